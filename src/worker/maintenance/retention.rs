//! Retention: finished jobs are deleted once they are older than their window, judged by
//! `finalized_at` alone (no uptime guard: a finished row's age does not depend on whether
//! workers were running). Completed jobs go after `SKIPLOCK_RETAIN_COMPLETED`, cancelled and
//! discarded ones after `SKIPLOCK_RETAIN_FAILED` (kept longer: someone may want to look at
//! why they failed). Deletes run in small batches so the table is never locked for long and
//! the claim path stays fast at any volume. Old period records of periodic jobs go too, and
//! per-key rate records whose time has passed (`skiplock.key_rates`: one row per key ever
//! rate-limited otherwise, e.g. every host a crawler fetched from).
//!
//! It runs as a periodic job of its own kind, [`KIND`] (`retain`), next to the reaper's `reap`
//! job and on the same interval: its result (`{"deleted": N, …}`) is a row of its own, and a
//! failure of one never hides or stops the other (retention has no uptime guard to report).

use std::time::Duration;

use serde::de::IgnoredAny;

use crate::error::Result;
use crate::queue::JobState;
use crate::store::{self, Pool};
use crate::worker::handler::{Handler, JobContext};
use crate::worker::outcome::{HandlerResult, Outcome};

/// The kind of retention's periodic job.
pub const KIND: &str = "retain";

/// Default retention of completed jobs.
pub const DEFAULT_RETAIN_COMPLETED: Duration = Duration::from_secs(24 * 3600);
/// Default retention of cancelled and discarded jobs.
pub const DEFAULT_RETAIN_FAILED: Duration = Duration::from_secs(7 * 86_400);
/// Rows per DELETE statement.
pub const BATCH: i64 = 500;
/// Statements per state per run at most; the next run continues.
pub const MAX_BATCHES: usize = 50;

/// How long finished jobs are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSettings {
    /// Completed jobs (`SKIPLOCK_RETAIN_COMPLETED`, 24h).
    pub completed: Duration,
    /// Cancelled and discarded jobs (`SKIPLOCK_RETAIN_FAILED`, 7d).
    pub failed: Duration,
    /// Time between runs, the period of the `retain` job: the reaper's
    /// (`SKIPLOCK_REAPER_INTERVAL`, 30s, at least 1s).
    pub interval: Duration,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            completed: DEFAULT_RETAIN_COMPLETED,
            failed: DEFAULT_RETAIN_FAILED,
            interval: super::reaper::DEFAULT_INTERVAL,
        }
    }
}

impl RetentionSettings {
    /// Rejects values that parse but make no sense.
    pub fn validate(&self) -> Result<()> {
        crate::config::check_duration("SKIPLOCK_REAPER_INTERVAL", self.interval)?;
        Ok(())
    }

    /// How long a job in `state` is kept after it finished; `None` for unfinished states,
    /// which retention never touches.
    pub fn window(&self, state: JobState) -> Option<Duration> {
        match state {
            JobState::Completed => Some(self.completed),
            JobState::Cancelled | JobState::Discarded => Some(self.failed),
            JobState::Waiting | JobState::Available | JobState::Running => None,
        }
    }
}

/// Deletes finished jobs past their retention window; the handler of the `retain` job.
#[derive(Debug, Clone)]
pub struct Retention {
    /// The windows.
    pub settings: RetentionSettings,
}

/// One retention pass: every finished state, in batches of [`BATCH`]; returns the number of
/// jobs deleted (never one an unfinished job depends on). Also forgets period records older
/// than the completed window (keeping each periodic job's latest), per-key rate records,
/// `unique_for` windows, key holds and job watches that decide nothing any more.
pub async fn run_retention(pool: &Pool, settings: &RetentionSettings) -> Result<u64> {
    let mut total = 0u64;
    for state in JobState::ALL {
        let Some(window) = settings.window(state) else {
            continue;
        };
        let mut deleted_here = 0u64;
        for _ in 0..MAX_BATCHES {
            let n = store::maintenance::retention(pool, state, window, BATCH).await?;
            deleted_here += n;
            if (n as i64) < BATCH {
                break;
            }
        }
        if deleted_here > 0 {
            tracing::info!(
                state = state.as_str(),
                jobs = deleted_here,
                window = %humantime::format_duration(window),
                "retention deleted finished jobs"
            );
        }
        total += deleted_here;
    }
    store::maintenance::retention_periodic_runs(pool, settings.completed).await?;
    let mut rates = 0u64;
    for _ in 0..MAX_BATCHES {
        let n = store::maintenance::retention_key_rates(pool, BATCH).await?;
        rates += n;
        if (n as i64) < BATCH {
            break;
        }
    }
    if rates > 0 {
        tracing::debug!(
            keys = rates,
            "retention forgot per-key rate records that had passed"
        );
    }
    let mut windows = 0u64;
    let mut holds = 0u64;
    for _ in 0..MAX_BATCHES {
        let n = store::maintenance::retention_unique_windows(pool, BATCH).await?;
        let h = store::maintenance::retention_key_holds(pool, BATCH).await?;
        let w = store::maintenance::retention_job_watches(pool, BATCH).await?;
        windows += n;
        holds += h;
        if (n as i64) < BATCH && (h as i64) < BATCH && (w as i64) < BATCH {
            break;
        }
    }
    if windows + holds > 0 {
        tracing::debug!(
            windows,
            holds,
            "retention forgot unique_for windows and key holds that had passed"
        );
    }
    match store::maintenance::tidy_lanes(pool, LANES_WAIT).await? {
        Some(0) => {}
        Some(n) => tracing::debug!(rows = n, "retention removed lane rows no job needs"),
        None => tracing::debug!(
            "a transaction writing jobs outlasted the wait; the lanes are tidied at the next pass"
        ),
    }
    Ok(total)
}

/// How long a retention pass waits for the transactions writing jobs when it marked lanes to
/// tidy (store::maintenance::tidy_lanes): enqueues and claims take milliseconds, so only a
/// transaction left open makes it give up until the next pass.
const LANES_WAIT: Duration = Duration::from_secs(10);

/// The `retain` job: one retention pass; completes with
/// `{"deleted": N, "completed_after_s": …, "failed_after_s": …}`. Args are ignored.
impl Handler for Retention {
    type Args = IgnoredAny;
    fn kind(&self) -> &'static str {
        KIND
    }
    async fn run(&self, ctx: JobContext, _args: IgnoredAny) -> HandlerResult {
        let deleted = run_retention(&ctx.pool, &self.settings).await?;
        Ok(Outcome::CompleteWith(serde_json::json!({
            "deleted": deleted,
            "completed_after_s": self.settings.completed.as_secs(),
            "failed_after_s": self.settings.failed.as_secs(),
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_per_state() {
        let s = RetentionSettings {
            completed: Duration::from_secs(1),
            failed: Duration::from_secs(2),
            interval: Duration::from_secs(3),
        };
        assert_eq!(s.window(JobState::Completed), Some(Duration::from_secs(1)));
        assert_eq!(s.window(JobState::Cancelled), Some(Duration::from_secs(2)));
        assert_eq!(s.window(JobState::Discarded), Some(Duration::from_secs(2)));
        assert_eq!(s.window(JobState::Available), None);
        assert_eq!(s.window(JobState::Running), None);
    }

    #[test]
    fn defaults_match_the_documentation() {
        let d = RetentionSettings::default();
        assert_eq!(d.completed, Duration::from_secs(86_400));
        assert_eq!(d.failed, Duration::from_secs(7 * 86_400));
        assert_eq!(d.interval, Duration::from_secs(30));
    }
}
