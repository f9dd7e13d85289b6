//! awa as a peer in `skiplock-devtools bench` (docs/performance.md): the same no-op drain, on the same
//! database server, in the same run. A project of its own (not part of skiplock's build):
//! `scripts/bench` builds it on first use, as it runs `npm ci` for the Graphile harness.
//!
//!   DATABASE_URL=postgres://... skiplock-bench-awa --jobs 50000 [--max-workers 1024]
//!        [--claim-batch 512] [--deadline-ms 0] [--batch 1000] [--no-wait]
//!
//! 1. runs awa's migrations in the database of DATABASE_URL and installs awa's queue storage
//!    (its default engine since 0.6: schema `awa`, default slot counts), emptied;
//! 2. pre-inserts --jobs no-op jobs with `QueueStorage::enqueue_params_copy` in batches of
//!    --batch (awa's documented bulk path for queue storage: COPY straight into its ready
//!    partitions), then VACUUM ANALYZE of its schema's tables (not timed);
//! 3. closes its setup connections, prints {"ready":true,"jobs":N,"awa":"<version>"} and waits
//!    for one line on stdin (so the caller can take its "before" readings with nothing of
//!    ours connected); --no-wait skips the wait;
//! 4. runs an awa `Client` on one queue with `max_workers` --max-workers, `claim_batch_size`
//!    --claim-batch and `deadline_duration` --deadline-ms (0, awa's own throughput benchmark's
//!    setting, takes its compact claim path: one receipt row per claim batch rather than one
//!    per job; its default is 5 minutes) and a no-op handler, until every handler returned and
//!    awa's exact queue counts show every job terminal (its completions are batched, so
//!    "done" is the durable count, not the handler's return);
//! 5. prints {"jobs", "seconds", "jobs_per_s", "polls"} on one line and exits 0.
//!
//! `seconds` runs from the client's start (as skiplock's drain, from its worker's start) to
//! the last completion written. `polls` is the number of "all terminal yet" queries, each
//! one committed transaction in the bench database, so the caller can take them out of its
//! commit count. Everything on stdout is JSON lines; errors go to stderr with a non-zero exit.

use std::io::BufRead;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use awa::{Client, InsertOpts, JobArgs, JobResult, QueueConfig, QueueStorage, QueueStorageConfig};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;

/// The queue the jobs go to.
const QUEUE: &str = "bench";

#[derive(Debug, Serialize, Deserialize, JobArgs)]
struct Noop {}

#[derive(Debug)]
struct Options {
    url: String,
    jobs: usize,
    max_workers: u32,
    claim_batch: usize,
    deadline_ms: u64,
    batch: usize,
    wait: bool,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut o = Options {
        url: std::env::var("DATABASE_URL").unwrap_or_default(),
        jobs: 50_000,
        // awa's configuration guide: "The 10k/s offered-rate reference shape needs 1,024
        // in-flight worker permits"; its claim batch default is 512.
        max_workers: 1024,
        claim_batch: 512,
        deadline_ms: 0,
        batch: 1000,
        wait: true,
    };
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let v = args.next().ok_or_else(|| format!("{name} needs a value"))?;
            match v.parse::<u64>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(format!("{name} must be a positive integer, got {v}")),
            }
        };
        match a.as_str() {
            "--jobs" => o.jobs = value("--jobs")? as usize,
            "--max-workers" => {
                o.max_workers = u32::try_from(value("--max-workers")?)
                    .map_err(|_| "--max-workers is too large".to_string())?
            }
            "--claim-batch" => o.claim_batch = value("--claim-batch")? as usize,
            "--deadline-ms" => {
                let v = args.next().ok_or("--deadline-ms needs a value")?;
                o.deadline_ms = v
                    .parse()
                    .map_err(|_| format!("--deadline-ms must be a whole number, got {v}"))?;
            }
            "--batch" => o.batch = value("--batch")? as usize,
            "--no-wait" => o.wait = false,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.url.is_empty() {
        return Err("no database: set DATABASE_URL".into());
    }
    Ok(o)
}

