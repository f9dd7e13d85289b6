//! skiplock's drains: one worker in this process (the headline), and several
//! `skiplock worker --exit-when-idle` processes on one queue.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use skiplock::Pool as PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::meter::{Meter, cpu_now, idle_pct};
use super::{BenchOptions, DrainRun, store, worker_settings};
use skiplock::error::{Error, Result};
use skiplock::worker::{Handler, HandlerResult, JobContext, Outcome, Worker};

/// How many `skiplock worker` processes the multi-process drain starts.
pub const PROCESSES: usize = 3;

/// Counts completions so the drain knows when every handler has run.
struct CountingNoop(Arc<AtomicUsize>, Arc<Notify>, usize);
impl Handler for CountingNoop {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "noop"
    }
    async fn run(&self, _ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        if self.0.fetch_add(1, Ordering::Relaxed) + 1 >= self.2 {
            self.1.notify_one();
        }
        Ok(Outcome::Complete)
    }
}

/// Drains the `n` due noop jobs already in the table with one worker in this process: jobs/s
/// from the worker's start until every ack is written, with the window's cost.
pub(crate) async fn in_process(
    url: &str,
    o: &BenchOptions,
    n: usize,
    meter: &Meter<'_>,
) -> Result<DrainRun> {
    in_process_beside(url, o, n, meter, async { Ok(()) }).await
}

/// [`in_process`], with `beside` run from the worker's start alongside it (what makes the
/// jobs due, in a drain where they are not all due at the start: the release ceiling,
/// src/bench/flows.rs).
pub(crate) async fn in_process_beside(
    url: &str,
    o: &BenchOptions,
    n: usize,
    meter: &Meter<'_>,
    beside: impl std::future::Future<Output = Result<()>>,
) -> Result<DrainRun> {
    let mark = meter.begin().await?;
    let p = store::pool(url, o.connections).await?;
    let done = Arc::new(AtomicUsize::new(0));
    let all_ran = Arc::new(Notify::new());
    // The worker under measurement runs only the benchmark's jobs (no maintenance).
    let worker = Worker::builder(p.clone())
        .settings(worker_settings(o))
        .without_maintenance()
        .register(CountingNoop(done.clone(), all_ran.clone(), n))
        .build();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let cpu0 = cpu_now();
    let started = Instant::now();
    let mut handle =
        tokio::spawn(async move { worker.run(async move { s.cancelled().await }).await });
    let ran = async {
        all_ran.notified().await;
        Ok(())
    };
    // A worker that stops before every job ran ends the drain with its error, rather than
    // leaving the bench waiting for handlers that will never run.
    let outcome = tokio::select! {
        r = async { tokio::try_join!(ran, beside) } => r.map(|_| ()),
        w = &mut handle => Err(match w {
            Ok(Err(e)) => Error::Other(format!("bench: the worker stopped during the drain: {e}")),
            Ok(Ok(())) => Error::Other("bench: the worker stopped before the drain ended".into()),
            Err(e) => Error::Other(format!("bench: the worker's task failed: {e}")),
        }),
    };
    if let Err(e) = outcome {
        stop.cancel();
        if !handle.is_finished() {
            let _ = handle.await;
        }
        return Err(e);
    }
    // Every handler ran; wait until every ack is written too.
    let mut polls = 0u64;
    loop {
        polls += 1;
        if store::count_running(&p).await? == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu1 = cpu_now();
    stop.cancel();
    handle.await.map_err(|e| Error::Other(e.to_string()))??;
    p.close().await;
    let usage = meter.end(mark, n, polls).await?;
    Ok(DrainRun {
        jobs_per_s: n as f64 / secs,
        usage,
        idle_pct: idle_pct(cpu0, cpu1),
    })
}

/// Drains the `n` due noop jobs already in the table with [`PROCESSES`] processes of
/// `worker_bin worker --exit-when-idle`, each with the in-process drain's concurrency and pool
/// size. jobs/s from just before the first process starts to the last ack, both on the
/// database's clock (so the processes' idle exit does not count); no idle figure, since the
/// processes' exit is not the drain's end.
pub(crate) async fn processes(
    url: &str,
    o: &BenchOptions,
    n: usize,
    worker_bin: &Path,
    monitor: &PgPool,
    meter: &Meter<'_>,
) -> Result<DrainRun> {
    let mark = meter.begin().await?;
    let t0 = store::clock(monitor).await?;
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        let child = tokio::process::Command::new(worker_bin)
            .args(["worker", "--exit-when-idle", "--queues"])
            .arg(format!("default={}", o.concurrency))
            .env("DATABASE_URL", url)
            .env("SKIPLOCK_MAX_CONNECTIONS", o.connections.to_string())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                Error::Other(format!(
                    "bench: cannot start {} worker: {e}",
                    worker_bin.display()
                ))
            })?;
        children.push(child);
    }
    // Generous: a drain that takes longer is broken, not slow.
    let limit = Duration::from_secs(600) + Duration::from_millis(n as u64 * 10);
    let deadline = Instant::now() + limit;
    for c in &mut children {
        let left = deadline.saturating_duration_since(Instant::now());
        let status = tokio::time::timeout(left, c.wait()).await.map_err(|_| {
            Error::Other(format!(
                "bench: the {PROCESSES}-process drain did not finish within {}s",
                limit.as_secs()
            ))
        })??;
        if !status.success() {
            return Err(Error::Other(format!(
                "bench: a `skiplock worker` of the {PROCESSES}-process drain exited with {status}"
            )));
        }
    }
    // + 1: the clock reading above is a commit of the monitor inside the window.
    let usage = meter.end(mark, n, 1).await?;
    let (completed, last) = store::drain_end(monitor).await?;
    let last = match last {
        Some(t) if completed as usize == n => t,
        _ => {
            return Err(Error::Other(format!(
                "bench: the {PROCESSES}-process drain completed {completed} of {n} jobs"
            )));
        }
    };
    Ok(DrainRun {
        jobs_per_s: n as f64 / (last - t0).max(1e-6),
        usage,
        idle_pct: None,
    })
}

