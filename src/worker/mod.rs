//! The worker pool: wires producers (one per queue), executors, the batching completer, the
//! heartbeat, the NOTIFY listener and the maintenance services, and shuts them down in order.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool) -> skiplock::Result<()> {
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
pub mod handler;
pub mod heartbeat;
pub mod outcome;
pub mod producer;
pub mod shutdown;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{Notify, mpsc};
use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::CancellationToken;

pub use handler::{BoxFuture, Handler, JobContext, Registry};
pub use outcome::{HandlerResult, JobError, Outcome};

use crate::config::{DEFAULT_QUEUE_CONCURRENCY, QueueSettings};
use crate::error::Result;
use crate::maintenance::{Service, rescuer::Rescuer, supervise};
use crate::queue::ack::Ack;
use crate::queue::heartbeat::{WorkerInfo, remove_worker, upsert_worker};
use crate::queue::notify::{Wake, listen};
use outcome::{Attempt, RetryPolicy, decide};

/// A job this process holds (claimed, not yet acknowledged).
pub(crate) struct Running {
    pub attempt: i32,
    pub lost: CancellationToken,
    pub abort: Option<AbortHandle>,
    /// The handler is still running (false once its ack is queued).
    pub executing: bool,
}

/// State shared by the worker's tasks.
pub(crate) struct Shared {
    pub pool: PgPool,
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
}

/// Something to run once at start-up, before claiming (e.g. packet recovery).
pub type StartHook = Box<dyn FnOnce(PgPool) -> BoxFuture<Result<()>> + Send>;

