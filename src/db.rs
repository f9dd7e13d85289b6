//! Connecting to Postgres with errors that name the problem and never the password.
//! One-shot commands use [`connect`] (fails fast, clear error); worker processes use
//! `session` (lazy pools, session limits, read-only refusal, waiting out outages).

internal_mod!(checkout);
internal_mod!(hosts);
internal_mod!(nodelay);
internal_mod!(outage);
internal_mod!(session);

/// Pool options with skiplock's connection setup (TCP_NODELAY, the session settings), for a
/// pool built by hand; [`connect`] is the usual way in.
pub use checkout::pool_options;
/// The handlers' pool of a worker process, built without contacting the database.
pub use session::handler_pool;

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgPool};

use crate::config::{PoolMode, SessionLimits, redact_url};
use crate::error::{Error, Result};
use crate::store::Pool;

/// The default log filter of the binary: sqlx's notices (the SQL API's `RAISE WARNING`s, e.g.
/// an evicted key squatter) only from WARN up.
pub const DEFAULT_LOG_FILTER: &str = "info,sqlx::postgres::notice=warn";

/// Opens a pool of at most `max_connections` to `url`. Fails fast (10 s) with a message
/// that names the (redacted) URL when the database cannot be reached.
pub async fn connect(url: &str, max_connections: u32) -> Result<Pool> {
    connect_in_mode(url, max_connections, PoolMode::Session).await
}

/// [`connect`] through a connection pooler in `mode` (`SKIPLOCK_POOL_MODE`; behind a
/// transaction-mode PgBouncer every statement runs in a transaction of its own:
/// `crate::store::pool`). No session limits, as for every one-shot command.
pub async fn connect_in_mode(url: &str, max_connections: u32, mode: PoolMode) -> Result<Pool> {
    if mode == PoolMode::Transaction {
        crate::store::pool::expect_transaction_pooling();
    }
    let opts = reachable(parse_url(url)?, url).await?;
    let mut options = checkout::pool_options();
    if mode == PoolMode::Transaction {
        options = options.after_connect(|conn, _meta| {
            Box::pin(async move {
                nodelay::set(conn).await?;
                crate::store::session::learn_types(conn).await
            })
        });
    }
    let pool = options
        .max_connections(max_connections)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(opts)
        .await
        .map_err(|e| {
            Error::Other(format!(
                "cannot connect to the database at {}: {}",
                redact_url(url),
                scrub(&e.to_string(), url)
            ))
        })?;
    Ok(Pool::with_mode(pool, mode, SessionLimits::NONE))
}

/// `opts` (parsed from `url`) once a connection to it was made, pointed at the first of its
/// hosts that accepts one (src/db/hosts.rs). One direct connection first: the pool retries a
/// refused connection until its acquire timeout and then reports only "pool timed out"; this
/// names the real cause at once.
pub async fn reachable(opts: PgConnectOptions, url: &str) -> Result<PgConnectOptions> {
    let fail = |why: String| {
        Error::Other(format!(
            "cannot connect to the database at {}: {}",
            redact_url(url),
            scrub(&why, url)
        ))
    };
    if hosts::of(&opts).is_some() {
        return hosts::choose(&opts, false)
            .await
            .map_err(|e| fail(session::reason(&e)));
    }
    let probe = opts.connect().await.map_err(|e| fail(e.to_string()))?;
    let _ = probe.close().await;
    Ok(opts)
}

/// Points `pool` at the first host of its URL that accepts a writable session (a URL with
/// several hosts, docs/operations.md "Several hosts in one URL"); with one host, only checks
/// it. Workers do this themselves after every outage; a long-lived producer pool calls it
/// when a statement failed because the database was unavailable.
pub async fn point_at_writable_host(pool: &PgPool) -> Result<()> {
    hosts::point(&[pool]).await
}

/// Parses a database URL (application name `skiplock`); a bad one is a `DATABASE_URL`
/// setting error that never shows the password.
pub fn parse_url(url: &str) -> Result<PgConnectOptions> {
    parse_url_of("DATABASE_URL", url)
}

/// [`parse_url`] for the URL of `setting` (its name in the error).
pub fn parse_url_of(setting: &str, url: &str) -> Result<PgConnectOptions> {
    // From here on every log line and error of this process hides the URL's passwords.
    crate::redact::register_url(url);
    let bad = |why: String| Error::config(setting, format!("{}: {why}", redact_url(url)));
    // Several hosts: the driver gets the first, `hosts` keeps the list (src/db/hosts.rs).
    let (single, hosts) = hosts::split(url).map_err(|why| bad(scrub(&why, url)))?;
    let opts: PgConnectOptions = single
        .parse()
        .map_err(|e: sqlx::Error| bad(scrub(&e.to_string(), url)))?;
    if let Some(h) = hosts {
        hosts::register(h, &opts);
    }
    // No `extra_float_digits` in the start-up packet: PgBouncer refuses parameters it does
    // not know (docs/operations.md, "Behind PgBouncer"); floats are read in binary anyway.
    Ok(opts.application_name("skiplock").extra_float_digits(None))
}

/// Whether two connect options reach the same host, port and database (a pooler's pool is
/// one database alias on one address): a worker's `SKIPLOCK_LISTEN_URL` that does is the
/// transaction-mode pool itself (src/worker/lifecycle.rs, `skiplock doctor`'s `listen_url`).
pub fn same_endpoint(a: &PgConnectOptions, b: &PgConnectOptions) -> bool {
    a.get_host() == b.get_host()
        && a.get_port() == b.get_port()
        && a.get_database() == b.get_database()
}

/// Replaces the URL's passwords (userinfo and query), and every password registered with
/// `crate::redact::register_url`, wherever they appear in `text`, with `***`.
pub fn scrub(text: &str, url: &str) -> String {
    crate::redact::scrub(&crate::redact::scrub_with(text, url))
}

/// A pool of at most `max_connections` to `url`, without the probe or the session limits
/// of [`connect`] and `session` (the dev tools: the benchmark and chaos runs).
pub async fn pool(url: &str, max_connections: u32, acquire_timeout: Duration) -> Result<Pool> {
    let mut opts = parse_url(url)?;
    if hosts::of(&opts).is_some() {
        opts = hosts::choose(&opts, false).await?;
    }
    Ok(checkout::pool_options()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .connect_with(opts)
        .await?
        .into())
}
