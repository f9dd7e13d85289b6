//! Handlers: what runs a job of one kind. A handler is a type implementing [`Handler`] with
//! typed, serde-deserialised args; the [`Registry`] stores them type-erased by kind.
//! Built-in workflows register exactly the way a user's handlers do.

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

pub(crate) mod steps;

use super::outcome::{HandlerResult, IntoJobResult, JobError};
use crate::queue::RawArgs;
use crate::queue::typed::JobArgs;
use crate::store::Pool;

/// Everything a running handler may need besides its args.
#[derive(Clone, Debug)]
pub struct JobContext {
    /// Job id.
    pub id: i64,
    /// Job kind.
    pub kind: String,
    /// Queue it was claimed from.
    pub queue: String,
    /// This attempt (1-based).
    pub attempt: i32,
    /// Attempt limit.
    pub max_attempts: i32,
    /// When the job was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it was due (its `scheduled_at` at the claim).
    pub scheduled_at: DateTime<Utc>,
    /// Its tags, sorted (docs/sql-reference.md, "Tags and meta").
    pub tags: Vec<String>,
    /// Its meta: a JSON object, `{}` when the enqueuer gave none.
    pub meta: serde_json::Value,
    /// Database pool, for handlers that write their own rows.
    pub pool: Pool,
    /// The worker running it.
    pub worker_id: Arc<str>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) lost: CancellationToken,
    /// What this attempt replayed and recorded (`steps`).
    pub(crate) steps: Arc<steps::Steps>,
}

impl JobContext {
    /// The jobs this one depends on (docs/flows.md), with how each finished and what it
    /// returned, by id: a fan-in reads its inputs here, a batch's callback counts them with
    /// [`crate::queue::flow::BatchSummary::of`]. Empty for a job without dependencies.
    pub async fn dependency_results(&self) -> crate::Result<Vec<crate::queue::flow::DependencyResult>> {
        crate::store::flows::dependency_results(&self.pool, self.id).await
    }

    /// Resolves when the worker begins shutting down: long handlers should stop and return
    /// [`super::Outcome::Snooze`] (or an error) so the job is picked up again later.
    pub async fn shutdown_requested(&self) {
        self.shutdown.cancelled().await
    }

    /// Whether shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Resolves when this job was taken away (cancelled by an operator or rescued): its
    /// result will be ignored, so the handler may as well stop.
    pub async fn lost(&self) {
        self.lost.cancelled().await
    }

    /// Whether the job was taken away.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// A context for calling a handler outside a worker (tests, one-off runs).
    pub fn detached(pool: Pool, id: i64, kind: &str) -> Self {
        let now = Utc::now();
        JobContext {
            id,
            kind: kind.to_string(),
            queue: crate::names::DEFAULT_QUEUE.into(),
            attempt: 1,
            max_attempts: 1,
            created_at: now,
            scheduled_at: now,
            tags: Vec::new(),
            meta: serde_json::Value::Object(Default::default()),
            pool,
            worker_id: Arc::from("detached"),
            shutdown: CancellationToken::new(),
            lost: CancellationToken::new(),
            steps: Arc::default(),
        }
    }
}

/// A job handler for one kind.
///
/// `Args` is deserialised from the job's `args` (straight from the stored text, when the job
/// starts); if that fails the job is discarded with the decode error (retrying would fail the
/// same way), and no other job is affected (src/queue/args.rs).
pub trait Handler: Send + Sync + 'static {
    /// The job's arguments.
    type Args: DeserializeOwned + Send + 'static;

    /// The kind this handler runs.
    fn kind(&self) -> &'static str;

    /// A timeout of its own; `None` uses the worker's `SKIPLOCK_JOB_TIMEOUT`.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// Runs one job.
    fn run(&self, ctx: JobContext, args: Self::Args) -> impl Future<Output = HandlerResult> + Send;
}

