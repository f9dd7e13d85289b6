//! An [apalis](https://docs.rs/apalis) 1.x backend on skiplock's jobs table (feature
//! `apalis`): teams with apalis workers (plain async handlers, tower middleware) switch to
//! skiplock by changing the backend and keep everything else.
//!
//! ```no_run
//! # use serde::{Deserialize, Serialize};
//! # use apalis_core::worker::builder::WorkerBuilder;
//! # use skiplock::apalis::SkiplockStorage;
//! #[derive(Serialize, Deserialize)]
//! struct Email { to: String }
//!
//! async fn send_email(email: Email) -> Result<(), std::io::Error> { Ok(()) }
//!
//! # async fn run(pool: skiplock::store::Pool) {
//! let worker = WorkerBuilder::new("email")
//!     .backend(SkiplockStorage::<Email>::new(pool, "send-email").concurrency(10))
//!     .build(send_email);
//! worker.run().await.unwrap();
//! # }
//! ```
//!
//! Jobs are plain `skiplock.jobs` rows of the storage's kind: claimed through the native
//! worker's claim statement, acknowledged through its fenced ack statement, heartbeated and
//! rescued like native jobs, visible to `skiplock jobs`, `stats`, psql and the console. See
//! `docs/apalis.md` for what behaves differently from apalis-postgres.

mod args;
mod engine;
mod layer;

use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use apalis_core::backend::finalize::Ephemeral;
use apalis_core::backend::{Backend, BackendConfig};
use apalis_core::task::Task;
use apalis_core::task::builder::TaskBuilder;
use apalis_core::task::task_id::TaskId;
use apalis_core::worker::context::WorkerContext;
use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

pub use args::{
    JobOptions, TaskFields, WRAP_KEY, decode_args, decode_raw_args, encode_args, new_job,
    skiplock_priority,
};
pub use layer::{SkiplockLayer, SkiplockService, error_message, is_abort};

use crate::config::{DEFAULT_QUEUE_CONCURRENCY, QueueSettings};
use crate::error::{Error, Result};
use crate::queue::{Job, NewJob};
use crate::store::Pool;
use crate::store::names::DEFAULT_QUEUE;
use crate::worker::outcome::{Attempt, JobError};
use engine::{Engine, Options};

/// The skiplock row behind an apalis task, in the task's data: a handler can take it as
/// `Data<SkiplockJob>`.
#[derive(Debug, Clone, PartialEq)]
pub struct SkiplockJob {
    /// Row id (`skiplock job ID`).
    pub id: i64,
    /// Kind.
    pub kind: String,
    /// Queue.
    pub queue: String,
    /// This attempt's number, from 1.
    pub attempt: i32,
    /// Attempt limit.
    pub max_attempts: i32,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
}

enum State {
    Idle,
    Starting(BoxFuture<'static, Result<mpsc::UnboundedReceiver<Job>>>),
    Running(mpsc::UnboundedReceiver<Job>),
    Closing(BoxFuture<'static, Result<()>>),
    Closed,
    Failed(String),
}

/// An apalis backend for jobs of one kind in one queue of skiplock. It is also a
/// `TaskSink`: `push`, `push_bulk` and `push_task` write skiplock rows (with
/// [`JobOptions`] attached to a task for queue, run time, priority and unique keys), and
/// [`SkiplockStorage::enqueue`] returns the new row's id.
///
/// A storage given to a worker claims jobs; a clone gets its own (unstarted) runtime, so a
/// clone kept for pushing never claims anything.
pub struct SkiplockStorage<Args> {
    pool: Pool,
    opts: Options,
    engine: Option<Arc<Engine>>,
    state: State,
    /// Tasks pushed and not yet flushed, as jobs.
    sink_buf: Vec<NewJob>,
    sink_fut: Option<BoxFuture<'static, Result<()>>>,
    _args: PhantomData<fn() -> Args>,
}

impl<Args> std::fmt::Debug for SkiplockStorage<Args> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkiplockStorage")
            .field("kind", &self.opts.kind)
            .field("queue", &self.opts.queue)
            .field("concurrency", &self.opts.concurrency)
            .finish()
    }
}

