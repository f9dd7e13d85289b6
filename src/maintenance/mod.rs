//! Maintenance services: small periodic tasks every worker process runs (rescuer, reaper,
//! retention, periodic jobs). Each is a [`Service`] with a `run_once` that does bounded work
//! and returns how many rows it touched; the [`supervise`] loop adds the staggered start, the
//! jittered interval and error logging, and stops with the worker.

pub mod periodic;
pub mod reaper;
pub mod rescuer;
pub mod retention;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::worker::handler::BoxFuture;

/// A periodic maintenance task.
pub trait Service: Send + Sync + 'static {
    /// Name used in logs.
    fn name(&self) -> &'static str;
    /// Time between runs.
    fn interval(&self) -> Duration;
    /// One run: bounded work, returns the number of rows touched.
    fn run_once(&self, pool: PgPool) -> BoxFuture<Result<u64>>;
}

/// Runs `service` every interval until `stop`. The first run starts after a random part of
/// one interval (at most 1 s) so that processes started together do not run in lockstep.
pub async fn supervise(service: Arc<dyn Service>, pool: PgPool, stop: CancellationToken) {
    let every = service.interval();
    let first = every
        .min(Duration::from_secs(1))
        .mul_f64(rand::random::<f64>());
    tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(first) => {} }
    loop {
        let span = tracing::info_span!("maintenance", service = service.name());
        match service.run_once(pool.clone()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(parent: &span, rows = n, "maintenance run touched rows"),
            Err(e) => {
                tracing::warn!(parent: &span, error = %e, "maintenance run failed; will try again")
            }
        }
        let jittered = every.mul_f64(0.9 + 0.2 * rand::random::<f64>());
        tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(jittered) => {} }
    }
}

/// Adds the configured maintenance services to a worker: the reaper and retention (settings
/// from the environment) and the periodic-job scheduler for the jobs of
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
    let mut builder = builder.service(reaper).service(retention);
    if !jobs.is_empty() {
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let scheduler = periodic::Scheduler::new(jobs, format!("{host}:{}", std::process::id()))?;
        builder = builder.service(scheduler);
    }
    Ok(builder)
}
