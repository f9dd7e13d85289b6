//! The worker pool: wires producers (one per queue), executors, the batching ack writer, the
//! heartbeat, the NOTIFY listener, the rescuer and the maintenance services, and shuts them
//! down in order.
//!
//! Where things are: [`WorkerBuilder`] (`builder.rs`: handlers, services, and the
//! maintenance installed by default), [`Worker`]'s lifecycle in three phases (`lifecycle.rs`:
//! [`Worker::start`] → [`Started::wait`] → [`Started::shutdown`]; [`Worker::run`] does all
//! three), the contracts others build on (`handler`, `outcome`, `service`), the runtime
//! tasks (`producer`, `acks`, `heartbeat`, `listener`, `rescuer`, …) and
//! [`maintenance`] (reaper, retention, periodic jobs), which depends on those contracts only.
//!
//! Two pools: the handlers' (the one given to [`Worker::builder`], handed to handlers as
//! [`JobContext::pool`]) and the runtime's own small one (claims, acks, heartbeats, the
//! listener, the rescuer), so handlers holding every connection cannot starve the runtime.
//! Every long-running task is supervised (restarted after a panic or an error) and rides out
//! database outages with capped backoffs; see docs/reliability.md.
//!
//! ```no_run
//! # async fn demo(pool: skiplock::store::Pool) -> skiplock::Result<()> {
//! use skiplock::worker::{Worker, builtin};
//! let worker = Worker::builder(pool).settings(skiplock::config::QueueSettings::default())
//!     .register(builtin::Noop)
//!     .build();
//! worker.run(skiplock::worker::shutdown::signal()).await?;
//! # Ok(()) }
//! ```

internal_mod!(acks);
internal_mod!(buffer);
mod builder;
pub mod builtin;
pub(crate) mod cursor;
pub(crate) mod db_clock;
pub(crate) mod failure_log;
internal_mod!(executor);
pub mod hooks;
internal_mod!(faults);
internal_mod!(handler);
internal_mod!(heartbeat);
mod hints;
mod idle;
mod lifecycle;
internal_mod!(listener);
pub mod maintenance;
internal_mod!(outcome);
internal_mod!(producer);
mod queues;
internal_mod!(release);
internal_mod!(rescuer);
internal_mod!(service);
pub mod shutdown;
mod startup;
mod supervisor;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

pub use builder::WorkerBuilder;
pub use handler::steps::{MAX_STEP_BYTES, MAX_STEPS, Signal};
pub use handler::{BoxFuture, FnHandler, Handler, JobContext, Registry};
pub use hooks::Hook;
pub use lifecycle::{Started, Worker};
pub use outcome::{HandlerResult, IntoJobResult, IntoOutcome, JobError, Outcome, panic_message};
pub use service::Service;

use crate::config::QueueSettings;
use crate::db::outage::{Availability, is_read_only};
use crate::db::session::RECYCLE;
use crate::error::{Error, Result};
use crate::store::Pool;
use crate::store::heartbeat::WorkerInfo;

