//! `skiplock-devtools bench`: throughput, cost and latency of the queue, measured against baselines
//! run in the same run on the same server: what plain SQL achieves (the ceiling) and the peers
//! at their newest releases, Graphile Worker and awa. Each figure is the median of several
//! runs, with min and max; the targets are checked at the end ([`targets::TARGETS`]). The
//! benchmark creates and drops its own database.
//!
//! Files: `drain.rs` (skiplock's drains), `peers.rs` (ceiling, Graphile), `awa.rs`,
//! `harness.rs` (the contract with a peer's drain program), `steps.rs` (durable steps' cost),
//! `enqueue.rs`
//! (enqueue rates, latency), `meter.rs` (idle %, WAL and commits per job), `pgbouncer.rs` (the
//! PgBouncer of the drain through it), `store.rs` (every SQL statement), `stats.rs` and
//! `targets.rs` (pure).

// This tool's statements live in this crate's `sql/` (`sql!`, the core's src/sql_text.rs), and it runs
// them on its own connections: it is not part of the library.

#[cfg(feature = "apalis-bench")]
pub mod apalis;
pub mod awa;
pub mod command;
pub mod drain;
pub mod enqueue;
pub mod flows;
pub mod harness;
pub mod limits;
pub mod meter;
pub mod peers;
pub mod pgbouncer;
pub mod pressure;
pub mod stats;
pub mod steps;
pub mod store;
use enqueue::Through;
pub mod targets;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::json;
use skiplock::Pool as PgPool;

pub use awa::Awa;
pub use meter::Usage;
pub use peers::Graphile;
use skiplock::config::QueueSettings;
use skiplock::error::{Error, Result};
use skiplock::{ManyJobs, enqueue_many};
pub use stats::Stat;
pub use targets::TargetResult;

/// What to measure and how much.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Runs per figure (median reported).
    pub runs: usize,
    /// Jobs in each drain.
    pub jobs: usize,
    /// Worker concurrency (slots of the one queue) during drains, per process.
    pub concurrency: usize,
    /// Connections of the worker's pool (per process), and of the enqueue_many and ceiling loops.
    pub connections: u32,
    /// Concurrent clients of the single-call enqueue run (its target is for 8).
    pub enqueue_clients: usize,
    /// Finished rows of ballast in the scale run.
    pub scale_finished: usize,
    /// Future-scheduled rows of ballast in the scale run.
    pub scale_future: usize,
    /// Jobs in the latency run.
    pub latency_jobs: usize,
    /// The `skiplock` binary for the multi-process drain (the CLI passes its own).
    pub worker_bin: Option<PathBuf>,
    /// The Graphile harness.
    pub graphile: Graphile,
    /// The awa harness.
    pub awa: Awa,
    /// Skip the enqueue rates.
    pub skip_enqueue: bool,
    /// Skip the multi-process drain.
    pub skip_processes: bool,
    /// Skip the latency run.
    pub skip_latency: bool,
    /// Skip the plain-SQL ceiling.
    pub skip_ceiling: bool,
    /// Skip the Graphile Worker drain.
    pub skip_graphile: bool,
    /// Skip the awa drain.
    pub skip_awa: bool,
    /// Skip the (slow) scale run.
    pub skip_scale: bool,
    /// Skip the drains under limits and the polite crawl.
    pub skip_limits: bool,
    /// The `pgbouncer` binary for the drain through it; None skips that drain.
    pub pgbouncer: Option<PathBuf>,
    /// The in-process worker's settings besides queue, concurrency and pool size (`skiplock
    /// bench`: the environment's).
    pub worker: QueueSettings,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            runs: 3,
            jobs: 50_000,
            concurrency: 200,
            connections: 10,
            enqueue_clients: 8,
            scale_finished: 1_000_000,
            scale_future: 100_000,
            latency_jobs: 200,
            worker_bin: None,
            graphile: Graphile {
                node: "node".into(),
                dir: PathBuf::from("scripts/graphile"),
            },
            awa: Awa {
                bin: PathBuf::from("scripts/awa/target/release/skiplock-bench-awa"),
            },
            skip_enqueue: false,
            skip_processes: false,
            skip_latency: false,
            skip_ceiling: false,
            skip_graphile: false,
            skip_awa: false,
            skip_scale: false,
            skip_limits: false,
            pgbouncer: None,
            worker: QueueSettings::default(),
        }
    }
}

/// One drain's measurements.
#[derive(Debug, Clone, Copy)]
pub struct DrainRun {
    /// Throughput.
    pub jobs_per_s: f64,
    /// WAL and commits per job.
    pub usage: Usage,
    /// Machine idle %, where measured.
    pub idle_pct: Option<f64>,
}

/// One drain's figures over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct DrainFigures {
    /// jobs/s.
    pub jobs_per_s: Stat,
    /// WAL bytes per job (server-wide WAL over the drain's window).
    pub wal_bytes_per_job: Stat,
    /// Commits in the benchmark's database per 1,000 jobs (Postgres 15+).
    pub commits_per_1000: Option<Stat>,
    /// Machine idle % during the drain (Linux; not for the multi-process drain).
    pub idle_pct: Option<Stat>,
    /// The server's CPU per job in µs (a server on this machine).
    pub server_us_per_job: Option<Stat>,
    /// The benchmark's process and its waited-for children, CPU per job in µs.
    pub client_us_per_job: Option<Stat>,
}

