//! The operator console, `skiplock web`: server-rendered pages over the queue, the packet
//! pipeline and the crawl, with the few buttons operators press every day.
//!
//! - [`pages`]: one module per page (overview, jobs, packets, crawl, login); askama
//!   templates in `crates/skiplock-console/src/web/templates/`, compiled into the binary.
//! - [`auth`]: loopback by default, the tokens, server-side sessions, the login limit,
//!   CSRF on every POST; [`hosts`]: the `Host` names it answers for; [`flash`]: one-shot
//!   messages; [`server`]: the HTTP server with its read timeout.
//! - [`assets`], [`chart`], [`format`]: the embedded stylesheet and script, the SVG
//!   throughput chart, how times and sizes read.
//! - Statements: [`crate::store::web`]. Reads only; every button calls a SQL API function,
//!   so the console's login needs only the `skiplock_operator` role.
//!
//! Pages read without JavaScript; the one small script only refreshes the overview and
//! crawl pages and asks before destructive buttons.

// The HTTP server and the Host checks serve the metrics endpoint too (crate::metrics::serve).
pub mod assets;
pub mod auth;
pub mod chart;
pub mod flash;
pub mod format;
mod guard;
pub mod pages;
pub mod request;
// The server and the Host checks are shared with the metrics endpoint (crate::http), under
// the names the console's files use.
pub use crate::http::{hosts, server};

use std::time::Duration;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;

use crate::error::{Error, Result};

/// Default `--listen`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Default of `SKIPLOCK_WEB_STATEMENT_TIMEOUT`: the longest a page's query may run (a text
/// search over millions of rows is cut off with a clear error instead of hanging).
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of `SKIPLOCK_WEB_CONNECTIONS`.
pub const DEFAULT_CONNECTIONS: usize = 4;
/// A worker counts as live while its heartbeat is newer than this (as `skiplock stats`).
pub const LIVE_WORKER_SECS: f64 = 120.0;
/// Jobs per page.
pub const PAGE_SIZE: i64 = 50;
/// Jobs one bulk press changes at most (`max_rows` of retry_jobs / cancel_jobs).
pub const BULK_MAX: i32 = 10_000;
/// Packets per column of the board.
pub const BOARD_PER_STATE: i64 = 50;
/// Seconds between automatic refreshes of the overview and crawl pages.
pub const REFRESH_SECS: u32 = 5;
/// The setting of how many queues the overview and `/metrics` list one by one.
pub const TOP_QUEUES_SETTING: &str = "SKIPLOCK_TOP_QUEUES";
/// Default of `SKIPLOCK_TOP_QUEUES`: the overview and `/metrics` list the 50 deepest queues
/// (most live jobs) by name and add up the rest in one line / one `queue="(other)"` series,
/// so 100,000 queue names cost a page and a scrape no more than 50 do.
pub const DEFAULT_TOP_QUEUES: usize = 50;
/// The setting of the read timeout ([`server::serve`]).
pub const READ_TIMEOUT_SETTING: &str = "SKIPLOCK_WEB_READ_TIMEOUT";

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The console's database pool (a `skiplock_operator` login).
    pub pool: crate::store::Pool,
    /// Token and CSRF secrets.
    pub auth: Arc<auth::Auth>,
    /// The database login, shown in the header.
    pub db_user: Arc<str>,
    /// The `Host` names the console answers for.
    pub hosts: Arc<hosts::AllowedHosts>,
    /// Messages waiting to be shown once.
    pub flash: Arc<flash::Flashes>,
    /// Queues the overview and `/metrics` list one by one ([`DEFAULT_TOP_QUEUES`]).
    pub top_queues: usize,
    /// The longest a client may take to send a request's headers, or a form's body.
    pub read_timeout: Duration,
    /// What the doctor's page judges with: the workers' rescue window and the reaper's age
    /// (read by the command from the same settings as the worker's).
    pub doctor: skiplock::doctor::Thresholds,
    /// The optional parts whose gauges `/metrics` reads.
    pub parts: crate::metrics::serve::Parts,
}

/// Builds the console's router (every page, the assets, the login, the guard).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(pages::overview::page))
        .route("/queues/pause", post(pages::overview::pause))
        .route("/queues/resume", post(pages::overview::resume))
        .route("/jobs", get(pages::jobs::list))
        .route("/jobs/bulk", post(pages::jobs::bulk))
        .route("/jobs/{id}", get(pages::jobs::show))
        .route("/jobs/{id}/retry", post(pages::jobs::retry))
        .route("/jobs/{id}/cancel", post(pages::jobs::cancel))
        .route("/flows/{id}", get(pages::flows::show))
        .route("/packets", get(pages::packets::board))
        .route("/packets/{id}", get(pages::packets::show))
        .route("/packets/{id}/take", post(pages::packets::take))
        .route("/packets/{id}/complete", post(pages::packets::complete))
        .route("/packets/{id}/retry", post(pages::packets::retry))
        .route("/crawl", get(pages::crawl::page))
        .route("/doctor", get(pages::doctor::page))
        .route("/crawl/host", get(pages::crawl::host))
        .route("/crawl/pack-now", post(pages::crawl::pack_now))
        .route("/login", get(pages::login::form).post(pages::login::submit))
        .route("/logout", post(pages::login::logout))
        .route("/assets/{file}", get(assets::serve))
        .route("/metrics", get(metrics))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::guard,
        ))
        .with_state(state)
}

/// `GET /metrics`: the database's view in Prometheus text format (queue depth, oldest
/// waiting job, packets per state; see [`crate::metrics::render`]). Behind the same guard
/// as every page: with a token set, a scraper sends `Authorization: Bearer <token>`.
async fn metrics(
    axum::extract::State(st): axum::extract::State<AppState>,
) -> impl axum::response::IntoResponse {
    let body = crate::metrics::serve::database_text(&st.pool, st.top_queues, &st.parts).await;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::serve::TEXT_FORMAT,
        )],
        body,
    )
}

/// Resolves `listen` and checks it against the token rule ([`auth::listen_decision`]);
/// returns the address to bind.
pub async fn resolve_listen(listen: &str, token_set: bool) -> Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(listen)
        .await
        .map_err(|e| Error::Invalid(format!("invalid --listen {listen}: {e}")))?
        .collect();
    auth::listen_decision(listen, &addrs, token_set).map_err(Error::Invalid)?;
    Ok(addrs[0])
}

/// Serves the console on `listener` until `shutdown` completes; a connection that does not
/// send a request's headers within `read_timeout` is closed ([`server::serve`]).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    read_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    server::serve(listener, router(state), read_timeout, shutdown)
        .await
        .map_err(Error::Io)
}
