//! Worker sessions: the pools a worker process uses, and waiting for the database.
//!
//! - Every worker session sets `statement_timeout` and `lock_timeout` in its first statement,
//!   the one that also checks the server is writable (no extra round trip), so nothing
//!   another role holds can make a worker wait forever. Not in the start-up packet: PgBouncer
//!   refuses its `options` parameter, and sqlx's `extra_float_digits` is left out for the same
//!   reason (docs/operations.md, "Behind PgBouncer").
//! - A new connection that lands on a read-only server (a standby after a failover, or
//!   `default_transaction_read_only`) is refused and retried, never used: this check is
//!   what keeps a worker off a standby, whatever the URL's `target_session_attrs`.
//! - Connections opened before a statement met a read-only server are dropped on their
//!   next checkout ([`RECYCLE`]).
//! - Start-up ([`attempt_failed`]) retries with a capped backoff, one log line per attempt,
//!   forever unless bounded (`SKIPLOCK_CONNECT_TIMEOUT`).
//! - A URL with several hosts is split by `super::hosts`; this module's checks then pick
//!   the host whose session can write.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};

use super::outage::{Backoff, is_unavailable, sqlx_unavailable};
use crate::error::{Error, Result};

/// First and longest wait between two connection attempts at start-up.
pub const CONNECT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(200), Duration::from_secs(10));

/// The mark of connections to be replaced, kept by the checkout that honours it.
pub use super::checkout::RECYCLE;
pub use crate::config::{PoolMode, SessionLimits};
use crate::store::Pool;

/// `base` as a worker connects with it: no start-up parameter a connection pooler refuses
/// (the session limits are set by [`worker_pool`]'s first statement instead).
pub fn worker_options(base: &PgConnectOptions) -> PgConnectOptions {
    base.clone().extra_float_digits(None)
}

/// A lazily connecting pool of at most `max` worker sessions on `opts`, each with `limits`
/// (set after any the URL's `options` carried, so these win): read-only servers refused at
/// connect time, connections older than a [`RECYCLE`] mark dropped at checkout. Nothing is
/// contacted until the first statement, so it can be built while the database is down.
///
/// In transaction mode (`mode`) the limits are set by each transaction instead
/// (`crate::store::Pool`): a session setting would stay on whichever server connection the
/// pooler lent for the first statement.
pub fn worker_pool(
    opts: PgConnectOptions,
    limits: SessionLimits,
    mode: PoolMode,
    max: u32,
    acquire_timeout: Duration,
) -> Pool {
    if mode == PoolMode::Transaction {
        crate::store::pool::expect_transaction_pooling();
    }
    // The checkout's pool (no ping before every use, no connection older than a RECYCLE
    // mark); `after_connect` is replaced and calls the checkout's own (`nodelay::set`) first.
    let pool = super::checkout::pool_options()
        .max_connections(max)
        .min_connections(0)
        .acquire_timeout(acquire_timeout)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                super::nodelay::set(conn).await?;
                let flags = match mode {
                    PoolMode::Session => match crate::store::session::open(conn, limits).await {
                        // Behind a transaction-mode pooler (crate::error::pooled_statement_lost):
                        // failing here would only have the pool log and retry the connect until
                        // its timeout; the next statement meets the same answer and ends the
                        // start with the one line naming SKIPLOCK_POOL_MODE
                        // (tests/pgbouncer.rs).
                        Err(sqlx::Error::Database(d))
                            if crate::error::pooled_statement_lost(d.code().as_deref(), d.message()) =>
                        {
                            return Ok(());
                        }
                        other => other?,
                    },
                    PoolMode::Transaction => {
                        crate::store::session::learn_types(conn).await?;
                        crate::store::session::read_only(conn).await?
                    }
                };
                match read_only_why(flags) {
                    None => Ok(()),
                    Some(why) => Err(sqlx::Error::Protocol(format!(
                        "refusing a read-only connection: {why}"
                    ))),
                }
            })
        })
        .connect_lazy_with(opts);
    Pool::with_mode(pool, mode, limits)
}

/// Acquire timeout of the handlers' pool built by [`handler_pool`].
pub const HANDLER_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The handlers' pool of a `skiplock worker` process: `max_connections` worker sessions to
/// `url`, built without contacting the database (the worker waits for it).
pub fn handler_pool(url: &str, settings: &crate::config::QueueSettings) -> Result<Pool> {
    let opts = worker_options(&super::parse_url(url)?);
    Ok(worker_pool(
        opts,
        settings.session_limits(),
        settings.pool_mode,
        settings.max_connections,
        HANDLER_ACQUIRE_TIMEOUT,
    ))
}

