//! The baselines skiplock's drain is compared with, in the same run on the same server: the
//! plain-SQL ceiling and Graphile Worker (the harness in `scripts/graphile/drain.js`; awa's is
//! in `awa.rs`, the contract of both in `harness.rs`).

use std::path::PathBuf;
use std::time::Instant;

use skiplock::Pool as PgPool;

use super::meter::{Meter, cpu_now, idle_pct};
use super::{BenchOptions, DrainRun, store};
use skiplock::error::{Error, Result};

/// Graphile Worker's settings in the comparison (the "batched" row), those of its
/// performance page's fastest run: 24 concurrent jobs (a pool of 25 connections), a local
/// queue of 500 claimed ahead, completions and failures batched with no added delay.
pub const GRAPHILE_CONCURRENCY: usize = 24;
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
                "bench: `{} --version` does not run: the Graphile drain needs Node.js \
                 (pass --node PATH, or --skip-graphile)",
                self.node
            )));
        }
        Ok(())
    }
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
    let mut cmd = tokio::process::Command::new(&g.node);
    cmd.arg(g.dir.join("drain.js"))
        .args(["--jobs", &n.to_string()])
        .args(["--concurrency", &GRAPHILE_CONCURRENCY.to_string()])
        .args(["--local-queue", &GRAPHILE_LOCAL_QUEUE.to_string()]);
    super::harness::drain(cmd, "Graphile", "graphile_worker", url, n, meter).await
}
