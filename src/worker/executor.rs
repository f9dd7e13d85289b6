//! A job's run, from the moment a slot takes it out of its producer's buffer to its ack in the
//! ack writer's channel, in the order of [`spawn_job`]'s steps: **prepare** (its
//! [`JobContext`]) → **before-hooks** → **execute** (look up the handler, decode, enforce the
//! timeout, turn a panic into an error: [`execute`]) → **decide** (the next state, a pure
//! [`decide`]) → **after-hooks** → **ack** (handed to the ack writer, `super::acks`, with
//! what is written beside it: a key hold, a signal check). No SQL here: the ack writer writes
//! the result, and what a job's outcome asks of the database besides.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, oneshot};
use tokio_util::sync::CancellationToken;

use super::acks::{Done, KeyHold};
use super::handler::{ErasedHandler, JobContext};
use super::hooks::JobInfo;
use super::outcome::{Attempt, RetryPolicy, cap_error_owned, decide, panic_message};
use super::producer::state::Producer;
use super::failure_log::FailureLog;
use super::hooks::Hooks;
use super::{Jobs, Outcome, Shared};
use crate::queue::backoff::random_jitter;
use crate::queue::stored::Unreadable;
use crate::queue::{Job, RawArgs};
use crate::store::ack::Ack;

/// The level of a job's span: see [`spawn_job`].
const JOB_SPAN_LEVEL: tracing::Level = if cfg!(feature = "otel") {
    tracing::Level::INFO
} else {
    tracing::Level::DEBUG
};

/// What the buffer hands a job it starts (`super::buffer::start_buffered`): the token its
/// loss cancels, its kind's and queue's metrics, and when it started on the database's clock.
pub(crate) type Start = (
    CancellationToken,
    Arc<crate::metrics::JobSeries>,
    chrono::DateTime<chrono::Utc>,
);

/// Runs `job` on its own task, holding its producer's slot (`permit`) until its ack is queued
/// (and the key hold it asks for written): prepare → before-hooks → execute → decide →
/// after-hooks → ack. The task's abort handle goes into the job's `Jobs::running` entry (the
/// worker's shutdown aborts what outlives it).
pub(crate) fn spawn_job(
    shared: &Arc<Shared>,
    p: &Arc<Producer>,
    job: Job,
    permit: OwnedSemaphorePermit,
    (lost, series, started): Start,
) {
    let id = job.id;
    let (job, prepared) = prepare(shared, job, lost);
    let (sh, producer) = (shared.clone(), p.clone());
    let handle = tokio::spawn(async move {
        let handler = sh.registry.get(&job.kind).cloned();
        let info = before_hooks(&sh.report.hooks, &job);
        let steps = prepared.ctx.steps.clone();
        let began = Instant::now();
        let attempt = run_attempt(handler, &job, prepared, sh.settings.job_timeout).await;
        series.ran(began.elapsed());
        producer.ran(began.elapsed());
        log_attempt(&sh.report.failures, &job, &attempt);
        let (ack, hold_for) = decide_ack(&sh.settings, &job, attempt, started);
        if let Some(info) = info {
            sh.report.hooks.after(info, &ack, began.elapsed());
        }
        let poll = sh.settings.poll_interval;
        let signal = steps.waiting_for();
        let held = queue_ack(&sh.jobs, poll, &producer, ack, hold_for, signal).await;
        // The slot frees once the key hold is written: until then a claim of this producer
        // could take a job of the key the hold is about to move (src/worker/acks.rs).
        if let Some(held) = held {
            let _ = held.await;
        }
        drop(permit);
        producer.slot_freed.notify_one();
    });
    if let Some(r) = shared.jobs.running().get_mut(&id) {
        r.abort = Some(handle.abort_handle());
    }
}

/// What [`prepare`] makes of a claimed job for its handler.
struct Prepared {
    ctx: JobContext,
    args: RawArgs,
    /// The job's meta, unreadable: the job is discarded, its handler does not run.
    unreadable_meta: Option<Unreadable>,
}

/// Prepare: the handler's [`JobContext`] and args (moved out of the job). A meta serde_json
/// could not read (a row written past enqueue's check) discards this job alone, as unreadable
/// args do: its handler does not run (src/queue/stored.rs).
fn prepare(shared: &Shared, mut job: Job, lost: CancellationToken) -> (Job, Prepared) {
    let args = std::mem::take(&mut job.args);
    let (meta, unreadable_meta) = match std::mem::take(&mut job.meta).into_readable() {
        Ok(v) => (v, None),
        Err(u) => (serde_json::Value::Object(Default::default()), Some(u)),
    };
    let ctx = JobContext {
        id: job.id,
        kind: job.kind.clone(),
        queue: job.queue.clone(),
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        created_at: job.created_at,
        scheduled_at: job.scheduled_at,
        tags: job.tags.clone(),
        meta,
        pool: shared.db.handler_pool.clone(),
        worker_id: shared.worker_id.clone(),
        shutdown: shared.stop.shutdown.clone(),
        lost,
        steps: Default::default(),
    };
    let prepared = Prepared {
        ctx,
        args,
        unreadable_meta,
    };
    (job, prepared)
}

