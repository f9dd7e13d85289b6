//! Enqueueing from a service: a typed job ([`enqueue`], [`enqueue_with`]) and a flow
//! ([`enqueue_flow`]), each checked by the job model (`crate::queue`) and then written by the
//! store (`crate::store::jobs`, `crate::store::flows`).

use crate::error::Result;
use crate::queue::flow::{Flow, FlowIds};
use crate::queue::{Enqueued, JobArgs, JobOptions, NewJob};
use crate::store::Executor;

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
    crate::store::jobs::enqueue(exec, &job).await
}

/// Enqueues `flow` atomically (in `exec`'s transaction, if it is one): every job or none.
/// Cycles, unknown or duplicate names are refused with nothing inserted.
pub async fn enqueue_flow<'e, E: Executor<'e>>(exec: E, flow: &Flow) -> Result<FlowIds> {
    crate::store::flows::enqueue_flow(exec, &flow.to_spec()?).await
}
