//! The worker pool: wires producers (one per queue), executors, the batching completer, the
//! heartbeat, the NOTIFY listener and the maintenance services, and shuts them down in order.
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
//! let worker = Worker::builder(pool, skiplock::config::QueueSettings::default())
//!     .register(builtin::Noop)
//!     .build();
//! worker.run(skiplock::worker::shutdown::signal()).await?;
//! # Ok(()) }
//! ```

pub mod builtin;
pub mod completer;
pub mod executor;
pub mod faults;
pub mod handler;
pub mod heartbeat;
mod idle;
pub mod listener;
pub mod orphans;
pub mod outcome;
pub mod producer;
mod queues;
pub mod shutdown;
mod startup;
mod supervisor;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::CancellationToken;

pub use handler::{BoxFuture, Handler, JobContext, Registry};
pub use outcome::{HandlerResult, JobError, Outcome};

use crate::config::QueueSettings;
use crate::db::outage::{Availability, is_read_only};
use crate::db::session::{self, RECYCLE};
use crate::error::{Error, Result};
use crate::maintenance::{Service, rescuer::Rescuer, supervise as supervise_service};
use crate::store::Pool;
use crate::store::ack::Ack;
use crate::store::heartbeat::{WorkerInfo, worker_remove};
use listener::{Wake, listen};
use supervisor::supervise;

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
    /// Claimed ahead and waiting in its producer's buffer for a free slot (not started).
    pub buffered: bool,
}

/// State shared by the worker's tasks.
pub(crate) struct Shared {
    /// The runtime's own pool (claims, acks, heartbeats, listener, rescuer).
    pub pool: Pool,
    /// The handlers' pool ([`JobContext::pool`], start-up hooks, maintenance services).
    pub handler_pool: Pool,
    pub registry: Registry,
    pub kinds: Vec<String>,
    pub worker_id: Arc<str>,
    pub info: WorkerInfo,
    pub settings: QueueSettings,
    pub running: Mutex<HashMap<i64, Running>>,
    pub acks: mpsc::Sender<Ack>,
    pub acked: Notify,
    pub stop_claiming: CancellationToken,
    pub shutdown: CancellationToken,
    /// This process's view of the database's availability (gates the rescuer).
    pub availability: Arc<Availability>,
}

impl Shared {
    /// The jobs this process holds (a panic elsewhere never makes this lock unusable).
    pub fn running(&self) -> MutexGuard<'_, HashMap<i64, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a failed runtime statement: an outage stops the availability clock; a
    /// read-only server makes every open connection be replaced.
    pub fn db_failed(&self, e: &Error) {
        self.availability.observe(e);
        if is_read_only(e) {
            RECYCLE.recycle_all();
        }
    }
}

/// Something to run at start-up, before claiming (e.g. packet recovery). It may run again
/// if the database became unavailable while it ran, so it must be idempotent.
pub type StartHook = Box<dyn Fn(Pool) -> BoxFuture<Result<()>> + Send + Sync>;

/// Builds a [`Worker`].
pub struct WorkerBuilder {
    pool: Pool,
    runtime_pool: Option<Pool>,
    settings: QueueSettings,
    registry: Registry,
    services: Vec<Arc<dyn Service>>,
    hooks: Vec<StartHook>,
    exit_when_idle: bool,
}

