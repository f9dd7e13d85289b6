//! `skiplock-devtools bench --apalis` (feature `apalis-bench`): the same drain of pre-inserted jobs
//! through one apalis worker, once on [`skiplock_apalis::SkiplockStorage`] and once on
//! apalis-postgres's `PostgresStorage`, in the same run, on the same server, with the same
//! handler, concurrency and pool size. Each figure is jobs/s from the worker's start to its
//! exit after the last job (every ack written); runs alternate between the two backends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use apalis::prelude::{Data, TaskSink, WorkerBuilder, WorkerBuilderExt, WorkerContext};
use serde::{Deserialize, Serialize};

use super::{BenchDb, Stat, fill_kind, reset, store};
use skiplock::Pool as PgPool;
use skiplock::error::{Error, Result};

/// The kind (and apalis-postgres queue) of the benchmark's jobs.
pub const KIND: &str = "bench-apalis";

/// The benchmark's job arguments (what both backends store and decode).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchJob {
    /// Sequence number.
    pub n: u64,
}

/// What `--apalis` measures.
#[derive(Debug, Clone)]
pub struct ApalisOptions {
    /// Jobs per drain.
    pub jobs: usize,
    /// apalis worker concurrency (and SkiplockStorage's claim slots).
    pub concurrency: usize,
    /// Pool connections of each backend.
    pub connections: u32,
    /// Drains per backend (median reported).
    pub runs: usize,
}

/// The comparison's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ApalisReport {
    /// Jobs per drain.
    pub jobs: usize,
    /// Worker concurrency.
    pub concurrency: usize,
    /// Pool connections.
    pub connections: u32,
    /// Runs per backend.
    pub runs: usize,
    /// jobs/s through apalis on SkiplockStorage.
    pub skiplock: Stat,
    /// jobs/s through apalis on apalis-postgres.
    pub apalis_postgres: Stat,
    /// skiplock / apalis-postgres, per run.
    pub ratio: Stat,
}

/// Counts handled jobs and stops the worker after the last.
#[derive(Clone)]
struct Done {
    count: Arc<AtomicUsize>,
    of: usize,
}

async fn handle(_job: BenchJob, done: Data<Done>, worker: WorkerContext) {
    if done.count.fetch_add(1, Ordering::SeqCst) + 1 == done.of {
        let _ = worker.stop();
    }
}

fn worker_error(e: impl std::fmt::Display) -> Error {
    Error::Other(format!("bench --apalis: the apalis worker failed: {e}"))
}

async fn skiplock_drain(url: &str, monitor: &PgPool, o: &ApalisOptions) -> Result<f64> {
    reset(monitor).await?;
    fill_kind(monitor, KIND, o.jobs, |n| {
        skiplock_apalis::encode_args(&BenchJob { n: n as u64 })
    })
    .await?;
    store::vacuum_jobs(monitor).await?;
    let pool = store::pool(url, o.connections).await?;
    let storage = skiplock_apalis::SkiplockStorage::<BenchJob>::new(pool.clone(), KIND)
        .concurrency(o.concurrency);
    let done = Done {
        count: Arc::new(AtomicUsize::new(0)),
        of: o.jobs,
    };
    let started = Instant::now();
    WorkerBuilder::new("bench-skiplock")
        .backend(storage)
        .concurrency(o.concurrency)
        .data(done.clone())
        .build(handle)
        .run()
        .await
        .map_err(worker_error)?;
    let secs = started.elapsed().as_secs_f64();
    pool.close().await;
    check_done(&done)?;
    Ok(o.jobs as f64 / secs)
}