/// Before-hooks: the application's hooks see the job start (src/worker/hooks.rs). Its
/// [`JobInfo`] is built only when there are hooks: none, no cost.
fn before_hooks(hooks: &Hooks, job: &Job) -> Option<JobInfo> {
    let info = (!hooks.is_empty()).then(|| JobInfo {
        id: job.id,
        kind: job.kind.clone(),
        queue: job.queue.clone(),
        attempt: job.attempt,
        max_attempts: job.max_attempts,
    });
    if let Some(info) = &info {
        hooks.before(info);
    }
    info
}

/// Execute: the handler under the job's span ([`execute`]), or the discard of a job whose meta
/// is unreadable.
async fn run_attempt(
    handler: Option<ErasedHandler>,
    job: &Job,
    Prepared {
        ctx,
        args,
        unreadable_meta,
    }: Prepared,
    job_timeout: Duration,
) -> Attempt {
    // A debug-level span: at the default level it costs nothing per job; warnings below
    // carry the job's fields themselves. With the `otel` feature it is an info span (what
    // an OpenTelemetry layer usually records), named for the job's kind, the child or a
    // link of the enqueuer's trace (src/otel.rs).
    let span = tracing::span!(JOB_SPAN_LEVEL, "job", otel.name = %format_args!("job {}", job.kind),
        otel.kind = "consumer", job.id = job.id, job.kind = %job.kind,
        job.queue = %job.queue, job.attempt = job.attempt);
    #[cfg(feature = "otel")]
    crate::otel::follow_enqueuer(&span, &ctx.meta, job.attempt);
    match unreadable_meta {
        None => {
            use tracing::Instrument;
            execute(handler, ctx, args, job_timeout)
                .instrument(span)
                .await
        }
        Some(u) => Attempt::Returned(Err(super::JobError::discard(format!(
            "invalid meta for kind {}: {}",
            job.kind, u.error
        )))),
    }
}

/// Decide: the job's next state ([`decide`], pure), stamped with when its handler started;
/// and how long to hold its limit key (`Outcome::SnoozeKey`), which travels with the ack.
fn decide_ack(
    settings: &crate::config::QueueSettings,
    job: &Job,
    attempt: Attempt,
    started: chrono::DateTime<chrono::Utc>,
) -> (Ack, Option<Duration>) {
    let hold_for = match &attempt {
        Attempt::Returned(Ok(Outcome::SnoozeKey(d))) => Some(*d),
        _ => None,
    };
    let mut ack = decide(
        job.id,
        job.attempt,
        job.max_attempts,
        attempt,
        chrono::Utc::now(),
        RetryPolicy {
            unit: settings.backoff_unit,
            max: settings.backoff_max,
        },
        random_jitter(),
    );
    ack.started_at = Some(started);
    (ack, hold_for)
}

/// The attempt's log line: a failure (the first of a kind in full, the rest summed,
/// `super::failure_log`), a durable sleep, or an attempt that did not finish normally.
fn log_attempt(failures: &Mutex<FailureLog>, job: &Job, attempt: &Attempt) {
    match attempt {
        Attempt::Returned(Ok(_)) => {}
        Attempt::Suspended(until) => tracing::debug!(job.id = job.id, job.kind = %job.kind,
            job.attempt = job.attempt, %until, "job sleeps (docs/steps.md)"),
        Attempt::Returned(Err(e)) => {
            let say = failures
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .record(&job.kind, Instant::now(), &e.message);
            if let super::failure_log::Say::SummaryThenFull { more, last_error } = &say {
                super::failure_log::summary(&job.kind, *more, last_error);
            }
            if say != super::failure_log::Say::Nothing {
                tracing::warn!(job.id = job.id, job.kind = %job.kind,
                    job.attempt = job.attempt, error = %e.message,
                    "job failed (more failures of its kind within {}s are summed into one line)",
                    super::failure_log::WINDOW.as_secs());
            }
        }
        other => tracing::warn!(job.id = job.id, job.kind = %job.kind,
            job.attempt = job.attempt, outcome = ?other, "job did not finish normally"),
    }
}