impl DrainFigures {
    fn of(runs: &[DrainRun]) -> Option<DrainFigures> {
        let col = |f: &dyn Fn(&DrainRun) -> Option<f64>| -> Option<Stat> {
            let v: Option<Vec<f64>> = runs.iter().map(f).collect();
            v.and_then(|v| Stat::of_some(&v))
        };
        Some(DrainFigures {
            jobs_per_s: col(&|r| Some(r.jobs_per_s))?,
            wal_bytes_per_job: col(&|r| Some(r.usage.wal_bytes_per_job))?,
            commits_per_1000: col(&|r| r.usage.commits_per_1000),
            idle_pct: col(&|r| r.idle_pct),
            server_us_per_job: col(&|r| r.usage.server_us_per_job),
            client_us_per_job: col(&|r| r.usage.client_us_per_job),
        })
    }
}

/// Everything one `skiplock-devtools bench` run measured. Parts skipped by a flag are None.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Options used.
    pub settings: BTreeMap<String, String>,
    /// Postgres version and the settings that matter for throughput.
    pub postgres: BTreeMap<String, String>,
    /// jobs/s of single `skiplock.enqueue` calls from `enqueue_clients` clients.
    pub enqueue_single: Option<Stat>,
    /// jobs/s of `skiplock.enqueue_many` in batches of 1,000.
    pub enqueue_many: Option<Stat>,
    /// The same single calls as plain one-row INSERTs into a table shaped like
    /// skiplock.jobs (no trigger, no checks): what this server's table takes.
    pub enqueue_single_plain: Option<Stat>,
    /// The same batches as plain `INSERT … SELECT unnest` into that table.
    pub enqueue_many_plain: Option<Stat>,
    /// enqueue_single / its plain baseline, per run.
    pub enqueue_single_to_plain: Option<Stat>,
    /// enqueue_many / its plain baseline, per run.
    pub enqueue_many_to_plain: Option<Stat>,
    /// jobs/s of the same single calls with [`enqueue::admission_backlog`] jobs waiting in
    /// the queue and no limit on it.
    pub enqueue_single_backlog: Option<Stat>,
    /// The same with an admission limit of [`enqueue::ADMISSION_LIMIT`] on the queue, far from
    /// binding (docs/operations.md, "Admission control").
    pub enqueue_single_admission: Option<Stat>,
    /// enqueue_single_admission / enqueue_single_backlog, per run: what the check costs.
    pub admission_to_single: Option<Stat>,
    /// Draining `jobs` noop jobs with one worker in this process: the headline.
    pub drain: DrainFigures,
    /// The same with [`drain::PROCESSES`] `skiplock worker` processes on one queue.
    pub drain_processes: Option<DrainFigures>,
    /// Enqueue-to-start latency, ms: p50.
    pub latency_p50_ms: Option<Stat>,
    /// Enqueue-to-start latency, ms: p99.
    pub latency_p99_ms: Option<Stat>,
    /// The same measure with nothing of skiplock in it (a plain INSERT with a NOTIFY, a
    /// listener, one statement), same spacing, same run: this machine's floor, ms: p50.
    pub latency_floor_p50_ms: Option<Stat>,
    /// The floor's p99, ms.
    pub latency_floor_p99_ms: Option<Stat>,
    /// latency p50 / floor p50, per run.
    pub latency_p50_to_floor: Option<Stat>,
    /// jobs/s draining with the ballast in the table.
    pub drain_scaled: Option<Stat>,
    /// drain_scaled / drain (medians).
    pub scale_ratio: Option<f64>,
    /// The plain-SQL claim-and-complete loop.
    pub ceiling: Option<DrainFigures>,
    /// The same loop writing each job twice, claim and completion in two commits
    /// ([`peers::Ceiling::TwoCommits`]): the limit of any queue that keeps running jobs visible.
    pub ceiling_two_commits: Option<DrainFigures>,
    /// Graphile Worker, batched.
    pub graphile: Option<DrainFigures>,
    /// awa, with its documented settings ([`awa::AWA_MAX_WORKERS`]).
    pub awa: Option<DrainFigures>,
    /// drain / ceiling, per run (same run, same server).
    pub drain_to_ceiling: Option<Stat>,
    /// drain / the two-commit ceiling, per run.
    pub drain_to_ceiling_two_commits: Option<Stat>,
    /// The two-commit ceiling / the ceiling, per run: what writing each job twice costs plain
    /// SQL, the bound it puts on drain / ceiling.
    pub ceiling_two_commits_to_ceiling: Option<Stat>,
    /// drain / graphile, per run.
    pub drain_to_graphile: Option<Stat>,
    /// WAL per job, drain / graphile, per run.
    pub wal_to_graphile: Option<Stat>,
    /// drain / awa, per run.
    pub drain_to_awa: Option<Stat>,
    /// WAL per job, drain / awa, per run.
    pub wal_to_awa: Option<Stat>,
    /// The server's CPU time per job, drain / ceiling, per run: how much more work each job
    /// is for Postgres than the ceiling's (no target; it bounds drain / ceiling from above
    /// when the server's cores are what runs out).
    pub server_cpu_to_ceiling: Option<Stat>,
    /// multi-process drain / drain, per run.
    pub processes_to_drain: Option<Stat>,
    /// jobs/s of one `skiplock worker --exit-when-idle --queues default=100` process, as users
    /// run it (maintenance on), from just before its start to its last ack.
    pub drain_cli: Option<Stat>,
    /// The same with no flags (every queue, the default concurrency).
    pub drain_cli_default: Option<Stat>,
    /// ms from that process's start to its first claim (`--queues default=100`).
    pub first_claim_ms: Option<Stat>,
    /// drain_cli / graphile, per run.
    pub cli_to_graphile: Option<Stat>,
    /// drain_cli / awa, per run.
    pub cli_to_awa: Option<Stat>,
    /// drain_cli_default / drain_cli, per run.
    pub cli_default_to_cli: Option<Stat>,
    /// jobs/s of the same process as `drain_cli` through PgBouncer in transaction mode
    /// (`SKIPLOCK_POOL_MODE=transaction`, LISTEN on the server itself).
    pub drain_cli_pgbouncer: Option<Stat>,
    /// drain_cli_pgbouncer / drain_cli, per run.
    pub pgbouncer_to_cli: Option<Stat>,
    /// The drain with a per-key rate that never binds ([`limits::KEYS`] keys).
    pub drain_key_rate: Option<DrainFigures>,
    /// The drain with a queue concurrency limit that never binds.
    pub drain_queue_limit: Option<DrainFigures>,
    /// drain_key_rate / drain, per run.
    pub key_rate_to_drain: Option<Stat>,
    /// drain_queue_limit / drain, per run.
    pub queue_limit_to_drain: Option<Stat>,
    /// The drain of a fair queue ([`limits::KEYS`] keys, round-robin).
    pub drain_fair: Option<DrainFigures>,
    /// drain_fair / drain, per run.
    pub fair_to_drain: Option<Stat>,
    /// The drain of a fan-out and fan-in of [`flows::FLOW_JOBS`] jobs.
    pub drain_flow: Option<DrainFigures>,
    /// The plain drain of [`flows::FLOW_JOBS`] jobs, the flow's baseline.
    pub drain_flow_plain: Option<DrainFigures>,
    /// drain_flow / drain_flow_plain, per run.
    pub flow_to_drain: Option<Stat>,
    /// The release ceiling: the same jobs released by plain UPDATEs, with no edge or count
    /// ([`flows::release_ceiling`]).
    pub drain_flow_ceiling: Option<DrainFigures>,
    /// drain_flow_ceiling / drain_flow_plain, per run: the most a flow that writes each
    /// released job once reaches.
    pub flow_ceiling_to_drain: Option<Stat>,
    /// drain_flow / drain_flow_ceiling, per run: how much of that the flow reaches.
    pub flow_to_ceiling: Option<Stat>,
    /// The flow's fan-out alone ([`flows::Shape::OutOnly`]) / drain_flow_plain, per run.
    pub fan_out_to_drain: Option<Stat>,
    /// The flow's fan-in alone ([`flows::Shape::InOnly`]) / drain_flow_plain, per run.
    pub fan_in_to_drain: Option<Stat>,
    /// Jobs/s of a drain of [`steps::STEP_JOBS`] jobs of [`steps::STEPS_PER_JOB`] recorded
    /// steps each (docs/steps.md, "Cost").
    pub step_jobs_per_s: Option<Stat>,
    /// Jobs/s of the plain drain beside it, ten times as many jobs.
    pub step_plain_jobs_per_s: Option<Stat>,
    /// The time of one job of ten recorded steps / the time of ten plain jobs, per run.
    pub step_job_to_ten_plain: Option<Stat>,
    /// ms per checkpoint, [`steps::IN_A_ROW`] of them one after another in one handler.
    pub checkpoint_ms: Option<Stat>,
    /// ms per recorded step (a closure that does nothing), one after another.
    pub step_ms: Option<Stat>,
    /// Pages/s of the polite crawl ([`limits::CRAWL_HOSTS`] × [`limits::CRAWL_PAGES`]).
    pub crawl_pages_per_s: Option<Stat>,
    /// crawl pages/s / the ideal ([`limits::crawl_ideal`]), per run.
    pub crawl_to_ideal: Option<Stat>,
    /// The medians the targets are checked on, by target key.
    pub figures: BTreeMap<String, f64>,
    /// The targets, checked.
    pub targets: Vec<TargetResult>,
}

