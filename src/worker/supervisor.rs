//! Supervision of the worker's long-running tasks (producers, ack writer, heartbeat, NOTIFY
//! listener, queue discovery, idle check): a task that panics or returns an error is logged
//! at ERROR and started again after a capped backoff, with whatever state must survive it
//! (the ack writer's pending acks, a producer's slots) kept outside the task. A task that
//! returns `Ok` is done (it saw the stop signal, or a producer retired).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::outcome::panic_message;
use crate::db::outage::Backoff;
use crate::error::Result;

/// First and longest wait before restarting a failed task.
pub const RESTART_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(30));
/// A task that ran this long before failing starts again from the shortest wait.
pub const STABLE_AFTER: Duration = Duration::from_secs(60);

/// Runs `start(restarts)` until it returns `Ok(())`. After a panic or an error it logs at
/// ERROR, waits (capped backoff, cut short by `stop`) and calls `start` again with the
/// number of restarts so far, so the new run can first repair what the failed one left
/// (e.g. a producer returns the jobs it claimed but never started). A run that failed
/// after starting before `stop` gets one more run (the ack writer still drains its acks);
/// a run that began after `stop` and fails ends supervision.
pub(crate) async fn supervise<F, Fut>(task: &str, stop: CancellationToken, mut start: F)
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let mut backoff = Backoff::new(RESTART_BACKOFF.0, RESTART_BACKOFF.1);
    let mut restarts = 0u32;
    loop {
        let began = Instant::now();
        let stopping = stop.is_cancelled();
        let failure = match AssertUnwindSafe(start(restarts)).catch_unwind().await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => format!("failed: {e}"),
            Err(panic) => format!("panicked: {}", panic_message(panic.as_ref())),
        };
        if stopping {
            tracing::error!(
                task,
                restarts,
                "task {failure}; not restarting it (the worker is stopping)"
            );
            return;
        }
        if began.elapsed() >= STABLE_AFTER {
            backoff.reset();
        }
        let delay = backoff.next_delay();
        tracing::error!(
            task,
            restarts = restarts + 1,
            "task {failure}; restarting in {delay:?}"
        );
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(delay) => {}
        }
        restarts = restarts.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_panicking_or_failing_task_is_restarted_until_it_finishes() {
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        supervise("t", CancellationToken::new(), move |restarts| {
            let r = r.clone();
            async move {
                let n = r.fetch_add(1, Ordering::SeqCst);
                assert_eq!(n, restarts);
                match n {
                    0 => panic!("boom"),
                    1 => Err(Error::Other("bad".into())),
                    _ => Ok(()),
                }
            }
        })
        .await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_task_failing_as_the_worker_stops_gets_one_more_run() {
        let stop = CancellationToken::new();
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        let s = stop.clone();
        supervise("t", stop, move |_| {
            let r = r.clone();
            let s = s.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                s.cancel(); // the stop arrives while the first run is still going
                Err(Error::Other("always".into()))
            }
        })
        .await;
        // The first run failed before the stop was seen; the second began after it.
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}