impl<Args> Clone for SkiplockStorage<Args> {
    fn clone(&self) -> Self {
        SkiplockStorage {
            pool: self.pool.clone(),
            opts: self.opts.clone(),
            engine: None,
            state: State::Idle,
            sink_buf: Vec::new(),
            sink_fut: None,
            _args: PhantomData,
        }
    }
}

impl<Args> SkiplockStorage<Args> {
    /// A storage for jobs of `kind` in the `default` queue on `pool` (a migrated skiplock
    /// database), claiming at most [`DEFAULT_QUEUE_CONCURRENCY`] jobs at a time, with
    /// skiplock's default settings.
    pub fn new(pool: Pool, kind: impl Into<String>) -> Self {
        SkiplockStorage {
            pool,
            opts: Options {
                kind: kind.into(),
                queue: DEFAULT_QUEUE.to_string(),
                concurrency: DEFAULT_QUEUE_CONCURRENCY,
                settings: QueueSettings::default(),
                rescuer: true,
            },
            engine: None,
            state: State::Idle,
            sink_buf: Vec::new(),
            sink_fut: None,
            _args: PhantomData,
        }
    }

    /// Serves (and pushes to) `queue`.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.opts.queue = queue.into();
        self
    }

    /// Holds at most `n` jobs at once (running or claimed and waiting for apalis to start
    /// them). Match it to the worker's `.concurrency(n)`: a smaller tower limit leaves claimed
    /// jobs waiting in this process.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.opts.concurrency = n;
        self
    }

    /// skiplock's worker settings: poll interval, rescue timeout (heartbeats every quarter),
    /// shutdown grace, backoff, ack delay (e.g. `QueueSettings::from_env()?`). Its `queues`
    /// and connection counts are not used.
    pub fn settings(mut self, settings: QueueSettings) -> Self {
        self.opts.settings = settings;
        self
    }

    /// Whether this worker also runs skiplock's rescuer (default yes: some process must
    /// return the jobs of dead ones; several rescuers are harmless).
    pub fn rescuer(mut self, yes: bool) -> Self {
        self.opts.rescuer = yes;
        self
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The kind this storage runs and pushes.
    pub fn kind(&self) -> &str {
        &self.opts.kind
    }

    /// The id this storage's worker has in `skiplock.workers` and `attempted_by` (once its
    /// worker started).
    pub fn worker_id(&self) -> Option<&str> {
        self.engine.as_ref().map(|e| e.worker_id.as_str())
    }

    fn engine(&mut self) -> Arc<Engine> {
        self.engine
            .get_or_insert_with(|| Engine::new(self.pool.clone(), self.opts.clone()))
            .clone()
    }
}

impl<Args: Serialize> SkiplockStorage<Args> {
    /// Enqueues `args` as a job of this storage's kind with `opts`; returns its id (with a
    /// unique key that an available job holds: that job's id).
    pub async fn enqueue(&self, args: &Args, opts: &JobOptions) -> Result<i64> {
        let job = new_job(
            &self.opts.kind,
            &self.opts.queue,
            encode_args(args)?,
            &TaskFields::default(),
            Some(opts),
        )?;
        crate::store::jobs::enqueue(&self.pool, &job)
            .await
            .map(|e| e.id)
    }

    fn task_to_job(&self, task: &Task<Args>) -> Result<NewJob> {
        let fields = TaskFields {
            run_at: task.ctx().run_at(),
            priority: task.ctx().priority(),
            max_attempts: task.ctx().max_attempts(),
            idempotency_key: task.ctx().idempotency_key().map(str::to_string),
        };
        new_job(
            &self.opts.kind,
            &self.opts.queue,
            encode_args(&task.args)?,
            &fields,
            task.ctx().data().get::<JobOptions>(),
        )
    }
}