/// A database of its own for the benchmark, dropped at the end.
struct BenchDb {
    admin: PgPool,
    name: String,
    url: String,
}

impl BenchDb {
    async fn create(server_url: &str) -> Result<BenchDb> {
        let admin = skiplock::db::connect(server_url, 2).await?;
        let name = format!("skiplock_bench_{:08x}", rand::random::<u32>());
        store::create_database(&admin, &name).await?;
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
        let _ = store::drop_database(&self.admin, &self.name).await;
    }
}

async fn reset(monitor: &PgPool) -> Result<()> {
    store::truncate_jobs(monitor).await?;
    store::vacuum_jobs(monitor).await
}

async fn fill_noop(monitor: &PgPool, n: usize) -> Result<()> {
    fill(monitor, "noop", n).await?;
    store::analyze_jobs(monitor).await
}

/// Enqueues `n` due jobs of `kind` with empty args in the default queue, 1,000 a statement.
async fn fill(monitor: &PgPool, kind: &str, n: usize) -> Result<()> {
    let batch = vec![json!({}); n.min(1000)];
    let mut left = n;
    while left > 0 {
        let k = left.min(1000);
        enqueue_many(
            monitor,
            ManyJobs {
                kind,
                args: &batch[..k],
                queue: "default",
                ..Default::default()
            },
        )
        .await?;
        left -= k;
    }
    Ok(())
}

