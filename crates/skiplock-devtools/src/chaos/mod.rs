//! Fault injection: a run of `chaos_record` jobs through several worker *processes* that are
//! SIGKILLed at random moments and restarted, optionally with Postgres restarts and an
//! outage (the server stopped for longer than the rescue window) along the way.
//! Shared by `tests/faults.rs` (small) and `scripts/chaos` (20,000 jobs) so both prove the
//! same thing with the same code. The verdict ([`Report::ok`]) is: nothing lost, and every
//! job that ran more than once did so because the process running it was killed.
//!
//! The worker processes are `skiplock-devtools chaos-worker` (a hidden subcommand: the normal worker
//! runtime with only the [`record::Record`] handler), so the faults hit the real binary.

// This tool's statements live in this crate's `sql/` (`sql!`, the core's src/sql_text.rs), and it runs
// them on its own connections: it is not part of the library.

// The private cluster is the test fixtures' (crates/skiplock-test-support), which the doctor's tests
// start too.
pub use skiplock_test_support::cluster;
pub mod command;
pub mod ha;
pub mod partitions;
pub mod record;
pub mod store;

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rand::Rng;

use self::store as sql;
use skiplock::Pool;
use skiplock::error::{Error, Result};

/// What a chaos run does.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// Jobs to enqueue.
    pub jobs: u64,
    /// Worker processes running at once.
    pub workers: usize,
    /// SIGKILLs to send, spread at random over the run's progress.
    pub kills: usize,
    /// Restart Postgres during the run (needs a [`PgServer`], e.g. a
    /// [`cluster::PrivateCluster`]).
    pub pg_restart: bool,
    /// How many restarts, spread evenly over the run's progress (when `pg_restart`).
    pub pg_restart_count: usize,
    /// Stop Postgres this long once, mid-run (needs a [`PgServer`]). Longer than
    /// `rescue_after`, it shows that an outage reruns no live job.
    pub outage: Option<Duration>,
    /// Concurrency of each worker process.
    pub concurrency: usize,
    /// Pool size of each worker process.
    pub max_connections: u32,
    /// Each job works for 0..=work_ms milliseconds after recording its execution.
    pub work_ms: u64,
    /// Rescue timeout of the workers: how soon a killed worker's jobs come back.
    pub rescue_after: Duration,
    /// Give up (and report what is lost) after this long.
    pub deadline: Duration,
    /// The `skiplock` binary to run workers from.
    pub worker_bin: PathBuf,
    /// Where worker logs go (one file per worker slot); a temp dir if `None`.
    pub log_dir: Option<PathBuf>,
    /// Shows the recorded jobs as they come in (`skiplock-devtools chaos` on a terminal).
    pub progress: skiplock_cli::progress::Progress,
    /// Failovers to cause, in this order (needs a [`PgServer`] that fails over:
    /// [`ha::HaCluster`]), one every `failover_every`. With failovers, a tenth of the jobs
    /// is enqueued before the workers start and a producer enqueues the rest while the
    /// failovers happen.
    pub failovers: Vec<ha::Failover>,
    /// Time from one failover's recovery to the next failover.
    pub failover_every: Duration,
    /// The URLs the worker processes connect with, one per slot in turn (empty: the run's
    /// URL); the producer takes the next one in turn after the workers.
    pub worker_urls: Vec<String>,
}

impl ChaosConfig {
    /// Defaults for `jobs` jobs run by `worker_bin`.
    pub fn new(jobs: u64, worker_bin: impl Into<PathBuf>) -> Self {
        ChaosConfig {
            jobs,
            workers: 3,
            kills: 10,
            pg_restart: false,
            pg_restart_count: 1,
            outage: None,
            concurrency: 8,
            max_connections: 4,
            work_ms: 3,
            rescue_after: Duration::from_secs(10),
            deadline: Duration::from_secs(600),
            worker_bin: worker_bin.into(),
            log_dir: None,
            progress: skiplock_cli::progress::Progress::hidden(),
            failovers: Vec::new(),
            failover_every: Duration::from_secs(12),
            worker_urls: Vec::new(),
        }
    }
}