/// Writes `jobs` in order; consecutive plain jobs (same queue, run time, priority and limit
/// key, no unique key, default attempts) go in one `enqueue_many`.
async fn write_jobs(pool: Pool, jobs: Vec<NewJob>) -> Result<()> {
    let default_attempts = NewJob::new("", serde_json::Value::Null).max_attempts;
    let plain = |j: &NewJob| j.unique_key.is_none() && j.max_attempts == default_attempts;
    let mut i = 0;
    while i < jobs.len() {
        let first = &jobs[i];
        if !plain(first) {
            crate::store::jobs::enqueue(&pool, first).await?;
            i += 1;
            continue;
        }
        let mut end = i + 1;
        while end < jobs.len()
            && plain(&jobs[end])
            && jobs[end].queue == first.queue
            && jobs[end].run_at == first.run_at
            && jobs[end].priority == first.priority
            && jobs[end].limit_key == first.limit_key
        {
            end += 1;
        }
        let args: Vec<serde_json::Value> = jobs[i..end].iter().map(|j| j.args.clone()).collect();
        crate::store::jobs::enqueue_many(
            &pool,
            crate::store::jobs::ManyJobs {
                kind: &first.kind,
                args: &args,
                queue: &first.queue,
                run_at: first.run_at,
                priority: first.priority,
                limit_key: first.limit_key.as_deref(),
            },
        )
        .await?;
        i = end;
    }
    Ok(())
}

impl<Args: DeserializeOwned + Send + 'static> SkiplockStorage<Args> {
    /// The apalis task for claimed `job`, or the ack that discards it (undecodable args).
    fn to_task(&self, engine: &Engine, job: Job) -> Option<Task<Args>> {
        match decode_raw_args::<Args>(&job.args) {
            Ok(args) => {
                let meta = SkiplockJob {
                    id: job.id,
                    kind: job.kind,
                    queue: job.queue,
                    attempt: job.attempt,
                    max_attempts: job.max_attempts,
                    created_at: job.created_at,
                };
                let mut b = TaskBuilder::new(args)
                    .task_id(TaskId::from_int(job.id.max(0) as u64))
                    .attempt(job.attempt.max(0) as usize)
                    .max_attempts(job.max_attempts.max(0) as usize)
                    .run_at_timestamp(job.scheduled_at.timestamp().max(0) as u64)
                    .lock_by(Some(engine.worker_id.clone()))
                    .data(meta);
                if let Some(t) = job.attempted_at {
                    b = b.lock_at(Some(t.timestamp().max(0) as u64));
                }
                Some(b.build())
            }
            Err(message) => {
                let ack = engine.decide(
                    job.id,
                    job.attempt,
                    job.max_attempts,
                    Attempt::Returned(Err(JobError::discard(message))),
                );
                engine.ack(ack);
                None
            }
        }
    }
}

