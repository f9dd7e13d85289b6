//! [`WorkerBuilder`]: what a worker runs (handlers, services, start-up hooks) and with what
//! (pools, settings). The rescuer, the reaper, retention and the periodic-job scheduler are
//! installed by default, so a worker built as examples/quickstart.rs shows maintains its database; each
//! has an opt-out ([`WorkerBuilder::without_rescuer`], [`WorkerBuilder::without_maintenance`]).

use std::future::Future;
use std::sync::Arc;

use super::Hook;
use super::handler::{Handler, JobContext, Registry};
use super::lifecycle::Worker;
use super::maintenance::{self, MaintenanceSettings, periodic, reaper, retention};
use super::service::Service;
use super::{RUNTIME_ACQUIRE_TIMEOUT, StartHook};
use crate::config::QueueSettings;
use crate::db::session;
use crate::store::Pool;

/// Which maintenance the worker installs at [`WorkerBuilder::build`].
enum Maintenance {
    /// None (the rescuer is separate).
    Off,
    /// Built from settings (the default: every setting's default).
    Settings(MaintenanceSettings),
    /// The reaper and retention built by the caller, with these other periodic jobs.
    Parts(Box<(reaper::Reaper, retention::Retention, periodic::PeriodicJobs)>),
}

/// Builds a [`Worker`].
pub struct WorkerBuilder {
    pub(super) pool: Pool,
    runtime_pool: Option<Pool>,
    settings: QueueSettings,
    registry: Registry,
    services: Vec<Arc<dyn Service>>,
    hooks: Vec<StartHook>,
    job_hooks: Vec<Arc<dyn Hook>>,
    exit_when_idle: bool,
    rescuer: bool,
    maintenance: Maintenance,
    /// A word in the worker's id saying what runs it (`apalis`), for operators.
    id_label: Option<&'static str>,
}

impl Worker {
    /// Starts building a worker on `pool` (the pool handlers get, in [`JobContext::pool`]),
    /// with the default settings, serving every queue; the rescuer and the default maintenance
    /// (reaper, retention, periodic scheduler) come with it. Name the queues to serve with
    /// [`WorkerBuilder::queue`], the rest with [`WorkerBuilder::settings`].
    pub fn builder(pool: impl Into<Pool>) -> WorkerBuilder {
        WorkerBuilder::new(pool.into())
    }
}

impl WorkerBuilder {
    fn new(pool: Pool) -> Self {
        WorkerBuilder {
            pool,
            runtime_pool: None,
            settings: QueueSettings::default(),
            registry: Registry::new(),
            services: Vec::new(),
            hooks: Vec::new(),
            job_hooks: Vec::new(),
            exit_when_idle: false,
            rescuer: true,
            maintenance: Maintenance::Settings(MaintenanceSettings::default()),
            id_label: None,
        }
    }

