//! The operator console's connections (`skiplock web`): a small pool whose sessions carry a
//! statement and lock timeout (a page never waits forever on a lock or a slow search) and
//! `plan_cache_mode = force_custom_plan`, so the job list's optional filters are planned with
//! their values each time (a generic plan would keep `$1 IS NULL OR …` and lose the indexes),
//! and no JIT (its compile time is most of a short page's query). They are set by each
//! session's first statement, not in the start-up packet, which PgBouncer refuses.

use std::time::Duration;

use crate::config::{PoolMode, SessionLimits, redact_url};
use crate::error::{Error, Result};
use crate::store::Pool;

/// `lock_timeout` of the console's sessions: a button waits this long at most for a row a
/// worker holds.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens the console's pool of at most `max` sessions to `url`, with `statement_timeout`
/// (zero: none). Fails at once, naming the (redacted) URL, when the database cannot be
/// reached, like every one-shot command.
///
/// In transaction mode (`mode`) the timeouts are set by each transaction instead
/// (`crate::store::Pool`); plans are made per call anyway, every statement being unnamed there.
pub async fn connect(
    url: &str,
    max: u32,
    statement_timeout: Duration,
    mode: PoolMode,
) -> Result<Pool> {
    if mode == PoolMode::Transaction {
        crate::store::pool::expect_transaction_pooling();
    }
    let opts =
        super::reachable(super::parse_url(url)?.application_name("skiplock web"), url).await?;
    let fail = |e: sqlx::Error| {
        Error::Other(format!(
            "cannot connect to the database at {}: {}",
            redact_url(url),
            super::scrub(&e.to_string(), url)
        ))
    };
    let several_hosts = super::hosts::of(&opts).is_some();
    let pool = super::checkout::pool_options()
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                super::nodelay::set(conn).await?;
                match mode {
                    PoolMode::Session => {
                        crate::store::session::open_console(conn, statement_timeout, LOCK_TIMEOUT)
                            .await
                    }
                    PoolMode::Transaction => crate::store::session::learn_types(conn).await,
                }
            })
        })
        .max_connections(max)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(opts)
        .await
        .map_err(fail)?;
    if several_hosts {
        // After a failover the pages' failures send the pool to the new primary.
        tokio::spawn(super::hosts::follow_console(pool.clone()));
    }
    let limits = SessionLimits {
        statement_timeout,
        lock_timeout: LOCK_TIMEOUT,
    };
    Ok(Pool::with_mode(pool, mode, limits))
}
