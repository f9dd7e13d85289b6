//! `skiplock-devtools chaos` (hidden): the large fault-injection run behind `scripts/chaos`, and
//! `skiplock-devtools chaos-worker` (hidden), the worker processes it starts and kills. Hidden
//! subcommands rather than an example binary so the integration tests (which only know the
//! path of the `skiplock` binary) and the script run exactly the same code.

use std::path::PathBuf;

use clap::Args;

use crate::chaos::partitions::{self, PartitionConfig, net};
use crate::chaos::{self, ChaosConfig, cluster::PrivateCluster, ha::Failover, record::Record};
use skiplock::config::{self, QueueSettings, parse_duration};
use skiplock::worker::{Worker, shutdown};

/// `skiplock-devtools chaos` flags.
#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// Jobs to run.
    #[arg(long, default_value_t = 20_000)]
    pub jobs: u64,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// SIGKILLs at random moments (each killed worker is restarted).
    #[arg(long, default_value_t = 30)]
    pub kills: usize,
    /// Restart Postgres during the run (and stop it once for --outage). Runs on a private
    /// cluster started for the run (initdb in a temp dir), never on DATABASE_URL's server.
    #[arg(long)]
    pub pg_restart: bool,
    /// How many Postgres restarts, spread over the run (with --pg-restart).
    #[arg(long, default_value_t = 2)]
    pub pg_restarts: usize,
    /// With --pg-restart: stop Postgres this long once, mid-run (0s: no outage). Default:
    /// two and a half rescue windows, so a live job rescued because of the outage would
    /// show up as an unexplained duplicate.
    #[arg(long, value_parser = parse_duration)]
    pub outage: Option<std::time::Duration>,
    /// Concurrency of each worker.
    #[arg(long, default_value_t = 10)]
    pub concurrency: usize,
    /// Pool size of each worker.
    #[arg(long, default_value_t = 4)]
    pub max_connections: u32,
    /// Each job works for up to this many milliseconds.
    #[arg(long, default_value_t = 3)]
    pub work_ms: u64,
    /// Rescue timeout of the workers.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub rescue_after: std::time::Duration,
    /// Give up after this long.
    #[arg(long, default_value = "20m", value_parser = parse_duration)]
    pub deadline: std::time::Duration,
    /// Keep the worker logs here.
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
    /// Run on a highly available cluster of the run's own (`scripts/ha`: Patroni, etcd,
    /// HAProxy) and fail it over --failovers times: postmaster kill, node kill and
    /// switchover in turn. Workers connect through HAProxy and through a multi-host URL.
    #[arg(long, conflicts_with = "pg_restart")]
    pub failover: bool,
    /// Failovers to cause (with --failover).
    #[arg(long, default_value_t = 6)]
    pub failovers: usize,
    /// Time from one failover's recovery to the next (with --failover).
    #[arg(long, default_value = "12s", value_parser = parse_duration)]
    pub failover_every: std::time::Duration,
    /// Faults one worker sees (partitions, pauses, lost replies, resets, a slow link) and a
    /// full disk, at random, checked over the recorded history (src/chaos/partitions/).
    #[arg(long, conflicts_with_all = ["pg_restart", "failover"])]
    pub partitions: bool,
    /// Randomized schedules to run (with --partitions).
    #[arg(long, default_value_t = 50)]
    pub schedules: usize,
    /// The first schedule's seed (with --partitions; default: random, printed).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// Runs the chaos scenario and prints the summary line; fails unless it is OK.
