//! A worker's life in three phases: [`Worker::start`] (wait for the database, check the
//! schema, register, run the start-up hooks, spawn every task), [`Started::wait`] (serve
//! until shutdown is asked for or, with `exit_when_idle`, until idle) and
//! [`Started::shutdown`] (stop claiming, give running jobs their grace period, put the rest
//! back, write every pending ack, stop the heartbeat and the services, deregister).
//! [`Worker::run`] is the three in a row.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::handler::Registry;
use super::listener::{Wake, listen};
use super::rescuer::Rescuer;
use super::service::{Service, supervise as supervise_service};
use super::startup;
use super::supervisor::supervise;
use super::{
    Db, Jobs, Report, Shared, StartHook, Stops, acks, faults, heartbeat, idle, queues, release,
    shutdown,
};
use crate::config::{PoolMode, QueueSettings};
use crate::db;
use crate::db::outage::Availability;
use crate::error::{Error, Result};
use crate::store::Pool;
use crate::store::heartbeat::{WorkerInfo, worker_remove};
use crate::store::notify::WakeListener;

/// A pool of job executors in this process.
pub struct Worker {
    pub(super) pool: Pool,
    pub(super) runtime_pool: Pool,
    pub(super) owns_runtime_pool: bool,
    pub(super) settings: QueueSettings,
    pub(super) registry: Registry,
    pub(super) services: Vec<Arc<dyn Service>>,
    pub(super) hooks: Vec<StartHook>,
    pub(super) job_hooks: Vec<Arc<dyn super::Hook>>,
    pub(super) exit_when_idle: bool,
    pub(super) rescuer: bool,
    /// A problem found while building (an invalid maintenance setting), reported by `start`.
    pub(super) init_error: Option<Error>,
    pub(super) id: String,
    pub(super) host: String,
    pub(super) pid: i32,
}

/// A worker whose tasks are running (see [`Worker::start`]).
pub struct Started {
    shared: Arc<Shared>,
    id: String,
    runtime_pool: Pool,
    owns_runtime_pool: bool,
    queues: Arc<queues::Queues>,
    listener: JoinHandle<()>,
    discovery: Option<JoinHandle<()>>,
    idle: CancellationToken,
    idle_check: Option<JoinHandle<()>>,
    ack_writer: (CancellationToken, JoinHandle<()>),
    heartbeat: (CancellationToken, JoinHandle<()>),
    services: (CancellationToken, Vec<JoinHandle<()>>),
}

impl Worker {
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
        tokio::pin!(shutdown);
        let started = tokio::select! {
            r = self.start() => r?,
            _ = &mut shutdown => {
                tracing::info!("shutdown requested before the worker started");
                return Ok(());
            }
        };
        started.wait(shutdown).await;
        started.shutdown().await
    }

    /// Phase 1: waits for the database, checks the schema, registers the worker, runs the
    /// start-up hooks, then spawns the ack writer, heartbeat, services, rescuer, producers,
    /// listener (and queue discovery, and the idle check). Dropping the future before it
    /// returns leaves nothing running.
    pub async fn start(mut self) -> Result<Started> {
        if let Some(e) = self.init_error.take() {
            return Err(e);
        }
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
        startup::start(
            &self.runtime_pool,
            &self.pool,
            &info,
            &self.hooks,
            self.settings.connect_timeout,
            &availability,
        )
        .await?;

        let warm = self
            .owns_runtime_pool
            .then_some(self.settings.runtime_connections);
        let (listening, ()) = tokio::join!(
            Listening::open(&self.runtime_pool, &self.settings),
            warm_up(&self.runtime_pool, warm)
        );

        let (tx, rx) = mpsc::channel(acks::CHANNEL_CAPACITY);
        let shared = Arc::new(Shared {
            registry: self.registry,
            kinds: kinds.clone(),
            worker_id: Arc::from(self.id.as_str()),
            info,
            settings: self.settings.clone(),
            db: Db {
                pool: self.runtime_pool.clone(),
                handler_pool: self.pool.clone(),
                availability: availability.clone(),
                settling: Arc::new(tokio::sync::Semaphore::new(1)),
                clock: Default::default(),
            },
            jobs: Jobs {
                running: Mutex::new(HashMap::new()),
                acks: tx,
            },
            stop: Stops {
                claiming: CancellationToken::new(),
                shutdown: CancellationToken::new(),
                schema_moved: CancellationToken::new(),
                schema_mismatch: Mutex::new(None),
            },
            report: Report {
                metrics: crate::metrics::WorkerMetrics::default(),
                hooks: super::hooks::Hooks::new(self.job_hooks),
                failures: Mutex::new(Default::default()),
            },
        });
        tracing::info!(worker = %self.id, kinds = ?kinds, "worker started");

        let ack_writer = spawn_ack_writer(&shared, rx);
        let heartbeat = spawn_heartbeat(&shared);
        let services = spawn_services(
            &shared,
            self.services,
            self.rescuer
                .then(|| Rescuer::new(self.settings.rescue_after, availability))
                .map(|r| r.with_hooks(shared.report.hooks.clone())),
            &self.pool,
        );
        let mut services = services;
        {
            // After each outage: find the host that accepts writes (several in the URL) and
            // end every task's retry backoff once it answers.
            let pools = vec![self.runtime_pool.pg().clone(), self.pool.pg().clone()];
            let (a, stop) = (shared.db.availability.clone(), services.0.clone());
            services
                .1
                .push(tokio::spawn(crate::db::hosts::follow(pools, a, stop)));
        }
        let discover = self.settings.queues.is_none();
        let queues = queues::Queues::new(shared.clone(), discover);
        if let Some(q) = &self.settings.queues {
            for (name, limit) in q {
                queues.start(name, *limit);
            }
        }
        let listener = spawn_listener(&shared, &queues, listening);
        let discovery = discover.then(|| {
            let (q, stop) = (queues.clone(), shared.stop.claiming.clone());
            tokio::spawn(async move {
                supervise("queue discovery", stop, |_| q.clone().discover_loop()).await
            })
        });
        let idle = CancellationToken::new();
        let idle_check = self.exit_when_idle.then(|| {
            let explicit = self
                .settings
                .queues
                .as_ref()
                .map(|q| q.keys().cloned().collect());
            spawn_idle_check(&shared, explicit, &idle)
        });

        Ok(Started {
            shared,
            id: self.id,
            runtime_pool: self.runtime_pool,
            owns_runtime_pool: self.owns_runtime_pool,
            queues,
            listener,
            discovery,
            idle,
            idle_check,
            ack_writer,
            heartbeat,
            services,
        })
    }
}

