//! How a job the native worker claimed reaches apalis, and how apalis' result comes back.
//!
//! The storage's native worker (src/runtime.rs) has one handler, for the storage's
//! kind, and it does not run the job: [`hand_over`] decodes the args, sends an apalis task
//! down the storage's stream and waits. The storage's tower layer (src/layer.rs)
//! reports, through the task's [`Handoff`], first that apalis started the task, then how
//! the user's service ended; that report is the native handler's result, so retries,
//! discards, panics, timeouts and fenced acks are the native worker's own.
//!
//! Either side can walk away, and the other then knows:
//! - the native side drops its ends when the job is taken away (cancelled, rescued), when
//!   the job timeout passes, or when the shutdown grace runs out: the layer then stops the
//!   user's service future;
//! - before apalis starts a task, a shutdown (or a dropped stream) puts the job back without
//!   using up its attempt;
//! - apalis dropping a started task's future (its worker future dropped) fails the attempt
//!   with that said in `errors`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use apalis_core::task::Task;
use apalis_core::task::builder::TaskBuilder;
use apalis_core::task::task_id::TaskId;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot};

use super::SkiplockJob;
use super::args::decode_raw_args;
use skiplock::queue::RawArgs;
use skiplock::worker::{BoxFuture, JobContext};
use skiplock::worker::{HandlerResult, JobError, Outcome};

/// How the user's service ended, as the layer saw it.
pub(crate) enum Ended {
    /// It returned (`Ok` completes; an error retries or, for an `AbortError`, discards).
    Returned(HandlerResult),
    /// It panicked, with this message.
    Panicked(String),
}

/// The layer's ends of one task's two reports, in the task's data (apalis wants data that
/// clones; the first clone to take an end owns it).
#[derive(Clone)]
pub(crate) struct Handoff(Arc<Mutex<Ends>>);

struct Ends {
    started: Option<oneshot::Sender<()>>,
    ended: Option<oneshot::Sender<Ended>>,
}

impl Handoff {
    /// Reports that apalis started the task; returns where to report its end, or `None`
    /// when the native side no longer waits (the job went back or was taken away before
    /// apalis got to it: the task must not run).
    pub fn start(&self) -> Option<oneshot::Sender<Ended>> {
        let mut ends = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let started = ends.started.take()?;
        let ended = ends.ended.take()?;
        started.send(()).ok()?;
        Some(ended)
    }

    /// Whether the native side still waits for this task to start.
    pub fn is_waiting(&self) -> bool {
        let ends = self.0.lock().unwrap_or_else(|p| p.into_inner());
        ends.started.as_ref().is_some_and(|s| !s.is_closed())
    }
}

/// The handler the native worker runs for the storage's kind: hands each job to apalis
/// through `stream`.
pub(crate) fn handler<Args: DeserializeOwned + Send + 'static>(
    stream: mpsc::UnboundedSender<Task<Args>>,
) -> impl Fn(JobContext, RawArgs) -> BoxFuture<HandlerResult> + Send + Sync + 'static {
    move |ctx, args| Box::pin(hand_over(stream.clone(), ctx, args))
}

/// A result that puts the job back at once without using up its attempt.
fn put_back() -> HandlerResult {
    Ok(Outcome::Snooze(Duration::ZERO))
}

/// Sends the job to apalis and waits for the layer's reports (see the module docs).
async fn hand_over<Args: DeserializeOwned + Send + 'static>(
    stream: mpsc::UnboundedSender<Task<Args>>,
    ctx: JobContext,
    args: RawArgs,
) -> HandlerResult {
    // Args the handler's type cannot read discard this job alone, without running it.
    let args = decode_raw_args::<Args>(&args).map_err(JobError::discard)?;
    let (started_tx, started) = oneshot::channel();
    let (ended_tx, ended) = oneshot::channel();
    let handoff = Handoff(Arc::new(Mutex::new(Ends {
        started: Some(started_tx),
        ended: Some(ended_tx),
    })));
    if stream.send(to_task(args, &ctx, handoff)).is_err() {
        return put_back();
    }
    tokio::select! {
        biased;
        s = started => if s.is_err() {
            // apalis dropped the task without starting it (the stream closed).
            return put_back();
        },
        _ = ctx.shutdown_requested() => return put_back(),
        // Taken away: the fenced ack ignores whatever this returns.
        _ = ctx.lost() => return Err(JobError::retry("taken away before apalis started it")),
    }
    tokio::select! {
        e = ended => match e {
            Ok(Ended::Returned(r)) => r,
            // The executor records it as any handler's panic (`handler panicked: …`).
            Ok(Ended::Panicked(msg)) => std::panic::resume_unwind(Box::new(msg)),
            Err(_) => Err(JobError::retry(
                "apalis dropped the handler's future before it finished",
            )),
        },
        _ = ctx.lost() => Err(JobError::retry("taken away while running")),
    }
}

/// The apalis task for a claimed job: its args, the row's fields as [`SkiplockJob`], and
/// the [`Handoff`].
fn to_task<Args>(args: Args, ctx: &JobContext, handoff: Handoff) -> Task<Args> {
    let meta = SkiplockJob {
        id: ctx.id,
        kind: ctx.kind.clone(),
        queue: ctx.queue.clone(),
        attempt: ctx.attempt,
        max_attempts: ctx.max_attempts,
        created_at: ctx.created_at,
    };
    TaskBuilder::new(args)
        .task_id(TaskId::from_int(ctx.id.max(0) as u64))
        .attempt(ctx.attempt.max(0) as usize)
        .max_attempts(ctx.max_attempts.max(0) as usize)
        .run_at_timestamp(ctx.scheduled_at.timestamp().max(0) as u64)
        .lock_by(Some(ctx.worker_id.to_string()))
        .data(meta)
        .data(handoff)
        .build()
}
