//! An [apalis](https://docs.rs/apalis) 1.x backend on skiplock's jobs table (this crate,
//! `skiplock-apalis`): teams with apalis workers (plain async handlers, tower middleware) switch to
//! skiplock by changing the backend and keep everything else.
//!
//! ```no_run
//! # use serde::{Deserialize, Serialize};
//! # use apalis_core::worker::builder::WorkerBuilder;
//! # use skiplock_apalis::SkiplockStorage;
//! #[derive(Serialize, Deserialize)]
//! struct Email { to: String }
//!
//! async fn send_email(email: Email) -> Result<(), std::io::Error> { Ok(()) }
//!
//! # async fn run(pool: skiplock::Pool) {
//! let worker = WorkerBuilder::new("email")
//!     .backend(SkiplockStorage::<Email>::new(pool, "send-email").concurrency(10))
//!     .build(send_email);
//! worker.run().await.unwrap();
//! # }
//! ```
//!
//! Jobs are plain `skiplock.jobs` rows of the storage's kind, claimed, heartbeated, rescued
//! and acknowledged by a native skiplock worker inside the storage (src/runtime.rs)
//! that hands each job to apalis to run (src/handoff.rs); they are visible to
//! `skiplock jobs`, `stats`, psql and the console. See `docs/apalis.md` for what behaves
//! differently from apalis-postgres.

mod args;
mod handoff;
mod layer;
mod runtime;

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use apalis_core::backend::finalize::Ephemeral;
use apalis_core::backend::{Backend, BackendConfig};
use apalis_core::task::Task;
use apalis_core::worker::context::WorkerContext;
use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::WaitForCancellationFutureOwned;

pub use args::{
    JobOptions, TaskFields, WRAP_KEY, decode_args, decode_raw_args, encode_args, new_job,
    skiplock_priority,
};
pub use layer::{SkiplockLayer, SkiplockService, error_message, is_abort};

use handoff::Handoff;
use runtime::{Options, Runtime};
use skiplock::Pool;
use skiplock::config::{DEFAULT_QUEUE_CONCURRENCY, QueueSettings};
use skiplock::error::{Error, Result};
use skiplock::queue::DEFAULT_QUEUE;
use skiplock::queue::NewJob;

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

type Tasks<Args> = mpsc::UnboundedReceiver<Task<Args>>;

enum State<Args> {
    Idle,
    Starting(BoxFuture<'static, Result<(Runtime, Tasks<Args>)>>),
    Running {
        tasks: Tasks<Args>,
        /// Resolves once the runtime began shutting down (apalis stopping, the schema moved
        /// under it): the stream ends.
        ending: Pin<Box<WaitForCancellationFutureOwned>>,
    },
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
    runtime: Option<Runtime>,
    state: State<Args>,
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
            runtime: None,
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
    pub fn new(pool: impl Into<Pool>, kind: impl Into<String>) -> Self {
        SkiplockStorage {
            pool: pool.into(),
            opts: Options {
                kind: kind.into(),
                queue: DEFAULT_QUEUE.to_string(),
                concurrency: DEFAULT_QUEUE_CONCURRENCY,
                settings: QueueSettings::default(),
                rescuer: true,
            },
            runtime: None,
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
        self.runtime.as_ref().map(|r| r.worker_id.as_str())
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
        skiplock::enqueue_job(&self.pool, &job).await.map(|e| e.id)
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
            skiplock::enqueue_job(&pool, first).await?;
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
        skiplock::enqueue_many(
            &pool,
            skiplock::ManyJobs {
                kind: &first.kind,
                args: &args,
                queue: &first.queue,
                run_at: first.run_at,
                priority: first.priority,
                limit_key: first.limit_key.as_deref(),
                ..Default::default()
            },
        )
        .await?;
        i = end;
    }
    Ok(())
}

impl<Args: DeserializeOwned + Send + 'static> Backend for SkiplockStorage<Args> {
    type Task = Task<Args>;
    type Error = Error;

    fn poll_ready(&mut self, cx: &mut Context<'_>, worker: &WorkerContext) -> Poll<Result<()>> {
        loop {
            match &mut self.state {
                State::Idle => {
                    let start =
                        Runtime::start(self.pool.clone(), self.opts.clone(), worker.clone());
                    self.state = State::Starting(start.boxed());
                }
                State::Starting(fut) => match fut.poll_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok((runtime, tasks))) => {
                        let ending = Box::pin(runtime.ending.clone().cancelled_owned());
                        self.runtime = Some(runtime);
                        self.state = State::Running { tasks, ending };
                    }
                    Poll::Ready(Err(e)) => {
                        self.state = State::Failed(e.to_string());
                        return Poll::Ready(Err(e));
                    }
                },
                State::Running { .. } => return Poll::Ready(Ok(())),
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
        let State::Running { tasks, ending } = &mut self.state else {
            return Poll::Ready(None);
        };
        if ending.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        loop {
            match tasks.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                // Skipped: put back or taken away (cancelled, rescued) while it waited here.
                Poll::Ready(Some(task))
                    if !task
                        .data()
                        .get::<Handoff>()
                        .is_some_and(Handoff::is_waiting) => {}
                Poll::Ready(Some(task)) => return Poll::Ready(Some(Ok(task))),
            }
        }
    }

    fn poll_close(&mut self, cx: &mut Context<'_>, _worker: &WorkerContext) -> Poll<Result<()>> {
        loop {
            match std::mem::replace(&mut self.state, State::Closed) {
                // Tasks still in the stream are dropped here: their jobs go back (handoff.rs).
                State::Running { .. } | State::Starting(_) | State::Idle => {
                    // A start dropped half-way leaves nothing running (`Worker::start`).
                    match self.runtime.as_mut() {
                        Some(rt) => self.state = State::Closing(rt.close().boxed()),
                        None => return Poll::Ready(Ok(())),
                    }
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

/// A storage dropped without closing (its worker future dropped, say) shuts its runtime
/// down all the same, in the runtime's own task: claiming stops, what it held goes back
/// after the grace period and pending acks are written.
impl<Args> Drop for SkiplockStorage<Args> {
    fn drop(&mut self) {
        if let Some(rt) = &self.runtime {
            rt.stop();
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
        SkiplockLayer::default()
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
