//! The benchmark's durable-steps figures (docs/steps.md, "Cost"): what a recorded step costs a
//! job. A drain of [`STEP_JOBS`] jobs of [`STEPS_PER_JOB`] recorded steps each against a drain
//! of ten times as many plain jobs, by the same worker in the same run (each step is one
//! fenced, committed statement, as each plain job's ack is a share of one); and one job's
//! [`IN_A_ROW`] checkpoints and as many steps one after another, timed in its handler: the
//! latency a handler pays per checkpoint or step. Small on purpose: a few seconds a run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use skiplock::Pool as PgPool;
use skiplock::error::{Error, Result};
use skiplock::worker::{Handler, HandlerResult, JobContext, JobError, Outcome, Worker};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{BenchOptions, fill, store, worker_settings};

/// Jobs of recorded steps in the steps drain.
pub const STEP_JOBS: usize = 200;
/// Recorded steps in each of them (the plain drain has this many times as many jobs).
pub const STEPS_PER_JOB: usize = 10;
/// Checkpoints (and then steps) one job saves one after another for the latency figures.
pub const IN_A_ROW: usize = 100;

/// How much [`measure`] runs: [`STEP_JOBS`] and [`IN_A_ROW`] in the benchmark, less in its
/// tests.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Jobs of [`STEPS_PER_JOB`] steps.
    pub step_jobs: usize,
    /// Checkpoints, and steps, in a row.
    pub in_a_row: usize,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            step_jobs: STEP_JOBS,
            in_a_row: IN_A_ROW,
        }
    }
}

/// One run's steps figures.
#[derive(Debug, Clone, Copy)]
pub struct StepsRun {
    /// Jobs of [`STEPS_PER_JOB`] recorded steps per second.
    pub step_jobs_per_s: f64,
    /// Plain (noop) jobs per second, ten times as many drained.
    pub plain_jobs_per_s: f64,
    /// The time of one job of ten steps / the time of ten plain jobs (drain rates).
    pub step_job_to_ten_plain: f64,
    /// ms per checkpoint, one after another in one handler.
    pub checkpoint_ms: f64,
    /// ms per recorded step (a closure that does nothing), one after another.
    pub step_ms: f64,
}

const PLAIN: &str = "bench-steps-plain";
const STEPS: &str = "bench-steps-ten";
const IN_ROW: &str = "bench-steps-in-a-row";

/// Counts the jobs that ran and wakes the drain once `of` have.
#[derive(Clone)]
struct Done {
    n: Arc<AtomicUsize>,
    all: Arc<Notify>,
    of: usize,
}

impl Done {
    fn one(&self) {
        if self.n.fetch_add(1, Ordering::Relaxed) + 1 >= self.of {
            self.all.notify_one();
        }
    }
}

struct Plain(Done);
impl Handler for Plain {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        PLAIN
    }
    async fn run(&self, _ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        self.0.one();
        Ok(Outcome::Complete)
    }
}

struct TenSteps(Done);
impl Handler for TenSteps {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        STEPS
    }
    async fn run(&self, ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        for i in 0..STEPS_PER_JOB {
            ctx.step(format!("step-{i}"), || async move { Ok::<_, JobError>(i) })
                .await?;
        }
        self.0.one();
        Ok(Outcome::Complete)
    }
}

/// One job's checkpoints, then steps, one after another: (ms per checkpoint, ms per step).
struct InARow(Done, usize, Arc<Mutex<Option<(f64, f64)>>>);
impl Handler for InARow {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        IN_ROW
    }
    async fn run(&self, ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        let n = self.1;
        let t = Instant::now();
        for i in 0..n {
            ctx.checkpoint(&i).await?;
        }
        let checkpoint = t.elapsed().as_secs_f64() * 1000.0 / n as f64;
        let t = Instant::now();
        for i in 0..n {
            ctx.step(format!("step-{i}"), || async move { Ok::<_, JobError>(i) })
                .await?;
        }
        let step = t.elapsed().as_secs_f64() * 1000.0 / n as f64;
        *self.2.lock().unwrap_or_else(|p| p.into_inner()) = Some((checkpoint, step));
        self.0.one();
        Ok(Outcome::Complete)
    }
}

/// Drains the `of` due jobs of the handler `make` builds with one worker in this process:
/// seconds from the worker's start until every handler ran and every ack is written.
async fn drain<H: Handler>(
    url: &str,
    o: &BenchOptions,
    of: usize,
    make: impl FnOnce(Done) -> H,
) -> Result<f64> {
    let p = store::pool(url, o.connections).await?;
    let done = Done {
        n: Arc::new(AtomicUsize::new(0)),
        all: Arc::new(Notify::new()),
        of,
    };
    let all = done.all.clone();
    let worker = Worker::builder(p.clone())
        .settings(worker_settings(o))
        .without_maintenance()
        .register(make(done))
        .build();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let started = Instant::now();
    let mut handle =
        tokio::spawn(async move { worker.run(async move { s.cancelled().await }).await });
    let ran = tokio::select! {
        _ = all.notified() => Ok(()),
        w = &mut handle => Err(Error::Other(format!("bench: the worker stopped during the steps drain: {w:?}"))),
    };
    if let Err(e) = ran {
        stop.cancel();
        return Err(e);
    }
    while store::count_running(&p).await? > 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    stop.cancel();
    handle.await.map_err(|e| Error::Other(e.to_string()))??;
    p.close().await;
    Ok(secs)
}

/// One run of the steps figures on the benchmark's database (`url`; `monitor` enqueues).
pub async fn measure(
    url: &str,
    o: &BenchOptions,
    monitor: &PgPool,
    sizes: Sizes,
) -> Result<StepsRun> {
    let plain_jobs = sizes.step_jobs * STEPS_PER_JOB;
    fill(monitor, PLAIN, plain_jobs).await?;
    let plain_secs = drain(url, o, plain_jobs, Plain).await?;
    fill(monitor, STEPS, sizes.step_jobs).await?;
    let steps_secs = drain(url, o, sizes.step_jobs, TenSteps).await?;
    let times = Arc::new(Mutex::new(None));
    fill(monitor, IN_ROW, 1).await?;
    let t = times.clone();
    drain(url, o, 1, |d| InARow(d, sizes.in_a_row.max(1), t)).await?;
    let (checkpoint_ms, step_ms) = times
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .ok_or_else(|| Error::Other("bench: the in-a-row job did not report its times".into()))?;
    let step_jobs_per_s = sizes.step_jobs as f64 / steps_secs;
    let plain_jobs_per_s = plain_jobs as f64 / plain_secs;
    Ok(StepsRun {
        step_jobs_per_s,
        plain_jobs_per_s,
        step_job_to_ten_plain: plain_jobs_per_s / (STEPS_PER_JOB as f64 * step_jobs_per_s),
        checkpoint_ms,
        step_ms,
    })
}
