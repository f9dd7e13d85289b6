//! Job hooks: the application's code called around each job a worker runs and at each state
//! change the worker makes ([`Hook`]; docs/rust-guide.md, "Hooks"). For logging, metrics,
//! audit trails: a hook observes, it cannot change what happens to the job. A hook that
//! panics is logged and passed over; the job's acknowledgement is written all the same
//! (tests/hooks.rs). With no hook registered nothing here runs.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::queue::JobState;
use crate::store::ack::Ack;

/// The job a hook is told about.
#[derive(Debug, Clone)]
pub struct JobInfo {
    /// Job id.
    pub id: i64,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// This attempt (1 for the first).
    pub attempt: i32,
    /// Its attempt limit.
    pub max_attempts: i32,
}

/// What the worker decided after an attempt: the state its acknowledgement writes.
#[derive(Debug, Clone)]
pub struct JobEvent {
    /// The job.
    pub job: JobInfo,
    /// `completed`; `available` for a retry or a snooze (due at `scheduled_at`) or a job put
    /// back untouched at shutdown; `discarded`; `cancelled`.
    pub state: JobState,
    /// When it is due again (a retry or a snooze).
    pub scheduled_at: Option<DateTime<Utc>>,
    /// The attempt's error, when it failed.
    pub error: Option<String>,
    /// The attempt does not count (a snooze, or a job put back at shutdown).
    pub given_back: bool,
    /// How long the handler ran.
    pub ran_for: Duration,
}

/// A job the worker's rescuer returned: its worker stopped sending heartbeats.
#[derive(Debug, Clone)]
pub struct Rescued {
    /// Job id.
    pub id: i64,
    /// Its kind.
    pub kind: String,
    /// `available` (it will run again), `discarded` (it was out of attempts) or `cancelled`
    /// (superseded by another job waiting with its unique key).
    pub state: JobState,
}

/// Called by a worker around the jobs it runs; register with
/// [`WorkerBuilder::hook`](super::WorkerBuilder::hook). Every method does nothing by default.
/// They run on the worker's tasks: keep them short, and hand slow work (a network call) to a
/// task of your own.
pub trait Hook: Send + Sync + 'static {
    /// Before the handler starts.
    fn before(&self, _job: &JobInfo) {}
    /// After the handler returned (or failed, panicked, timed out), with what the worker
    /// writes for it.
    fn after(&self, _event: &JobEvent) {}
    /// After this worker's rescuer returned a job whose worker stopped sending heartbeats.
    fn rescued(&self, _job: &Rescued) {}
}

/// A worker's hooks, called in the order they were added.
#[derive(Clone, Default)]
pub(crate) struct Hooks(Arc<Vec<Arc<dyn Hook>>>);

impl Hooks {
    /// `hooks`, in that order.
    pub(crate) fn new(hooks: Vec<Arc<dyn Hook>>) -> Self {
        Hooks(Arc::new(hooks))
    }

    /// Whether there are none (then the worker builds no [`JobInfo`]).
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn before(&self, job: &JobInfo) {
        self.each("before", |h| h.before(job));
    }

    /// [`Hook::after`] for the attempt `job` ran for `ran_for` and ended with `ack`.
    pub(crate) fn after(&self, job: JobInfo, ack: &Ack, ran_for: Duration) {
        let event = JobEvent {
            job,
            state: ack.state,
            scheduled_at: ack.scheduled_at,
            error: ack.error.clone(),
            given_back: ack.give_back,
            ran_for,
        };
        self.each("after", |h| h.after(&event));
    }

    pub(crate) fn rescued(&self, job: &Rescued) {
        self.each("rescued", |h| h.rescued(job));
    }

    /// `call` on every hook; a panic is logged and the next hook called.
    fn each(&self, what: &'static str, call: impl Fn(&dyn Hook)) {
        for h in self.0.iter() {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| call(h.as_ref()))) {
                tracing::error!(
                    hook = what,
                    panic = %super::outcome::panic_message(p.as_ref()),
                    "a job hook panicked; the job goes on as if it had returned"
                );
            }
        }
    }
}