impl<Args: DeserializeOwned + Send + 'static> Backend for SkiplockStorage<Args> {
    type Task = Task<Args>;
    type Error = Error;

    fn poll_ready(&mut self, cx: &mut Context<'_>, worker: &WorkerContext) -> Poll<Result<()>> {
        loop {
            match &mut self.state {
                State::Idle => {
                    let engine = self.engine();
                    self.state = State::Starting(engine.start(worker.clone()).boxed());
                }
                State::Starting(fut) => match fut.poll_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(rx)) => self.state = State::Running(rx),
                    Poll::Ready(Err(e)) => {
                        self.state = State::Failed(e.to_string());
                        return Poll::Ready(Err(e));
                    }
                },
                State::Running(_) => return Poll::Ready(Ok(())),
                State::Failed(msg) => return Poll::Ready(Err(Error::Other(msg.clone()))),
                State::Closing(_) | State::Closed => {
                    return Poll::Ready(Err(Error::Other("apalis storage: already closed".into())));
                }
            }
        }
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        _worker: &WorkerContext,
    ) -> Poll<Option<Result<Task<Args>>>> {
        let engine = self.engine();
        loop {
            let State::Running(rx) = &mut self.state else {
                return Poll::Ready(None);
            };
            match rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(job)) => {
                    let lost = engine.lost_token(job.id);
                    if lost.as_ref().is_none_or(|t| t.is_cancelled()) {
                        // Taken away (cancelled or rescued) before it started.
                        engine.forget(job.id);
                        continue;
                    }
                    if let Some(task) = self.to_task(&engine, job) {
                        return Poll::Ready(Some(Ok(task)));
                    }
                }
            }
        }
    }

    fn poll_close(&mut self, cx: &mut Context<'_>, _worker: &WorkerContext) -> Poll<Result<()>> {
        loop {
            match std::mem::replace(&mut self.state, State::Closed) {
                State::Running(rx) => {
                    let engine = self.engine();
                    self.state = State::Closing(engine.close(Some(rx)).boxed());
                }
                State::Starting(_) | State::Idle => {
                    // Dropping a start in progress: close what it may have started.
                    let engine = self.engine();
                    self.state = State::Closing(engine.close(None).boxed());
                }
                State::Closing(mut fut) => match fut.poll_unpin(cx) {
                    Poll::Pending => {
                        self.state = State::Closing(fut);
                        return Poll::Pending;
                    }
                    Poll::Ready(r) => return Poll::Ready(r),
                },
                State::Closed => return Poll::Ready(Ok(())),
                State::Failed(msg) => {
                    self.state = State::Failed(msg);
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}

/// A storage dropped without closing (its worker future dropped, say) stops its background
/// tasks: claiming stops, claimed jobs not yet started go back and pending acks are written
/// (by a task spawned on the current runtime, if there is one); jobs whose handlers were
/// dropped mid-run are no longer heartbeated, so the rescuer returns them.
impl<Args> Drop for SkiplockStorage<Args> {
    fn drop(&mut self) {
        let Some(engine) = self.engine.take() else {
            return;
        };
        let rx = match std::mem::replace(&mut self.state, State::Closed) {
            State::Running(rx) => Some(rx),
            State::Closing(_) | State::Starting(_) => None,
            State::Idle | State::Closed | State::Failed(_) => return,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(engine.close(rx));
            }
            Err(_) => engine.abandon(),
        }
    }
}

impl<Args: DeserializeOwned + Send + 'static> BackendConfig for SkiplockStorage<Args> {
    type Args = Args;
    type Id = u64;
    type Kind = Ephemeral;
    type Config = ();
    type Layer = SkiplockLayer;

    fn config(&self) -> &Self::Config {
        &()
    }

    fn middleware(&mut self, _worker: &mut WorkerContext) -> SkiplockLayer {
        SkiplockLayer {
            engine: self.engine(),
        }
    }
}

impl<Args: Serialize> futures::Sink<Task<Args>> for SkiplockStorage<Args> {
    type Error = Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        // Keep at most one batch in memory: flush a large buffer before taking more.
        if self.sink_buf.len() >= 1000 || self.sink_fut.is_some() {
            return self.poll_flush(cx);
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(self: Pin<&mut Self>, item: Task<Args>) -> Result<()> {
        let this = self.get_mut();
        let job = this.task_to_job(&item)?;
        this.sink_buf.push(job);
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        loop {
            if let Some(fut) = this.sink_fut.as_mut() {
                let r = futures::ready!(fut.poll_unpin(cx));
                this.sink_fut = None;
                r?;
            }
            if this.sink_buf.is_empty() {
                return Poll::Ready(Ok(()));
            }
            let jobs = std::mem::take(&mut this.sink_buf);
            this.sink_fut = Some(write_jobs(this.pool.clone(), jobs).boxed());
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.poll_flush(cx)
    }
}