pub async fn run(url: Option<&str>, a: ChaosArgs) -> anyhow::Result<()> {
    if a.partitions {
        return run_partitions(&a).await;
    }
    use skiplock_cli::check_flag;
    check_flag("--jobs", a.jobs.into(), 1, 10_000_000)?;
    check_flag("--workers", a.workers as i128, 1, 64)?;
    check_flag("--kills", a.kills as i128, 0, 100_000)?;
    check_flag("--concurrency", a.concurrency as i128, 1, 10_000)?;
    check_flag("--max-connections", a.max_connections.into(), 2, 1000)?;
    check_flag("--work-ms", a.work_ms.into(), 0, 60_000)?;
    let d = std::time::Duration::from_secs;
    skiplock_cli::check_duration_flag("--rescue-after", a.rescue_after, d(1), d(86_400))?;
    skiplock_cli::check_duration_flag("--deadline", a.deadline, d(1), d(7 * 86_400))?;
    let mut cfg = ChaosConfig::new(a.jobs, std::env::current_exe()?);
    cfg.workers = a.workers.max(1);
    cfg.kills = a.kills;
    cfg.pg_restart = a.pg_restart;
    cfg.pg_restart_count = a.pg_restarts;
    if a.pg_restart {
        cfg.outage = match a.outage {
            Some(d) if d.is_zero() => None,
            Some(d) => Some(d),
            None => Some(a.rescue_after.mul_f64(2.5)),
        };
    }
    cfg.concurrency = a.concurrency.max(1);
    cfg.max_connections = a.max_connections.max(2);
    cfg.work_ms = a.work_ms;
    cfg.rescue_after = a.rescue_after;
    cfg.deadline = a.deadline;
    cfg.log_dir = a.log_dir;
    cfg.progress = skiplock_cli::progress::Progress::bar(a.jobs, "chaos: jobs recorded");
    let report = if a.failover {
        check_flag("--failovers", a.failovers as i128, 1, 1000)?;
        skiplock_cli::check_duration_flag("--failover-every", a.failover_every, d(1), d(3600))?;
        let ha = tokio::task::spawn_blocking(crate::chaos::ha::HaCluster::start).await??;
        let admin = skiplock::db::connect(&ha.url("postgres")?, 1).await?;
        crate::chaos::store::create_database(&admin, "skiplock_chaos").await?;
        admin.close().await;
        cfg.failovers = (0..a.failovers)
            .map(|i| Failover::CYCLE[i % Failover::CYCLE.len()])
            .collect();
        cfg.failover_every = a.failover_every;
        cfg.worker_urls = vec![ha.url("skiplock_chaos")?, ha.hosts_url("skiplock_chaos")?];
        let r = chaos::run(&cfg, &ha.url("skiplock_chaos")?, Some(&ha)).await;
        tokio::task::spawn_blocking(move || drop(ha)).await?;
        r?
    } else if a.pg_restart {
        let cluster = tokio::task::spawn_blocking(PrivateCluster::start).await??;
        tracing::info!(dir = %cluster.path().display(), "private Postgres cluster started");
        let admin = skiplock::db::connect(&cluster.url("postgres"), 1).await?;
        crate::chaos::store::create_database(&admin, "skiplock_chaos").await?;
        admin.close().await;
        chaos::run(&cfg, &cluster.url("skiplock_chaos"), Some(&cluster)).await?
    } else {
        let url = config::database_url(url)?;
        chaos::run(&cfg, &url, None).await?
    };
    cfg.progress.finish();
    println!("{}", report.summary_line());
    if !report.ok() {
        anyhow::bail!(
            "chaos run failed: lost={} unexplained duplicates={} unexpected worker exits={}",
            report.lost,
            report.unexplained,
            report.unexpected_exits
        );
    }
    Ok(())
}

/// A worker with only the `chaos_record` handler, settings from the environment.
pub async fn worker(url: Option<&str>) -> anyhow::Result<()> {
    let settings = QueueSettings::from_env()?;
    let pool = skiplock::db::handler_pool(&config::database_url(url)?, &settings)?;
    // Only the chaos jobs (the driver counts every row of skiplock.jobs): no maintenance.
    let worker = Worker::builder(pool)
        .settings(settings)
        .without_maintenance()
        .register(Record)
        .register(crate::chaos::partitions::job::FaultJob)
        .build();
    worker.run(shutdown::signal()).await?;
    Ok(())
}

/// `chaos --partitions`: the long partition run behind `scripts/chaos --partitions`. Runs the
/// schedules and prints their lines and the totals; fails unless every one is OK.
async fn run_partitions(a: &ChaosArgs) -> anyhow::Result<()> {
    use skiplock_cli::check_flag;
    check_flag("--jobs", a.jobs.into(), 1, 10_000_000)?;
    check_flag("--workers", a.workers as i128, 1, 20)?;
    check_flag("--schedules", a.schedules as i128, 1, 100_000)?;
    let d = std::time::Duration::from_secs;
    skiplock_cli::check_duration_flag("--rescue-after", a.rescue_after, d(1), d(3600))?;
    if let Some(why) = net::unsupported() {
        anyhow::bail!("the partition run cannot run here: {why}");
    }
    let mut cfg = PartitionConfig::new(a.jobs, std::env::current_exe()?);
    cfg.schedules = a.schedules;
    cfg.workers = a.workers;
    cfg.rescue_after = a.rescue_after;
    cfg.concurrency = a.concurrency.max(1);
    cfg.log_dir = a.log_dir.clone();
    if let Some(seed) = a.seed {
        cfg.seed = seed;
    }
    println!(
        "partitions: {} schedules from seed {} ({} jobs, {} workers, rescue window {:?}); replay one with --seed N --schedules 1",
        cfg.schedules, cfg.seed, cfg.jobs, cfg.workers, cfg.rescue_after
    );
    let report = partitions::run(&cfg, |line| println!("{line}")).await?;
    println!("{}", report.summary_line());
    if !report.ok() {
        let failed: Vec<u64> = report
            .schedules
            .iter()
            .filter(|s| !s.ok())
            .map(|s| s.seed)
            .collect();
        anyhow::bail!(
            "the partition run failed: schedules {failed:?} (replay: --seed N --schedules 1)"
        );
    }
    Ok(())
}