/// Why the session on `conn` cannot write, if it cannot: the server is in recovery (a
/// standby), or the session's transactions default to read-only.
pub async fn read_only_reason(conn: &mut PgConnection) -> sqlx::Result<Option<String>> {
    Ok(read_only_why(crate::store::session::read_only(conn).await?))
}

/// Why a session cannot write, from its `(in_recovery, read_only)` flags.
fn read_only_why((recovery, read_only): (bool, bool)) -> Option<String> {
    if recovery {
        Some("the server is a standby in recovery (pg_is_in_recovery())".into())
    } else if read_only {
        Some("the server is read-only (default_transaction_read_only is on)".into())
    } else {
        None
    }
}

/// Where `opts` points, for messages: never the password.
pub fn describe(opts: &PgConnectOptions) -> String {
    let host = match opts.get_socket() {
        Some(s) => s.display().to_string(),
        None => opts.get_host().to_string(),
    };
    format!(
        "postgres://{}@{}:{}/{}",
        opts.get_username(),
        host,
        opts.get_port(),
        opts.get_database().unwrap_or("")
    )
}

/// One connection attempt: connect, refuse a read-only server (where `writable`), close. A
/// connection error that will not go away by waiting (wrong password, no such database)
/// names the target.
pub async fn probe(opts: &PgConnectOptions, writable: bool) -> Result<()> {
    let mut conn = opts.connect().await.map_err(|e| {
        if sqlx_unavailable(&e) {
            Error::Database(e)
        } else {
            Error::Other(format!(
                "cannot connect to the database at {}: {}",
                describe(opts),
                match &e {
                    sqlx::Error::Database(d) => d.message().to_string(),
                    other => other.to_string(),
                }
            ))
        }
    })?;
    if !writable {
        let _ = conn.close().await;
        return Ok(());
    }
    let why = read_only_reason(&mut conn).await;
    let _ = conn.close().await;
    match why? {
        None => Ok(()),
        Some(why) => Err(Error::Unavailable(why)),
    }
}

/// After failed start-up attempt number `attempt`: returns `e` itself when it is permanent
/// (not [`is_unavailable`]) or when `timeout` would run out before the next attempt;
/// otherwise logs one WARN line and waits for the backoff's next delay.
pub async fn attempt_failed(
    opts: &PgConnectOptions,
    e: Error,
    attempt: u64,
    elapsed: Duration,
    timeout: Option<Duration>,
    backoff: &mut Backoff,
) -> Result<()> {
    if !is_unavailable(&e) {
        return Err(e);
    }
    let target = describe(opts);
    let reason = reason(&e);
    let delay = backoff.next_delay();
    if let Some(t) = timeout.filter(|t| elapsed + delay > *t) {
        return Err(Error::Unavailable(format!(
            "cannot connect to the database at {target}: {reason} (gave up after {attempt} attempts in {}; SKIPLOCK_CONNECT_TIMEOUT={})",
            humantime::format_duration(Duration::from_millis(elapsed.as_millis() as u64)),
            humantime::format_duration(t)
        )));
    }
    tracing::warn!(
        attempt,
        "waiting for the database at {target}: {reason}; retrying in {}",
        humantime::format_duration(delay)
    );
    tokio::time::sleep(delay).await;
    Ok(())
}

/// What `e` says about the database, for a log line (the server's own message where it
/// sent one).
pub fn reason(e: &Error) -> String {
    match e {
        Error::Unavailable(m) => m.clone(),
        Error::Database(sqlx::Error::Database(d)) => d.message().to_string(),
        Error::Database(d) => d.to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_never_carry_the_password() {
        let o: PgConnectOptions = "postgres://bob:s3cret@db.example:6543/jobs"
            .parse()
            .unwrap();
        let d = describe(&o);
        assert_eq!(d, "postgres://bob@db.example:6543/jobs");
        assert!(!d.contains("s3cret"));
    }

    #[test]
    fn worker_sessions_send_no_start_up_parameter_a_pooler_refuses() {
        let o: PgConnectOptions = "postgres://u@h/d".parse().unwrap();
        let w = worker_options(&o);
        assert_eq!(w.get_options(), None);
        assert!(format!("{w:?}").contains("extra_float_digits: None"), "{w:?}");
    }
}