async fn apalis_postgres_drain(url: &str, o: &ApalisOptions, run: usize) -> Result<f64> {
    use apalis_postgres::{Config, PostgresStorage};
    let pool = store::pool(url, o.connections).await?;
    PostgresStorage::setup(&pool)
        .await
        .map_err(|e| Error::Other(format!("bench --apalis: apalis-postgres setup: {e}")))?;
    // A queue of its own per run, so earlier runs' finished rows are the only difference.
    let config = Config::default().queue(format!("{KIND}-{run}"));
    let mut storage = PostgresStorage::<BenchJob>::new(&pool).with_config(config);
    let mut left = o.jobs;
    let mut n = 0u64;
    while left > 0 {
        let k = left.min(1000);
        let batch = (n..n + k as u64).map(|n| BenchJob { n }).collect();
        storage
            .push_bulk(batch)
            .await
            .map_err(|e| Error::Other(format!("bench --apalis: apalis-postgres push: {e}")))?;
        n += k as u64;
        left -= k;
    }
    let done = Done {
        count: Arc::new(AtomicUsize::new(0)),
        of: o.jobs,
    };
    let started = Instant::now();
    WorkerBuilder::new("bench-apalis-postgres")
        .backend(storage)
        .concurrency(o.concurrency)
        .data(done.clone())
        .build(handle)
        .run()
        .await
        .map_err(worker_error)?;
    let secs = started.elapsed().as_secs_f64();
    pool.close().await;
    check_done(&done)?;
    Ok(o.jobs as f64 / secs)
}

fn check_done(done: &Done) -> Result<()> {
    let n = done.count.load(Ordering::SeqCst);
    if n != done.of {
        return Err(Error::Other(format!(
            "bench --apalis: the worker stopped after {n} of {} jobs",
            done.of
        )));
    }
    Ok(())
}

/// Runs the comparison on a fresh database on the server of `server_url`.
pub async fn run(
    server_url: &str,
    o: &ApalisOptions,
    progress: impl Fn(&str),
) -> Result<ApalisReport> {
    let db = BenchDb::create(server_url).await?;
    let r = run_in(&db, o, &progress).await;
    db.drop_db().await;
    r
}

async fn run_in(db: &BenchDb, o: &ApalisOptions, progress: &impl Fn(&str)) -> Result<ApalisReport> {
    let monitor = store::monitor(&db.url).await?;
    skiplock::store::schema::migrate_parts(&monitor, &skiplock_workflows::schemas()).await?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for run in 0..o.runs.max(1) {
        progress(&format!(
            "apalis on SkiplockStorage: {} jobs, run {}/{}",
            o.jobs,
            run + 1,
            o.runs
        ));
        ours.push(skiplock_drain(&db.url, &monitor, o).await?);
        progress(&format!(
            "apalis on apalis-postgres: {} jobs, run {}/{}",
            o.jobs,
            run + 1,
            o.runs
        ));
        theirs.push(apalis_postgres_drain(&db.url, o, run).await?);
    }
    monitor.close().await;
    let ratios: Vec<f64> = ours.iter().zip(&theirs).map(|(a, b)| a / b).collect();
    Ok(ApalisReport {
        jobs: o.jobs,
        concurrency: o.concurrency,
        connections: o.connections,
        runs: o.runs.max(1),
        skiplock: Stat::of(&ours),
        apalis_postgres: Stat::of(&theirs),
        ratio: Stat::of(&ratios),
    })
}

/// The report as a small table.
pub fn render(r: &ApalisReport) -> String {
    let row = |name: &str, s: &Stat| {
        format!(
            "{name:<34} {:>9.0} jobs/s  ({:.0}–{:.0})\n",
            s.median, s.min, s.max
        )
    };
    let mut out = format!(
        "apalis drain: {} jobs, concurrency {}, {} connections, median of {} run(s)\n",
        r.jobs, r.concurrency, r.connections, r.runs
    );
    out.push_str(&row("apalis on SkiplockStorage", &r.skiplock));
    out.push_str(&row("apalis on apalis-postgres", &r.apalis_postgres));
    out.push_str(&format!(
        "{:<34} {:>9.2}×       ({:.2}–{:.2})\n",
        "SkiplockStorage / apalis-postgres", r.ratio.median, r.ratio.min, r.ratio.max
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_both_backends_and_the_ratio() {
        let r = ApalisReport {
            jobs: 20000,
            concurrency: 10,
            connections: 10,
            runs: 1,
            skiplock: Stat::of(&[3000.0]),
            apalis_postgres: Stat::of(&[1000.0]),
            ratio: Stat::of(&[3.0]),
        };
        let t = render(&r);
        assert!(t.contains("20000 jobs, concurrency 10"), "{t}");
        assert!(
            t.contains("apalis on SkiplockStorage") && t.contains("3000 jobs/s"),
            "{t}"
        );
        assert!(
            t.contains("apalis on apalis-postgres") && t.contains("1000 jobs/s"),
            "{t}"
        );
        assert!(t.contains("3.00×"), "{t}");
    }
}
