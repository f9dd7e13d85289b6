//! The operator console's connections (`skiplock web`): a small pool whose sessions carry a
//! statement and lock timeout (a page never waits forever on a lock or a slow search) and
//! `plan_cache_mode = force_custom_plan`, so the job list's optional filters are planned with
//! their values each time (a generic plan would keep `$1 IS NULL OR …` and lose the indexes),
//! and no JIT (its compile time is most of a short page's query).

use std::time::Duration;

use sqlx::{ConnectOptions, Connection, PgPool};

use crate::config::redact_url;
use crate::error::{Error, Result};

/// `lock_timeout` of the console's sessions: a button waits this long at most for a row a
/// worker holds.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens the console's pool of at most `max` sessions to `url`, with `statement_timeout`
/// (zero: none). Fails at once, naming the (redacted) URL, when the database cannot be
/// reached, like every one-shot command.
pub async fn connect(url: &str, max: u32, statement_timeout: Duration) -> Result<PgPool> {
    let opts = super::parse_url(url)?
        .application_name("skiplock web")
        .options([
            (
                "statement_timeout",
                statement_timeout.as_millis().to_string(),
            ),
            ("lock_timeout", LOCK_TIMEOUT.as_millis().to_string()),
            ("plan_cache_mode", "force_custom_plan".to_string()),
            // Pages are short reads: compiling a plan (50 ms and more) costs more than it saves.
            ("jit", "off".to_string()),
        ]);
    let fail = |e: sqlx::Error| {
        Error::Other(format!(
            "cannot connect to the database at {}: {}",
            redact_url(url),
            super::scrub(&e.to_string(), url)
        ))
    };
    let probe = opts.connect().await.map_err(fail)?;
    let _ = probe.close().await;
    super::checkout::pool_options()
        .max_connections(max)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(opts)
        .await
        .map_err(fail)
}
