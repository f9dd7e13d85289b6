//! Operating the queue from a program: look at jobs, cancel and retry them, pause and resume
//! queues, set their limits. The same operations as the SQL API's (`skiplock.cancel`,
//! `skiplock.pause_queue`, …; docs/sql-reference.md) and the CLI's, with the same fences: a cancelled
//! running job's late acknowledgement is ignored, a retry never puts a second available job on
//! a unique key. Every function takes any executor: a pool (`&pool`) or the caller's
//! transaction (`&mut *tx`).
//!
//! ```no_run
//! # async fn demo(pool: skiplock::Pool) -> skiplock::Result<()> {
//! use skiplock::admin;
//! admin::pause_queue(&pool, "mail").await?;
//! admin::set_queue_limit(&pool, "mail", Some(4)).await?;
//! let job = admin::get_job(&pool, 42).await?;
//! if job.state.is_finished() {
//!     admin::retry(&pool, job.id).await?;
//! }
//! admin::resume_queue(&pool, "mail").await?;
//! # Ok(()) }
//! ```

use crate::error::Result;
use crate::queue::JobRow;
use crate::queue::flow::{DependencyResult, Dependent, FlowProgress};
use crate::store::{self, Executor};

pub use crate::store::steps::StepRecord;

pub use crate::store::bulk::JobFilter as BulkFilter;
pub use crate::store::control::{KeyLimit, KeyLimitChange, QueueControl, Rate};
pub use crate::store::jobs::{
    JobFilter, QueueStat, Reschedule, cancel_by_key, hold_key, reschedule,
};

/// One job, with everything its row holds; [`crate::Error::NotFound`] when there is none.
pub async fn get_job<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<JobRow> {
    store::jobs::get_job(exec, id).await
}

/// Jobs matching `filter`, newest first, at most `filter.limit`.
pub async fn list_jobs<'e, E: Executor<'e>>(exec: E, filter: &JobFilter) -> Result<Vec<JobRow>> {
    store::jobs::list_jobs(exec, filter).await
}

/// How many jobs each queue holds in each state.
pub async fn queue_stats<'e, E: Executor<'e>>(exec: E) -> Result<Vec<QueueStat>> {
    store::jobs::queue_stats(exec).await
}

/// Cancels a waiting or running job (`skiplock.cancel`): a running job's handler is told it
/// was taken away, and its acknowledgement is ignored. A job that does not exist or is already
/// finished is refused, naming it.
pub async fn cancel<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<()> {
    store::jobs::cancel_job(exec, id).await.map(|_| ())
}

/// Makes a finished or waiting job available now (`skiplock.retry`), with one more attempt if
/// it was out of them. Refused for a running job, or while another available job holds its
/// unique key.
pub async fn retry<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<()> {
    store::jobs::retry_job(exec, id).await.map(|_| ())
}

/// Cancels the unfinished jobs that match `filter`, oldest first, at most `max_rows`
/// (`skiplock.cancel_jobs`); how many.
pub async fn cancel_jobs(pool: &store::Pool, filter: &BulkFilter, max_rows: i32) -> Result<i64> {
    store::bulk::cancel_jobs(pool, filter, max_rows).await
}

/// Retries the finished jobs that match `filter`, oldest first, at most `max_rows`
/// (`skiplock.retry_jobs`); how many.
pub async fn retry_jobs(pool: &store::Pool, filter: &BulkFilter, max_rows: i32) -> Result<i64> {
    store::bulk::retry_jobs(pool, filter, max_rows).await
}

/// Pauses a queue for every worker: its jobs stay waiting, those claimed ahead go back.
/// Whether it was running.
pub async fn pause_queue<'e, E: Executor<'e>>(exec: E, queue: &str) -> Result<bool> {
    store::control::pause(exec, queue).await
}

/// Turns fair mode of a queue on or off: its claims serve its limit keys round-robin.
pub async fn set_queue_fairness<'e, E: Executor<'e>>(
    exec: E,
    queue: &str,
    fair: bool,
) -> Result<()> {
    store::control::set_queue_fairness(exec, queue, fair).await
}

/// Resumes a paused queue. Whether it was paused.
pub async fn resume_queue<'e, E: Executor<'e>>(exec: E, queue: &str) -> Result<bool> {
    store::control::resume(exec, queue).await
}

/// At most `concurrency` running jobs of `queue`, all workers together (`None`: no limit).
pub async fn set_queue_limit<'e, E: Executor<'e>>(
    exec: E,
    queue: &str,
    concurrency: Option<i32>,
) -> Result<()> {
    store::control::set_queue_limit(exec, queue, concurrency).await
}

/// The per-key limits of `queue` (per `limit_key`: running jobs and starts per period), both
/// at once; a limit left `None` is removed.
pub async fn set_key_limit<'e, E: Executor<'e>>(
    exec: E,
    queue: &str,
    limit: KeyLimit,
) -> Result<()> {
    store::control::set_key_limit(exec, queue, limit).await
}

/// Changes one of `queue`'s per-key limits and keeps the other.
pub async fn change_key_limit<'e, E: Executor<'e>>(
    exec: E,
    queue: &str,
    change: KeyLimitChange,
) -> Result<()> {
    store::control::change_key_limit(exec, queue, change).await
}

/// Every queue with a limit or paused, or with jobs waiting or running, and its settings.
pub async fn queue_controls<'e, E: Executor<'e>>(exec: E) -> Result<Vec<QueueControl>> {
    store::control::list(exec).await
}

/// How many jobs of flow `flow` are in each state (an id [`crate::enqueue_flow`] returned, or
/// any job's: it and everything that depends on it).
pub async fn flow_progress<'e, E: Executor<'e>>(exec: E, flow: i64) -> Result<FlowProgress> {
    store::flows::flow_progress(exec, flow).await
}

/// The dependencies of job `id`, with how each finished and what it returned.
pub async fn dependency_results<'e, E: Executor<'e>>(
    exec: E,
    id: i64,
) -> Result<Vec<DependencyResult>> {
    store::flows::dependency_results(exec, id).await
}

/// The jobs that wait for job `id`, with their states.
pub async fn dependents<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<Vec<Dependent>> {
    store::flows::dependents(exec, id).await
}

/// What job `id`'s durable steps recorded, in order (docs/steps.md, "Inspecting"): each step,
/// sleep and wait, and its cursor (seq 0).
pub async fn job_steps<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<Vec<StepRecord>> {
    store::steps::load(exec, id).await
}
