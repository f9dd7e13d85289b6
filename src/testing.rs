//! Helpers for testing a program that uses skiplock, against a real database: execute a job's
//! handler inline, see what was enqueued, drain the queue with a worker, and execute a handler
//! that uses durable steps inline, one attempt at a time, against what the job recorded
//! ([`run_recorded`], [`replay_job`]; docs/steps.md). (As River's `rivertest` and Oban's
//! `Testing` do; `examples/testing.rs` shows each.)
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
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::queue::{JobArgs, JobState, NewJob, RawArgs};
use crate::store::steps::StepRecord;
use crate::store::testing::ClaimedJob;
use crate::store::{self, Executor, Pool};
use crate::worker::outcome::{Attempt, RetryPolicy, decide};
use crate::worker::{HandlerResult, IntoJobResult, JobContext, WorkerBuilder};

/// Runs `handler` on `args` as a worker would (the args go through their JSON form, so a
/// serde mismatch between enqueue and handler shows here too), with a context of its own
/// (job id 0, attempt 1 of 1, `pool` as [`JobContext::pool`]); returns its verdict. There is
/// no job row, so durable steps cannot record: a handler that uses them is run with
/// [`run_recorded`].
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

/// The `attempted_by` of the attempts [`run_recorded`] and [`replay_job`] run (the fence of
/// their steps and acknowledgement, as a worker's id is).
pub const INLINE_WORKER: &str = "skiplock-testing-inline";

/// One attempt of a job run inline by [`run_recorded`] or [`replay_job`], acknowledged as a
/// worker acknowledges it.
#[derive(Debug, Clone, PartialEq)]
pub struct InlineRun {
    /// The job.
    pub id: i64,
    /// The attempt that ran.
    pub attempt: i32,
    /// The job's state after the attempt: `completed`, `available` (a retry after an error,
    /// or a durable sleep or wait: see `suspended_until`), `discarded` or `cancelled`.
    pub state: JobState,
    /// The attempt's error as stored in the job's `errors` (a handler's error, a panic, a
    /// timeout), if it failed or was cancelled.
    pub error: Option<String>,
    /// What the handler completed the job with ([`crate::worker::Outcome::CompleteWith`]).
    pub result: Option<Value>,
    /// When the attempt ended in a durable sleep or a wait for a signal: when the job is due
    /// again (its attempt given back). [`replay_job`] runs it again before then.
    pub suspended_until: Option<DateTime<Utc>>,
    /// Everything the job has recorded after this attempt, in order (steps, sleeps, waits, and
    /// the cursor at seq 0).
    pub steps: Vec<StepRecord>,
}

