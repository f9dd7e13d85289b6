//! Enqueue rates (single calls from concurrent clients, and `enqueue_many`) and the
//! enqueue-to-start latency into an idle worker.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::stats::percentile;
use super::{BenchOptions, store, worker_settings};
use skiplock::error::{Error, Result};
use skiplock::queue::NewJob;
use skiplock::worker::{Handler, HandlerResult, JobContext, Outcome, Worker};
use skiplock::{ManyJobs, enqueue_job as enqueue, enqueue_many};

/// Single calls per client at most (fewer with a small `--jobs`).
const SINGLE_PER_CLIENT: usize = 2_000;

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

/// How many single calls each of `clients` clients makes for a run of `jobs` jobs.
pub fn single_per_client(jobs: usize, clients: usize) -> usize {
    (jobs / clients.max(1)).clamp(1, SINGLE_PER_CLIENT)
}

/// What an enqueue run writes through: skiplock's API, or the baseline beside it (plain
/// INSERTs into the ceiling's table, which has skiplock.jobs' columns and indexes but no
/// trigger and no checks: what this server's table takes, measured in the same run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Through {
    /// `skiplock.enqueue` / `skiplock.enqueue_many`.
    Api,
    /// Plain INSERTs into `public.ceiling_jobs` (the caller creates and drops it).
    PlainInsert,
}

/// jobs/s of single enqueues, `o.enqueue_clients` clients at once, each with its own
/// connection.
pub(crate) async fn single(url: &str, o: &BenchOptions, through: Through) -> Result<f64> {
    let clients = o.enqueue_clients.max(1);
    let p = store::pool(url, clients as u32).await?;
    let per_client = single_per_client(o.jobs, clients);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_client {
                let args = json!({"i": i});
                match through {
                    Through::Api => {
                        enqueue(&p, &NewJob::new("noop", args).queue("bench")).await?;
                    }
                    Through::PlainInsert => {
                        store::plain_insert(&p, "noop", &args, "bench").await?;
                    }
                }
            }
            Ok::<_, Error>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| Error::Other(e.to_string()))??;
    }
    let rate = (per_client * clients) as f64 / started.elapsed().as_secs_f64();
    p.close().await;
    Ok(rate)
}

/// Jobs waiting in the bench queue while the admission phase measures: the count a limited
/// queue's enqueue used to make grew with them (docs/operations.md, "Admission control").
pub const ADMISSION_BACKLOG: usize = 10_000;

/// The limit the admission phase sets: far above the backlog and all the phase's enqueues, so
/// it never binds and what is measured is the check alone.
pub const ADMISSION_LIMIT: i32 = 1_000_000;

/// The admission phase's backlog for a run of `jobs` jobs: [`ADMISSION_BACKLOG`], fewer for a
/// smoke run.
pub fn admission_backlog(jobs: usize) -> usize {
    ADMISSION_BACKLOG.min(jobs.max(1))
}

/// Whether a limit of `limit` leaves room for a backlog of `backlog` and `clients` clients'
/// `per_client` single enqueues each: a limit that bound would measure refusals, not the check.
pub fn limit_never_binds(limit: i32, backlog: usize, clients: usize, per_client: usize) -> bool {
    let total = clients
        .checked_mul(per_client)
        .and_then(|n| n.checked_add(backlog));
    matches!((usize::try_from(limit), total), (Ok(l), Some(t)) if t <= l)
}

/// jobs/s of the single enqueues of [`single`] into the bench queue with
/// [`admission_backlog`] jobs already waiting in it, with a limit of `limit` on it (None: no
/// limit), as the owner sets it through `monitor`. The caller empties the queue before.
pub(crate) async fn single_with_backlog(
    url: &str,
    monitor: &skiplock::Pool,
    o: &BenchOptions,
    limit: Option<i32>,
) -> Result<f64> {
    let backlog = admission_backlog(o.jobs);
    let clients = o.enqueue_clients.max(1);
    if let Some(l) = limit
        && !limit_never_binds(l, backlog, clients, single_per_client(o.jobs, clients))
    {
        return Err(Error::Other(format!(
            "admission phase: a limit of {l} would bind ({backlog} waiting, --jobs {})",
            o.jobs
        )));
    }
    store::admission_backlog(monitor, i32::try_from(backlog).unwrap_or(i32::MAX)).await?;
    store::analyze_jobs(monitor).await?;
    store::admission_limit(monitor, limit).await?;
    let rate = single(url, o, Through::Api).await;
    store::admission_limit(monitor, None).await?;
    rate
}