/// The outcome of a chaos run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Jobs enqueued.
    pub jobs: i64,
    /// Jobs `completed` at the end.
    pub completed: i64,
    /// Handler executions recorded.
    pub executions: i64,
    /// Jobs executed more than once.
    pub duplicates: i64,
    /// Extra executions after the handler itself reported an error for that attempt (e.g.
    /// its insert committed but the connection died in the Postgres restart before the
    /// answer came back): at-least-once working as intended.
    pub retried_after_error: i64,
    /// Extra executions not explained by a SIGKILL of the process that ran them.
    pub unexplained: i64,
    /// The jobs behind `unexplained`, for the post-mortem.
    pub unexplained_jobs: Vec<i64>,
    /// Jobs not completed, or completed without a recorded execution.
    pub lost: i64,
    /// SIGKILLs sent.
    pub kills: usize,
    /// Worker processes started again (after a kill or an unexpected exit).
    pub restarts: usize,
    /// Postgres restarts.
    pub pg_restarts: usize,
    /// Postgres outages (server stopped, then started again).
    pub outages: usize,
    /// Worker processes that exited without being killed (must be 0).
    pub unexpected_exits: usize,
    /// Warning lines in the worker logs about failed statements, retries or reconnects.
    pub outage_warnings: usize,
    /// Times a worker's NOTIFY listener noticed its connection was gone and reconnected.
    pub listener_reconnects: usize,
    /// Failovers caused.
    pub failovers: usize,
    /// Failovers the run was asked to cause.
    pub planned_failovers: usize,
    /// Per failover: its kind and the longest time without a completed job that began
    /// between just before it and the cluster's healing (the gap as the queue sees it), in
    /// seconds.
    pub failover_gaps: Vec<(&'static str, f64)>,
    /// Producer batches whose enqueue failed in a failover (each checked, then retried
    /// only if it had not committed).
    pub producer_retries: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl Report {
    /// Nothing lost, no unexplained duplicate, no worker died on its own.
    pub fn ok(&self) -> bool {
        self.lost == 0
            && self.unexplained == 0
            && self.unexpected_exits == 0
            && self.completed == self.jobs
            && self.failovers >= self.planned_failovers
    }

    /// The one-line summary `scripts/chaos` prints.
    pub fn summary_line(&self) -> String {
        format!(
            "chaos: jobs={} completed={} executions={} kills={} restarts={} pg_restarts={} outages={} \
             duplicates={} retried_after_error={} unexplained={} lost={} unexpected_exits={} outage_warnings={} listener_reconnects={} \
             {}elapsed={:.1}s => {}{}",
            self.jobs,
            self.completed,
            self.executions,
            self.kills,
            self.restarts,
            self.pg_restarts,
            self.outages,
            self.duplicates,
            self.retried_after_error,
            self.unexplained,
            self.lost,
            self.unexpected_exits,
            self.outage_warnings,
            self.listener_reconnects,
            if self.planned_failovers == 0 {
                String::new()
            } else {
                format!(
                    "failovers={} producer_retries={} gaps=[{}] ",
                    self.failovers,
                    self.producer_retries,
                    self.failover_gaps
                        .iter()
                        .map(|(k, g)| format!("{k} {g:.1}s"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            self.elapsed.as_secs_f64(),
            if self.ok() { "OK" } else { "FAILED" },
            if self.unexplained_jobs.is_empty() {
                String::new()
            } else {
                format!(" (unexplained jobs: {:?})", self.unexplained_jobs)
            }
        )
    }
}

/// Progress points (completed-job counts) at which to kill, random and sorted.
pub fn kill_points(jobs: u64, kills: usize, rng: &mut impl Rng) -> Vec<u64> {
    if jobs == 0 {
        return Vec::new();
    }
    let lo = jobs / 20;
    let hi = (jobs * 19 / 20).max(lo + 1);
    let mut v: Vec<u64> = (0..kills).map(|_| rng.random_range(lo..hi)).collect();
    v.sort_unstable();
    v
}

/// Something a chaos run does to the database server at a progress point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerEvent {
    /// `pg_ctl restart -m fast`.
    Restart,
    /// Stop the server for this long, then start it.
    Outage(Duration),
}

/// The server events of a run, each with the completed-job count at which it happens:
/// spread evenly over the run, the outage in the middle.
pub fn server_events(
    jobs: u64,
    restarts: usize,
    outage: Option<Duration>,
) -> Vec<(u64, ServerEvent)> {
    let mut events: Vec<ServerEvent> = vec![ServerEvent::Restart; restarts];
    if let Some(d) = outage {
        events.insert(restarts / 2, ServerEvent::Outage(d));
    }
    let n = events.len() as u64;
    events
        .into_iter()
        .enumerate()
        .map(|(i, e)| (jobs * (i as u64 + 1) / (n + 1), e))
        .collect()
}

/// The database server a chaos run restarts, stops or fails over: a private cluster or HA
/// cluster of its own, never a shared one. What a server cannot do is an error.
pub trait PgServer {
    /// Restarts the server and waits for it.
    fn restart_server(&self) -> Result<()> {
        Err(Error::Invalid("this server cannot be restarted".into()))
    }
    /// Stops the server.
    fn stop_server(&self) -> Result<()> {
        Err(Error::Invalid("this server cannot be stopped".into()))
    }
    /// Starts the stopped server and waits for it.
    fn start_server(&self) -> Result<()> {
        Err(Error::Invalid("this server cannot be started".into()))
    }
    /// Causes a failover of kind `f`, then waits until the old primary is back as a
    /// synchronous standby.
    fn fail_over(&self, _f: ha::Failover) -> Result<()> {
        Err(Error::Invalid("this server cannot fail over".into()))
    }
}

impl PgServer for ha::HaCluster {
    fn fail_over(&self, f: ha::Failover) -> Result<()> {
        let old = ha::HaCluster::fail_over(self, f)?;
        self.heal(&old)
    }
}

impl PgServer for cluster::PrivateCluster {
    fn restart_server(&self) -> Result<()> {
        self.restart()
    }
    fn stop_server(&self) -> Result<()> {
        cluster::PrivateCluster::stop_server(self)
    }
    fn start_server(&self) -> Result<()> {
        cluster::PrivateCluster::start_server(self)
    }
}

/// Whether a worker log line reports a failure the worker survives (outage evidence).
pub fn is_outage_warning(line: &str) -> bool {
    line.contains("WARN")
        && (line.contains("retrying")
            || line.contains("reconnect")
            || line.contains("failed")
            || line.contains("connection"))
}

struct Slot {
    child: Child,
    log: PathBuf,
}

fn spawn(cfg: &ChaosConfig, url: &str, log: &PathBuf) -> Result<Child> {
    let out = File::options().create(true).append(true).open(log)?;
    let err = out.try_clone()?;
    let child = Command::new(&cfg.worker_bin)
        .arg("chaos-worker")
        .env("DATABASE_URL", url)
        .env("SKIPLOCK_QUEUES", format!("default={}", cfg.concurrency))
        .env("SKIPLOCK_MAX_CONNECTIONS", cfg.max_connections.to_string())
        .env(
            "SKIPLOCK_RESCUE_AFTER",
            format!("{}ms", cfg.rescue_after.as_millis()),
        )
        .env("SKIPLOCK_POLL_INTERVAL", "200ms")
        .env("SKIPLOCK_BACKOFF_UNIT", "10ms")
        .env("SKIPLOCK_BACKOFF_MAX", "2s")
        .env("SKIPLOCK_SHUTDOWN_GRACE", "10s")
        .env("RUST_LOG", "info,sqlx=warn")
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()?;
    Ok(child)
}

// Used by tests/faults.rs, which compiles this file too.
#[allow(dead_code)]
/// Starts a `chaos-worker` process on `url`, logging to `log` (for tests of the driver).
pub fn spawn_worker(cfg: &ChaosConfig, url: &str, log: &PathBuf) -> Result<Child> {
    spawn(cfg, url, log)
}

/// Stops worker processes as an operator would (SIGTERM) and returns how many did not exit 0
/// within a minute (then killed). A process is sent SIGTERM only once it is registered in
/// `skiplock.workers` (or after a minute): a worker polls its SIGTERM handler before it
/// registers (`Worker::run`), while a process just started, as after a kill near the end of a
/// run, still has the default disposition and would die of the signal, which on a loaded machine
/// can take long enough to be met.
pub async fn stop_workers(pool: &Pool, children: impl IntoIterator<Item = &mut Child>) -> usize {
    let mut children: Vec<&mut Child> = children.into_iter().collect();
    let ready_by = Instant::now() + Duration::from_secs(60);
    loop {
        let registered = sql::registered_pids(pool).await.unwrap_or_default();
        let waiting = children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(None)) && !registered.contains(&(c.id() as i32)));
        if !waiting || Instant::now() > ready_by {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for c in &children {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
    }
    let mut unexpected = 0;
    for c in &mut children {
        let stop_by = Instant::now() + Duration::from_secs(60);
        loop {
            match c.try_wait() {
                Ok(Some(status)) => {
                    if !status.success() {
                        unexpected += 1;
                    }
                    break;
                }
                Ok(None) if Instant::now() < stop_by => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                _ => {
                    let _ = c.kill();
                    let _ = c.wait();
                    unexpected += 1;
                    break;
                }
            }
        }
    }
    unexpected
}

async fn progress(pool: &Pool) -> Option<i64> {
    sql::progress(pool).await.ok()
}

/// Runs the chaos scenario against `url` (migrated here if needed). `server` restarts and
/// stops the database server (a private cluster only!) for `cfg.pg_restart` and
/// `cfg.outage`.
pub async fn run(
    cfg: &ChaosConfig,
    url: &str,
    server: Option<&(dyn PgServer + Sync)>,
) -> Result<Report> {
    if (cfg.pg_restart || cfg.outage.is_some() || !cfg.failovers.is_empty()) && server.is_none() {
        return Err(Error::Invalid(
            "a Postgres restart, outage or failover needs a server of the run's own".into(),
        ));
    }
    let slot_url = |i: usize| -> &str {
        if cfg.worker_urls.is_empty() {
            url
        } else {
            &cfg.worker_urls[i % cfg.worker_urls.len()]
        }
    };
    let started = Instant::now();
    let pool = skiplock::db::pool(url, 2, Duration::from_secs(30)).await?;
    skiplock::store::schema::migrate_parts(&pool, &skiplock_workflows::schemas()).await?;
    // The run enqueues and judges every job in the table: never mix it with real work.
    let existing = sql::job_count(&pool).await?;
    if existing > 0 {
        return Err(Error::Invalid(format!(
            "chaos needs a database without jobs (found {existing}); use a fresh one"
        )));
    }
    install(&pool).await?;
    // With failovers a producer enqueues all but the first tenth during the run.
    let up_front = if !cfg.failovers.is_empty() {
        (cfg.jobs / 10).max(1)
    } else {
        cfg.jobs
    };
    let mut n = 1u64;
    while n <= up_front {
        let last = (n + 4999).min(up_front);
        sql::fill(&pool, n as i64, last as i64, cfg.work_ms as i64).await?;
        n = last + 1;
    }

    let tmp_logs;
    let log_dir = match &cfg.log_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp_logs = tempfile::Builder::new()
                .prefix("skiplock-chaos-")
                .tempdir()?;
            tmp_logs.path().to_path_buf()
        }
    };
    let mut report = Report::default();
    let mut slots = Vec::new();
    for i in 0..cfg.workers {
        let log = log_dir.join(format!("worker-{i}.log"));
        let _ = std::fs::remove_file(&log);
        slots.push(Slot {
            child: spawn(cfg, slot_url(i), &log)?,
            log,
        });
    }
    let failovers_done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let producer = (up_front < cfg.jobs).then(|| {
        let (url, cfg) = (slot_url(cfg.workers).to_string(), cfg.clone());
        let done = failovers_done.clone();
        tokio::spawn(async move { produce(&url, up_front + 1, &cfg, done).await })
    });
    let mut failovers: Vec<(ha::Failover, DateTime<Utc>, DateTime<Utc>)> = Vec::new();
    let mut next_failover = started + cfg.failover_every;
    report.planned_failovers = cfg.failovers.len();

    let mut rng = rand::rng();
    let points = kill_points(cfg.jobs, cfg.kills, &mut rng);
    let mut next_kill = 0;
    let mut kills: Vec<(i32, DateTime<Utc>)> = Vec::new();
    let mut events = server_events(
        cfg.jobs,
        if cfg.pg_restart {
            cfg.pg_restart_count
        } else {
            0
        },
        cfg.outage,
    )
    .into_iter()
    .peekable();
    let mut done = 0i64;
    let deadline = started + cfg.deadline;
    loop {
        // Workers that died on their own are a failure, but restart them to finish the run.
        for (i, s) in slots.iter_mut().enumerate() {
            if let Ok(Some(status)) = s.child.try_wait() {
                tracing::error!(slot = i, %status, "chaos: a worker exited without being killed");
                report.unexpected_exits += 1;
                s.child = spawn(cfg, slot_url(i), &s.log)?;
                report.restarts += 1;
            }
        }
        if failovers.len() < cfg.failovers.len() && Instant::now() >= next_failover {
            let server = server.expect("checked above");
            let f = cfg.failovers[failovers.len()];
            tracing::info!(completed = done, "chaos: failover by {}", f.name());
            let began = Utc::now();
            // Blocks this loop until the old primary is back as a standby (seconds); the
            // workers and the producer run on.
            tokio::task::block_in_place(|| server.fail_over(f))?;
            failovers.push((f, began, Utc::now()));
            report.failovers += 1;
            failovers_done.store(report.failovers, std::sync::atomic::Ordering::Relaxed);
            tracing::info!("chaos: the cluster has a synchronous standby again");
            next_failover = Instant::now() + cfg.failover_every;
        }
        if let Some(p) = progress(&pool).await {
            done = p;
            cfg.progress.set(done.max(0) as u64);
        }
        if (done >= cfg.jobs as i64 && failovers.len() >= cfg.failovers.len())
            || Instant::now() > deadline
        {
            break;
        }
        while let Some((_, event)) = events.next_if(|(at, _)| done as u64 >= *at) {
            let server = server.expect("checked above");
            match event {
                ServerEvent::Restart => {
                    tracing::info!(completed = done, "chaos: restarting Postgres");
                    server.restart_server()?;
                    report.pg_restarts += 1;
                }
                ServerEvent::Outage(d) => {
                    tracing::info!(completed = done, "chaos: stopping Postgres for {d:?}");
                    server.stop_server()?;
                    // The workers must wait it out: none may exit meanwhile.
                    let until = Instant::now() + d;
                    while Instant::now() < until {
                        for (i, s) in slots.iter_mut().enumerate() {
                            if let Ok(Some(status)) = s.child.try_wait() {
                                tracing::error!(slot = i, %status, "chaos: a worker exited during the outage");
                                report.unexpected_exits += 1;
                                s.child = spawn(cfg, slot_url(i), &s.log)?;
                                report.restarts += 1;
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    server.start_server()?;
                    report.outages += 1;
                }
            }
            tracing::info!("chaos: Postgres is back");
        }
        while next_kill < points.len() && done as u64 >= points[next_kill] {
            // A random moment within the next few milliseconds, a random worker.
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..20))).await;
            let i = rng.random_range(0..slots.len());
            let s = &mut slots[i];
            let pid = s.child.id() as i32;
            s.child.kill()?; // SIGKILL
            let _ = s.child.wait();
            kills.push((pid, Utc::now()));
            report.kills += 1;
            tracing::info!(slot = i, pid, completed = done, "chaos: SIGKILL");
            s.child = spawn(cfg, slot_url(i), &s.log)?;
            report.restarts += 1;
            next_kill += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Stop the workers gracefully, then record the kills and judge.
    report.unexpected_exits += stop_workers(&pool, slots.iter_mut().map(|s| &mut s.child)).await;
    if let Some(p) = producer {
        match p.await {
            Ok(Ok(retries)) => report.producer_retries = retries,
            Ok(Err(e)) => tracing::error!("chaos: the producer failed: {e}"),
            Err(e) => tracing::error!("chaos: the producer panicked: {e}"),
        }
    }
    record_kills(&pool, &kills).await?;
    judge(&pool, &mut report).await?;
    if !failovers.is_empty() {
        let starts: Vec<DateTime<Utc>> = failovers.iter().map(|f| f.1).collect();
        let healed: Vec<DateTime<Utc>> = failovers.iter().map(|f| f.2).collect();
        let gaps = sql::failover_gaps(&pool, &starts, &healed).await?;
        for ((f, at, healed), (gap, began)) in failovers.iter().zip(&gaps) {
            tracing::info!(
                "chaos: {} at {at}, healed at {healed}: longest time without a completion {gap:.2}s from {began:?}",
                f.name()
            );
        }
        report.failover_gaps = failovers
            .iter()
            .zip(gaps)
            .map(|(f, (g, _))| (f.0.name(), g))
            .collect();
    }
    for s in &slots {
        if let Ok(text) = std::fs::read_to_string(&s.log) {
            report.outage_warnings += text.lines().filter(|l| is_outage_warning(l)).count();
            report.listener_reconnects += text
                .lines()
                .filter(|l| {
                    l.contains("listener: connection lost") || l.contains("listener: error")
                })
                .count();
        }
    }
    report.elapsed = started.elapsed();
    pool.close().await;
    Ok(report)
}

/// Enqueues jobs `first..=cfg.jobs` through `url` in small batches while the failovers
/// happen: the jobs are shared out evenly between the stretches before, between and after
/// the failovers (`failovers_done` says which stretch it is in), each share paced over
/// `failover_every` plus the time a failover and its healing take, so that every failover
/// meets jobs being enqueued and run. Rides out the failovers: a batch that failed is checked
/// and enqueued again only if it did not commit (the answer to a commit can be lost while
/// the commit holds). Returns the batches it had to retry.
async fn produce(
    url: &str,
    first: u64,
    cfg: &ChaosConfig,
    failovers_done: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> Result<usize> {
    const TICK: Duration = Duration::from_millis(250);
    /// What a failover and its healing take, roughly (docs/operations.md, "Patroni").
    const FAILOVER_TIME: Duration = Duration::from_secs(15);
    let (last, stretches) = (cfg.jobs, cfg.failovers.len() as u64 + 1);
    let share = (last - first + 1).div_ceil(stretches);
    let ticks = ((cfg.failover_every + FAILOVER_TIME).as_millis() / TICK.as_millis()) as u64;
    let per_tick = share.div_ceil(ticks.max(1)).max(1);
    let work_ms = cfg.work_ms;
    let pool = skiplock::db::pool(url, 2, Duration::from_secs(5)).await?;
    let mut retries = 0;
    let mut a = first;
    while a <= last {
        let stretch = failovers_done.load(std::sync::atomic::Ordering::Relaxed) as u64;
        let allowed = (first - 1 + share * (stretch + 1)).min(last);
        if a > allowed {
            tokio::time::sleep(TICK).await;
            continue;
        }
        let b = (a + per_tick - 1).min(allowed);
        let mut unsure = false;
        loop {
            if unsure {
                match sql::filled(&pool, a as i64, b as i64).await {
                    Ok(n) if n == (b - a + 1) as i64 => break,
                    Ok(0) => {}
                    Ok(n) => {
                        return Err(Error::Other(format!(
                            "batch {a}..={b} half enqueued ({n} jobs): not atomic"
                        )));
                    }
                    Err(_) => {
                        // Several hosts in the URL: look for the one that accepts writes.
                        let _ = skiplock::db::point_at_writable_host(&pool).await;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
            match sql::fill(&pool, a as i64, b as i64, work_ms as i64).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::info!("chaos: producer batch {a}..={b} failed ({e}); checking");
                    retries += 1;
                    unsure = true;
                    let _ = skiplock::db::point_at_writable_host(&pool).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        a = b + 1;
        tokio::time::sleep(TICK).await;
    }
    pool.close().await;
    Ok(retries)
}

/// (Re)creates the side tables of a run (`skiplock_chaos.executions`, `.kills`).
pub async fn install(pool: &Pool) -> Result<()> {
    sql::install(pool).await
}

/// Records SIGKILLs (process id, time after the process was gone).
pub async fn record_kills(pool: &Pool, kills: &[(i32, DateTime<Utc>)]) -> Result<()> {
    let (pids, ats): (Vec<i32>, Vec<DateTime<Utc>>) = kills.iter().copied().unzip();
    sql::kill(pool, &pids, &ats).await
}

/// Fills the verdict fields of `report` from the jobs and side tables
/// (`sql/chaos/verify.sql`), logging every unexplained execution.
pub async fn judge(pool: &Pool, report: &mut Report) -> Result<()> {
    let v = sql::verify(pool).await?;
    if !v.unexplained_jobs.is_empty() {
        for x in sql::explain(pool, &v.unexplained_jobs).await? {
            tracing::warn!(
                job = x.job_id,
                attempt = x.attempt,
                pid = x.pid,
                worker = x.worker_id,
                at = x.at,
                errors = x.errors,
                "chaos: unexplained execution"
            );
        }
    }
    report.unexplained_jobs = v.unexplained_jobs;
    report.jobs = v.jobs;
    report.completed = v.completed;
    report.executions = v.executions;
    report.duplicates = v.duplicates;
    report.retried_after_error = v.retried_after_error;
    report.unexplained = v.unexplained;
    report.lost = v.lost;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_points_are_sorted_and_inside_the_run() {
        let mut rng = rand::rng();
        let p = kill_points(1000, 50, &mut rng);
        assert_eq!(p.len(), 50);
        assert!(p.windows(2).all(|w| w[0] <= w[1]));
        assert!(p.iter().all(|&x| (50..950).contains(&x)));
        assert!(kill_points(0, 5, &mut rng).is_empty());
        assert_eq!(kill_points(3, 2, &mut rng).len(), 2);
    }

    #[test]
    fn server_events_are_spread_with_the_outage_in_the_middle() {
        let d = Duration::from_secs(25);
        assert_eq!(
            server_events(1000, 2, Some(d)),
            vec![
                (250, ServerEvent::Restart),
                (500, ServerEvent::Outage(d)),
                (750, ServerEvent::Restart)
            ]
        );
        assert_eq!(
            server_events(1000, 1, None),
            vec![(500, ServerEvent::Restart)]
        );
        assert!(server_events(1000, 0, None).is_empty());
    }

    #[test]
    fn outage_warnings_are_recognised() {
        assert!(is_outage_warning(
            "2026 WARN skiplock::queue::notify: listener: connection lost; reconnecting"
        ));
        assert!(is_outage_warning("WARN claim failed; retrying in 100ms"));
        assert!(!is_outage_warning("INFO worker started"));
        assert!(!is_outage_warning("INFO listener: reconnecting"));
    }

    #[test]
    fn a_report_is_ok_only_without_losses_or_unexplained_duplicates() {
        let good = Report {
            jobs: 10,
            completed: 10,
            executions: 12,
            duplicates: 2,
            ..Report::default()
        };
        assert!(good.ok());
        assert!(good.summary_line().ends_with("OK"));
        assert!(
            !Report {
                lost: 1,
                ..good.clone()
            }
            .ok()
        );
        assert!(
            !Report {
                unexplained: 1,
                ..good.clone()
            }
            .ok()
        );
        assert!(
            !Report {
                unexpected_exits: 1,
                ..good.clone()
            }
            .ok()
        );
        assert!(
            !Report {
                completed: 9,
                ..good.clone()
            }
            .ok()
        );
        // A failover run that did not cause every failover it was asked for proves less.
        let failover = Report {
            failovers: 5,
            planned_failovers: 6,
            failover_gaps: vec![("switchover", 2.5)],
            ..good
        };
        assert!(!failover.ok());
        assert!(failover.summary_line().contains("gaps=[switchover 2.5s]"));
        assert!(
            Report {
                failovers: 6,
                ..failover
            }
            .ok()
        );
    }
}