/// Inserts `n` jobs of `kind` in the default queue, the args of job `i` from `args(i)`.
#[cfg(feature = "apalis-bench")]
async fn fill_kind(
    monitor: &PgPool,
    kind: &str,
    n: usize,
    args: impl Fn(usize) -> Result<serde_json::Value>,
) -> Result<()> {
    let mut i = 0;
    while i < n {
        let k = (n - i).min(1000);
        let batch = (i..i + k).map(&args).collect::<Result<Vec<_>>>()?;
        enqueue_many(
            monitor,
            ManyJobs {
                kind,
                args: &batch,
                queue: "default",
                run_at: None,
                priority: 0,
                limit_key: None,
                ..Default::default()
            },
        )
        .await?;
        i += k;
    }
    store::analyze_jobs(monitor).await
}

/// The in-process worker's settings: [`BenchOptions::worker`] (`skiplock-devtools bench` passes the
/// environment's, so `SKIPLOCK_FETCH_COOLDOWN` and friends can be tuned), with the
/// benchmark's queue, concurrency and pool size.
pub(crate) fn worker_settings(o: &BenchOptions) -> QueueSettings {
    QueueSettings {
        queues: Some(BTreeMap::from([("default".to_string(), o.concurrency)])),
        max_connections: o.connections,
        ..o.worker.clone()
    }
}

/// The server's version and the settings that matter for the figures (a report prints them:
/// figures from a server with autovacuum off or fsync off describe a database nobody runs).
pub(crate) async fn postgres_facts(p: &PgPool) -> Result<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for name in [
        "server_version",
        "shared_buffers",
        "synchronous_commit",
        "fsync",
        "autovacuum",
        "wal_level",
        "max_connections",
    ] {
        m.insert(name.to_string(), store::setting(p, name).await?);
    }
    Ok(m)
}

/// The report's line of [`postgres_facts`].
pub fn postgres_heading(pg: &BTreeMap<String, String>) -> String {
    let get = |k: &str| pg.get(k).map(String::as_str).unwrap_or("?");
    format!(
        "postgres {} (autovacuum {}, shared_buffers {}, synchronous_commit {}, fsync {})",
        get("server_version"),
        get("autovacuum"),
        get("shared_buffers"),
        get("synchronous_commit"),
        get("fsync")
    )
}

/// Runs every measurement on a fresh database on the server of `server_url`; `progress` is
/// told what runs.
pub async fn run(
    server_url: &str,
    o: &BenchOptions,
    progress: impl Fn(&str),
) -> Result<BenchReport> {
    if !o.skip_graphile {
        o.graphile.check()?;
    }
    if !o.skip_awa {
        o.awa.check()?;
    }
    if !o.skip_processes && o.worker_bin.is_none() {
        return Err(Error::Invalid(
            "bench: the multi-process drain needs the skiplock binary (worker_bin)".into(),
        ));
    }
    let db = BenchDb::create(&same_transport(server_url)?).await?;
    let r = run_in(&db, o, &progress).await;
    db.drop_db().await;
    r
}

/// `server_url` with `sslmode=disable` unless it names an `sslmode`: every client of the bench
/// (skiplock, its worker processes, the ceiling, Graphile's node-pg, which uses no TLS unless
/// told) then talks to the server the same way, and TLS, which costs a local server more than
/// the work measured (docs/performance.md), is measured only when asked for.
pub fn same_transport(server_url: &str) -> Result<String> {
    let mut u = url::Url::parse(server_url).map_err(|e| {
        Error::config(
            "DATABASE_URL",
            skiplock::db::scrub(&e.to_string(), server_url),
        )
    })?;
    if !u.query_pairs().any(|(k, _)| k == "sslmode") {
        u.query_pairs_mut().append_pair("sslmode", "disable");
    }
    Ok(u.to_string())
}

/// Per-run ratio of a figure `f` of two drains, when both were measured (in every run).
fn ratios(a: &[DrainRun], b: &[DrainRun], f: impl Fn(&DrainRun) -> Option<f64>) -> Option<Stat> {
    let a: Vec<f64> = a.iter().map(&f).collect::<Option<_>>()?;
    let b: Vec<f64> = b.iter().map(&f).collect::<Option<_>>()?;
    per_run_ratio(&a, &b)
}

/// The medians the targets are checked on.
fn figures(r: &BenchReport) -> BTreeMap<String, f64> {
    let stats: [(&str, Option<&Stat>); 23] = [
        ("cli_to_graphile", r.cli_to_graphile.as_ref()),
        ("cli_to_awa", r.cli_to_awa.as_ref()),
        ("drain_to_awa", r.drain_to_awa.as_ref()),
        ("pgbouncer_to_cli", r.pgbouncer_to_cli.as_ref()),
        ("cli_default_to_cli", r.cli_default_to_cli.as_ref()),
        ("first_claim_ms", r.first_claim_ms.as_ref()),
        ("drain_to_graphile", r.drain_to_graphile.as_ref()),
        ("drain_to_ceiling", r.drain_to_ceiling.as_ref()),
        ("idle_pct", r.drain.idle_pct.as_ref()),
        ("wal_to_graphile", r.wal_to_graphile.as_ref()),
        ("enqueue_many", r.enqueue_many.as_ref()),
        ("enqueue_single", r.enqueue_single.as_ref()),
        ("latency_p50_ms", r.latency_p50_ms.as_ref()),
        ("latency_p99_ms", r.latency_p99_ms.as_ref()),
        (
            "enqueue_single_to_plain",
            r.enqueue_single_to_plain.as_ref(),
        ),
        ("enqueue_many_to_plain", r.enqueue_many_to_plain.as_ref()),
        ("admission_to_single", r.admission_to_single.as_ref()),
        ("latency_p50_to_floor", r.latency_p50_to_floor.as_ref()),
        ("key_rate_to_drain", r.key_rate_to_drain.as_ref()),
        ("queue_limit_to_drain", r.queue_limit_to_drain.as_ref()),
        ("fair_to_drain", r.fair_to_drain.as_ref()),
        ("flow_to_drain", r.flow_to_drain.as_ref()),
        ("crawl_to_ideal", r.crawl_to_ideal.as_ref()),
    ];
    let mut m: BTreeMap<String, f64> = stats
        .into_iter()
        .filter_map(|(k, s)| s.map(|s| (k.to_string(), s.median)))
        .collect();
    if let Some(v) = r.scale_ratio {
        m.insert("scale_ratio".to_string(), v);
    }
    m
}