/// jobs/s of batches of 1,000 over `o.connections` connections.
pub(crate) async fn many(url: &str, o: &BenchOptions, through: Through) -> Result<f64> {
    let p = store::pool(url, o.connections).await?;
    let batches = (o.jobs / 1000).max(1);
    let args: Vec<serde_json::Value> = (0..1000).map(|i| json!({"i": i})).collect();
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..o.connections {
        let (p, args, next) = (p.clone(), args.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < batches {
                let jobs = ManyJobs {
                    limit_key: None,
                    kind: "noop",
                    args: &args,
                    queue: "bench",
                    run_at: None,
                    priority: 0,
                    ..Default::default()
                };
                match through {
                    Through::Api => enqueue_many(&p, jobs).await?,
                    Through::PlainInsert => {
                        store::plain_insert_many(&p, jobs.kind, jobs.args, jobs.queue).await?
                    }
                };
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
pub(crate) async fn latency(url: &str, o: &BenchOptions) -> Result<(f64, f64)> {
    let p = store::pool(url, o.connections).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let worker = Worker::builder(p.clone())
        .settings(worker_settings(o))
        .without_maintenance()
        .register(StartSignal(tx))
        .build();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let handle = tokio::spawn(async move { worker.run(async move { s.cancelled().await }).await });
    // Let the worker settle (LISTEN established, first empty claim done).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut ids = Vec::new();
    for _ in 0..o.latency_jobs {
        let id = enqueue(&p, &NewJob::new("noop", json!({}))).await?.id;
        ids.push(id);
        // Wait for this one to start before the next (an idle pool each time).
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .map_err(|_| Error::Other("latency run: a job did not start within 10 s".into()))?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    handle.await.map_err(|e| Error::Other(e.to_string()))??;
    let mut ms = store::latency_ms(&p, &ids).await?;
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    p.close().await;
    Ok((percentile(&ms, 50.0), percentile(&ms, 99.0)))
}

/// (p50, p99) in ms of the same measure with nothing of skiplock in it, the same number of
/// times at the same spacing: a plain one-row INSERT with a NOTIFY in one committed statement,
/// a listener on its own connection, and one statement sent as the notification arrives. It
/// is the floor of enqueue-to-start on this machine and server (a commit, a notification, a
/// wake-up, one round trip), measured in the run beside skiplock's figure.
pub(crate) async fn latency_floor(url: &str, o: &BenchOptions) -> Result<(f64, f64)> {
    // Three connections: the listener's and the two held below.
    let p = store::pool(url, 3).await?;
    store::ceiling_table(&p).await?;
    let mut listener = store::floor_listener(&p).await?;
    // Held for the whole run: no pool check-out (and its ping) between the steps.
    let mut enq = p.acquire().await?;
    let mut start = p.acquire().await?;
    let mut ms = Vec::with_capacity(o.latency_jobs);
    for _ in 0..o.latency_jobs {
        let sent = store::floor_enqueue(&mut enq).await?;
        tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .map_err(|_| Error::Other("latency floor: no notification within 10 s".into()))??;
        ms.push(store::floor_start(&mut start).await? - sent);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop((enq, start, listener));
    store::ceiling_drop(&p).await?;
    p.close().await;
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    Ok((percentile(&ms, 50.0), percentile(&ms, 99.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_calls_scale_down_for_smoke_runs() {
        assert_eq!(single_per_client(50_000, 8), 2_000);
        assert_eq!(single_per_client(2_000, 8), 250);
        assert_eq!(single_per_client(3, 8), 1);
        assert_eq!(single_per_client(100, 0), 100);
    }

    #[test]
    fn the_admission_limit_never_binds_in_a_full_or_smoke_run() {
        for (jobs, clients) in [(50_000, 8), (2_000, 8), (3, 1), (1_000_000, 64)] {
            assert!(
                limit_never_binds(
                    ADMISSION_LIMIT,
                    admission_backlog(jobs),
                    clients,
                    single_per_client(jobs, clients)
                ),
                "{jobs} jobs, {clients} clients"
            );
        }
        assert_eq!(admission_backlog(50_000), 10_000);
        assert_eq!(admission_backlog(2_000), 2_000);
        assert_eq!(admission_backlog(0), 1);
        assert!(!limit_never_binds(10, 5, 2, 3));
        assert!(limit_never_binds(11, 5, 2, 3));
        assert!(!limit_never_binds(-1, 0, 0, 0));
        assert!(!limit_never_binds(i32::MAX, usize::MAX, 2, 1));
    }
}
