//! `skiplock bench`: throughput and latency of the queue, measured against what plain SQL
//! achieves on the same server in the same run (the ceiling). Each figure is the median of
//! several runs, with min and max. The benchmark creates and drops its own database.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::config::QueueSettings;
use crate::error::{Error, Result};
use crate::queue::NewJob;
use crate::store::bench as sql;
use crate::store::jobs::{ManyJobs, enqueue, enqueue_many};
use crate::store::{Pool, schema};
use crate::worker::{HandlerResult, JobContext, Outcome, Worker, handler::Handler};

/// What to measure and how much.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Runs per figure (median reported).
    pub runs: usize,
    /// Jobs in each drain.
    pub jobs: usize,
    /// Worker concurrency (slots of the one queue) during drains.
    pub concurrency: usize,
    /// Connections of the worker's pool, and of the enqueue and ceiling loops.
    pub connections: u32,
    /// Finished rows of ballast in the scale run.
    pub scale_finished: usize,
    /// Future-scheduled rows of ballast in the scale run.
    pub scale_future: usize,
    /// Jobs in the latency run.
    pub latency_jobs: usize,
    /// Skip the (slow) scale run.
    pub skip_scale: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            runs: 3,
            jobs: 50_000,
            concurrency: 200,
            connections: 8,
            scale_finished: 1_000_000,
            scale_future: 100_000,
            latency_jobs: 200,
            skip_scale: false,
        }
    }
}

/// Median, min and max of one figure.
#[derive(Debug, Clone, Serialize)]
pub struct Stat {
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Stat {
    /// Summarises samples.
    pub fn of(samples: &[f64]) -> Stat {
        let mut s = samples.to_vec();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let median = if s.is_empty() {
            0.0
        } else if s.len() % 2 == 1 {
            s[s.len() / 2]
        } else {
            (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
        };
        Stat {
            median,
            min: s.first().copied().unwrap_or(0.0),
            max: s.last().copied().unwrap_or(0.0),
        }
    }
}

/// The percentile `p` (0–100) of sorted samples, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Everything one `skiplock bench` run measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Options used.
    pub settings: BTreeMap<String, String>,
    /// Postgres version and the settings that matter for throughput.
    pub postgres: BTreeMap<String, String>,
    /// jobs/s of single `skiplock.enqueue` calls from `connections` connections.
    pub enqueue_single: Stat,
    /// jobs/s of `skiplock.enqueue_many` in batches of 1,000.
    pub enqueue_many: Stat,
    /// jobs/s draining `jobs` noop jobs.
    pub drain: Stat,
    /// Enqueue-to-start latency, ms: p50.
    pub latency_p50_ms: Stat,
    /// Enqueue-to-start latency, ms: p99.
    pub latency_p99_ms: Stat,
    /// jobs/s draining with the ballast in the table (absent with --skip-scale).
    pub drain_scaled: Option<Stat>,
    /// drain_scaled / drain.
    pub scale_ratio: Option<f64>,
    /// jobs/s of the plain-SQL claim-and-complete loop.
    pub ceiling: Stat,
    /// drain / ceiling: the headline.
    pub drain_to_ceiling: f64,
}

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

/// Reports each start to the latency run.
struct StartSignal(mpsc::UnboundedSender<i64>);
impl Handler for StartSignal {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "noop"
    }
    async fn run(&self, ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        let _ = self.0.send(ctx.id);
        Ok(Outcome::Complete)
    }
}

/// A database of its own for the benchmark, dropped at the end.
struct BenchDb {
    admin: Pool,
    name: String,
    url: String,
}

impl BenchDb {
    async fn create(server_url: &str) -> Result<BenchDb> {
        let admin = crate::db::connect(server_url, 2).await?;
        let name = format!("skiplock_bench_{:08x}", rand::random::<u32>());
        sql::create_database(&admin, &name).await?;
        let mut u = url::Url::parse(server_url)
            .map_err(|e| Error::config("DATABASE_URL", e.to_string()))?;
        u.set_path(&format!("/{name}"));
        Ok(BenchDb {
            admin,
            name,
            url: u.to_string(),
        })
    }

    async fn drop_db(&self) {
        let _ = sql::drop_database(&self.admin, &self.name).await;
    }
}

async fn pool(url: &str, n: u32) -> Result<Pool> {
    crate::db::pool(url, n, Duration::from_secs(30)).await
}

async fn reset(pool: &Pool) -> Result<()> {
    sql::truncate_jobs(pool).await?;
    sql::vacuum_jobs(pool).await
}

/// `args` noop jobs in queue `queue`, due now.
fn noops<'a>(args: &'a [serde_json::Value], queue: &'a str) -> ManyJobs<'a> {
    ManyJobs {
        kind: "noop",
        args,
        queue,
        run_at: None,
        priority: 0,
    }
}

