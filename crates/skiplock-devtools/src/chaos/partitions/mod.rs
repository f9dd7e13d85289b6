//! The partition run: faults that **one** worker sees while the others and the database carry
//! on — its link cut both ways or only the server's answers, a slow and lossy link, its
//! connections reset, its process paused for longer than the rescue window, commits whose
//! answers are lost — and a full disk under the jobs, injected at random ([`schedule`]) into a
//! workload of short jobs, long jobs past the rescue window, fan-in flows, unique-key replaces
//! and key-rate-limited jobs, then judged over the whole recorded history ([`checker`]).
//!
//! Each worker is a `skiplock-devtools chaos-worker` process in a network namespace of its own
//! ([`net`]), reaching the run's own Postgres cluster ([`server`]) over its veth link; the
//! driver enqueues over 127.0.0.1, which no fault touches. One cluster serves every schedule,
//! each schedule gets a database of its own. Shared by tests/partitions.rs (small) and
//! `scripts/chaos --partitions` (docs/reliability.md).

pub mod checker;
pub mod job;
pub mod net;
pub mod schedule;
pub mod server;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use self::checker::Verdict;
use self::net::{Link, Links};
use self::schedule::{Fault, Kind};
use self::server::Server;
use crate::chaos::store::partitions as sql;
use skiplock::error::{Error, Result};

/// The key-limited queue of the workload.
pub const LIMITED_QUEUE: &str = "limited";

/// What a partition run does.
#[derive(Debug, Clone)]
pub struct PartitionConfig {
    /// Schedules to run, one after the other.
    pub schedules: usize,
    /// The first schedule's seed; schedule `i` uses `seed + i`.
    pub seed: u64,
    /// Jobs per schedule (at least; a schedule enqueues until it has them).
    pub jobs: u64,
    /// Worker processes.
    pub workers: usize,
    /// The workers' rescue window.
    pub rescue_after: Duration,
    /// Over how long the jobs are enqueued and the faults begin.
    pub span: Duration,
    /// Faults per schedule beyond one of each kind.
    pub extra_faults: usize,
    /// Concurrency of each worker's default queue (half of it for the limited queue).
    pub concurrency: usize,
    /// The `skiplock` binary to run workers from.
    pub worker_bin: PathBuf,
    /// Where worker logs go (a folder per schedule); kept in a temp dir only for a failed one.
    pub log_dir: Option<PathBuf>,
    /// Tag of the run's names (`slf<tag>…`, a lower-case letter): runs of other tags may run
    /// at the same time.
    pub tag: char,
    /// The third byte of the first link's subnet (10.231.<base>.0/24).
    pub net_base: u8,
    /// The private cluster's port.
    pub port: u16,
    /// Give up on a schedule's jobs finishing after this long past its last fault.
    pub finish_within: Duration,
}

impl PartitionConfig {
    /// Defaults for `jobs` jobs per schedule run by `worker_bin`.
    pub fn new(jobs: u64, worker_bin: impl Into<PathBuf>) -> Self {
        PartitionConfig {
            schedules: 1,
            seed: rand::random::<u32>() as u64,
            jobs,
            workers: 3,
            rescue_after: Duration::from_secs(4),
            span: Duration::from_secs(15),
            extra_faults: 2,
            concurrency: 8,
            worker_bin: worker_bin.into(),
            log_dir: None,
            tag: 'p',
            net_base: 10,
            port: 55410,
            finish_within: Duration::from_secs(180),
        }
    }
}

/// What one schedule did and what the checker found.
#[derive(Debug, Clone, Default)]
pub struct ScheduleReport {
    /// Its seed (`--seed` replays it).
    pub seed: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, usize>,
    /// Enqueues that failed (a full disk), each enqueued again as a new one.
    pub failed_enqueues: usize,
    /// Worker processes that exited before the end, or not with 0 after SIGTERM.
    pub unexpected_exits: usize,
    /// The checker's verdict.
    pub verdict: Verdict,
    /// Wall time.
    pub elapsed: Duration,
}

impl ScheduleReport {
    /// Nothing wrong.
    pub fn ok(&self) -> bool {
        self.verdict.ok() && self.unexpected_exits == 0
    }

