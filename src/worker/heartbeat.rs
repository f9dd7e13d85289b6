//! The heartbeat task: every interval (a quarter of the rescue timeout, so a short timeout
//! in tests never rescues a live job) one statement refreshes every job this process holds,
//! and the worker's own row in `skiplock.workers`. Jobs that come back missing were taken
//! away; their handlers are told through [`super::JobContext::lost`].
//!
//! A failed beat (database down) is retried after a short, capped backoff rather than a
//! whole interval, so when the database comes back this process's heartbeats are among the
//! first statements to land: the rescuer waits a full window of connection before judging
//! any heartbeat stale, and by then every live worker has beaten.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use super::faults::{self, Point};
use crate::db::outage::{Backoff, is_unavailable};
use crate::store::heartbeat::{HeldJob, heartbeat_many, worker_upsert};
use crate::store::schema;

/// The heartbeat interval for a rescue timeout.
pub fn interval_for(rescue_after: Duration) -> Duration {
    (rescue_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(15))
}

/// The backoff of a failing heartbeat: from 100 ms up to the interval (at most 5 s).
pub fn retry_backoff(every: Duration) -> Backoff {
    Backoff::new(
        Duration::from_millis(100).min(every),
        every.min(Duration::from_secs(5)),
    )
}

/// Beats until `stop`.
pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) -> crate::error::Result<()> {
    let every = interval_for(shared.settings.rescue_after);
    let mut retry = retry_backoff(every);
    let mut wait = every;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(wait) => {}
            // Back after an outage: beat at once (the rescuers of other workers wait for it).
            _ = shared.db.availability.back(), if wait != every => {}
        }
        faults::hit(&shared.worker_id, Point::Heartbeat);
        if beat(&shared).await {
            retry.reset();
            wait = every;
        } else {
            wait = retry.next_delay();
        }
    }
}

/// One heartbeat; whether every statement of it succeeded.
pub(crate) async fn beat(shared: &Shared) -> bool {
    let mut ok = true;
    // A statement failed because the database is unavailable (then the schema is not checked).
    let mut outage = false;
    let pairs: Vec<HeldJob> = {
        let running = shared.jobs.running();
        running
            .iter()
            .map(|(id, r)| HeldJob {
                id: *id,
                attempt: r.attempt,
                started_at: r.started_at,
            })
            .collect()
    };
    if !pairs.is_empty() {
        match heartbeat_many(&shared.db.pool, &pairs).await {
            Ok(alive) => {
                if alive.len() != pairs.len() {
                    let alive: std::collections::HashSet<i64> = alive.into_iter().collect();
                    let running = shared.jobs.running();
                    for HeldJob { id, attempt, .. } in pairs.iter().filter(|j| !alive.contains(&j.id)) {
                        if let Some(r) = running
                            .get(id)
                            .filter(|r| r.attempt == *attempt && (r.executing || r.buffered))
                        {
                            tracing::warn!(
                                job.id = id,
                                job.attempt = attempt,
                                "job was taken away from this worker (cancelled or rescued); telling its handler to stop"
                            );
                            r.lost.cancel();
                        }
                    }
                }
            }
            Err(e) => {
                ok = false;
                outage = is_unavailable(&e);
                shared.db.failed(&e);
                tracing::warn!(error = %e, "heartbeat failed; retrying soon");
            }
        }
    }
    // The schema's record comes back with the worker's row (no query of its own).
    let mut recorded = None;
    if ok {
        match worker_upsert(&shared.db.pool, &shared.info).await {
            Ok(info) => {
                shared.db.availability.success();
                recorded = Some(info);
            }
            Err(e) => {
                ok = false;
                outage = is_unavailable(&e);
                shared.db.failed(&e);
                tracing::warn!(error = %e, "worker heartbeat failed; retrying soon");
            }
        }
    }
    // A `skiplock migrate` of another release since this worker started: stop. Also when the
    // beat failed for another reason than an outage (the new schema may be what failed it).
    if !shared.stop.schema_moved.is_cancelled() {
        let moved = match schema::moved_after_beat(&shared.db.pool, recorded, outage).await {
            Ok(m) => m,
            Err(e) => {
                shared.db.failed(&e);
                tracing::debug!(error = %e, "could not check the schema's version; the next beat will");
                None
            }
        };
        if let Some(m) = moved {
            shared.stop.schema_moved(m);
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_is_a_quarter_of_the_rescue_timeout_within_bounds() {
        assert_eq!(
            interval_for(Duration::from_secs(60)),
            Duration::from_secs(15)
        );
        assert_eq!(
            interval_for(Duration::from_secs(2)),
            Duration::from_millis(500)
        );
        assert_eq!(
            interval_for(Duration::from_millis(100)),
            Duration::from_millis(50)
        );
        assert_eq!(
            interval_for(Duration::from_secs(3600)),
            Duration::from_secs(15)
        );
    }

    #[test]
    fn a_failing_heartbeat_retries_well_within_its_interval() {
        let mut b = retry_backoff(Duration::from_secs(15));
        let d: Vec<u128> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(d, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        let mut b = retry_backoff(Duration::from_millis(50));
        assert_eq!(b.next_delay(), Duration::from_millis(50));
        assert_eq!(b.next_delay(), Duration::from_millis(50));
    }
}
