//! Worker sessions: the pools a worker process uses, and waiting for the database.
//!
//! - Every worker session sets `statement_timeout` and `lock_timeout` (in the start-up
//!   packet, no extra round trip), so nothing another role holds can make a worker wait
//!   forever.
//! - A new connection that lands on a read-only server (a standby after a failover, or
//!   `default_transaction_read_only`) is refused and retried, never used. The driver
//!   (sqlx 0.9) takes one host and ignores `target_session_attrs`, so this check is what
//!   keeps a worker off a standby; see docs/reliability.md for putting several hosts behind
//!   one address.
//! - Connections opened before a statement met a read-only server are dropped on their
//!   next checkout ([`RECYCLE`]).
//! - [`wait_for_database`] retries with a capped backoff, one log line per attempt, forever
//!   unless bounded (`SKIPLOCK_CONNECT_TIMEOUT`).

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use super::outage::{Backoff, RecycleMark, is_unavailable, sqlx_unavailable};
use crate::error::{Error, Result};

/// First and longest wait between two connection attempts at start-up.
pub const CONNECT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(200), Duration::from_secs(10));

/// Marks connections to be replaced after a statement met a read-only server; shared by
/// every pool built here.
pub static RECYCLE: RecycleMark = RecycleMark::new();

pub use crate::config::SessionLimits;

/// `base` with the worker session settings added (later `-c` options win over earlier ones,
/// so these override any the URL carried).
pub fn worker_options(base: &PgConnectOptions, limits: SessionLimits) -> PgConnectOptions {
    base.clone().options([
        (
            "statement_timeout",
            limits.statement_timeout.as_millis().to_string(),
        ),
        ("lock_timeout", limits.lock_timeout.as_millis().to_string()),
    ])
}

/// A lazily connecting pool of at most `max` worker sessions on `opts`: read-only servers
/// refused at connect time, connections older than a [`RECYCLE`] mark dropped at checkout.
/// Nothing is contacted until the first statement, so it can be built while the database
/// is down.
pub fn worker_pool(opts: PgConnectOptions, max: u32, acquire_timeout: Duration) -> PgPool {
    // The checkout's pool (no ping before every use); both hooks are replaced, and each calls
    // what the checkout's own did (`nodelay::set`, `checkout::check`) before its own step.
    super::checkout::pool_options()
        .max_connections(max)
        .min_connections(0)
        .acquire_timeout(acquire_timeout)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                super::nodelay::set(conn).await?;
                match read_only_reason(conn).await? {
                    None => Ok(()),
                    Some(why) => Err(sqlx::Error::Protocol(format!(
                        "refusing a read-only connection: {why}"
                    ))),
                }
            })
        })
        .before_acquire(|conn, meta| {
            let ok = RECYCLE.accepts(meta.age);
            Box::pin(async move {
                if !ok {
                    return Ok(false);
                }
                super::checkout::check(conn, &meta).await
            })
        })
        .connect_lazy_with(opts)
}

/// Acquire timeout of the handlers' pool built by [`handler_pool`].
pub const HANDLER_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The handlers' pool of a `skiplock worker` process: `max_connections` worker sessions to
/// `url`, built without contacting the database (the worker waits for it).
pub fn handler_pool(url: &str, settings: &crate::config::QueueSettings) -> Result<PgPool> {
    let opts = worker_options(&super::parse_url(url)?, settings.session_limits());
    Ok(worker_pool(
        opts,
        settings.max_connections,
        HANDLER_ACQUIRE_TIMEOUT,
    ))
}

/// Why the session on `conn` cannot write, if it cannot: the server is in recovery (a
/// standby), or the session's transactions default to read-only.
pub async fn read_only_reason(conn: &mut PgConnection) -> sqlx::Result<Option<String>> {
    let (recovery, read_only) = crate::store::session::read_only(conn).await?;
    Ok(if recovery {
        Some("the server is a standby in recovery (pg_is_in_recovery())".into())
    } else if read_only {
        Some("the server is read-only (default_transaction_read_only is on)".into())
    } else {
        None
    })
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

/// One connection attempt: connect, refuse a read-only server, close. A connection error
/// that will not go away by waiting (wrong password, no such database) names the target.
pub async fn probe(opts: &PgConnectOptions) -> Result<()> {
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
    let why = read_only_reason(&mut conn).await;
    let _ = conn.close().await;
    match why? {
        None => Ok(()),
        Some(why) => Err(Error::Unavailable(why)),
    }
}

/// Waits until a writable connection to `opts` can be made: capped exponential backoff
/// ([`CONNECT_BACKOFF`]), one WARN line per failed attempt, forever unless `timeout` is
/// set. A permanent error (wrong password, no such database) ends the wait at once.
pub async fn wait_for_database(opts: &PgConnectOptions, timeout: Option<Duration>) -> Result<()> {
    let started = tokio::time::Instant::now();
    let mut backoff = Backoff::new(CONNECT_BACKOFF.0, CONNECT_BACKOFF.1);
    let mut attempt = 1u64;
    loop {
        match probe(opts).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                attempt_failed(opts, e, attempt, started.elapsed(), timeout, &mut backoff).await?;
                attempt += 1;
            }
        }
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
    let reason = match &e {
        Error::Unavailable(m) => m.clone(),
        Error::Database(sqlx::Error::Database(d)) => d.message().to_string(),
        Error::Database(d) => d.to_string(),
        other => other.to_string(),
    };
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
    fn worker_sessions_set_both_timeouts_after_the_urls_own() {
        let o: PgConnectOptions = "postgres://u@h/d?options[statement_timeout]=5"
            .parse()
            .unwrap();
        let w = worker_options(
            &o,
            SessionLimits {
                statement_timeout: Duration::from_secs(60),
                lock_timeout: Duration::from_secs(10),
            },
        );
        let opts = w.get_options().unwrap();
        let own = opts.find("statement_timeout=60000").unwrap();
        assert!(opts.find("statement_timeout=5").unwrap() < own, "{opts}");
        assert!(opts.contains("lock_timeout=10000"), "{opts}");
    }
}