/// A handler written as a function of typed args: its kind is `A::KIND`, the same constant
/// [`crate::enqueue`] writes, so enqueue and handler cannot disagree on a string. Built by
/// [`Registry::register_typed`] / [`crate::worker::WorkerBuilder::register_typed`].
pub struct FnHandler<A, F> {
    f: F,
    timeout: Option<Duration>,
    _args: PhantomData<fn() -> A>,
}

impl<A, F, Fut> Handler for FnHandler<A, F>
where
    A: JobArgs,
    F: Fn(JobContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoJobResult,
{
    type Args = A;
    fn kind(&self) -> &'static str {
        A::KIND
    }
    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
    fn run(&self, ctx: JobContext, args: A) -> impl Future<Output = HandlerResult> + Send {
        let fut = (self.f)(ctx, args);
        async move { fut.await.into_job_result() }
    }
}

impl<A, F> FnHandler<A, F> {
    /// `f` as the handler of `A`'s kind.
    pub fn new(f: F) -> Self {
        FnHandler {
            f,
            timeout: None,
            _args: PhantomData,
        }
    }
    /// A timeout of its own instead of the worker's `SKIPLOCK_JOB_TIMEOUT`.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }
}

/// A boxed handler future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

type ErasedFn = dyn Fn(JobContext, RawArgs) -> BoxFuture<HandlerResult> + Send + Sync;

/// A type-erased handler: decode, then run.
#[derive(Clone)]
pub struct ErasedHandler {
    call: Arc<ErasedFn>,
    timeout: Option<Duration>,
}

impl ErasedHandler {
    /// Runs the handler on the job's args as stored (it parses them).
    pub fn call(&self, ctx: JobContext, args: RawArgs) -> BoxFuture<HandlerResult> {
        (self.call)(ctx, args)
    }
    /// The handler's own timeout, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

/// Handlers by kind.
#[derive(Clone, Default)]
pub struct Registry {
    handlers: BTreeMap<String, ErasedHandler>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` for its kind, replacing any earlier one.
    pub fn register<H: Handler>(&mut self, handler: H) -> &mut Self {
        let kind = handler.kind().to_string();
        let timeout = handler.timeout();
        let h = Arc::new(handler);
        self.register_raw(kind, timeout, move |ctx: JobContext, args: RawArgs| {
            let h = h.clone();
            Box::pin(async move {
                let args: H::Args = args.parse().map_err(|e| {
                    JobError::discard(format!("invalid args for kind {}: {e}", ctx.kind))
                })?;
                h.run(ctx, args).await
            }) as BoxFuture<HandlerResult>
        })
    }

    /// Registers a handler of a kind known only at run time that reads the stored args
    /// itself (the apalis backend's hand-over to apalis, crates/skiplock-apalis/src/handoff.rs).
    pub fn register_raw(
        &mut self,
        kind: String,
        timeout: Option<Duration>,
        call: impl Fn(JobContext, RawArgs) -> BoxFuture<HandlerResult> + Send + Sync + 'static,
    ) -> &mut Self {
        self.handlers.insert(
            kind,
            ErasedHandler {
                call: Arc::new(call),
                timeout,
            },
        );
        self
    }

    /// Registers `f` as the handler of the typed job `A` (kind `A::KIND`); `f` returns
    /// anything [`IntoJobResult`] takes: `()`, an outcome, `anyhow::Result<()>`, ….
    pub fn register_typed<A, F, Fut>(&mut self, f: F) -> &mut Self
    where
        A: JobArgs,
        F: Fn(JobContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoJobResult,
    {
        self.register(FnHandler::<A, F>::new(f))
    }

    /// The handler for `kind`.
    pub fn get(&self, kind: &str) -> Option<&ErasedHandler> {
        self.handlers.get(kind)
    }

    /// Every registered kind (what this worker claims).
    pub fn kinds(&self) -> Vec<String> {
        self.handlers.keys().cloned().collect()
    }
}