impl WorkerBuilder {
    /// Registers a handler for its kind.
    pub fn register<H: Handler>(mut self, h: H) -> Self {
        self.registry.register(h);
        self
    }
    /// Gives mutable access to the registry (for `register` functions of workflows).
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }
    /// Adds a maintenance service, run every interval while the worker runs (on the
    /// handlers' pool).
    pub fn service(mut self, s: impl Service) -> Self {
        self.services.push(Arc::new(s));
        self
    }
    /// Adds `queue` with `limit` slots to an explicit queue list (`SKIPLOCK_QUEUES`,
    /// `--queues`) that does not name it; a worker serving every queue finds it in the jobs
    /// table anyway. For jobs every worker must be able to run, such as maintenance's.
    pub fn also_serve(mut self, queue: &str, limit: usize) -> Self {
        if let Some(q) = self.settings.queues.as_mut() {
            q.entry(queue.to_string()).or_insert(limit);
        }
        self
    }
    /// The handlers' pool (for components built before the worker).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
    /// Uses `pool` for the runtime's own statements instead of the pool the worker builds
    /// by default (`settings.runtime_connections` connections to the handlers' database,
    /// with the worker session limits).
    pub fn runtime_pool(mut self, pool: Pool) -> Self {
        self.runtime_pool = Some(pool);
        self
    }
    /// Adds a start-up hook.
    pub fn on_start(mut self, hook: StartHook) -> Self {
        self.hooks.push(hook);
        self
    }
    /// Exit once nothing in the worker's queues is claimable now and nothing runs.
    pub fn exit_when_idle(mut self, yes: bool) -> Self {
        self.exit_when_idle = yes;
        self
    }
    /// Finishes the builder.
    pub fn build(self) -> Worker {
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let pid = std::process::id() as i32;
        let id = format!("{host}:{pid}:{:08x}", rand::random::<u32>());
        let owns_runtime_pool = self.runtime_pool.is_none();
        let runtime_pool = self.runtime_pool.unwrap_or_else(|| {
            let opts = session::worker_options(
                &self.pool.connect_options(),
                self.settings.session_limits(),
            );
            session::worker_pool(
                opts,
                self.settings.runtime_connections,
                RUNTIME_ACQUIRE_TIMEOUT,
            )
        });
        Worker {
            pool: self.pool,
            runtime_pool,
            owns_runtime_pool,
            settings: self.settings,
            registry: self.registry,
            services: self.services,
            hooks: self.hooks,
            exit_when_idle: self.exit_when_idle,
            id,
            host,
            pid,
        }
    }
}

/// A pool of job executors in this process.
pub struct Worker {
    pool: Pool,
    runtime_pool: Pool,
    owns_runtime_pool: bool,
    settings: QueueSettings,
    registry: Registry,
    services: Vec<Arc<dyn Service>>,
    hooks: Vec<StartHook>,
    exit_when_idle: bool,
    id: String,
    host: String,
    pid: i32,
}

impl Worker {
    /// Starts building a worker on `pool` with `settings`.
    pub fn builder(pool: Pool, settings: QueueSettings) -> WorkerBuilder {
        WorkerBuilder {
            pool,
            runtime_pool: None,
            settings,
            registry: Registry::new(),
            services: Vec::new(),
            hooks: Vec::new(),
            exit_when_idle: false,
        }
    }

    /// This worker's id (as in `skiplock.workers` and `attempted_by`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Runs until `shutdown` resolves (or, with `exit_when_idle`, until idle), then shuts
    /// down gracefully: no new claims, running jobs get the grace period, the rest go back
    /// to `available` without using up their attempt.
    ///
    /// A database that is down at start is waited for (capped backoff, one log line per
    /// attempt), forever unless `connect_timeout` is set; `shutdown` ends the wait.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let kinds = self.registry.kinds();
        let info = WorkerInfo {
            id: self.id.clone(),
            host: self.host.clone(),
            pid: self.pid,
            queues: self
                .settings
                .queues
                .as_ref()
                .map(|q| q.keys().cloned().collect())
                .unwrap_or_default(),
            kinds: kinds.clone(),
        };
        let availability = Arc::new(Availability::new());
        tokio::pin!(shutdown);
        tokio::select! {
            r = startup::start(&self.runtime_pool, &self.pool, &info, &self.hooks,
                               self.settings.connect_timeout, &availability) => r?,
            _ = &mut shutdown => {
                tracing::info!("shutdown requested before the worker started");
                return Ok(());
            }
        }

        let (tx, rx) = mpsc::channel(completer::CHANNEL_CAPACITY);
        let shared = Arc::new(Shared {
            pool: self.runtime_pool.clone(),
            handler_pool: self.pool.clone(),
            registry: self.registry,
            kinds: kinds.clone(),
            worker_id: Arc::from(self.id.as_str()),
            info,
            settings: self.settings.clone(),
            running: Mutex::new(HashMap::new()),
            acks: tx,
            acked: Notify::new(),
            stop_claiming: CancellationToken::new(),
            shutdown: CancellationToken::new(),
            availability: availability.clone(),
        });
        tracing::info!(worker = %self.id, kinds = ?kinds, "worker started");