/// A task of the worker and the token that stops it.
type Stoppable<T> = (CancellationToken, T);

/// The ack writer: writes the acks handlers send, in batches (supervised).
fn spawn_ack_writer(
    shared: &Arc<Shared>,
    rx: mpsc::Receiver<acks::Done>,
) -> Stoppable<JoinHandle<()>> {
    let stop = CancellationToken::new();
    let (sh, st) = (shared.clone(), stop.clone());
    let state = Arc::new(tokio::sync::Mutex::new(acks::AckWriter::new(rx)));
    let task = tokio::spawn(async move {
        supervise("ack writer", st.clone(), |_| {
            acks::run(sh.clone(), state.clone(), st.clone())
        })
        .await
    });
    (stop, task)
}

/// The heartbeat of the worker's row and of every job it holds (supervised).
fn spawn_heartbeat(shared: &Arc<Shared>) -> Stoppable<JoinHandle<()>> {
    let stop = CancellationToken::new();
    let (sh, st) = (shared.clone(), stop.clone());
    let task = tokio::spawn(async move {
        supervise("heartbeat", st.clone(), |_| {
            heartbeat::run(sh.clone(), st.clone())
        })
        .await
    });
    (stop, task)
}

/// The services (maintenance, a user's own) on the handlers' pool, and the rescuer on the
/// runtime's.
fn spawn_services(
    shared: &Arc<Shared>,
    services: Vec<Arc<dyn Service>>,
    rescuer: Option<Rescuer>,
    handler_pool: &Pool,
) -> Stoppable<Vec<JoinHandle<()>>> {
    let stop = CancellationToken::new();
    let mut tasks: Vec<JoinHandle<()>> = services
        .into_iter()
        .map(|s| tokio::spawn(supervise_service(s, handler_pool.clone(), stop.clone())))
        .collect();
    if let Some(rescuer) = rescuer {
        tasks.push(tokio::spawn(supervise_service(
            Arc::new(rescuer),
            shared.db.pool.clone(),
            stop.clone(),
        )));
    }
    (stop, tasks)
}

