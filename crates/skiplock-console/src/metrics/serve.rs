//! Serving `/metrics`: a worker's own endpoint (`SKIPLOCK_METRICS_LISTEN`) and the scrape's
//! database read, which the console's `/metrics` shares.
//!
//! The worker's endpoint has no token, so like the console it listens on loopback unless
//! told otherwise: a non-loopback address needs `SKIPLOCK_METRICS_ALLOW_REMOTE=true` (the
//! series hold queue and kind names and counts, never arguments or errors). Like the
//! console it answers only for its own host names (DNS rebinding, [`crate::http::hosts`];
//! more names in `SKIPLOCK_METRICS_HOSTS`), and closes connections that do not send their
//! headers within `SKIPLOCK_METRICS_READ_TIMEOUT` ([`crate::http::server`]). The database
//! read uses a pool of its own (one connection) and a short statement timeout, so a scrape
//! never takes a connection the worker needs and never waits long; its per-queue series are
//! bounded by `SKIPLOCK_TOP_QUEUES` ([`super::render`]).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::header::{CONTENT_TYPE, HOST};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::store::Pool;

/// The address of a worker's endpoint (unset or empty: none).
pub const LISTEN_SETTING: &str = "SKIPLOCK_METRICS_LISTEN";
/// Whether a worker's endpoint may listen on a non-loopback address.
pub const ALLOW_REMOTE_SETTING: &str = "SKIPLOCK_METRICS_ALLOW_REMOTE";
/// The longest a scraper may take to send a request's headers (and an idle connection stays
/// open): [`crate::http::server::serve`].
pub const READ_TIMEOUT_SETTING: &str = "SKIPLOCK_METRICS_READ_TIMEOUT";
/// The longest a scrape's database read may take (statement timeout, and the whole read
/// including waiting for the connection).
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the recorder drains histogram samples between scrapes (bounded memory).
pub const UPKEEP_EVERY: Duration = Duration::from_secs(5);
/// The content type of the text format.
pub const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a worker's endpoint may listen on `addrs` (what `listen` resolved to): loopback
/// always, anything else only with `allow_remote`. The error is the line the worker prints.
pub fn listen_decision(
    listen: &str,
    addrs: &[SocketAddr],
    allow_remote: bool,
) -> std::result::Result<(), String> {
    if addrs.is_empty() {
        return Err(format!("{LISTEN_SETTING}={listen} resolves to no address"));
    }
    if allow_remote || addrs.iter().all(|a| a.ip().is_loopback()) {
        return Ok(());
    }
    Err(format!(
        "refusing to serve metrics on {listen} (not a loopback address) without {ALLOW_REMOTE_SETTING}=true: the endpoint has no token, so exposing it must be a decision"
    ))
}

/// The optional parts whose gauges a scrape reads (`skiplock::part::Part::gauges`; the
/// `skiplock` command's are the built-in workflows).
#[derive(Clone, Default)]
pub struct Parts(pub Arc<Vec<Box<dyn skiplock::part::Part>>>);

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|p| p.schema().name))
            .finish()
    }
}

/// The database's part of a scrape, per-queue series for the `top` queues and the `parts`'
/// gauges: the snapshot within [`SCRAPE_TIMEOUT`], or a report that it failed (logged at warn).
pub async fn database_text(pool: &Pool, top: usize, parts: &Parts) -> String {
    let began = Instant::now();
    let snap = match tokio::time::timeout(SCRAPE_TIMEOUT, snapshot(pool, top, parts)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "metrics: reading queue depth from the database failed");
            None
        }
        Err(_) => {
            tracing::warn!(
                "metrics: reading queue depth from the database took longer than {SCRAPE_TIMEOUT:?}"
            );
            None
        }
    };
    super::render::database(snap.as_ref(), began.elapsed())
}

/// One read-only transaction under a short statement timeout: the core's snapshot, then each
/// part's gauges.
async fn snapshot(
    pool: &Pool,
    top: usize,
    parts: &Parts,
) -> Result<crate::store::metrics::Snapshot> {
    let mut tx = crate::store::metrics::begin(pool, SCRAPE_TIMEOUT).await?;
    let mut snap = crate::store::metrics::read(&mut tx, top).await?;
    for p in parts.0.iter() {
        snap.parts.extend(p.gauges(&mut tx).await?);
    }
    tx.rollback().await?;
    Ok(snap)
}

#[derive(Clone)]
struct Endpoint {
    handle: PrometheusHandle,
    pool: Pool,
    top: usize,
    parts: Parts,
}

/// Refuses (421) a request whose `Host` is not one of the endpoint's own names: a scrape
/// from a DNS-rebinding page would otherwise read every queue and kind name.
async fn check_host(
    State(hosts): State<Arc<crate::http::hosts::AllowedHosts>>,
    req: Request,
    next: Next,
) -> Response {
    let host = req
        .headers()
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    if host.as_deref().is_some_and(|h| hosts.host_ok(h)) {
        next.run(req).await
    } else {
        (
            StatusCode::MISDIRECTED_REQUEST,
            hosts.refusal(host.as_deref()),
        )
            .into_response()
    }
}

