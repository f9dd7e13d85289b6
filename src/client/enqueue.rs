//! Enqueueing from a service: a typed job ([`enqueue`], [`enqueue_with`]) and a flow
//! ([`enqueue_flow`]), each checked by the job model (`crate::queue`) and then written by the
//! store (`crate::store::jobs`, `crate::store::flows`).

use crate::error::{Error, Result};
use crate::queue::flow::{Flow, FlowIds};
use crate::queue::{Enqueued, JobArgs, JobOptions, NewJob};
use crate::store::Executor;
use crate::store::jobs::ManyJobs;

/// Enqueues one job (`skiplock::enqueue_job`): its id (or the id of the available job holding
/// its key) and what the enqueue did; a refusal for a full queue is counted
/// (`skiplock_enqueue_refused_total`).
pub async fn enqueue_job<'e, E: Executor<'e>>(exec: E, job: &NewJob) -> Result<Enqueued> {
    crate::store::jobs::enqueue(exec, job)
        .await
        .map_err(|e| counted(e, &job.queue))
}

/// Enqueues many jobs of one kind in one statement (`skiplock::enqueue_many`): their ids in
/// order; all or none. A refusal for a full queue is counted once.
pub async fn enqueue_many<'e, E: Executor<'e>>(exec: E, jobs: ManyJobs<'_>) -> Result<Vec<i64>> {
    let queue = jobs.queue;
    crate::store::jobs::enqueue_many(exec, jobs)
        .await
        .map_err(|e| counted(e, queue))
}

/// `e`, counted in `skiplock_enqueue_refused_total` when it refuses an enqueue into `queue`
/// because the queue is full (docs/operations.md, "Metrics").
fn counted(e: Error, queue: &str) -> Error {
    if super::admission::is_queue_full(&e) {
        crate::metrics::enqueue_refused(queue);
    }
    e
}

/// Enqueues a typed job with its type's default options: its id (or the id of the available
/// job holding its unique key) and what the enqueue did. `exec` is a pool (`&pool`) or a
/// transaction (`&mut *tx`: the job exists only if the transaction commits).
pub async fn enqueue<'e, E: Executor<'e>, A: JobArgs>(exec: E, args: A) -> Result<Enqueued> {
    enqueue_with(exec, args, JobOptions::default()).await
}

/// Like [`enqueue`], with `options` overriding the type's defaults.
pub async fn enqueue_with<'e, E: Executor<'e>, A: JobArgs>(
    exec: E,
    args: A,
    options: JobOptions,
) -> Result<Enqueued> {
    let job = NewJob::typed(&args, options)?;
    enqueue_job(exec, &job).await
}

/// Enqueues `flow` atomically (in `exec`'s transaction, if it is one): every job or none.
/// Cycles, unknown or duplicate names are refused with nothing inserted.
pub async fn enqueue_flow<'e, E: Executor<'e>>(exec: E, flow: &Flow) -> Result<FlowIds> {
    crate::store::flows::enqueue_flow(exec, &flow.to_spec()?).await
}