    /// The worker's settings (poll interval, timeouts, buffers, …; `QueueSettings::from_env`
    /// at a program's edge). Queues named with [`Self::queue`] before are kept.
    pub fn settings(mut self, settings: QueueSettings) -> Self {
        let named = self.settings.queues.take();
        self.settings = settings;
        if let Some(named) = named {
            let q = self.settings.queues.get_or_insert_with(Default::default);
            for (name, n) in named {
                q.insert(name, n);
            }
        }
        self
    }
    /// Serves `queue` with `concurrency` slots (jobs of it running at once in this worker).
    /// A worker that names no queue serves every queue, at the default concurrency each.
    pub fn queue(mut self, queue: &str, concurrency: usize) -> Self {
        self.settings
            .queues
            .get_or_insert_with(Default::default)
            .insert(queue.to_string(), concurrency);
        self
    }
    /// Registers a handler for its kind.
    pub fn register<H: Handler>(mut self, h: H) -> Self {
        self.registry.register(h);
        self
    }
    /// Registers `f` as the handler of the typed job `A`: the kind is `A::KIND`, the same
    /// constant [`crate::enqueue`] writes (`.register_typed(|ctx, job: SendEmail| async
    /// move { … })`).
    pub fn register_typed<A, F, Fut>(mut self, f: F) -> Self
    where
        A: crate::queue::JobArgs,
        F: Fn(JobContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: super::outcome::IntoJobResult,
    {
        self.registry.register_typed(f);
        self
    }
    /// Gives mutable access to the registry (for `register` functions of workflows).
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }
    /// Adds a service, run every interval while the worker runs (on the handlers' pool).
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
    /// The kinds registered so far (what the worker will claim).
    pub fn kinds(&self) -> Vec<String> {
        self.registry.kinds()
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

    /// Adds a job hook, called around each job this worker runs and for each job its rescuer
    /// returns ([`Hook`]); hooks run in the order added.
    pub fn hook(mut self, hook: impl Hook) -> Self {
        self.job_hooks.push(Arc::new(hook));
        self
    }
    /// Exit once nothing in the worker's queues is claimable now and nothing runs (jobs left
    /// waiting for a dependency that has finished are released first: src/worker/idle.rs).
    pub fn exit_when_idle(mut self, yes: bool) -> Self {
        self.exit_when_idle = yes;
        self
    }

    /// The settings of the default maintenance (reaper, retention, periodic jobs), e.g.
    /// [`MaintenanceSettings::from_env`] at a program's edge. Turns maintenance back on.
    pub fn maintenance(mut self, settings: MaintenanceSettings) -> Self {
        self.maintenance = Maintenance::Settings(settings);
        self
    }
    /// Adds periodic jobs declared in code to those the scheduler enqueues (turns
    /// maintenance back on with default settings if it was off).
    pub fn periodic(mut self, jobs: periodic::PeriodicJobs) -> Self {
        self.maintenance = match std::mem::replace(&mut self.maintenance, Maintenance::Off) {
            Maintenance::Settings(mut s) => {
                s.periodic = s.periodic.extend(jobs);
                Maintenance::Settings(s)
            }
            Maintenance::Off => Maintenance::Settings(MaintenanceSettings {
                periodic: jobs,
                ..Default::default()
            }),
            Maintenance::Parts(mut p) => {
                p.2 = std::mem::take(&mut p.2).extend(jobs);
                Maintenance::Parts(p)
            }
        };
        self
    }
    /// Uses a reaper and retention built by the caller (a test keeps a clone of the reaper
    /// to watch its counters), with `jobs` as the other periodic jobs.
    pub fn maintenance_parts(
        mut self,
        reaper: reaper::Reaper,
        retention: retention::Retention,
        jobs: periodic::PeriodicJobs,
    ) -> Self {
        self.maintenance = Maintenance::Parts(Box::new((reaper, retention, jobs)));
        self
    }
    /// No reaper, retention or periodic scheduler in this worker (another process runs them,
    /// or a test counts every row). The rescuer stays unless [`Self::without_rescuer`].
    pub fn without_maintenance(mut self) -> Self {
        self.maintenance = Maintenance::Off;
        self
    }
    /// No rescuer in this worker: jobs of dead workers are then rescued only by other
    /// processes (or `skiplock reap`).
    pub fn without_rescuer(mut self) -> Self {
        self.rescuer = false;
        self
    }

    /// Puts `label` in the worker's id (`host:pid:label:…`), so `skiplock workers` and
    /// `attempted_by` show what kind of process it is.
    /// (crates/skiplock-apalis labels its native worker `apalis`.)
    pub fn id_label(mut self, label: &'static str) -> Self {
        self.id_label = Some(label);
        self
    }

    /// Finishes the builder. A maintenance setting that turns out invalid here is reported
    /// by [`Worker::start`] (and so by [`Worker::run`]), before anything starts.
    pub fn build(mut self) -> Worker {
        let parts = match std::mem::replace(&mut self.maintenance, Maintenance::Off) {
            Maintenance::Off => None,
            Maintenance::Settings(s) => Some(maintenance::parts(self.pool.clone(), s)),
            Maintenance::Parts(p) => {
                let (r, t, jobs) = *p;
                Some(maintenance::parts_from(r, t, jobs))
            }
        };
        let mut init_error = None;
        match parts {
            None => {}
            Some(Err(e)) => init_error = Some(e),
            Some(Ok(p)) => {
                // The handlers with the scheduler that enqueues their jobs (a worker never
                // declares a kind it cannot run), and their queue even in an explicit list.
                self = self
                    .register(p.reaper)
                    .register(p.retention)
                    .service(p.scheduler)
                    .also_serve(maintenance::QUEUE, maintenance::QUEUE_CONCURRENCY);
            }
        }
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let pid = std::process::id() as i32;
        let label = self.id_label.map(|l| format!("{l}:")).unwrap_or_default();
        let id = format!("{host}:{pid}:{label}{:08x}", rand::random::<u32>());
        let owns_runtime_pool = self.runtime_pool.is_none();
        let runtime_pool = self.runtime_pool.unwrap_or_else(|| {
            let opts = session::worker_options(&self.pool.connect_options());
            session::worker_pool(
                opts,
                self.settings.session_limits(),
                self.pool.mode(),
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
            job_hooks: self.job_hooks,
            exit_when_idle: self.exit_when_idle,
            rescuer: self.rescuer,
            init_error,
            id,
            host,
            pid,
        }
    }
}