async fn scrape(State(e): State<Endpoint>) -> impl IntoResponse {
    e.handle.run_upkeep();
    let mut body = e.handle.render();
    if !body.is_empty() && !body.ends_with('\n') {
        body.push('\n');
    }
    body.push_str(&database_text(&e.pool, e.top, &e.parts).await);
    ([(CONTENT_TYPE, TEXT_FORMAT)], body)
}

/// The endpoint's router: `GET /metrics` (the recorder's series, then the database's, for
/// the `top` queues and the `parts`), only for the `hosts` names.
pub fn router(
    handle: PrometheusHandle,
    scrape_pool: Pool,
    hosts: crate::http::hosts::AllowedHosts,
    top: usize,
    parts: Parts,
) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(Endpoint {
            handle,
            pool: scrape_pool,
            top,
            parts,
        })
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(hosts),
            check_host,
        ))
}

/// A pool for scrapes: one lazily opened worker session on the same database as `pool`.
pub fn scrape_pool(pool: &Pool, limits: crate::db::session::SessionLimits) -> Pool {
    let opts = crate::db::session::worker_options(&pool.connect_options());
    crate::db::session::worker_pool(opts, limits, pool.mode(), 1, SCRAPE_TIMEOUT)
}

/// A worker's endpoint's settings, as values: the `skiplock` command reads them from the
/// environment (crates/skiplock-cli/src/worker.rs, the settings named beside each field).
#[derive(Debug, Clone)]
pub struct EndpointSettings {
    /// The address to listen on ([`LISTEN_SETTING`]).
    pub listen: String,
    /// Whether a non-loopback address may be used ([`ALLOW_REMOTE_SETTING`]).
    pub allow_remote: bool,
    /// Names the endpoint answers for besides its address's
    /// ([`crate::http::hosts::METRICS_HOSTS_SETTING`], [`crate::http::hosts::parse_hosts`]).
    pub extra_hosts: Vec<String>,
    /// The longest a scraper may take to send a request's headers ([`READ_TIMEOUT_SETTING`],
    /// default [`crate::http::server::DEFAULT_READ_TIMEOUT`]).
    pub read_timeout: Duration,
    /// Queues listed one by one in a scrape ([`crate::web::TOP_QUEUES_SETTING`], default
    /// [`crate::web::DEFAULT_TOP_QUEUES`]).
    pub top_queues: usize,
    /// The optional parts whose gauges a scrape reads.
    pub parts: Parts,
}

/// Installs the recorder and serves a worker's endpoint on `settings.listen` until `stop`:
/// checks the address ([`listen_decision`]), binds it (so a bad address fails before the
/// worker starts), and returns the bound address and the server task.
pub async fn start(
    settings: EndpointSettings,
    scrape_pool: Pool,
    stop: CancellationToken,
) -> Result<(SocketAddr, JoinHandle<()>)> {
    let EndpointSettings {
        listen,
        allow_remote,
        extra_hosts,
        read_timeout,
        top_queues: top,
        parts,
    } = settings;
    let listen = listen.as_str();
    let invalid = |m: String| Error::config(LISTEN_SETTING, m);
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(listen)
        .await
        .map_err(|e| invalid(format!("invalid address {listen}: {e}")))?
        .collect();
    listen_decision(listen, &addrs, allow_remote).map_err(invalid)?;
    let hosts_setting = crate::http::hosts::METRICS_HOSTS_SETTING;
    let listener = tokio::net::TcpListener::bind(addrs[0])
        .await
        .map_err(|e| invalid(format!("cannot listen on {}: {e}", addrs[0])))?;
    let bound = listener.local_addr().map_err(Error::Io)?;
    let handle = super::install()?;
    let hosts = crate::http::hosts::AllowedHosts::new(bound, extra_hosts, hosts_setting);
    let app = router(handle.clone(), scrape_pool, hosts, top, parts);
    let task = tokio::spawn(async move {
        let upkeep = {
            let (handle, stop) = (handle.clone(), stop.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(UPKEEP_EVERY) => handle.run_upkeep(),
                    }
                }
            })
        };
        if let Err(e) =
            crate::http::server::serve(listener, app, read_timeout, stop.cancelled_owned()).await
        {
            tracing::error!(error = %e, "metrics endpoint stopped");
        }
        let _ = upkeep.await;
    });
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_is_always_allowed_anything_else_needs_the_setting() {
        assert!(listen_decision("127.0.0.1:9187", &[addr("127.0.0.1:9187")], false).is_ok());
        assert!(listen_decision("[::1]:9187", &[addr("[::1]:9187")], false).is_ok());
        let e = listen_decision("0.0.0.0:9187", &[addr("0.0.0.0:9187")], false).unwrap_err();
        assert!(e.contains(ALLOW_REMOTE_SETTING), "{e}");
        assert!(listen_decision("0.0.0.0:9187", &[addr("0.0.0.0:9187")], true).is_ok());
        // A name resolving to loopback and a public address is not loopback-only.
        let mixed = [addr("127.0.0.1:1"), addr("192.0.2.1:1")];
        assert!(listen_decision("h:1", &mixed, false).is_err());
        assert!(listen_decision("h:1", &[], true).is_err());
    }
}