        let completer_stop = CancellationToken::new();
        let completer = {
            let (sh, stop) = (shared.clone(), completer_stop.clone());
            let state = Arc::new(tokio::sync::Mutex::new(completer::Completer::new(rx)));
            tokio::spawn(async move {
                supervise("completer", stop.clone(), |_| {
                    completer::run(sh.clone(), state.clone(), stop.clone())
                })
                .await
            })
        };
        let hb_stop = CancellationToken::new();
        let hb = {
            let (sh, stop) = (shared.clone(), hb_stop.clone());
            tokio::spawn(async move {
                supervise("heartbeat", stop.clone(), |_| {
                    heartbeat::run(sh.clone(), stop.clone())
                })
                .await
            })
        };
        let maint_stop = CancellationToken::new();
        let mut maint: Vec<JoinHandle<()>> = self
            .services
            .into_iter()
            .map(|s| tokio::spawn(supervise_service(s, self.pool.clone(), maint_stop.clone())))
            .collect();
        let rescuer = Rescuer::new(self.settings.rescue_after, availability.clone());
        maint.push(tokio::spawn(supervise_service(
            Arc::new(rescuer),
            self.runtime_pool.clone(),
            maint_stop.clone(),
        )));

        let discover = self.settings.queues.is_none();
        let queues = queues::Queues::new(shared.clone(), discover);
        if let Some(q) = &self.settings.queues {
            for (name, limit) in q {
                queues.start(name, *limit);
            }
        }
        let listener = {
            let (q, sh) = (queues.clone(), shared.clone());
            tokio::spawn(async move {
                supervise("listener", sh.stop_claiming.clone(), |_| {
                    let (q, sh) = (q.clone(), sh.clone());
                    async move {
                        let on_wake = {
                            let sh = sh.clone();
                            move |w: Wake| {
                                match &w {
                                    Wake::Lost => sh.availability.failure(),
                                    Wake::All => sh.availability.success(),
                                    Wake::Queue(_) => {
                                        faults::hit(&sh.worker_id, faults::Point::Listener)
                                    }
                                }
                                q.wake(w)
                            }
                        };
                        listen(sh.pool.clone(), sh.stop_claiming.clone(), on_wake).await;
                        Ok(())
                    }
                })
                .await
            })
        };
        let discovery = discover.then(|| {
            let (q, stop) = (queues.clone(), shared.stop_claiming.clone());
            tokio::spawn(async move {
                supervise("queue discovery", stop, |_| q.clone().discover_loop()).await
            })
        });

        let idle = CancellationToken::new();
        let idle_check = self.exit_when_idle.then(|| {
            let (sh, idle) = (shared.clone(), idle.clone());
            let queues: Option<Vec<String>> = self
                .settings
                .queues
                .as_ref()
                .map(|q| q.keys().cloned().collect());
            tokio::spawn(async move {
                supervise("idle check", sh.stop_claiming.clone(), |_| {
                    idle::run(sh.clone(), queues.clone(), idle.clone())
                })
                .await
            })
        });

        tokio::select! {
            _ = &mut shutdown => tracing::info!("shutdown requested"),
            _ = idle.cancelled() => tracing::info!("idle: nothing claimable and nothing running"),
        }

        // 1. Stop claiming and wait for the producers (a claim in flight still spawns its
        //    jobs); discovery and the listener first, as they may start producers.
        shared.stop_claiming.cancel();
        if let Some(d) = discovery {
            let _ = d.await;
        }
        let _ = listener.await;
        if let Some(i) = idle_check {
            let _ = i.await;
        }
        for t in queues.take_tasks() {
            let _ = t.await;
        }

        // 2-3. Tell handlers, give them the grace period, put the rest back.
        shutdown::finish_running(&shared).await;

        // 4. Write the remaining acks, then put back anything claimed but never started (a
        //    producer that failed and could not return its batch), then stop the heartbeat
        //    and maintenance.
        completer_stop.cancel();
        let _ = completer.await;
        if let Err(e) = orphans::release(
            &shared,
            None,
            false,
            "released at shutdown: claimed but never started",
        )
        .await
        {
            tracing::warn!(error = %e, "could not check for claimed jobs that never started");
        }
        hb_stop.cancel();
        let _ = hb.await;
        maint_stop.cancel();
        for m in maint {
            let _ = m.await;
        }
        if let Err(e) = worker_remove(&self.runtime_pool, &self.id).await {
            tracing::warn!(error = %e, "could not remove the worker row");
        }
        if self.owns_runtime_pool {
            let _ = tokio::time::timeout(Duration::from_secs(5), self.runtime_pool.close()).await;
        }
        tracing::info!(worker = %self.id, "worker stopped");
        Ok(())
    }
}
