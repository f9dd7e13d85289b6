//! Maintenance: the rescuer and the periodic-job scheduler are [`Service`]s every worker
//! process runs (a `run_once` that does bounded work and returns how many rows it touched; the
//! [`supervise`] loop adds the staggered start, the jittered interval and error logging, and
//! stops with the worker). The reaper and retention are periodic *jobs* (kinds `reap` and
//! `retain`, see [`builtin_jobs`]): enqueued once per `SKIPLOCK_REAPER_INTERVAL` across all
//! processes by the scheduler, run by whichever worker claims them, each run a row with its
//! result. [`register_all`] registers their handlers together with the scheduler that
//! enqueues them, so no worker declares a kind it cannot run.

pub mod periodic;
pub mod reaper;
pub mod rescuer;
pub mod retention;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::db::outage::Backoff;
use crate::error::{Error, Result};
use crate::queue::NewJob;
use crate::store::Pool;
use crate::worker::handler::BoxFuture;

/// The queue of the built-in maintenance jobs (`reap`, `retain`). A name of skiplock's own, so
/// that adding it to a worker's queues never serves (and throttles) a queue of the user's.
pub const QUEUE: &str = "skiplock.maintenance";
/// Slots a worker with an explicit queue list gives [`QUEUE`] unless it lists it itself: one
/// each for `reap` and `retain`, so a long retention pass never delays a reaper run.
pub const QUEUE_CONCURRENCY: usize = 2;

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
                tracing::error!(parent: &span, panic = %crate::worker::executor::panic_message(panic.as_ref()),
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

/// The built-in periodic jobs: `reap` (the reaper) and `retain` (retention), each every
/// interval of its settings (`SKIPLOCK_REAPER_INTERVAL`), in [`QUEUE`], with one attempt (a
/// failed run is recorded in its row and the next period runs anyway). Their periodic names
/// are their kinds.
pub fn builtin_jobs(
    reaper: &reaper::ReaperSettings,
    retention: &retention::RetentionSettings,
) -> Result<periodic::PeriodicJobs> {
    let job = |kind: &'static str, every: Duration| {
        periodic::PeriodicJob::every(
            kind,
            every,
            NewJob::new(kind, serde_json::json!({}))
                .queue(QUEUE)
                .max_attempts(1),
        )
        .map_err(|e| Error::config("SKIPLOCK_REAPER_INTERVAL", e.to_string()))
    };
    Ok(periodic::PeriodicJobs::new()
        .add(job(reaper::KIND, reaper.interval)?)
        .add(job(retention::KIND, retention.interval)?))
}

/// Adds maintenance to a worker, with settings from the environment: the `reap` and `retain`
/// handlers and the periodic-job scheduler, which enqueues them and the jobs of
/// `SKIPLOCK_PERIODIC_FILE`. The rescuer is always part of the worker itself.
pub fn register_all(builder: crate::worker::WorkerBuilder) -> Result<crate::worker::WorkerBuilder> {
    register_with(builder, periodic::PeriodicJobs::new())
}

/// Like [`register_all`], with periodic jobs declared in code added to those of the file.
pub fn register_with(
    builder: crate::worker::WorkerBuilder,
    code_jobs: periodic::PeriodicJobs,
) -> Result<crate::worker::WorkerBuilder> {
    let pool = builder.pool().clone();
    let reaper = reaper::Reaper::new(pool, reaper::ReaperSettings::from_env()?);
    let retention = retention::Retention {
        settings: retention::RetentionSettings::from_env()?,
    };
    let jobs = code_jobs.extend(periodic::PeriodicJobs::from_env()?);
    register_parts(builder, reaper, retention, jobs)
}

/// Like [`register_with`], with the reaper and retention built by the caller (settings in
/// code; a test keeps a clone of the reaper to watch its counters). Registers both handlers
/// with the scheduler that enqueues their jobs (a worker never declares a kind it cannot
/// run), and makes a worker with an explicit queue list serve [`QUEUE`] too.
pub fn register_parts(
    builder: crate::worker::WorkerBuilder,
    reaper: reaper::Reaper,
    retention: retention::Retention,
    jobs: periodic::PeriodicJobs,
) -> Result<crate::worker::WorkerBuilder> {
    let jobs = jobs.extend(builtin_jobs(&reaper.settings(), &retention.settings)?);
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let scheduler = periodic::Scheduler::new(jobs, format!("{host}:{}", std::process::id()))?;
    Ok(builder
        .register(reaper)
        .register(retention)
        .service(scheduler)
        .also_serve(QUEUE, QUEUE_CONCURRENCY))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_jobs_are_reap_and_retain_every_reaper_interval_in_their_queue() {
        let r = reaper::ReaperSettings {
            interval: Duration::from_secs(45),
            ..Default::default()
        };
        let t = retention::RetentionSettings::default();
        let jobs = builtin_jobs(&r, &t).unwrap();
        let got: Vec<_> = jobs
            .jobs()
            .iter()
            .map(|j| {
                (
                    j.name.as_str(),
                    j.job.kind.as_str(),
                    j.job.queue.as_str(),
                    j.schedule.describe(),
                    j.job.max_attempts,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("reap", "reap", QUEUE, "every 45s".to_string(), 1),
                ("retain", "retain", QUEUE, "every 30s".to_string(), 1),
            ]
        );
        let bad = reaper::ReaperSettings {
            interval: Duration::from_millis(1500) + Duration::from_nanos(1),
            ..Default::default()
        };
        let e = builtin_jobs(&bad, &t).unwrap_err().to_string();
        assert!(e.contains("SKIPLOCK_REAPER_INTERVAL"), "{e}");
    }

    #[test]
    fn failing_services_back_off_to_four_intervals_or_a_minute() {
        let s = Duration::from_secs;
        assert_eq!(failure_wait_cap(s(3)), s(12));
        assert_eq!(failure_wait_cap(s(30)), s(60));
        assert_eq!(failure_wait_cap(s(3600)), s(3600));
    }
}