/// Acquire timeout of the runtime's pool: short, so a task notices an outage and backs off
/// instead of queueing behind the pool.
pub const RUNTIME_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// A job this process holds (claimed, not yet acknowledged).
pub(crate) struct Running {
    pub attempt: i32,
    pub lost: CancellationToken,
    pub abort: Option<AbortHandle>,
    /// The handler is still running (false once its ack is queued).
    pub executing: bool,
    /// Its kind's and queue's metrics (counted when the ack is written).
    pub series: Arc<crate::metrics::JobSeries>,
    /// Claimed ahead and waiting in its producer's buffer for a free slot (not started).
    pub buffered: bool,
    /// When its handler started, on the database's clock ([`db_clock`]); `None` while buffered.
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// State shared by the worker's tasks, by concern: what the worker is (fixed at start), how it
/// reaches the database ([`Db`]), the jobs it holds ([`Jobs`]), when it stops ([`Stops`]) and
/// what it reports of its jobs ([`Report`]). A task's functions take the part they use (the
/// executor's steps, the buffer, the ack writer's key holds and signal checks), so what each
/// one touches can be read from its signature.
pub(crate) struct Shared {
    pub registry: Registry,
    pub kinds: Vec<String>,
    pub worker_id: Arc<str>,
    pub info: WorkerInfo,
    pub settings: QueueSettings,
    pub db: Db,
    pub jobs: Jobs,
    pub stop: Stops,
    pub report: Report,
}

/// How the worker's tasks reach the database, and what they know of it: the two pools (the
/// runtime's own, so handlers holding every connection of theirs cannot starve claims, acks and
/// heartbeats: see the module's doc), whether it answers, and its clock.
pub(crate) struct Db {
    /// The runtime's own pool (claims, acks, heartbeats, listener, rescuer).
    pub pool: Pool,
    /// The handlers' pool ([`JobContext::pool`], start-up hooks, maintenance services).
    pub handler_pool: Pool,
    /// This process's view of the database's availability (gates the rescuer).
    pub availability: Arc<Availability>,
    /// One settling at a time, of a fan-out after its ack (`acks::settle_rest`) or of the
    /// settle hints heard (`hints`): each holds a connection of the runtime's pool, which the
    /// claims, acks and heartbeats need.
    pub settling: Arc<tokio::sync::Semaphore>,
    /// The database's clock as the claims report it (when handlers started).
    pub clock: db_clock::DbClock,
}

impl Db {
    /// Records a failed runtime statement: an outage stops the availability clock; a
    /// read-only server makes every open connection be replaced.
    pub fn failed(&self, e: &Error) {
        self.availability.observe(e);
        if is_read_only(e) {
            RECYCLE.recycle_all();
        }
    }
}

/// The jobs this process holds (claimed, not yet acknowledged: the heartbeat keeps them alive,
/// the shutdown releases or waits for them) and where their outcomes go (the ack writer).
pub(crate) struct Jobs {
    pub running: Mutex<HashMap<i64, Running>>,
    pub acks: mpsc::Sender<acks::Done>,
}

impl Jobs {
    /// The jobs this process holds (a panic elsewhere never makes this lock unusable).
    pub fn running(&self) -> MutexGuard<'_, HashMap<i64, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// When the worker stops, in the order its shutdown goes: no more claims, then the handlers
/// asked to stop; or on its own, when the schema moves under it.
pub(crate) struct Stops {
    /// The producers claim no more.
    pub claiming: CancellationToken,
    /// Handlers are asked to stop ([`JobContext::shutdown_requested`]).
    pub shutdown: CancellationToken,
    /// Cancelled when the heartbeat finds the schema migrated to another SQL API while this
    /// worker ran (`schema_mismatch` says how): its statements are those of its own release,
    /// so it stops as if asked to and exits with that error.
    pub schema_moved: CancellationToken,
    /// How the schema moved (set once, with `schema_moved`).
    pub schema_mismatch: Mutex<Option<crate::error::SchemaMismatch>>,
}

impl Stops {
    /// Records that the schema was migrated under this worker (once) and starts its stop.
    pub fn schema_moved(&self, m: crate::error::SchemaMismatch) {
        let mut slot = self
            .schema_mismatch
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            tracing::error!("the schema was migrated while this worker ran ({m}); stopping");
            *slot = Some(m);
            // No claim with this release's statements from now on, whoever runs the worker
            // (`Started::wait` then stops it; the shutdown cancels this again, harmlessly).
            self.claiming.cancel();
            self.schema_moved.cancel();
        }
    }
}

/// What the worker reports of its jobs, besides their rows: metrics, the application's job
/// hooks, and the log's summary of handler failures. None of it changes what happens to a job.
pub(crate) struct Report {
    /// Metric handles (no-ops unless a recorder is installed, see [`crate::metrics`]).
    pub metrics: crate::metrics::WorkerMetrics,
    /// The application's job hooks ([`hooks`]).
    pub hooks: hooks::Hooks,
    /// Handler failures summarised per kind ([`failure_log`]).
    pub failures: Mutex<failure_log::FailureLog>,
}

/// Something to run at start-up, before claiming (e.g. packet recovery). It may run again
/// if the database became unavailable while it ran, so it must be idempotent.
pub type StartHook = Box<dyn Fn(Pool) -> BoxFuture<Result<()>> + Send + Sync>;
