//! The heartbeat task: every interval (a quarter of the rescue timeout, so a short timeout
//! in tests never rescues a live job) one statement refreshes every job this process holds,
//! and the worker's own row in `skiplock.workers`. Jobs that come back missing were taken
//! away; their handlers are told through [`super::JobContext::lost`].

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::queue::heartbeat::{heartbeat_many, upsert_worker};

/// The heartbeat interval for a rescue timeout.
pub fn interval_for(rescue_after: Duration) -> Duration {
    (rescue_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(15))
}

/// Beats until `stop`.
pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let every = interval_for(shared.settings.rescue_after);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        beat(&shared).await;
    }
}

/// One heartbeat.
pub(crate) async fn beat(shared: &Shared) {
    let pairs: Vec<(i64, i32)> = {
        let running = shared.running.lock().unwrap();
        running.iter().map(|(id, r)| (*id, r.attempt)).collect()
    };
    if !pairs.is_empty() {
        match heartbeat_many(&shared.pool, &pairs).await {
            Ok(alive) => {
                if alive.len() != pairs.len() {
                    let alive: std::collections::HashSet<i64> = alive.into_iter().collect();
                    let running = shared.running.lock().unwrap();
                    for (id, attempt) in pairs.iter().filter(|(id, _)| !alive.contains(id)) {
                        if let Some(r) = running
                            .get(id)
                            .filter(|r| r.attempt == *attempt && r.executing)
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
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
    }
    if let Err(e) = upsert_worker(&shared.pool, &shared.info).await {
        tracing::warn!(error = %e, "worker heartbeat failed");
    }
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
}
