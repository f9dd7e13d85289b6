//! The HTTP/1.1 server under the console and a worker's metrics endpoint: axum's router on
//! hyper connections with a header-read timeout, so a client that opens connections and
//! sends headers slowly (or never) cannot hold them open (slowloris). `axum::serve` has no
//! such timeout.
//!
//! hyper's header-read timer runs while it waits for a request's head, and it restarts when
//! a kept-alive connection waits for its next request: one setting bounds both the time to
//! send headers and how long an idle connection stays open (docs/console.md, "Access",
//! timeouts). Each request carries its peer address as `ConnectInfo<SocketAddr>` (the login
//! limit is per client address).

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt as _;

/// Default of `SKIPLOCK_WEB_READ_TIMEOUT` and `SKIPLOCK_METRICS_READ_TIMEOUT`.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections get to finish their requests at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` completes; a connection that has not sent a
/// whole request head within `read_timeout` (of opening, or of its previous response) is
/// closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    read_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .max_buf_size(64 * 1024);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let svc = app
            .clone()
            .map_request(move |mut req: axum::http::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req.map(axum::body::Body::new)
            });
        let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %peer, "connection closed");
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
    Ok(())
}

/// The peer address of a request served by [`serve`] (unspecified when there is none, as in
/// a router driven directly).
pub fn peer(req: &axum::extract::Request) -> SocketAddr {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
}