/// The pool the listener takes its connection from: the runtime's own, except behind a
/// transaction-pooling PgBouncer, whose server connections cannot keep a LISTEN: there one
/// session on `SKIPLOCK_LISTEN_URL`, or none (the producers poll; said once in the log).
fn listen_pool(runtime: &Pool, settings: &QueueSettings) -> Result<Option<Pool>> {
    if runtime.mode() == PoolMode::Session {
        return Ok(Some(runtime.clone()));
    }
    let Some(url) = &settings.listen_url else {
        tracing::warn!(
            poll_interval = %crate::config::format_duration(settings.poll_interval),
            "SKIPLOCK_POOL_MODE=transaction and no SKIPLOCK_LISTEN_URL: no LISTEN (a \
             transaction-pooling PgBouncer cannot deliver notifications); new jobs are found by \
             polling every SKIPLOCK_POLL_INTERVAL"
        );
        return Ok(None);
    };
    let opts = db::session::worker_options(&db::parse_url_of("SKIPLOCK_LISTEN_URL", url)?);
    // The same address and database as DATABASE_URL: the same transaction-mode pool, whose
    // LISTEN would never hear a notification. Said in one line instead of listening in vain
    // (crates/skiplock-cli/tests/worker.rs,
    // a_listen_url_through_the_transaction_pooler_is_named_and_not_listened_on).
    let runtime_opts = runtime.connect_options();
    if db::same_endpoint(&opts, &runtime_opts) {
        tracing::warn!(
            poll_interval = %crate::config::format_duration(settings.poll_interval),
            "SKIPLOCK_LISTEN_URL reaches the same address and database as DATABASE_URL, which \
             SKIPLOCK_POOL_MODE=transaction says is a pooler in transaction mode: a LISTEN there \
             never hears a notification, so there is none; point SKIPLOCK_LISTEN_URL at the \
             server itself (or a session-mode pool); new jobs are found by polling every \
             SKIPLOCK_POLL_INTERVAL"
        );
        return Ok(None);
    }
    let limits = settings.session_limits();
    let timeout = db::session::HANDLER_ACQUIRE_TIMEOUT;
    Ok(Some(db::session::worker_pool(
        opts,
        limits,
        PoolMode::Session,
        1,
        timeout,
    )))
}

/// The longest a starting worker waits for its listener's connection (a database that went
/// away just after the start-up check): the claims then start without it.
const LISTEN_AT_START: Duration = Duration::from_secs(1);

/// The listener's pool and its first connection, opened before the producers claim: a job
/// released or inserted between a first claim and a LISTEN opened later sends a NOTIFY nobody
/// hears, and waits for the next wake-up. Opened under the load of the first claims, that
/// connection took a tenth of a second, which a flow's first release waited through
/// (docs/performance.md, "Flows").
struct Listening {
    pool: Option<Pool>,
    first: Option<WakeListener>,
}

impl Listening {
    /// The pool, and a connection listening on it unless the database did not give one
    /// within [`LISTEN_AT_START`] (the listener's own loop then connects, as after any loss).
    /// None of either when there is to be no LISTEN (see [`listen_pool`]).
    async fn open(runtime: &Pool, settings: &QueueSettings) -> Listening {
        let pool = listen_pool(runtime, settings).unwrap_or_else(|e| {
            // Checked when the settings were read (`QueueSettings::validate`); a builder
            // given settings by hand may still carry a bad URL.
            tracing::error!(error = %e, "no LISTEN: SKIPLOCK_LISTEN_URL is invalid; polling");
            None
        });
        let first = match &pool {
            Some(p) => tokio::time::timeout(LISTEN_AT_START, WakeListener::connect(p))
                .await
                .ok()
                .and_then(|l| l.ok()),
            None => None,
        };
        Listening { pool, first }
    }
}

/// Opens the runtime pool's connections before the first claim, beside the listener's (at
/// most [`LISTEN_AT_START`]). Opened on demand instead, they came when the claims, the ack
/// writer and the settling of a flow's release all first wanted one at once, and each waited
/// for a connection to be set up under that load: a fan-out's first children started 80 ms
/// after the root's ack with eight runtime connections (docs/performance.md, "Flows"). One is
/// open already (the start-up checks') and the listener takes one; the rest are held together,
/// or the pool would hand back the same one. `connections`: the pool's size (None: a pool the
/// application gave, left as it is).
async fn warm_up(pool: &Pool, connections: Option<u32>) {
    let Some(connections) = connections else {
        return;
    };
    let more = connections.saturating_sub(2) as usize;
    let pool = pool.pg();
    let opened = tokio::time::timeout(
        LISTEN_AT_START,
        futures::future::join_all((0..more).map(|_| pool.acquire())),
    )
    .await;
    if let Ok(opened) = opened
        && let Some(Err(e)) = opened.iter().find(|c| c.is_err())
    {
        tracing::debug!(error = %e, "could not open a runtime connection ahead; it opens when needed");
    }
}