    /// One line.
    pub fn line(&self) -> String {
        let v = &self.verdict;
        format!(
            "partitions: seed={} jobs={} executions={} faults=[{}] duplicates={} explained=[{}] answers_lost=[{}] rescues={} \
             max_rescue_wait={:.1}s failed_enqueues={} unexpected_exits={} elapsed={:.1}s => {}{}",
            self.seed,
            v.jobs,
            v.executions,
            join(&self.faults),
            v.duplicates,
            join(&v.explained),
            join(&v.answers_lost),
            v.rescues,
            v.max_rescue_wait,
            self.failed_enqueues,
            self.unexpected_exits,
            self.elapsed.as_secs_f64(),
            if self.ok() { "OK" } else { "FAILED" },
            if self.ok() {
                String::new()
            } else {
                format!(" {}", v.anomalies())
            }
        )
    }
}

fn join(m: &BTreeMap<String, usize>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A whole run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Every schedule.
    pub schedules: Vec<ScheduleReport>,
    /// Whether the kernel had `tc netem` (else the slow link was loss alone).
    pub netem: bool,
}

impl Report {
    /// Every schedule OK.
    pub fn ok(&self) -> bool {
        !self.schedules.is_empty() && self.schedules.iter().all(|s| s.ok())
    }

    /// Faults per kind over the run.
    pub fn faults(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for s in &self.schedules {
            for (k, n) in &s.faults {
                *m.entry(k.clone()).or_default() += n;
            }
        }
        m
    }

    /// The totals line.
    pub fn summary_line(&self) -> String {
        let sum =
            |f: &dyn Fn(&ScheduleReport) -> usize| self.schedules.iter().map(f).sum::<usize>();
        let (mut explained, mut answers_lost) = (BTreeMap::new(), BTreeMap::new());
        for s in &self.schedules {
            for (k, n) in &s.verdict.explained {
                *explained.entry(k.clone()).or_default() += n;
            }
            for (k, n) in &s.verdict.answers_lost {
                *answers_lost.entry(k.clone()).or_default() += n;
            }
        }
        let v = |s: &ScheduleReport| s.verdict.clone();
        format!(
            "partitions total: schedules={} jobs={} executions={} faults=[{}] duplicates={} explained=[{}] answers_lost=[{}] \
             unexplained={} lost={} finished_twice={} stale_acks={} phantom_completions={} stuck={} unfinished={} \
             fan_in_early={} replace_mismatch={} failed_but_committed={} discarded={} rescues={} max_rescue_wait={:.1}s \
             failed_enqueues={} unexpected_exits={} netem={} elapsed={:.0}s => {}",
            self.schedules.len(),
            sum(&|s| s.verdict.jobs),
            sum(&|s| s.verdict.executions),
            join(&self.faults()),
            sum(&|s| s.verdict.duplicates),
            join(&explained),
            join(&answers_lost),
            sum(&|s| v(s).unexplained.len()),
            sum(&|s| v(s).lost.len()),
            sum(&|s| v(s).finished_twice.len()),
            sum(&|s| v(s).stale_acks.len()),
            sum(&|s| v(s).phantom_completions.len()),
            sum(&|s| v(s).stuck.len()),
            sum(&|s| v(s).unfinished.len()),
            sum(&|s| v(s).fan_in_early.len()),
            sum(&|s| v(s).replace_mismatch.len()),
            sum(&|s| v(s).failed_but_committed.len()),
            sum(&|s| s.verdict.discarded),
            sum(&|s| s.verdict.rescues),
            self.schedules
                .iter()
                .map(|s| s.verdict.max_rescue_wait)
                .fold(0.0, f64::max),
            sum(&|s| s.failed_enqueues),
            sum(&|s| s.unexpected_exits),
            self.netem,
            self.schedules
                .iter()
                .map(|s| s.elapsed.as_secs_f64())
                .sum::<f64>(),
            if self.ok() { "OK" } else { "FAILED" },
        )
    }
}

/// Runs `f` (a command or a file operation) off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Other(format!("a fault step panicked: {e}")))?
}

