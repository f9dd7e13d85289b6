//! The baselines skiplock's drain is compared with, in the same run on the same server: the
//! plain-SQL ceiling and Graphile Worker (the harness in `scripts/graphile/drain.js`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Deserialize;
use skiplock::Pool as PgPool;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::ChildStdout;

use super::meter::{Meter, cpu_now, idle_pct};
use super::{BenchOptions, DrainRun, store};
use skiplock::error::{Error, Result};

/// Graphile Worker's settings in the comparison (the "batched" row): 10 concurrent
/// jobs, a local queue of 500 claimed ahead, completions batched with no added delay.
pub const GRAPHILE_CONCURRENCY: usize = 10;
/// See [`GRAPHILE_CONCURRENCY`].
pub const GRAPHILE_LOCAL_QUEUE: usize = 500;

/// How the plain-SQL loop writes a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ceiling {
    /// Claimed and completed in one statement and one commit (each job written once): the
    /// most Postgres can do, the target's baseline.
    OneCommit,
    /// Claimed as `running` in one commit, then completed, fenced on the attempt, in a second
    /// (each job written twice, as a queue that shows running jobs and rescues them must):
    /// where that design's own limit lies, in the same run.
    TwoCommits,
}

/// jobs/s of the plain-SQL claim-and-complete loop over `o.jobs` rows with `o.connections`
/// connections, with the window's cost. The table is made and filled before the window.
pub(crate) async fn ceiling(
    url: &str,
    o: &BenchOptions,
    monitor: &PgPool,
    meter: &Meter<'_>,
    how: Ceiling,
) -> Result<DrainRun> {
    store::ceiling_table(monitor).await?;
    store::ceiling_fill(monitor, o.jobs).await?;
    store::ceiling_vacuum(monitor).await?;
    let mark = meter.begin().await?;
    let p = store::pool(url, o.connections).await?;
    let cpu0 = cpu_now();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..o.connections {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            loop {
                let n = match how {
                    Ceiling::OneCommit => store::ceiling_step(&p).await?,
                    Ceiling::TwoCommits => {
                        let (ids, attempts): (Vec<i64>, Vec<i32>) =
                            store::ceiling_claim(&p).await?.into_iter().unzip();
                        if ids.is_empty() {
                            0
                        } else {
                            store::ceiling_complete(&p, &ids, &attempts).await?
                        }
                    }
                };
                if n == 0 {
                    break;
                }
                done += n;
            }
            Ok::<_, Error>(done)
        }));
    }
    let mut total = 0u64;
    for t in tasks {
        total += t.await.map_err(|e| Error::Other(e.to_string()))??;
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu1 = cpu_now();
    p.close().await;
    let usage = meter.end(mark, total as usize, 0).await?;
    store::ceiling_drop(monitor).await?;
    Ok(DrainRun {
        jobs_per_s: total as f64 / secs,
        usage,
        idle_pct: idle_pct(cpu0, cpu1),
    })
}

/// Where the Graphile harness lives and what runs it.
#[derive(Debug, Clone)]
pub struct Graphile {
    /// `node` (or a path to it).
    pub node: String,
    /// The folder with `drain.js`, `package.json` and the installed `node_modules`.
    pub dir: PathBuf,
}

impl Graphile {
    /// A clear error now rather than after minutes of other measurements.
    pub fn check(&self) -> Result<()> {
        let script = self.dir.join("drain.js");
        if !script.is_file() {
            return Err(Error::Invalid(format!(
                "bench: no Graphile harness at {} (run from the project root, pass \
                 --graphile-dir, or --skip-graphile)",
                script.display()
            )));
        }
        if !self
            .dir
            .join("node_modules")
            .join("graphile-worker")
            .is_dir()
        {
            return Err(Error::Invalid(format!(
                "bench: graphile-worker is not installed in {}: run `npm ci --prefix {}` \
                 (scripts/bench does), or pass --skip-graphile",
                self.dir.display(),
                self.dir.display()
            )));
        }
        let runs = std::process::Command::new(&self.node)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !runs {
            return Err(Error::Invalid(format!(
                "bench: `{} --version` does not run: the Graphile drain needs Node.js 20 \
                 (pass --node PATH, or --skip-graphile)",
                self.node
            )));
        }
        Ok(())
    }
}

