//! Services: periodic tasks a worker runs beside its jobs (the rescuer, the periodic-job
//! scheduler, anything given to [`crate::worker::WorkerBuilder::service`]). A service is a
//! `run_once` that does bounded work and returns how many rows it touched; [`supervise`]
//! adds the staggered start, the jittered interval, backoff on failure and panic logging,
//! and stops with the worker.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use super::handler::BoxFuture;
use crate::db::outage::Backoff;
use crate::error::Result;
use crate::store::Pool;

/// A periodic maintenance task.
pub trait Service: Send + Sync + 'static {
    /// Name used in logs.
    fn name(&self) -> &'static str;
    /// Time between runs.
    fn interval(&self) -> Duration;
    /// One run: bounded work, returns the number of rows touched.
    fn run_once(&self, pool: Pool) -> BoxFuture<Result<u64>>;
}

/// Runs `service` every interval until `stop`. The first run starts after a random part of
/// one interval (at most 1 s) so that processes started together do not run in lockstep.
/// A failed run (the database down, say) is logged and retried after a growing wait,
/// doubling from the interval up to [`failure_wait_cap`]; a panicking run is logged at
/// ERROR and counts as a failure, it does not end the service.
pub async fn supervise(service: Arc<dyn Service>, pool: Pool, stop: CancellationToken) {
    let every = service.interval();
    let first = every
        .min(Duration::from_secs(1))
        .mul_f64(rand::random::<f64>());
    tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(first) => {} }
    let mut failing = Backoff::new(every, failure_wait_cap(every));
    loop {
        let span = tracing::info_span!("maintenance", service = service.name());
        let run = AssertUnwindSafe(service.run_once(pool.clone()))
            .catch_unwind()
            .await;
        let wait = match run {
            Ok(Ok(n)) => {
                if n > 0 {
                    tracing::info!(parent: &span, rows = n, "maintenance run touched rows");
                }
                failing.reset();
                every.mul_f64(0.9 + 0.2 * rand::random::<f64>())
            }
            Ok(Err(e)) => {
                let wait = failing.next_delay();
                tracing::warn!(parent: &span, error = %e, "maintenance run failed; retrying in {wait:?}");
                wait
            }
            Err(panic) => {
                let wait = failing.next_delay();
                tracing::error!(parent: &span, panic = %super::outcome::panic_message(panic.as_ref()),
                    "maintenance run panicked; retrying in {wait:?}");
                wait
            }
        };
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(wait) => {} }
    }
}

/// The longest wait between two failing runs of a service that runs every `every`: four
/// intervals, at most a minute (but never less than one interval).
pub fn failure_wait_cap(every: Duration) -> Duration {
    (every * 4).min(Duration::from_secs(60)).max(every)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_services_back_off_to_four_intervals_or_a_minute() {
        let s = Duration::from_secs;
        assert_eq!(failure_wait_cap(s(3)), s(12));
        assert_eq!(failure_wait_cap(s(30)), s(60));
        assert_eq!(failure_wait_cap(s(3600)), s(3600));
    }
}