/// Enqueues a job of `args` (default options) and runs its first attempt inline, with
/// `handler`, as a worker would: its durable steps, cursor, sleeps and waits are recorded in
/// the database (docs/steps.md), and the attempt is acknowledged (completed, retried,
/// discarded, or due later after a sleep or wait). [`replay_job`] with the id runs the next
/// attempt, which replays what this one recorded. The job is enqueued and claimed in one
/// transaction: a worker of the same database never sees it available.
pub async fn run_recorded<A, F, Fut>(pool: &Pool, handler: F, args: A) -> Result<InlineRun>
where
    A: JobArgs,
    F: Fn(JobContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoJobResult,
{
    let job = NewJob::typed(&args, Default::default())?;
    let mut tx = pool.begin().await?;
    let id = store::jobs::enqueue(&mut *tx, &job).await?.id;
    let claimed = store::testing::claim_job(&mut *tx, id, INLINE_WORKER)
        .await?
        .ok_or_else(|| {
            Error::Invalid(format!(
                "job {id} (of kind {}) is not available to run: a job with its unique key was there already",
                A::KIND
            ))
        })?;
    tx.commit().await?;
    run_claimed(pool, handler, claimed).await
}

/// Runs the next attempt of job `id` inline with `handler`, against what the job recorded in
/// the database (by workers or by [`run_recorded`]): recorded steps return their recorded
/// results without running, the cursor reads as saved, a sleep or wait already answered passes
/// (a pending sleep or wait is run again before its time: the attempt ends again unless the
/// signal has come), and what is new is recorded; then the attempt is acknowledged as a
/// worker's. A job waiting to run is claimed whatever its run time; a finished job is made
/// available again first (as [`crate::admin::retry`] does: one more attempt if it was out of
/// them). A running job or one waiting for its dependencies is refused. It changes the job:
/// use it on a test database (or a copy).
pub async fn replay_job<A, F, Fut>(pool: &Pool, handler: F, id: i64) -> Result<InlineRun>
where
    A: JobArgs,
    F: Fn(JobContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoJobResult,
{
    let job = store::jobs::get_job(pool, id).await?;
    if job.kind != A::KIND {
        return Err(Error::Invalid(format!(
            "job {id} is of kind {:?}, not {:?}: the handler cannot replay it",
            job.kind,
            A::KIND
        )));
    }
    if job.state.is_finished() {
        store::jobs::retry_job(pool, id).await?;
    }
    let Some(claimed) = store::testing::claim_job(pool, id, INLINE_WORKER).await? else {
        let state = store::jobs::get_job(pool, id).await?.state;
        return Err(Error::Invalid(format!(
            "job {id} is {state}: only a job waiting to run (available) or finished can be replayed"
        )));
    };
    run_claimed(pool, handler, claimed).await
}

/// Runs the claimed attempt `job` with `handler` through the worker's own executor (decode,
/// timeout, panics, the steps' verdict) and acknowledges it with the worker's decision.
async fn run_claimed<A, F, Fut>(pool: &Pool, handler: F, job: ClaimedJob) -> Result<InlineRun>
where
    A: JobArgs,
    F: Fn(JobContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoJobResult,
{
    let mut registry = crate::worker::handler::Registry::new();
    registry.register_typed(handler);
    let erased = registry.get(A::KIND).cloned();
    let ctx = JobContext {
        id: job.id,
        kind: job.kind,
        queue: job.queue,
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        created_at: job.created_at,
        scheduled_at: job.scheduled_at,
        tags: job.tags,
        meta: job.meta,
        pool: pool.clone(),
        worker_id: Arc::from(INLINE_WORKER),
        shutdown: CancellationToken::new(),
        lost: CancellationToken::new(),
        steps: Arc::default(),
    };
    let steps = ctx.steps.clone();
    let attempt = crate::worker::executor::execute(
        erased,
        ctx,
        RawArgs::new(job.args),
        crate::config::DEFAULT_JOB_TIMEOUT,
    )
    .await;
    let suspended_until = match attempt {
        Attempt::Suspended(until) => Some(until),
        _ => None,
    };
    // The worker's default backoff, its jitter halfway: a retry's time matters little here,
    // since replay_job claims a job whatever its run time.
    let policy = RetryPolicy {
        unit: crate::config::DEFAULT_BACKOFF_UNIT,
        max: crate::config::DEFAULT_BACKOFF_MAX,
    };
    let ack = decide(
        job.id,
        job.attempt,
        job.max_attempts,
        attempt,
        Utc::now(),
        policy,
        0.5,
    );
    store::ack::ack_many(pool, std::slice::from_ref(&ack)).await?;
    // A signal sent while the attempt was ending found it running (docs/steps.md, "Signals").
    if let Some(name) = steps.waiting_for() {
        store::steps::wake_signalled(pool, job.id, job.attempt, INLINE_WORKER, &name).await?;
    }
    let row = store::jobs::get_job(pool, job.id).await?;
    Ok(InlineRun {
        id: job.id,
        attempt: job.attempt,
        state: row.state,
        error: ack.error,
        result: ack.result,
        suspended_until,
        steps: store::steps::load(pool, job.id).await?,
    })
}