/// The harness's first line: set up and waiting for "go".
#[derive(Debug, Deserialize)]
struct Ready {
    ready: bool,
    graphile_worker: Option<String>,
}

/// The harness's last line.
#[derive(Debug, Deserialize)]
struct Drained {
    jobs: usize,
    jobs_per_s: f64,
    polls: u64,
}

/// How long the harness may take to install its schema and insert its jobs, and to drain.
fn harness_limit(n: usize) -> Duration {
    Duration::from_secs(600) + Duration::from_millis(n as u64 * 10)
}

async fn next_json<T: for<'de> Deserialize<'de>>(
    lines: &mut Lines<BufReader<ChildStdout>>,
    what: &str,
    limit: Duration,
) -> Result<T> {
    let line = tokio::time::timeout(limit, lines.next_line())
        .await
        .map_err(|_| {
            Error::Other(format!(
                "bench: the Graphile harness sent no {what} within {}s",
                limit.as_secs()
            ))
        })??
        .ok_or_else(|| {
            Error::Other(format!(
                "bench: the Graphile harness exited before its {what} (its error is above)"
            ))
        })?;
    serde_json::from_str(&line).map_err(|e| {
        Error::Other(format!(
            "bench: the Graphile harness's {what} is not what was expected ({e}): {line:.200}"
        ))
    })
}

/// Graphile Worker drains `n` pre-inserted no-op jobs in the benchmark's database (its own
/// schema `graphile_worker`): jobs/s as the harness timed it (worker start to the last
/// completion written), with the window's cost. Also returns graphile-worker's version.
pub(crate) async fn graphile(
    url: &str,
    n: usize,
    g: &Graphile,
    meter: &Meter<'_>,
) -> Result<(DrainRun, Option<String>)> {
    let script: &Path = &g.dir.join("drain.js");
    let mut child = tokio::process::Command::new(&g.node)
        .arg(script)
        .args(["--jobs", &n.to_string()])
        .args(["--concurrency", &GRAPHILE_CONCURRENCY.to_string()])
        .args(["--local-queue", &GRAPHILE_LOCAL_QUEUE.to_string()])
        .env("DATABASE_URL", url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            Error::Other(format!(
                "bench: cannot start `{}` for the Graphile drain (Node.js 20 is needed; or pass \
                 --skip-graphile): {e}",
                g.node
            ))
        })?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(Error::Other(
            "bench: the Graphile harness has no pipes".into(),
        ));
    };
    let mut lines = BufReader::new(stdout).lines();
    let limit = harness_limit(n);
    let ready: Ready = next_json(&mut lines, "ready line", limit).await?;
    if !ready.ready {
        return Err(Error::Other(
            "bench: the Graphile harness is not ready".into(),
        ));
    }
    let mark = meter.begin().await?;
    let cpu0 = cpu_now();
    stdin.write_all(b"go\n").await?;
    stdin.flush().await?;
    let d: Drained = next_json(&mut lines, "result", limit).await?;
    let cpu1 = cpu_now();
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .map_err(|_| Error::Other("bench: the Graphile harness did not exit".into()))??;
    if !status.success() {
        return Err(Error::Other(format!(
            "bench: the Graphile harness exited with {status}"
        )));
    }
    if d.jobs != n {
        return Err(Error::Other(format!(
            "bench: the Graphile harness drained {} jobs, not {n}",
            d.jobs
        )));
    }
    // The harness's "all deleted yet" polls are commits in the database: taken out.
    let usage = meter.end(mark, n, d.polls).await?;
    Ok((
        DrainRun {
            jobs_per_s: d.jobs_per_s,
            usage,
            idle_pct: idle_pct(cpu0, cpu1),
        },
        ready.graphile_worker,
    ))
}