/// a / b of each run, when both were measured in every run.
fn per_run_ratio(a: &[f64], b: &[f64]) -> Option<Stat> {
    let v: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
    // A baseline of 0 (a CPU figure rounded to no tick) gives no ratio, not an infinite one.
    (a.len() == b.len() && v.iter().all(|r| r.is_finite()))
        .then(|| Stat::of_some(&v))
        .flatten()
}

async fn run_in(db: &BenchDb, o: &BenchOptions, progress: &impl Fn(&str)) -> Result<BenchReport> {
    let url = db.url.as_str();
    let monitor = store::monitor(url).await?;
    skiplock::store::schema::migrate_parts(&monitor, &skiplock_workflows::schemas()).await?;
    let postgres = postgres_facts(&monitor).await?;
    let meter = meter::Meter {
        admin: &db.admin,
        monitor: &monitor,
        db: &db.name,
        flushes: store::server_version_num(&monitor).await? >= 150_000,
        server_pid: store::backend_pid(&monitor).await?,
    };
    let (mut single, mut many, mut p50, mut p99, mut scaled) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut floor50, mut floor99) = (vec![], vec![]);
    let (mut single_plain, mut many_plain) = (vec![], vec![]);
    let (mut single_backlog, mut single_admission) = (vec![], vec![]);
    let (mut drains, mut procs, mut ceil, mut graph) = (vec![], vec![], vec![], vec![]);
    let mut ceil2 = vec![];
    let (mut keyed, mut qlim, mut fair, mut crawls) = (vec![], vec![], vec![], vec![]);
    let (mut flow_plain, mut flow_fan, mut flow_ceiling) = (vec![], vec![], vec![]);
    let (mut fan_out, mut fan_in) = (vec![], vec![]);
    let mut steps_runs: Vec<steps::StepsRun> = vec![];
    let (mut cli, mut cli_default, mut cli_first) = (vec![], vec![], vec![]);
    let mut cli_pgbouncer = vec![];
    let mut graphile_version = None;
    let (mut awas, mut awa_version) = (vec![], None);
    for run in 1..=o.runs {
        let step = |what: &str| progress(&format!("run {run}/{}: {what}", o.runs));
        if !o.skip_enqueue {
            step("enqueue");
            reset(&monitor).await?;
            single.push(enqueue::single(url, o, Through::Api).await?);
            reset(&monitor).await?;
            many.push(enqueue::many(url, o, Through::Api).await?);
            step("enqueue baseline (plain INSERTs, same table shape)");
            store::ceiling_table(&monitor).await?;
            single_plain.push(enqueue::single(url, o, Through::PlainInsert).await?);
            // An empty table again, as the API's runs get one.
            store::ceiling_table(&monitor).await?;
            many_plain.push(enqueue::many(url, o, Through::PlainInsert).await?);
            store::ceiling_drop(&monitor).await?;
            step(&format!(
                "single enqueues, {} waiting, without and with an admission limit of {}",
                enqueue::admission_backlog(o.jobs),
                enqueue::ADMISSION_LIMIT
            ));
            reset(&monitor).await?;
            single_backlog.push(enqueue::single_with_backlog(url, &monitor, o, None).await?);
            reset(&monitor).await?;
            single_admission.push(
                enqueue::single_with_backlog(url, &monitor, o, Some(enqueue::ADMISSION_LIMIT))
                    .await?,
            );
        }

        step(&format!("drain {} jobs, 1 process", o.jobs));
        reset(&monitor).await?;
        fill_noop(&monitor, o.jobs).await?;
        drains.push(drain::in_process(url, o, o.jobs, &meter).await?);

        if let (false, Some(bin)) = (o.skip_processes, &o.worker_bin) {
            step(&format!(
                "drain {} jobs, {} processes",
                o.jobs,
                drain::PROCESSES
            ));
            reset(&monitor).await?;
            fill_noop(&monitor, o.jobs).await?;
            procs.push(drain::processes(url, o, o.jobs, bin, &monitor, &meter).await?);
        }

        if let (false, Some(bin)) = (o.skip_processes, &o.worker_bin) {
            for (how, what) in [
                (
                    drain::Cli::Queue,
                    format!("--queues default={}", drain::CLI_CONCURRENCY),
                ),
                (drain::Cli::NoFlags, "no flags".to_string()),
            ] {
                step(&format!(
                    "drain {} jobs, one `skiplock worker --exit-when-idle` ({what})",
                    o.jobs
                ));
                reset(&monitor).await?;
                fill_noop(&monitor, o.jobs).await?;
                let (rate, first_ms) = drain::cli(url, o.jobs, how, bin, &monitor, &[]).await?;
                match how {
                    drain::Cli::Queue => {
                        cli.push(rate);
                        cli_first.push(first_ms);
                    }
                    drain::Cli::NoFlags => cli_default.push(rate),
                }
            }
        }

        if let (Some(pgbouncer), Some(bin)) = (&o.pgbouncer, &o.worker_bin) {
            step(&format!(
                "drain {} jobs, one `skiplock worker` through PgBouncer in transaction mode",
                o.jobs
            ));
            reset(&monitor).await?;
            fill_noop(&monitor, o.jobs).await?;
            // A PgBouncer of this drain's own: stopped after it, its server connections go
            // with it (the next step waits for the database to have no other client).
            let bouncer = pgbouncer::Bouncer::in_front_of(pgbouncer, url).await?;
            let through = bouncer.url(url)?;
            let env = [
                ("SKIPLOCK_POOL_MODE", "transaction"),
                ("SKIPLOCK_LISTEN_URL", url),
            ];
            let (rate, _) =
                drain::cli(&through, o.jobs, drain::Cli::Queue, bin, &monitor, &env).await?;
            cli_pgbouncer.push(rate);
            drop(bouncer);
        }

        step(&format!(
            "drain {} jobs: plain, the flow, its release ceiling, its two halves",
            flows::FLOW_JOBS
        ));
        reset(&monitor).await?;
        flow_plain.push(flows::plain_drain(url, o, &monitor, &meter).await?);
        reset(&monitor).await?;
        flow_fan.push(flows::fan_drain(url, o, &monitor, &meter, flows::Shape::Whole).await?);
        reset(&monitor).await?;
        flow_ceiling.push(flows::release_ceiling(url, o, &monitor, &meter).await?);
        reset(&monitor).await?;
        fan_out.push(flows::fan_drain(url, o, &monitor, &meter, flows::Shape::OutOnly).await?);
        reset(&monitor).await?;
        fan_in.push(flows::fan_drain(url, o, &monitor, &meter, flows::Shape::InOnly).await?);

        step(&format!(
            "durable steps: {} jobs of {} steps against {} plain jobs; {} checkpoints in a row",
            steps::STEP_JOBS,
            steps::STEPS_PER_JOB,
            steps::STEP_JOBS * steps::STEPS_PER_JOB,
            steps::IN_A_ROW
        ));
        reset(&monitor).await?;
        steps_runs.push(steps::measure(url, o, &monitor, steps::Sizes::default()).await?);

        if !o.skip_limits {
            step(&format!(
                "drain {} jobs, per-key rate that never binds ({} keys)",
                o.jobs,
                limits::KEYS
            ));
            reset(&monitor).await?;
            keyed.push(limits::key_rate_drain(url, o, &monitor, &meter).await?);
            step(&format!(
                "drain {} jobs, queue concurrency limit that never binds",
                o.jobs
            ));
            reset(&monitor).await?;
            qlim.push(limits::queue_limit_drain(url, o, &monitor, &meter).await?);
            step(&format!(
                "drain {} jobs, fair queue ({} keys round-robin)",
                o.jobs,
                limits::KEYS
            ));
            reset(&monitor).await?;
            fair.push(limits::fair_drain(url, o, &monitor, &meter).await?);
            step(&format!(
                "crawl {} hosts × {} pages, politeness {} ms",
                limits::CRAWL_HOSTS,
                limits::CRAWL_PAGES,
                limits::CRAWL_POLITENESS.as_millis()
            ));
            reset(&monitor).await?;
            crawls.push(limits::crawl(url, o, &monitor).await?);
        }

        if !o.skip_latency {
            step("latency");
            reset(&monitor).await?;
            let (a, b) = enqueue::latency(url, o).await?;
            p50.push(a);
            p99.push(b);
            step("latency floor (plain INSERT + NOTIFY)");
            let (a, b) = enqueue::latency_floor(url, o).await?;
            floor50.push(a);
            floor99.push(b);
        }

        if !o.skip_ceiling {
            step("ceiling");
            reset(&monitor).await?;
            ceil.push(peers::ceiling(url, o, &monitor, &meter, peers::Ceiling::OneCommit).await?);
            step("ceiling, two commits per job");
            reset(&monitor).await?;
            ceil2.push(peers::ceiling(url, o, &monitor, &meter, peers::Ceiling::TwoCommits).await?);
        }

        if !o.skip_graphile {
            step(&format!("graphile drain {} jobs", o.jobs));
            reset(&monitor).await?;
            let (r, v) = peers::graphile(url, o.jobs, &o.graphile, &meter).await?;
            graph.push(r);
            graphile_version = v;
        }

        if !o.skip_awa {
            step(&format!("awa drain {} jobs", o.jobs));
            reset(&monitor).await?;
            let (r, v) = awa::drain(url, o.jobs, &o.awa, &meter).await?;
            awas.push(r);
            awa_version = v;
        }
    }
    if !o.skip_scale {
        reset(&monitor).await?;
        progress(&format!(
            "scale: inserting {} finished and {} future rows",
            o.scale_finished, o.scale_future
        ));
        store::scale_fill(&monitor, o.scale_finished).await?;
        store::scale_future(&monitor, o.scale_future).await?;
        store::vacuum_jobs(&monitor).await?;
        for run in 1..=o.runs {
            progress(&format!(
                "scale run {run}/{}: drain {} jobs",
                o.runs, o.jobs
            ));
            fill_noop(&monitor, o.jobs).await?;
            scaled.push(drain::in_process(url, o, o.jobs, &meter).await?.jobs_per_s);
            // Keep the ballast at its size: this run's rows become ballast for the next.
            store::scale_trim(&monitor, o.jobs).await?;
            store::vacuum_jobs(&monitor).await?;
        }
    }
    monitor.close().await;
    let Some(drain) = DrainFigures::of(&drains) else {
        return Err(Error::Other("bench: no drain ran".into()));
    };
    let drain_scaled = Stat::of_some(&scaled);
    let scale_ratio = drain_scaled
        .as_ref()
        .map(|s| s.median / drain.jobs_per_s.median);
    let throughput = |r: &DrainRun| Some(r.jobs_per_s);
    let mut settings = BTreeMap::from([
        ("runs".to_string(), o.runs.to_string()),
        ("jobs".to_string(), o.jobs.to_string()),
        ("concurrency".to_string(), o.concurrency.to_string()),
        ("connections".to_string(), o.connections.to_string()),
        ("enqueue_clients".to_string(), o.enqueue_clients.to_string()),
        ("latency_jobs".to_string(), o.latency_jobs.to_string()),
        ("processes".to_string(), drain::PROCESSES.to_string()),
        (
            "fetch_cooldown".to_string(),
            humantime::format_duration(worker_settings(o).fetch_cooldown).to_string(),
        ),
        (
            "ack_delay".to_string(),
            humantime::format_duration(worker_settings(o).ack_delay).to_string(),
        ),
        (
            "claim_ahead".to_string(),
            worker_settings(o).claim_ahead.to_string(),
        ),
    ]);
    if !o.skip_scale {
        settings.insert("scale_finished".to_string(), o.scale_finished.to_string());
        settings.insert("scale_future".to_string(), o.scale_future.to_string());
    }
    if !o.skip_graphile {
        let v = graphile_version.unwrap_or_else(|| "?".into());
        settings.insert(
            "graphile".to_string(),
            format!(
                "graphile-worker {v}, concurrency {}, localQueue.size {}, completeJobBatchDelay 0",
                peers::GRAPHILE_CONCURRENCY,
                peers::GRAPHILE_LOCAL_QUEUE
            ),
        );
    }
    if !o.skip_awa {
        let v = awa_version.unwrap_or_else(|| "?".into());
        settings.insert(
            "awa".to_string(),
            format!(
                "awa {v}, queue storage, max_workers {}, claim_batch_size {}, deadline_duration {} ms",
                awa::AWA_MAX_WORKERS,
                awa::AWA_CLAIM_BATCH,
                awa::AWA_DEADLINE_MS
            ),
        );
    }
    let mut report = BenchReport {
        settings,
        postgres,
        enqueue_single: Stat::of_some(&single),
        enqueue_many: Stat::of_some(&many),
        enqueue_single_plain: Stat::of_some(&single_plain),
        enqueue_many_plain: Stat::of_some(&many_plain),
        enqueue_single_to_plain: per_run_ratio(&single, &single_plain),
        enqueue_many_to_plain: per_run_ratio(&many, &many_plain),
        enqueue_single_backlog: Stat::of_some(&single_backlog),
        enqueue_single_admission: Stat::of_some(&single_admission),
        admission_to_single: per_run_ratio(&single_admission, &single_backlog),
        drain_to_ceiling: ratios(&drains, &ceil, throughput),
        drain_to_ceiling_two_commits: ratios(&drains, &ceil2, throughput),
        ceiling_two_commits_to_ceiling: ratios(&ceil2, &ceil, throughput),
        drain_to_graphile: ratios(&drains, &graph, throughput),
        wal_to_graphile: ratios(&drains, &graph, |r| Some(r.usage.wal_bytes_per_job)),
        drain_to_awa: ratios(&drains, &awas, throughput),
        wal_to_awa: ratios(&drains, &awas, |r| Some(r.usage.wal_bytes_per_job)),
        server_cpu_to_ceiling: ratios(&drains, &ceil, |r| r.usage.server_us_per_job),
        processes_to_drain: ratios(&procs, &drains, throughput),
        drain_cli: Stat::of_some(&cli),
        drain_cli_default: Stat::of_some(&cli_default),
        first_claim_ms: Stat::of_some(&cli_first),
        cli_to_graphile: per_run_ratio(
            &cli,
            &graph.iter().map(|r| r.jobs_per_s).collect::<Vec<_>>(),
        ),
        cli_to_awa: per_run_ratio(&cli, &awas.iter().map(|r| r.jobs_per_s).collect::<Vec<_>>()),
        cli_default_to_cli: per_run_ratio(&cli_default, &cli),
        drain_cli_pgbouncer: Stat::of_some(&cli_pgbouncer),
        pgbouncer_to_cli: per_run_ratio(&cli_pgbouncer, &cli),
        key_rate_to_drain: ratios(&keyed, &drains, throughput),
        queue_limit_to_drain: ratios(&qlim, &drains, throughput),
        drain_key_rate: DrainFigures::of(&keyed),
        drain_queue_limit: DrainFigures::of(&qlim),
        fair_to_drain: ratios(&fair, &drains, throughput),
        drain_fair: DrainFigures::of(&fair),
        flow_to_drain: ratios(&flow_fan, &flow_plain, throughput),
        drain_flow: DrainFigures::of(&flow_fan),
        drain_flow_plain: DrainFigures::of(&flow_plain),
        flow_ceiling_to_drain: ratios(&flow_ceiling, &flow_plain, throughput),
        flow_to_ceiling: ratios(&flow_fan, &flow_ceiling, throughput),
        drain_flow_ceiling: DrainFigures::of(&flow_ceiling),
        fan_out_to_drain: ratios(&fan_out, &flow_plain, throughput),
        fan_in_to_drain: ratios(&fan_in, &flow_plain, throughput),
        crawl_to_ideal: Stat::of_some(
            &crawls
                .iter()
                .map(|c| c / limits::crawl_ideal())
                .collect::<Vec<_>>(),
        ),
        crawl_pages_per_s: Stat::of_some(&crawls),
        step_jobs_per_s: Stat::of_some(
            &steps_runs
                .iter()
                .map(|r| r.step_jobs_per_s)
                .collect::<Vec<_>>(),
        ),
        step_plain_jobs_per_s: Stat::of_some(
            &steps_runs
                .iter()
                .map(|r| r.plain_jobs_per_s)
                .collect::<Vec<_>>(),
        ),
        step_job_to_ten_plain: Stat::of_some(
            &steps_runs
                .iter()
                .map(|r| r.step_job_to_ten_plain)
                .collect::<Vec<_>>(),
        ),
        checkpoint_ms: Stat::of_some(
            &steps_runs
                .iter()
                .map(|r| r.checkpoint_ms)
                .collect::<Vec<_>>(),
        ),
        step_ms: Stat::of_some(&steps_runs.iter().map(|r| r.step_ms).collect::<Vec<_>>()),
        drain,
        drain_processes: DrainFigures::of(&procs),
        latency_p50_ms: Stat::of_some(&p50),
        latency_p99_ms: Stat::of_some(&p99),
        latency_p50_to_floor: per_run_ratio(&p50, &floor50),
        latency_floor_p50_ms: Stat::of_some(&floor50),
        latency_floor_p99_ms: Stat::of_some(&floor99),
        drain_scaled,
        scale_ratio,
        ceiling: DrainFigures::of(&ceil),
        ceiling_two_commits: DrainFigures::of(&ceil2),
        graphile: DrainFigures::of(&graph),
        awa: DrainFigures::of(&awas),
        figures: BTreeMap::new(),
        targets: Vec::new(),
    };
    report.figures = figures(&report);
    report.targets = targets::evaluate(&report.figures);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rate: f64, wal: f64) -> DrainRun {
        DrainRun {
            jobs_per_s: rate,
            usage: Usage {
                wal_bytes_per_job: wal,
                commits_per_1000: None,
                server_us_per_job: Some(wal / 10.0),
                client_us_per_job: None,
            },
            idle_pct: Some(10.0),
        }
    }

    #[test]
    fn ratios_pair_runs_and_need_both_sides() {
        let a = [run(100.0, 900.0), run(300.0, 900.0), run(200.0, 900.0)];
        let b = [run(100.0, 600.0), run(100.0, 600.0), run(100.0, 600.0)];
        let r = ratios(&a, &b, |r| Some(r.jobs_per_s)).unwrap();
        assert_eq!((r.median, r.min, r.max), (2.0, 1.0, 3.0));
        assert_eq!(
            ratios(&a, &b, |r| Some(r.usage.wal_bytes_per_job))
                .unwrap()
                .median,
            1.5
        );
        assert_eq!(
            ratios(&a, &b, |r| r.usage.server_us_per_job)
                .unwrap()
                .median,
            1.5
        );
        assert!(ratios(&a, &[], |r| Some(r.jobs_per_s)).is_none());
        assert!(ratios(&a, &[run(100.0, 0.0); 3], |r| r.usage.server_us_per_job).is_none());
        // A figure missing from one run (a remote server's CPU) gives no ratio.
        assert!(ratios(&a, &b, |r| r.usage.client_us_per_job).is_none());
    }

    #[test]
    fn the_bench_talks_without_tls_unless_the_url_asks_for_it() {
        assert_eq!(
            same_transport("postgres://root@127.0.0.1:5432/x").unwrap(),
            "postgres://root@127.0.0.1:5432/x?sslmode=disable"
        );
        assert_eq!(
            same_transport("postgres://root@h/x?application_name=a").unwrap(),
            "postgres://root@h/x?application_name=a&sslmode=disable"
        );
        assert_eq!(
            same_transport("postgres://root@h/x?sslmode=require").unwrap(),
            "postgres://root@h/x?sslmode=require"
        );
        assert!(same_transport("not a url").is_err());
    }

    #[test]
    fn drain_figures_leave_out_what_was_not_measured() {
        let f = DrainFigures::of(&[run(100.0, 900.0), run(200.0, 800.0)]).unwrap();
        assert_eq!(f.jobs_per_s.median, 150.0);
        assert!(f.commits_per_1000.is_none());
        assert!(f.client_us_per_job.is_none());
        assert_eq!(f.server_us_per_job.unwrap().median, 85.0);
        assert_eq!(f.idle_pct.unwrap().median, 10.0);
        assert!(DrainFigures::of(&[]).is_none());
    }
}