async fn fill_noop(pool: &Pool, n: usize) -> Result<()> {
    let batch: Vec<serde_json::Value> = (0..1000).map(|_| json!({})).collect();
    let mut left = n;
    while left > 0 {
        let k = left.min(1000);
        enqueue_many(pool, noops(&batch[..k], crate::store::names::DEFAULT_QUEUE)).await?;
        left -= k;
    }
    sql::analyze_jobs(pool).await?;
    Ok(())
}

/// The worker's settings: the environment's (so `SKIPLOCK_FETCH_COOLDOWN` and friends can be
/// tuned), with the benchmark's queue, concurrency and pool size.
fn worker_settings(o: &BenchOptions) -> QueueSettings {
    let env = QueueSettings::from_env().unwrap_or_default();
    QueueSettings {
        queues: Some(BTreeMap::from([("default".to_string(), o.concurrency)])),
        max_connections: o.connections,
        ..env
    }
}

/// jobs/s of a drain of the `n` due noop jobs already in the table.
async fn drain(url: &str, o: &BenchOptions, n: usize) -> Result<f64> {
    let p = pool(url, o.connections).await?;
    let done = Arc::new(AtomicUsize::new(0));
    let all_ran = Arc::new(Notify::new());
    let worker = Worker::builder(p.clone(), worker_settings(o))
        .register(CountingNoop(done.clone(), all_ran.clone(), n))
        .build();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let started = Instant::now();
    let handle = tokio::spawn(async move { worker.run(async move { s.cancelled().await }).await });
    all_ran.notified().await;
    // Every handler ran; wait until every ack is written too.
    loop {
        // Every handler ran, so only acks are outstanding.
        let left = sql::running_count(&p).await?;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    stop.cancel();
    handle.await.map_err(|e| Error::Other(e.to_string()))??;
    p.close().await;
    Ok(n as f64 / secs)
}

async fn enqueue_single(url: &str, o: &BenchOptions) -> Result<f64> {
    let p = pool(url, o.connections).await?;
    let per_conn = 2_000usize;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..o.connections {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_conn {
                enqueue(&p, &NewJob::new("noop", json!({"i": i})).queue("bench")).await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| Error::Other(e.to_string()))??;
    }
    let rate = (per_conn * o.connections as usize) as f64 / started.elapsed().as_secs_f64();
    p.close().await;
    Ok(rate)
}

async fn enqueue_batched(url: &str, o: &BenchOptions) -> Result<f64> {
    let p = pool(url, o.connections).await?;
    let batches = (o.jobs / 1000).max(1);
    let args: Vec<serde_json::Value> = (0..1000).map(|i| json!({"i": i})).collect();
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..o.connections {
        let (p, args, next) = (p.clone(), args.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < batches {
                enqueue_many(&p, noops(&args, "bench")).await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| Error::Other(e.to_string()))??;
    }
    let rate = (batches * 1000) as f64 / started.elapsed().as_secs_f64();
    p.close().await;
    Ok(rate)
}

/// (p50, p99) in ms of enqueue-to-start, one job at a time into an idle pool.
async fn latency(url: &str, o: &BenchOptions) -> Result<(f64, f64)> {
    let p = pool(url, o.connections).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let worker = Worker::builder(p.clone(), worker_settings(o))
        .register(StartSignal(tx))
        .build();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let handle = tokio::spawn(async move { worker.run(async move { s.cancelled().await }).await });
    // Let the worker settle (LISTEN established, first empty claim done).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut ids = Vec::new();
    for _ in 0..o.latency_jobs {
        let id = enqueue(&p, &NewJob::new("noop", json!({}))).await?;
        ids.push(id);
        // Wait for this one to start before the next (an idle pool each time).
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .map_err(|_| Error::Other("latency run: a job did not start within 10 s".into()))?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    handle.await.map_err(|e| Error::Other(e.to_string()))??;
    let mut ms = sql::latency_ms(&p, &ids).await?;
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    p.close().await;
    Ok((percentile(&ms, 50.0), percentile(&ms, 99.0)))
}

/// jobs/s of the plain-SQL loop over `n` rows with `connections` connections.
async fn ceiling(url: &str, o: &BenchOptions) -> Result<f64> {
    let p = pool(url, o.connections).await?;
    sql::ceiling_table(&p).await?;
    sql::ceiling_fill(&p, o.jobs as i64).await?;
    sql::vacuum_ceiling(&p).await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..o.connections {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            loop {
                let n = sql::ceiling_step(&p).await?;
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
    let rate = total as f64 / started.elapsed().as_secs_f64();
    sql::drop_ceiling(&p).await?;
    p.close().await;
    Ok(rate)
}

async fn postgres_facts(p: &Pool) -> Result<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for name in [
        "server_version",
        "shared_buffers",
        "synchronous_commit",
        "fsync",
        "wal_level",
        "max_connections",
    ] {
        let v = sql::setting(p, name).await?;
        m.insert(name.to_string(), v);
    }
    Ok(m)
}

/// Runs every measurement on a fresh database on the server of `server_url`; `progress` is
/// told what runs.
pub async fn run(
    server_url: &str,
    o: &BenchOptions,
    progress: impl Fn(&str),
) -> Result<BenchReport> {
    let db = BenchDb::create(server_url).await?;
    let r = run_in(&db.url, o, &progress).await;
    db.drop_db().await;
    r
}

async fn run_in(url: &str, o: &BenchOptions, progress: &impl Fn(&str)) -> Result<BenchReport> {
    let p = pool(url, 2).await?;
    schema::migrate(&p).await?;
    let postgres = postgres_facts(&p).await?;
    let (mut single, mut many, mut drains, mut p50, mut p99, mut scaled, mut ceil) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for run in 1..=o.runs {
        progress(&format!("run {run}/{}: enqueue", o.runs));
        reset(&p).await?;
        single.push(enqueue_single(url, o).await?);
        reset(&p).await?;
        many.push(enqueue_batched(url, o).await?);

        progress(&format!("run {run}/{}: drain {} jobs", o.runs, o.jobs));
        reset(&p).await?;
        fill_noop(&p, o.jobs).await?;
        drains.push(drain(url, o, o.jobs).await?);

        progress(&format!("run {run}/{}: latency", o.runs));
        reset(&p).await?;
        let (a, b) = latency(url, o).await?;
        p50.push(a);
        p99.push(b);

        progress(&format!("run {run}/{}: ceiling", o.runs));
        reset(&p).await?;
        ceil.push(ceiling(url, o).await?);
    }
    if !o.skip_scale {
        reset(&p).await?;
        progress(&format!(
            "scale: inserting {} finished and {} future rows",
            o.scale_finished, o.scale_future
        ));
        sql::scale_fill(&p, o.scale_finished as i64).await?;
        sql::scale_future(&p, o.scale_future as i64).await?;
        sql::vacuum_jobs(&p).await?;
        for run in 1..=o.runs {
            progress(&format!(
                "scale run {run}/{}: drain {} jobs",
                o.runs, o.jobs
            ));
            fill_noop(&p, o.jobs).await?;
            scaled.push(drain(url, o, o.jobs).await?);
            // Keep the ballast at its size: this run's rows become ballast for the next.
            sql::trim_completed(&p, o.jobs as i64).await?;
            sql::vacuum_jobs(&p).await?;
        }
    }
    p.close().await;
    let drain = Stat::of(&drains);
    let ceiling = Stat::of(&ceil);
    let drain_scaled = (!scaled.is_empty()).then(|| Stat::of(&scaled));
    let scale_ratio = drain_scaled.as_ref().map(|s| s.median / drain.median);
    let mut settings = BTreeMap::from([
        ("runs".to_string(), o.runs.to_string()),
        ("jobs".to_string(), o.jobs.to_string()),
        ("concurrency".to_string(), o.concurrency.to_string()),
        ("connections".to_string(), o.connections.to_string()),
        ("latency_jobs".to_string(), o.latency_jobs.to_string()),
        (
            "fetch_cooldown".to_string(),
            humantime::format_duration(worker_settings(o).fetch_cooldown).to_string(),
        ),
        (
            "ack_delay".to_string(),
            humantime::format_duration(worker_settings(o).ack_delay).to_string(),
        ),
    ]);
    if !o.skip_scale {
        settings.insert("scale_finished".to_string(), o.scale_finished.to_string());
        settings.insert("scale_future".to_string(), o.scale_future.to_string());
    }
    Ok(BenchReport {
        settings,
        postgres,
        enqueue_single: Stat::of(&single),
        enqueue_many: Stat::of(&many),
        drain_to_ceiling: drain.median / ceiling.median,
        drain,
        latency_p50_ms: Stat::of(&p50),
        latency_p99_ms: Stat::of(&p99),
        drain_scaled,
        scale_ratio,
        ceiling,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_max() {
        let s = Stat::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Stat::of(&[1.0, 2.0, 3.0, 4.0]).median, 2.5);
        assert_eq!(Stat::of(&[]).median, 0.0);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 100.0);
        assert_eq!(percentile(&v, 99.0), 198.0);
        assert_eq!(percentile(&v, 100.0), 200.0);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
