//! Helpers for testing a program that uses skiplock, against a real database: execute a job's
//! handler inline, see what was enqueued, drain the queue with a worker. (As River's
//! `rivertest` and Oban's `Testing` do; `examples/testing.rs` shows each.)
//!
//! ```no_run
//! # use skiplock::prelude::*;
//! # #[derive(Serialize, Deserialize, PartialEq, Debug)] struct Welcome { to: String }
//! # impl JobArgs for Welcome { const KIND: &'static str = "welcome"; }
//! # async fn send_welcome(_ctx: JobContext, _job: Welcome) -> anyhow::Result<()> { Ok(()) }
//! # async fn demo(pool: skiplock::Pool) -> skiplock::Result<()> {
//! use skiplock::testing;
//! // The handler alone, as a worker would run it.
//! let verdict = testing::run_job(&pool, send_welcome, Welcome { to: "a@example.org".into() }).await;
//! assert_eq!(verdict, Ok(Outcome::Complete));
//! // What a transaction enqueued (seen inside it, before it commits).
//! let mut tx = pool.begin().await?;
//! skiplock::enqueue(&mut *tx, Welcome { to: "b@example.org".into() }).await?;
//! assert_eq!(testing::enqueued::<Welcome, _>(&mut *tx).await?.len(), 1);
//! tx.commit().await?;
//! // Every due job run by a worker, until none is left.
//! let drained = testing::drain(Worker::builder(pool.clone()).register_typed(send_welcome)).await?;
//! assert_eq!(drained.completed, 1);
//! # Ok(()) }
//! ```

use std::future::Future;

use crate::error::{Error, Result};
use crate::queue::{JobArgs, JobState, NewJob};
use crate::store::{self, Executor, Pool};
use crate::worker::{HandlerResult, IntoJobResult, JobContext, WorkerBuilder};

/// Runs `handler` on `args` as a worker would (the args go through their JSON form, so a
/// serde mismatch between enqueue and handler shows here too), with a context of its own
/// (job id 0, attempt 1 of 1, `pool` as [`JobContext::pool`]); returns its verdict.
pub async fn run_job<A, F, Fut>(pool: &Pool, handler: F, args: A) -> HandlerResult
where
    A: JobArgs,
    F: Fn(JobContext, A) -> Fut,
    Fut: Future,
    Fut::Output: IntoJobResult,
{
    let job = NewJob::typed(&args, Default::default())
        .map_err(|e| crate::worker::JobError::discard(format!("args of kind {}: {e}", A::KIND)))?;
    let args: A = serde_json::from_value(job.args).map_err(|e| {
        crate::worker::JobError::discard(format!("invalid args for kind {}: {e}", A::KIND))
    })?;
    let ctx = JobContext::detached(pool.clone(), 0, A::KIND);
    handler(ctx, args).await.into_job_result()
}

/// The waiting (`available`) jobs of `A`'s kind, oldest first, decoded: what a program
/// enqueued. Given a transaction, it sees that transaction's own jobs before they commit.
pub async fn enqueued<'e, A, E>(exec: E) -> Result<Vec<A>>
where
    A: JobArgs,
    E: Executor<'e>,
{
    store::testing::available_args(exec, A::KIND)
        .await?
        .into_iter()
        .map(|text| {
            serde_json::from_str(&text).map_err(|e| {
                Error::Invalid(format!(
                    "a waiting {} job's args do not decode: {e}",
                    A::KIND
                ))
            })
        })
        .collect()
}

/// How many jobs of the worker's kinds are in each state after [`drain`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    /// Completed.
    pub completed: i64,
    /// Discarded (out of attempts, or by their handler).
    pub discarded: i64,
    /// Cancelled.
    pub cancelled: i64,
    /// Still waiting: due later (a retry's backoff, a snooze, a `run_at` ahead), in a paused
    /// queue, or of a kind the worker does not run.
    pub available: i64,
    /// Waiting for dependencies that have not finished (docs/flows.md).
    pub waiting: i64,
}

/// Runs the worker `builder` builds (without the reaper, retention and periodic jobs, which
/// would enqueue jobs of their own) until nothing it can claim is due and nothing runs, then
/// counts the jobs of the kinds it runs by state.
pub async fn drain(builder: WorkerBuilder) -> Result<Drained> {
    let pool = builder.pool().clone();
    let kinds = builder.kinds();
    builder
        .without_maintenance()
        .exit_when_idle(true)
        .build()
        .run(std::future::pending::<()>())
        .await?;
    let mut d = Drained::default();
    for (state, n) in store::testing::count_by_state(&pool, &kinds).await? {
        match state {
            JobState::Completed => d.completed = n,
            JobState::Discarded => d.discarded = n,
            JobState::Cancelled => d.cancelled = n,
            JobState::Available => d.available = n,
            JobState::Waiting => d.waiting = n,
            JobState::Running => {}
        }
    }
    Ok(d)
}