/// Runs every schedule of `cfg`, printing each one's line as it ends (`print`).
pub async fn run(cfg: &PartitionConfig, print: impl Fn(&str)) -> Result<Report> {
    let (tag, base, workers) = (cfg.tag, cfg.net_base, cfg.workers);
    let links = Arc::new(blocking(move || Links::create(tag, base, workers)).await?);
    let addrs: Vec<String> = links.links.iter().map(|l| l.host_addr.clone()).collect();
    let port = cfg.port;
    let server = Arc::new(blocking(move || Server::start(tag, port, &addrs, 256)).await?);
    let admin = skiplock::db::pool(
        &server.url("127.0.0.1", "postgres"),
        1,
        Duration::from_secs(30),
    )
    .await?;
    sql::create_tablespace(
        &admin,
        server::SMALL,
        &server.small_location().to_string_lossy(),
    )
    .await?;
    let mut report = Report {
        netem: links.netem,
        ..Report::default()
    };
    if !links.netem {
        print(
            "partitions: this kernel has no tc netem: the slow link is random loss alone (TCP retransmits)",
        );
    }
    for i in 0..cfg.schedules {
        let seed = cfg.seed + i as u64;
        let r = schedule(cfg, seed, &links, &server, &admin).await;
        // Whatever happened, the next schedule starts from a healed network and disk.
        for l in &links.links {
            let l = l.clone();
            let _ = blocking(move || {
                l.heal();
                Ok(())
            })
            .await;
        }
        let s = server.clone();
        let _ = blocking(move || s.free_disk()).await;
        let r = r?;
        print(&r.line());
        report.schedules.push(r);
    }
    admin.close().await;
    Ok(report)
}

/// One enqueue of the workload.
#[derive(Debug, Clone)]
enum Op {
    Plain { count: i32 },
    Long { count: i32 },
    Limited { count: i32 },
    Flow { children: i32 },
    Replace { key: String, due_ms: i32 },
}

impl Op {
    fn draw(rng: &mut StdRng) -> Op {
        match rng.random_range(0..100) {
            0..55 => Op::Plain { count: 40 },
            55..60 => Op::Long { count: 3 },
            60..75 => Op::Flow { children: 9 },
            75..90 => Op::Limited { count: 30 },
            _ => Op::Replace {
                key: format!("r{}", rng.random_range(0..16)),
                due_ms: rng.random_range(300..1500),
            },
        }
    }

    fn jobs(&self) -> i64 {
        match self {
            Op::Plain { count } | Op::Long { count } | Op::Limited { count } => *count as i64,
            Op::Flow { children } => *children as i64 + 1,
            Op::Replace { .. } => 1,
        }
    }

    fn what(&self) -> String {
        match self {
            Op::Plain { .. } => "plain".into(),
            Op::Long { .. } => "long".into(),
            Op::Limited { .. } => "limited".into(),
            Op::Flow { .. } => "flow".into(),
            Op::Replace { key, .. } => format!("replace:{key}"),
        }
    }
}

async fn enqueue(
    pool: &skiplock::Pool,
    op: &Op,
    n: i64,
    rescue_after: Duration,
) -> Result<(Vec<i64>, Option<String>)> {
    let kind = job::KIND;
    Ok(match op {
        Op::Plain { count } => (sql::enqueue_plain(pool, kind, n, *count, 3, 0).await?, None),
        Op::Long { count } => {
            let long = rescue_after.mul_f64(1.5).as_millis() as i32;
            (
                sql::enqueue_plain(pool, kind, n, *count, 100, long).await?,
                None,
            )
        }
        Op::Limited { count } => (
            sql::enqueue_limited(pool, kind, LIMITED_QUEUE, n, *count, 10, 3).await?,
            None,
        ),
        Op::Flow { children } => (sql::enqueue_flow(pool, kind, n, *children).await?, None),
        Op::Replace { key, due_ms } => {
            let (id, outcome) = sql::enqueue_replace(pool, kind, n, key, *due_ms).await?;
            (vec![id], Some(outcome))
        }
    })
}