/// Ack: the job stops executing, its producer is woken when a retry or snooze is due before
/// the next poll, and the outcome goes to the ack writer with what travels with it (a key
/// hold for `hold_for`, written before the ack; a signal check, after it: `super::acks`).
/// With a key hold, answers with what says when it is written.
async fn queue_ack(
    jobs: &Jobs,
    poll: Duration,
    producer: &Producer,
    ack: Ack,
    hold_for: Option<Duration>,
    wake_on_signal: Option<String>,
) -> Option<oneshot::Receiver<()>> {
    if let Some(r) = jobs.running().get_mut(&ack.id) {
        r.executing = false;
    }
    wake_when_due(&ack, poll, producer.wake.clone());
    let (hold_key, held) = match hold_for {
        Some(hold_for) => {
            let (written, held) = oneshot::channel();
            (Some(KeyHold { hold_for, written }), Some(held))
        }
        None => (None, None),
    };
    let id = ack.id;
    let done = Done {
        ack,
        hold_key,
        wake_on_signal,
    };
    if jobs.acks.send(done).await.is_err() {
        tracing::error!(job.id = id, "ack writer gone; the rescuer will return this job");
    }
    held
}

/// A retry or snooze due before the next poll would wait up to a poll interval; instead,
/// wake this queue's producer when it is due (plus a little for the ack to be written).
/// Jobs scheduled by other processes still rely on NOTIFY (due now) or the poll.
fn wake_when_due(ack: &Ack, poll: Duration, wake: Arc<Notify>) {
    if ack.state != crate::queue::JobState::Available || ack.give_back && ack.scheduled_at.is_none()
    {
        return;
    }
    let Some(at) = ack.scheduled_at else { return };
    let wait =
        (at - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO) + Duration::from_millis(5);
    if wait >= poll {
        return;
    }
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        wake.notify_one();
    });
}

/// Runs `handler` on `args` under its timeout (or `default_timeout`). The handler parses
/// the args itself, so args it cannot read fail this job alone (src/queue/args.rs).
pub async fn execute(
    handler: Option<ErasedHandler>,
    ctx: JobContext,
    args: RawArgs,
    default_timeout: Duration,
) -> Attempt {
    let Some(h) = handler else {
        return Attempt::NoHandler;
    };
    let timeout = h.timeout().unwrap_or(default_timeout);
    let steps = ctx.steps.clone();
    let fut = AssertUnwindSafe(h.call(ctx, args)).catch_unwind();
    let attempt = run(fut, timeout).await;
    // An attempt that ended itself (a durable sleep or wait) is due again then, whatever its
    // handler returned after; a step's own error (a discard) is the verdict when the handler
    // returned an error (docs/steps.md).
    if let Some(until) = steps.suspended() {
        return Attempt::Suspended(until);
    }
    match (attempt, steps.failed()) {
        (Attempt::Returned(Err(_)), Some(mut e)) => {
            e.message = cap_error_owned(e.message);
            Attempt::Returned(Err(e))
        }
        (attempt, _) => attempt,
    }
}

async fn run(
    fut: impl std::future::Future<
        Output = Result<super::HandlerResult, Box<dyn Any + Send + 'static>>,
    >,
    timeout: Duration,
) -> Attempt {
    // Messages capped here, before the worker logs the attempt and acks it (the ack caps
    // again, a no-op then): neither the log line nor `errors` holds more than
    // MAX_ERROR_BYTES of a message (docs/reliability.md, "Errors").
    match tokio::time::timeout(timeout, fut).await {
        Err(_) => Attempt::TimedOut(timeout),
        Ok(Err(panic)) => Attempt::Panicked(cap_error_owned(panic_message(panic.as_ref()))),
        Ok(Ok(Err(mut e))) => {
            e.message = cap_error_owned(e.message);
            Attempt::Returned(Err(e))
        }
        Ok(Ok(result)) => Attempt::Returned(result),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::stored::StoredJson;

    fn job() -> Job {
        let now = chrono::Utc::now();
        Job {
            id: 7,
            kind: "call".into(),
            queue: "api".into(),
            args: RawArgs::new("{}"),
            priority: 0,
            attempt: 1,
            max_attempts: 3,
            scheduled_at: now,
            created_at: now,
            attempted_at: None,
            tags: Vec::new(),
            meta: StoredJson::Value(serde_json::json!({})),
        }
    }

    #[test]
    fn only_a_snooze_of_the_key_sends_a_key_hold_with_its_ack() {
        let settings = crate::config::QueueSettings::default();
        let started = chrono::Utc::now();
        let hour = Duration::from_secs(3600);
        let (ack, hold) = decide_ack(
            &settings,
            &job(),
            Attempt::Returned(Ok(Outcome::SnoozeKey(hour))),
            started,
        );
        assert_eq!(hold, Some(hour));
        // Snoozed like a plain snooze: the attempt given back, stamped with its start.
        assert!(ack.give_back && ack.scheduled_at.is_some());
        assert_eq!(ack.started_at, Some(started));
        for attempt in [
            Attempt::Returned(Ok(Outcome::Snooze(hour))),
            Attempt::Returned(Ok(Outcome::Complete)),
            Attempt::Returned(Err(crate::worker::JobError::retry("slow down"))),
            Attempt::Suspended(started),
        ] {
            assert_eq!(decide_ack(&settings, &job(), attempt, started).1, None);
        }
    }
}
