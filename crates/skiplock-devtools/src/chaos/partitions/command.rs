//! `skiplock-devtools chaos --partitions` (hidden): the long partition run behind
//! `scripts/chaos --partitions`, each schedule's line as it ends, then the totals.

use crate::chaos::command::ChaosArgs;
use crate::chaos::partitions::{self, PartitionConfig, net};

/// Runs the schedules and prints their lines and the totals; fails unless every one is OK.
pub async fn run(a: &ChaosArgs) -> anyhow::Result<()> {
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