/// Builds a [`Worker`].
pub struct WorkerBuilder {
    pool: PgPool,
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
    /// Adds a maintenance service, run every interval while the worker runs.
    pub fn service(mut self, s: impl Service) -> Self {
        self.services.push(Arc::new(s));
        self
    }
    /// The pool the worker will use (for components built before the worker).
    pub fn pool(&self) -> &PgPool {
        &self.pool
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
        Worker {
            pool: self.pool,
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
    pool: PgPool,
    settings: QueueSettings,
    registry: Registry,
    services: Vec<Arc<dyn Service>>,
    hooks: Vec<StartHook>,
    exit_when_idle: bool,
    id: String,
    host: String,
    pid: i32,
}

/// The producers of a worker, by queue; new queues get one on first sight when the worker
/// serves every queue.
struct Producers {
    shared: Arc<Shared>,
    map: Mutex<HashMap<String, Arc<Notify>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Concurrency of queues discovered at run time; `None` when queues are explicit.
    discover: Option<usize>,
}

impl Producers {
    fn start(&self, queue: &str, limit: usize) {
        let mut map = self.map.lock().unwrap();
        if map.contains_key(queue) || self.shared.stop_claiming.is_cancelled() {
            return;
        }
        let wake = Arc::new(Notify::new());
        map.insert(queue.to_string(), wake.clone());
        tracing::info!(queue, concurrency = limit, "serving queue");
        let t = tokio::spawn(producer::run(
            self.shared.clone(),
            queue.to_string(),
            limit,
            wake,
        ));
        self.tasks.lock().unwrap().push(t);
    }

    fn wake(&self, w: Wake) {
        match w {
            Wake::Queue(q) => {
                let known = self.map.lock().unwrap().get(&q).cloned();
                match known {
                    Some(n) => n.notify_one(),
                    None => {
                        if let Some(limit) = self.discover {
                            self.start(&q, limit);
                        }
                    }
                }
            }
            Wake::All => {
                for n in self.map.lock().unwrap().values() {
                    n.notify_one();
                }
            }
        }
    }
}

impl Worker {
    /// Starts building a worker on `pool` with `settings`.
    pub fn builder(pool: PgPool, settings: QueueSettings) -> WorkerBuilder {
        WorkerBuilder {
            pool,
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
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        crate::schema::ensure_migrated(&self.pool).await?;
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
        upsert_worker(&self.pool, &info).await?;
        for hook in self.hooks {
            hook(self.pool.clone()).await?;
        }

        let (tx, rx) = mpsc::channel(completer::CHANNEL_CAPACITY);
        let shared = Arc::new(Shared {
            pool: self.pool.clone(),
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
        });
        tracing::info!(worker = %self.id, kinds = ?kinds, "worker started");

        let completer_stop = CancellationToken::new();
        let completer = tokio::spawn(completer::run(shared.clone(), rx, completer_stop.clone()));
        let hb_stop = CancellationToken::new();
        let hb = tokio::spawn(heartbeat::run(shared.clone(), hb_stop.clone()));
        let maint_stop = CancellationToken::new();
        let mut services = self.services;
        services.push(Arc::new(Rescuer {
            rescue_after: self.settings.rescue_after,
        }));
        let maint: Vec<JoinHandle<()>> = services
            .into_iter()
            .map(|s| tokio::spawn(supervise(s, self.pool.clone(), maint_stop.clone())))
            .collect();

        let producers = Arc::new(Producers {
            shared: shared.clone(),
            map: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
            discover: if self.settings.queues.is_some() {
                None
            } else {
                Some(DEFAULT_QUEUE_CONCURRENCY)
            },
        });
        if let Some(q) = &self.settings.queues {
            for (name, limit) in q {
                producers.start(name, *limit);
            }
        }
        let listener = {
            let p = producers.clone();
            tokio::spawn(listen(
                self.pool.clone(),
                shared.stop_claiming.clone(),
                move |w| p.wake(w),
            ))
        };
        let discovery = producers.discover.map(|_| {
            let p = producers.clone();
            let sh = shared.clone();
            tokio::spawn(async move {
                loop {
                    match crate::queue::claim::discover_queues(&sh.pool, &sh.kinds).await {
                        Ok(qs) => {
                            for q in qs {
                                p.start(&q, DEFAULT_QUEUE_CONCURRENCY);
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "queue discovery failed"),
                    }
                    tokio::select! {
                        _ = sh.stop_claiming.cancelled() => return,
                        _ = tokio::time::sleep(sh.settings.poll_interval) => {}
                    }
                }
            })
        });

        let idle = CancellationToken::new();
        if self.exit_when_idle {
            let sh = shared.clone();
            let idle = idle.clone();
            let queues: Option<Vec<String>> = self
                .settings
                .queues
                .as_ref()
                .map(|q| q.keys().cloned().collect());
            tokio::spawn(async move {
                let every = sh.settings.poll_interval.min(Duration::from_millis(200));
                let mut idle_checks = 0;
                loop {
                    tokio::time::sleep(every).await;
                    if !sh.running.lock().unwrap().is_empty() {
                        idle_checks = 0;
                        continue;
                    }
                    match crate::queue::claim::has_claimable(&sh.pool, &sh.kinds, queues.as_deref())
                        .await
                    {
                        Ok(false) if sh.running.lock().unwrap().is_empty() => {
                            idle_checks += 1;
                            if idle_checks >= 2 {
                                idle.cancel();
                                return;
                            }
                        }
                        Ok(_) => idle_checks = 0,
                        Err(e) => tracing::warn!(error = %e, "idle check failed"),
                    }
                }
            });
        }

        tokio::select! {
            _ = shutdown => tracing::info!("shutdown requested"),
            _ = idle.cancelled() => tracing::info!("idle: nothing claimable and nothing running"),
        }

        // 1. Stop claiming and wait for the producers (a claim in flight still spawns its jobs).
        shared.stop_claiming.cancel();
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *producers.tasks.lock().unwrap());
        for t in tasks {
            let _ = t.await;
        }
        if let Some(d) = discovery {
            let _ = d.await;
        }
        let _ = listener.await;

        // 2. Tell handlers, and give them the grace period.
        shared.shutdown.cancel();
        let grace = self.settings.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace;
        let executing = |sh: &Shared| {
            sh.running
                .lock()
                .unwrap()
                .values()
                .filter(|r| r.executing)
                .count()
        };
        let n = executing(&shared);
        if n > 0 {
            tracing::info!(
                jobs = n,
                "waiting up to {} for running jobs",
                humantime::format_duration(grace)
            );
        }
        while executing(&shared) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // 3. Abort what is left and put it back without using up its attempt.
        let leftovers: Vec<(i64, i32)> = {
            let running = shared.running.lock().unwrap();
            running
                .iter()
                .filter(|(_, r)| r.executing)
                .map(|(id, r)| {
                    if let Some(a) = &r.abort {
                        a.abort();
                    }
                    (*id, r.attempt)
                })
                .collect()
        };
        for (id, attempt) in leftovers {
            tracing::warn!(
                job.id = id,
                "grace period over; returning the job to the queue"
            );
            let policy = RetryPolicy {
                unit: self.settings.backoff_unit,
                max: self.settings.backoff_max,
            };
            // A released job keeps its attempt whatever its limit, so the limit is moot here.
            let ack = decide(
                id,
                attempt,
                i32::MAX,
                Attempt::Released,
                chrono::Utc::now(),
                policy,
                0.0,
            );
            let _ = shared.acks.send(ack).await;
        }

        // 4. Write the remaining acks, then stop the heartbeat and maintenance.
        completer_stop.cancel();
        let _ = completer.await;
        hb_stop.cancel();
        let _ = hb.await;
        maint_stop.cancel();
        for m in maint {
            let _ = m.await;
        }
        if let Err(e) = remove_worker(&self.pool, &self.id).await {
            tracing::warn!(error = %e, "could not remove the worker row");
        }
        tracing::info!(worker = %self.id, "worker stopped");
        Ok(())
    }
}