/// awa's version, from this program's own lock file (the version that was built).
fn awa_version() -> Option<String> {
    let lock: toml::Table = include_str!("../Cargo.lock").parse().ok()?;
    lock.get("package")?
        .as_array()?
        .iter()
        .find(|p| p.get("name").and_then(|n| n.as_str()) == Some("awa"))?
        .get("version")?
        .as_str()
        .map(str::to_string)
}

fn say(v: serde_json::Value) {
    println!("{v}");
}

async fn prepare(o: &Options, store: &QueueStorage) -> Result<(), Box<dyn std::error::Error>> {
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&o.url)
        .await?;
    awa::migrations::run(&pool).await?;
    store.install(&pool).await?;
    store.reset(&pool).await?;
    let mut left = o.jobs;
    while left > 0 {
        let k = left.min(o.batch);
        let params = (0..k)
            .map(|_| {
                awa::model::insert::params_with(
                    &Noop {},
                    InsertOpts {
                        queue: QUEUE.into(),
                        ..Default::default()
                    },
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        store.enqueue_params_copy(&pool, &params).await?;
        left -= k;
    }
    // The same start for every system of the bench: statistics fresh, nothing to vacuum.
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables \
         WHERE schemaname = $1",
    )
    .bind(store.schema())
    .fetch_all(&pool)
    .await?;
    for t in tables {
        sqlx::query(&format!("VACUUM ANALYZE {t}"))
            .execute(&pool)
            .await?;
    }
    pool.close().await;
    Ok(())
}

async fn drain(
    o: &Options,
    store: &QueueStorage,
    config: QueueStorageConfig,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    // The worker pool: sized as awa's own throughput benchmark sizes it.
    let pool = PgPoolOptions::new()
        .max_connections(20)
        .connect(&o.url)
        .await?;
    let ran = Arc::new(AtomicUsize::new(0));
    let all_ran = Arc::new(tokio::sync::Notify::new());
    let (counter, notify, n) = (ran.clone(), all_ran.clone(), o.jobs);
    let started = Instant::now();
    let client = Client::builder(pool.clone())
        .queue(
            QUEUE,
            QueueConfig {
                max_workers: o.max_workers,
                claim_batch_size: o.claim_batch,
                deadline_duration: Duration::from_millis(o.deadline_ms),
                ..QueueConfig::default()
            },
        )
        // awa's defaults (1 s rotation of the queue and lease rings), said out loud.
        .queue_storage(config, Duration::from_secs(1), Duration::from_secs(1))
        .register::<Noop, _, _>(move |_args, _ctx| {
            let (counter, notify) = (counter.clone(), notify.clone());
            async move {
                if counter.fetch_add(1, Ordering::Relaxed) + 1 == n {
                    notify.notify_one();
                }
                Ok(JobResult::Completed)
            }
        })
        .build()?;
    client.start().await?;
    all_ran.notified().await;
    // Every handler returned; wait until every completion is written.
    let mut polls = 0u64;
    loop {
        polls += 1;
        let c = store.queue_counts(&pool, QUEUE).await?;
        if c.terminal as usize >= o.jobs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    client.shutdown(Duration::from_secs(10)).await;
    pool.close().await;
    let done = ran.load(Ordering::Relaxed);
    Ok(serde_json::json!({
        "jobs": done,
        "seconds": seconds,
        "jobs_per_s": done as f64 / seconds,
        "polls": polls,
    }))
}

async fn main_inner() -> Result<(), Box<dyn std::error::Error>> {
    let o = parse_args(std::env::args().skip(1))?;
    let config = QueueStorageConfig::default();
    let store = QueueStorage::new(config.clone())?;
    prepare(&o, &store).await?;
    say(serde_json::json!({ "ready": true, "jobs": o.jobs, "awa": awa_version() }));
    if o.wait {
        let mut line = String::new();
        if std::io::stdin().lock().read_line(&mut line)? == 0 {
            return Err("stdin closed before the go line".into());
        }
    }
    say(drain(&o, &store, config).await?);
    Ok(())
}

#[tokio::main]
async fn main() {
    if let Err(e) = main_inner().await {
        eprintln!("awa drain: {e}");
        std::process::exit(1);
    }
}