/// The NOTIFY listener, waking the producers of the queues it names (supervised), on the
/// connection `first` already listening when [`Listening::open`] could open it.
fn spawn_listener(
    shared: &Arc<Shared>,
    queues: &Arc<queues::Queues>,
    listening: Listening,
) -> JoinHandle<()> {
    let Listening { pool, first } = listening;
    let Some(pool) = pool else {
        return tokio::spawn(async {});
    };
    let (q, sh) = (queues.clone(), shared.clone());
    let first = Arc::new(Mutex::new(first));
    // One task settles every hint this process hears (super::hints); it ends with the claims.
    let (hints, _) = super::hints::spawn(
        shared.db.pool.clone(),
        shared.db.settling.clone(),
        shared.stop.claiming.clone(),
    );
    tokio::spawn(async move {
        supervise("listener", sh.stop.claiming.clone(), |_| {
            let (q, sh, pool, hints) = (q.clone(), sh.clone(), pool.clone(), hints.clone());
            let first = first.lock().unwrap_or_else(|p| p.into_inner()).take();
            async move {
                let on_wake = {
                    let sh = sh.clone();
                    move |w: Wake| {
                        match &w {
                            Wake::Lost => sh.db.availability.failure(),
                            Wake::All => sh.db.availability.success(),
                            Wake::Queue(_) => faults::hit(&sh.worker_id, faults::Point::Listener),
                            Wake::Settle(ids) => hints.hint(ids.clone()),
                        }
                        q.wake(w)
                    }
                };
                let back = sh.db.availability.clone();
                listen(pool, first, sh.stop.claiming.clone(), &back, on_wake).await;
                Ok(())
            }
        })
        .await
    })
}

/// The check that ends an `exit_when_idle` worker once nothing in `queues` (None: any queue)
/// is claimable and nothing runs (supervised).
fn spawn_idle_check(
    shared: &Arc<Shared>,
    queues: Option<Vec<String>>,
    idle: &CancellationToken,
) -> JoinHandle<()> {
    let (sh, idle) = (shared.clone(), idle.clone());
    tokio::spawn(async move {
        supervise("idle check", sh.stop.claiming.clone(), |_| {
            idle::run(sh.clone(), queues.clone(), idle.clone())
        })
        .await
    })
}

impl Started {
    /// This worker's id (as in `skiplock.workers` and `attempted_by`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Phase 2: serves until `shutdown` resolves or, with `exit_when_idle`, until nothing in
    /// the worker's queues is claimable and nothing runs, or until the schema was migrated to
    /// another SQL API under it (then [`Started::shutdown`] returns that error).
    pub async fn wait(&self, shutdown: impl Future<Output = ()>) {
        tokio::select! {
            _ = shutdown => tracing::info!("shutdown requested"),
            _ = self.idle.cancelled() => tracing::info!("idle: nothing claimable and nothing running"),
            _ = self.shared.stop.schema_moved.cancelled() => {}
        }
    }

    /// Phase 3: the graceful shutdown, in order (see the module docs).
    pub async fn shutdown(self) -> Result<()> {
        let shared = self.shared;
        // 1. Stop claiming and wait for the producers (each waits for its claims in flight
        //    and lets go of its buffer); discovery and the listener first, as they may start
        //    producers.
        shared.stop.claiming.cancel();
        if let Some(d) = self.discovery {
            let _ = d.await;
        }
        let _ = self.listener.await;
        if let Some(i) = self.idle_check {
            let _ = i.await;
        }
        for t in self.queues.take_tasks() {
            let _ = t.await;
        }
        // Jobs claimed ahead that never started go back now, not after the grace period:
        // nobody heartbeats them any more, and other workers may run them meanwhile.
        release_unstarted(&shared).await;

        // 2-3. Tell handlers, give them the grace period, put the rest back.
        shutdown::finish_running(&shared).await;

        // 4. Write the remaining acks, then put back anything claimed but never started (a
        //    producer that failed and could not return its batch), then stop the heartbeat
        //    and the services.
        self.ack_writer.0.cancel();
        let _ = self.ack_writer.1.await;
        release_unstarted(&shared).await;
        self.heartbeat.0.cancel();
        let _ = self.heartbeat.1.await;
        self.services.0.cancel();
        for m in self.services.1 {
            let _ = m.await;
        }
        if let Err(e) = worker_remove(&self.runtime_pool, &self.id).await {
            tracing::warn!(error = %e, "could not remove the worker row");
        }
        if self.owns_runtime_pool {
            let _ = tokio::time::timeout(Duration::from_secs(5), self.runtime_pool.close()).await;
        }
        // The failures summed since their kind's line, said before the last line.
        let unsaid = shared
            .report
            .failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain();
        for (kind, more, last_error) in unsaid {
            super::failure_log::summary(&kind, more, &last_error);
        }
        tracing::info!(worker = %self.id, "worker stopped");
        let moved = shared
            .stop
            .schema_mismatch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match moved {
            Some(m) => Err(Error::Schema(m)),
            None => Ok(()),
        }
    }
}

/// Puts back every job this worker claimed but does not hold (buffered and never started,
/// or a producer's batch it could not return), the attempt given back.
async fn release_unstarted(shared: &Shared) {
    if let Err(e) = release::unstarted(
        shared,
        None,
        false,
        "released at shutdown: claimed but never started",
    )
    .await
    {
        tracing::warn!(error = %e, "could not check for claimed jobs that never started");
    }
}