/// The concurrency of the one-process CLI drain with `--queues` (as a user sets it for short
/// jobs; the in-process drain's is `--concurrency`).
pub const CLI_CONCURRENCY: usize = 100;

/// How a one-process CLI drain runs `skiplock worker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    /// `--queues default=100` ([`CLI_CONCURRENCY`]; maintenance on).
    Queue,
    /// No flags: every queue at the default concurrency, found by queue discovery.
    NoFlags,
}

/// One `skiplock worker --exit-when-idle` process, as users run it (maintenance on), drains
/// the `n` due noop jobs: jobs/s from just before the process starts to its last ack, and the
/// time from that start to its first claim (ms), both on the database's clock. `env`: settings
/// of the process besides `DATABASE_URL` (the drain through PgBouncer's).
pub(crate) async fn cli(
    url: &str,
    n: usize,
    how: Cli,
    worker_bin: &Path,
    monitor: &PgPool,
    env: &[(&str, &str)],
) -> Result<(f64, f64)> {
    let t0 = store::clock(monitor).await?;
    let mut cmd = tokio::process::Command::new(worker_bin);
    cmd.args(["worker", "--exit-when-idle"]);
    if how == Cli::Queue {
        cmd.arg("--queues")
            .arg(format!("default={CLI_CONCURRENCY}"));
    }
    let mut child = cmd
        .env("DATABASE_URL", url)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            Error::Other(format!(
                "bench: cannot start {} worker: {e}",
                worker_bin.display()
            ))
        })?;
    let limit = Duration::from_secs(600) + Duration::from_millis(n as u64 * 10);
    let status = tokio::time::timeout(limit, child.wait())
        .await
        .map_err(|_| {
            Error::Other(format!(
                "bench: the one-process CLI drain did not finish within {}s",
                limit.as_secs()
            ))
        })??;
    if !status.success() {
        return Err(Error::Other(format!(
            "bench: the `skiplock worker` of the CLI drain exited with {status}"
        )));
    }
    let (completed, last) = store::drain_end(monitor).await?;
    let first = store::first_claim(monitor).await?;
    match (last, first) {
        (Some(last), Some(first)) if completed as usize == n => Ok((
            n as f64 / (last - t0).max(1e-6),
            (first - t0).max(0.0) * 1000.0,
        )),
        _ => Err(Error::Other(format!(
            "bench: the CLI drain completed {completed} of {n} jobs"
        ))),
    }
}
