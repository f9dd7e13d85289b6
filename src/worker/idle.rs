//! `--exit-when-idle`: ends the worker once nothing in its queues is claimable now and
//! nothing runs, twice in a row. Before it calls that idle it runs the maintenance's flow
//! sweep once (`skiplock.settle_dependencies`): jobs left waiting for a dependency that has
//! finished (a worker stopped in the middle of a fan-out) are about to be claimable, and the
//! rescuer's own pass may come only after the worker has gone. While the database is
//! unavailable it backs off (and is never idle: it cannot know).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use super::rescuer::SETTLE_BATCH;
use crate::db::outage::Backoff;
use crate::error::Result;
use crate::store::claim::has_claimable;
use crate::store::flows::settle_dependencies;

/// Longest wait between two failed checks.
pub const CHECK_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Checks until idle (then cancels `idle`) or until the worker stops claiming.
pub(crate) async fn run(
    shared: Arc<Shared>,
    queues: Option<Vec<String>>,
    idle: CancellationToken,
) -> Result<()> {
    let every = shared
        .settings
        .poll_interval
        .min(Duration::from_millis(200));
    let mut backoff = Backoff::new(every, CHECK_BACKOFF_MAX);
    let mut wait = every;
    let mut idle_checks = 0;
    loop {
        tokio::select! {
            _ = shared.stop.claiming.cancelled() => return Ok(()),
            _ = tokio::time::sleep(wait) => {}
        }
        wait = every;
        if !shared.jobs.running().is_empty() {
            idle_checks = 0;
            continue;
        }
        let checked = match has_claimable(&shared.db.pool, &shared.kinds, queues.as_deref()).await {
            Ok(false) => settle_dependencies(&shared.db.pool, SETTLE_BATCH)
                .await
                .map(|settled| settled > 0),
            other => other,
        };
        match checked {
            Ok(claimable) => {
                backoff.reset();
                if !claimable && shared.jobs.running().is_empty() {
                    idle_checks += 1;
                    if idle_checks >= 2 {
                        idle.cancel();
                        return Ok(());
                    }
                } else {
                    idle_checks = 0;
                }
            }
            Err(e) => {
                shared.db.failed(&e);
                idle_checks = 0;
                wait = backoff.next_delay();
                tracing::warn!(error = %e, "idle check failed; retrying in {wait:?}");
            }
        }
    }
}
