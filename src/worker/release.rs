//! The buffer's release: jobs this worker claimed but no longer holds. A producer that failed
//! between its claim and starting the batch leaves those rows `running` with nobody to
//! heartbeat or ack them, and a stopping worker holds buffered jobs it will not start. The
//! producer's next run (and the worker's shutdown) puts them back at once
//! (`sql/queue/release_unstarted.sql`) rather than leaving them to the rescuer a window later.

use super::Shared;
use crate::error::Result;
use crate::store::ack::{ReleaseParams, release_unstarted};

/// Whether jobs released after a producer failure use up their attempt: only when the
/// producer was claiming one job at a time (after an earlier failure), so the failure
/// involved that job alone and may be its fault. A batch's jobs get their attempt back:
/// one bad row must not cost its batch-mates attempts.
pub fn count_attempt_after(claiming_one_at_a_time: bool) -> bool {
    claiming_one_at_a_time
}

/// The ids this process holds (claimed and not yet acknowledged).
pub(crate) fn held(shared: &Shared) -> Vec<i64> {
    shared
        .jobs.running
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .copied()
        .collect()
}

/// Job ids a summary line names at most; the count says how many there were.
pub(crate) const IDS_SHOWN: usize = 20;

/// Puts back the jobs `shared` claimed but does not hold, of `queue` (or of every queue),
/// logged as one line with their count (a stop that returns a full buffer wrote one WARN per
/// job): at INFO when they went back with their attempt given back (a graceful stop, a batch
/// after a producer failure: nothing lost), at WARN when the attempt was used up.
pub(crate) async fn unstarted(
    shared: &Shared,
    queue: Option<&str>,
    count_attempt: bool,
    reason: &str,
) -> Result<usize> {
    let held = held(shared);
    let p = ReleaseParams {
        worker: &shared.worker_id,
        queue,
        held: &held,
        count_attempt,
        reason,
    };
    let rows = release_unstarted(&shared.db.pool, p).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let n = rows.len();
    let available = rows
        .iter()
        .filter(|r| r.state == crate::queue::JobState::Available)
        .count();
    let ids: Vec<i64> = rows.iter().take(IDS_SHOWN).map(|r| r.id).collect();
    if count_attempt {
        tracing::warn!(jobs = n, available, discarded = n - available, job.ids = ?ids,
            "returned {n} job(s) this worker claimed but never started, their attempt used up: {reason}");
    } else {
        tracing::info!(jobs = n, available, job.ids = ?ids,
            "returned {n} job(s) this worker claimed but never started: {reason}");
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lone_claim_can_be_blamed_for_a_failure() {
        assert!(count_attempt_after(true));
        assert!(!count_attempt_after(false));
    }
}
