//! Shutdown signals. SIGINT or SIGTERM starts a graceful shutdown: stop claiming, give
//! running jobs the grace period, then put the rest back without using up their attempt.

use std::time::Duration;

use super::Shared;
use super::outcome::{Attempt, RetryPolicy, decide};

/// Tells handlers the worker is stopping, waits up to the grace period for them, then
/// aborts the rest and queues their release (back to `available`, attempt kept).
pub(crate) async fn finish_running(shared: &Shared) {
    shared.stop.shutdown.cancel();
    let grace = shared.settings.shutdown_grace;
    let deadline = tokio::time::Instant::now() + grace;
    let executing = |sh: &Shared| sh.jobs.running().values().filter(|r| r.executing).count();
    let n = executing(shared);
    if n > 0 {
        tracing::info!(
            jobs = n,
            "waiting up to {} for running jobs",
            humantime::format_duration(grace)
        );
    }
    while executing(shared) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Abort what is left and put it back without using up its attempt.
    let leftovers: Vec<(i64, i32)> = {
        let running = shared.jobs.running();
        running
            .iter()
            .filter(|(_, r)| r.executing)
            .map(|(id, r)| {
                if let Some(a) = &r.abort {
                    a.abort();
                }
                (*id, r.attempt)
            })
            .collect()
    };
    // One line for all of them, with their count (tests/runtime.rs,
    // a_stop_returns_its_claimed_ahead_jobs_in_one_line).
    if !leftovers.is_empty() {
        let ids: Vec<i64> = leftovers
            .iter()
            .take(super::release::IDS_SHOWN)
            .map(|(id, _)| *id)
            .collect();
        tracing::warn!(
            jobs = leftovers.len(),
            job.ids = ?ids,
            "grace period over; returning {} running job(s) to the queue",
            leftovers.len()
        );
    }
    for (id, attempt) in leftovers {
        let policy = RetryPolicy {
            unit: shared.settings.backoff_unit,
            max: shared.settings.backoff_max,
        };
        // A released job keeps its attempt whatever its limit, so the limit is moot here.
        let ack = decide(
            id,
            attempt,
            i32::MAX,
            Attempt::Released,
            chrono::Utc::now(),
            policy,
            0.0,
        );
        let _ = shared.jobs.acks.send(ack.into()).await;
    }
}

/// Resolves on the first SIGINT or SIGTERM.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
