//! `skiplock bench`: runs the benchmark and prints a table (or `--json`).

use clap::Args;

use crate::bench::{BenchOptions, BenchReport, Stat, run};

/// `skiplock bench` flags.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Runs per figure (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Jobs per drain.
    #[arg(long, default_value_t = 50_000)]
    pub jobs: usize,
    /// Worker concurrency during drains.
    #[arg(long, default_value_t = 200)]
    pub concurrency: usize,
    /// Connections of the worker pool, the enqueue loops and the ceiling loop.
    #[arg(long, default_value_t = 8)]
    pub connections: u32,
    /// Finished rows of ballast for the scale run.
    #[arg(long, default_value_t = 1_000_000)]
    pub scale_finished: usize,
    /// Future-scheduled rows of ballast for the scale run.
    #[arg(long, default_value_t = 100_000)]
    pub scale_future: usize,
    /// Skip the scale run.
    #[arg(long)]
    pub skip_scale: bool,
}

fn rate(s: &Stat) -> String {
    format!("{:>9.0} jobs/s  ({:.0}–{:.0})", s.median, s.min, s.max)
}

fn ms(s: &Stat) -> String {
    format!("{:>9.2} ms      ({:.2}–{:.2})", s.median, s.min, s.max)
}

/// Prints the report as a table.
pub fn print_report(r: &BenchReport) {
    let s = &r.settings;
    println!(
        "skiplock bench: median of {} runs (min–max); {} jobs per drain, concurrency {}, {} connections",
        s["runs"], s["jobs"], s["concurrency"], s["connections"]
    );
    println!(
        "worker: fetch cooldown {}, ack delay {}",
        s["fetch_cooldown"], s["ack_delay"]
    );
    println!(
        "postgres {} (shared_buffers {}, synchronous_commit {}, fsync {})",
        r.postgres["server_version"],
        r.postgres["shared_buffers"],
        r.postgres["synchronous_commit"],
        r.postgres["fsync"]
    );
    println!();
    println!(
        "1. enqueue, single calls              {}",
        rate(&r.enqueue_single)
    );
    println!(
        "   enqueue_many, batches of 1,000     {}",
        rate(&r.enqueue_many)
    );
    println!("2. drain noop jobs                    {}", rate(&r.drain));
    println!(
        "3. latency enqueue→start p50          {}",
        ms(&r.latency_p50_ms)
    );
    println!(
        "   latency enqueue→start p99          {}",
        ms(&r.latency_p99_ms)
    );
    match (&r.drain_scaled, r.scale_ratio) {
        (Some(d), Some(ratio)) => {
            println!(
                "4. drain with {} finished + {} future rows {}",
                s["scale_finished"],
                s["scale_future"],
                rate(d)
            );
            println!("   scale ratio (4)/(2)                {ratio:>9.2}");
        }
        _ => println!("4. scale run skipped"),
    }
    println!("5. ceiling: plain SQL, 100 per txn    {}", rate(&r.ceiling));
    println!();
    println!("headline: drain / ceiling = {:.2}", r.drain_to_ceiling);
}

/// Runs `skiplock bench`.
pub async fn run_cli(url: Option<&str>, a: BenchArgs) -> anyhow::Result<()> {
    use super::check_flag;
    check_flag("--runs", a.runs as i128, 1, 100)?;
    check_flag("--jobs", a.jobs as i128, 1000, 10_000_000)?;
    check_flag("--concurrency", a.concurrency as i128, 1, 10_000)?;
    check_flag("--connections", a.connections.into(), 2, 1000)?;
    check_flag("--scale-finished", a.scale_finished as i128, 0, 100_000_000)?;
    check_flag("--scale-future", a.scale_future as i128, 0, 100_000_000)?;
    let server = crate::config::database_url(url)?;
    let o = BenchOptions {
        runs: a.runs.max(1),
        jobs: a.jobs.max(1000),
        concurrency: a.concurrency.max(1),
        connections: a.connections.max(2),
        scale_finished: a.scale_finished,
        scale_future: a.scale_future,
        skip_scale: a.skip_scale,
        ..BenchOptions::default()
    };
    let report = run(&server, &o, |m| eprintln!("bench: {m}")).await?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}