fn spawn_worker(cfg: &PartitionConfig, link: &Link, url: &str, log: &PathBuf) -> Result<Child> {
    let out = File::options().create(true).append(true).open(log)?;
    let err = out.try_clone()?;
    Ok(Command::new("ip")
        .args(["netns", "exec", &link.netns])
        .arg(&cfg.worker_bin)
        .arg("chaos-worker")
        .env("DATABASE_URL", url)
        .env(
            "SKIPLOCK_QUEUES",
            format!(
                "default={},{LIMITED_QUEUE}={}",
                cfg.concurrency,
                (cfg.concurrency / 2).max(1)
            ),
        )
        .env(
            "SKIPLOCK_MAX_CONNECTIONS",
            (cfg.concurrency as u32 + 2).to_string(),
        )
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
        .spawn()?)
}

/// What every fault of a schedule shares.
#[derive(Clone)]
struct Injector {
    server: Arc<Server>,
    netem: bool,
    t0: tokio::time::Instant,
    pool: skiplock::Pool,
    pg_port: u16,
}

/// Injects `f` into worker `pid`'s `link` (or the server's disk) at `t0 + f.at`; what it did.
async fn inject(f: Fault, link: Link, pid: i32, x: Injector) -> Result<sql::FaultRow> {
    let Injector {
        server,
        netem,
        t0,
        pool,
        pg_port,
    } = x;
    let pool = &pool;
    let mut port = None;
    tokio::time::sleep_until(t0 + f.at).await;
    let started_at = Utc::now();
    let signal = |s: Signal| {
        kill(Pid::from_raw(pid), s).map_err(|e| Error::Other(format!("kill -{s:?} {pid}: {e}")))
    };
    match f.kind {
        Kind::Partition | Kind::RepliesLost => {
            let both = f.kind == Kind::Partition;
            let l = link.clone();
            blocking(move || l.drop_packets(true, both)).await?;
            tokio::time::sleep(f.hold).await;
            blocking(move || link.pass_packets(true, both)).await?;
        }
        Kind::Slow => {
            let l = link.clone();
            blocking(move || l.slow(f.loss, netem)).await?;
            tokio::time::sleep(f.hold).await;
            blocking(move || link.fast(f.loss, netem)).await?;
        }
        Kind::Reset => blocking(move || link.reset()).await?,
        Kind::Pause => {
            signal(Signal::SIGSTOP)?;
            tokio::time::sleep(f.hold).await;
            signal(Signal::SIGCONT)?;
        }
        Kind::LostCommit => {
            // A commit whose answer is lost: the server's packets dropped on one connection of
            // the worker's runtime (the one that claimed or acked last, so its next statements
            // claim and ack too) until the history shows a state change committed on it, then
            // that connection reset, so the worker never reads the answer. (Dropping the answers
            // on every connection stalls a worker after one statement per connection, mostly
            // heartbeats.) A connection whose next statement changed no job (a heartbeat) is
            // reset all the same after 1.5 s, and the next one tried, four at most; an idle
            // worker, with no such connection, gets the drop and the reset of every connection.
            let mut hold = f.hold;
            for _ in 0..4 {
                let give_up = tokio::time::Instant::now() + Duration::from_secs(2);
                let mut target = None;
                while target.is_none() && tokio::time::Instant::now() < give_up {
                    target = sql::claiming_port(pool, &link.ns_addr)
                        .await
                        .unwrap_or(None);
                    if target.is_none() {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                let Some(p) = target else {
                    break;
                };
                port = Some(p);
                let l = link.clone();
                blocking(move || l.drop_replies_on(pg_port, p, true)).await?;
                let since = Utc::now();
                tokio::time::sleep(hold).await;
                hold = Duration::ZERO;
                let give_up = tokio::time::Instant::now() + Duration::from_millis(1500);
                let mut committed = false;
                while !committed && tokio::time::Instant::now() < give_up {
                    committed = sql::commits_since(pool, &link.ns_addr, p, since)
                        .await
                        .unwrap_or(0)
                        > 0;
                    if !committed {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                let l = link.clone();
                blocking(move || l.reset_one(p)).await?;
                let l = link.clone();
                blocking(move || l.drop_replies_on(pg_port, p, false)).await?;
                if committed {
                    break;
                }
            }
            if port.is_none() {
                let l = link.clone();
                blocking(move || l.drop_packets(true, false)).await?;
                tokio::time::sleep(f.hold).await;
                let l = link.clone();
                blocking(move || l.reset()).await?;
                blocking(move || link.pass_packets(true, false)).await?;
            }
        }
        Kind::DiskFull => {
            let s = server.clone();
            blocking(move || s.fill_disk()).await?;
            tokio::time::sleep(f.hold).await;
            blocking(move || server.free_disk()).await?;
        }
    }
    Ok(sql::FaultRow {
        kind: f.kind.name().to_string(),
        slot: f.kind.one_worker().then_some(f.slot as i32),
        pid: f.kind.one_worker().then_some(pid),
        port,
        started_at,
        ended_at: Utc::now(),
    })
}

/// Runs schedule `seed`: a database of its own, the workers, the workload and the faults, then
/// the checker.
async fn schedule(
    cfg: &PartitionConfig,
    seed: u64,
    links: &Arc<Links>,
    server: &Arc<Server>,
    admin: &skiplock::Pool,
) -> Result<ScheduleReport> {
    let started = Instant::now();
    let db = format!("slf_schedule_{seed}");
    sql::drop_database(admin, &db).await?;
    sql::create_database(admin, &db, server::SMALL).await?;
    let pool =
        skiplock::db::pool(&server.url("127.0.0.1", &db), 4, Duration::from_secs(30)).await?;
    skiplock::store::schema::migrate_parts(&pool, &skiplock_workflows::schemas()).await?;
    sql::install(&pool).await?;
    sql::key_limit(&pool, LIMITED_QUEUE, 25).await?;

    let tmp_logs = match &cfg.log_dir {
        Some(_) => None,
        None => Some(tempfile::Builder::new().prefix("slf-logs-").tempdir()?),
    };
    let log_dir = match (&cfg.log_dir, &tmp_logs) {
        (Some(d), _) => d.join(format!("seed-{seed}")),
        (None, Some(t)) => t.path().to_path_buf(),
        (None, None) => unreachable!("a temp dir when no log dir is given"),
    };
    std::fs::create_dir_all(&log_dir)?;
    let mut children = Workers(Vec::new());
    for (i, link) in links.links.iter().enumerate() {
        let log = log_dir.join(format!("worker-{i}.log"));
        children.0.push(spawn_worker(
            cfg,
            link,
            &server.url(&link.host_addr, &db),
            &log,
        )?);
    }
    let pids: Vec<i32> = children.0.iter().map(|c| c.id() as i32).collect();
    let mut report = ScheduleReport {
        seed,
        ..ScheduleReport::default()
    };
    // Faults begin once every worker is registered (and so ready for SIGTERM).
    let ready_by = Instant::now() + Duration::from_secs(120);
    loop {
        let registered = crate::chaos::store::registered_pids(&pool)
            .await
            .unwrap_or_default();
        if pids.iter().all(|p| registered.contains(p)) {
            break;
        }
        if Instant::now() > ready_by {
            stop(&mut children.0, &mut report).await;
            return Err(Error::Other(format!(
                "the workers did not register within 120 s (logs: {})",
                log_dir.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let plan = schedule::plan(
        seed,
        cfg.workers,
        cfg.span,
        cfg.rescue_after,
        cfg.extra_faults,
    );
    let t0 = tokio::time::Instant::now();
    let injector = Injector {
        server: server.clone(),
        netem: links.netem,
        t0,
        pool: pool.clone(),
        pg_port: cfg.port,
    };
    let faults: Vec<_> = plan
        .iter()
        .map(|f| {
            let link = links.links[f.slot].clone();
            tokio::spawn(inject(*f, link, pids[f.slot], injector.clone()))
        })
        .collect();

    // The workload, paced over the span, until the schedule has its jobs.
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_f00d);
    let mut ops: Vec<sql::EnqueueRow> = Vec::new();
    let mut ats: Vec<DateTime<Utc>> = Vec::new();
    let (mut n, mut have) = (1i64, 0u64);
    while have < cfg.jobs {
        let due = t0 + cfg.span.mul_f64(have as f64 / cfg.jobs as f64);
        tokio::time::sleep_until(due).await;
        let op = Op::draw(&mut rng);
        let ns: Vec<i64> = (n..n + op.jobs()).collect();
        let r = enqueue(&pool, &op, n, cfg.rescue_after).await;
        n += op.jobs();
        let row = match r {
            Ok((ids, outcome)) => {
                have += match &outcome {
                    Some(o) if o != "inserted" => 0,
                    _ => ids.len() as u64,
                };
                sql::EnqueueRow {
                    op: ops.len() as i32,
                    what: op.what(),
                    ns,
                    ok: true,
                    ids,
                    outcome,
                    error: None,
                }
            }
            Err(e) => {
                report.failed_enqueues += 1;
                // Not retried at once: the disk may stay full for a while.
                tokio::time::sleep(Duration::from_millis(200)).await;
                sql::EnqueueRow {
                    op: ops.len() as i32,
                    what: op.what(),
                    ns,
                    ok: false,
                    ids: vec![],
                    outcome: None,
                    error: Some(e.to_string()),
                }
            }
        };
        ops.push(row);
        ats.push(Utc::now());
        if children
            .0
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(Some(_))))
        {
            tracing::error!(logs = %log_dir.display(), "partitions: a worker exited during the run");
            report.unexpected_exits += 1;
            break;
        }
    }
    let mut injected = Vec::new();
    for f in faults {
        injected.push(
            f.await
                .map_err(|e| Error::Other(format!("a fault task failed: {e}")))??,
        );
    }
    for f in &injected {
        *report.faults.entry(f.kind.clone()).or_default() += 1;
    }

    // Every job finishes once the faults are healed (a long one may still be waiting for the
    // rescue of its attempt).
    let finish_by = Instant::now() + cfg.finish_within;
    loop {
        match sql::unfinished(&pool).await {
            Ok(0) => break,
            _ if Instant::now() > finish_by => break,
            _ => {}
        }
        if children
            .0
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(Some(_))))
        {
            report.unexpected_exits += 1;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop(&mut children.0, &mut report).await;

    sql::record_enqueues(&pool, &ops, &ats).await?;
    sql::record_faults(&pool, &injected).await?;
    let mut history = sql::history(&pool).await?;
    history.slots = pids
        .iter()
        .zip(&links.links)
        .map(|(p, l)| (*p, l.ns_addr.clone()))
        .collect();
    report.verdict = checker::check(&history, cfg.rescue_after, Utc::now());
    pool.close().await;
    report.elapsed = started.elapsed();
    if report.ok() {
        sql::drop_database(admin, &db).await?;
    } else {
        // Kept for the post-mortem (the database lives until the cluster is removed).
        if let Some(t) = tmp_logs {
            let _ = t.keep();
        }
        tracing::error!(logs = %log_dir.display(), server_log = %server.log().display(), database = db, "partitions: schedule {seed} failed");
    }
    Ok(report)
}

/// The worker processes of a schedule: any still running when it is dropped (a schedule that
/// failed half-way) are killed.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Stops the workers (SIGCONT first, in case one is paused, then SIGTERM); each must exit 0
/// within a minute.
async fn stop(children: &mut [Child], report: &mut ScheduleReport) {
    for c in children.iter() {
        let pid = Pid::from_raw(c.id() as i32);
        let _ = kill(pid, Signal::SIGCONT);
        let _ = kill(pid, Signal::SIGTERM);
    }
    for c in children.iter_mut() {
        let by = Instant::now() + Duration::from_secs(60);
        loop {
            match c.try_wait() {
                Ok(Some(status)) => {
                    if !status.success() {
                        report.unexpected_exits += 1;
                    }
                    break;
                }
                Ok(None) if Instant::now() < by => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                _ => {
                    let _ = c.kill();
                    let _ = c.wait();
                    report.unexpected_exits += 1;
                    break;
                }
            }
        }
    }
}
