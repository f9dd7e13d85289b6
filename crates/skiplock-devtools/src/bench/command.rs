//! `skiplock-devtools bench`: runs the benchmark and prints a table (or `--json`).

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use crate::bench::targets::{Cmp, Verdict};
use crate::bench::{
    Awa, BenchOptions, BenchReport, DrainFigures, Graphile, Stat, drain, limits, run,
};

/// `skiplock-devtools bench` flags.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Print one JSON object (every figure, the settings and the targets).
    #[arg(long)]
    pub json: bool,
    /// Runs per figure (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Jobs per drain (at least 1,000; e.g. 2000 for a quick smoke run).
    #[arg(long, default_value_t = 50_000)]
    pub jobs: usize,
    /// Worker concurrency during drains (per process).
    #[arg(long, default_value_t = 200)]
    pub concurrency: usize,
    /// Connections of the worker pool (per process), the enqueue_many loop and the ceiling loop.
    #[arg(long, default_value_t = 10)]
    pub connections: u32,
    /// Concurrent clients of the single-call enqueue run.
    #[arg(long, default_value_t = 8)]
    pub enqueue_clients: usize,
    /// Jobs of the latency run.
    #[arg(long, default_value_t = 200)]
    pub latency_jobs: usize,
    /// Finished rows of ballast for the scale run.
    #[arg(long, default_value_t = 1_000_000)]
    pub scale_finished: usize,
    /// Future-scheduled rows of ballast for the scale run.
    #[arg(long, default_value_t = 100_000)]
    pub scale_future: usize,
    /// The folder of the Graphile Worker harness (drain.js with its node_modules).
    #[arg(long, default_value = "scripts/graphile")]
    pub graphile_dir: PathBuf,
    /// The Node.js executable for the Graphile harness.
    #[arg(long, default_value = "node")]
    pub node: String,
    /// Skip the enqueue rates.
    #[arg(long)]
    pub skip_enqueue: bool,
    /// Skip the multi-process drain.
    #[arg(long)]
    pub skip_processes: bool,
    /// Skip the drain through PgBouncer in transaction mode (skipped anyway when `pgbouncer`
    /// is not installed).
    #[arg(long)]
    pub skip_pgbouncer: bool,
    /// Skip the latency run.
    #[arg(long)]
    pub skip_latency: bool,
    /// Skip the plain-SQL ceiling.
    #[arg(long)]
    pub skip_ceiling: bool,
    /// Skip the Graphile Worker drain.
    #[arg(long)]
    pub skip_graphile: bool,
    /// The awa harness's executable (`scripts/awa`, built by `scripts/bench`).
    #[arg(long, default_value = "scripts/awa/target/release/skiplock-bench-awa")]
    pub awa_bin: PathBuf,
    /// Skip the awa drain.
    #[arg(long)]
    pub skip_awa: bool,
    /// With --pressure: run Graphile Worker only (to find the rate it holds before a full run).
    #[arg(long, requires = "pressure", conflicts_with = "skip_graphile")]
    pub skip_skiplock: bool,
    /// Skip the scale run.
    #[arg(long)]
    pub skip_scale: bool,
    /// Skip the drains under limits and the polite crawl.
    #[arg(long)]
    pub skip_limits: bool,
    /// Instead of the usual figures: the same drain of `--jobs` through an apalis worker on
    /// skiplock's `SkiplockStorage` and on apalis-postgres (`--concurrency`, `--connections`,
    /// `--runs` apply to both). Needs a build with the `apalis-bench` feature
    /// (`scripts/bench --apalis` builds it).
    #[arg(long)]
    pub apalis: bool,
    /// Instead of the usual figures: sustained load while Postgres cannot vacuum. A producer
    /// offers `--rate` jobs/s to one `skiplock worker --queues default=N` (and to Graphile
    /// Worker unless --skip-graphile) through a clean phase, a pressure phase (a held
    /// transaction id, or four REPEATABLE READ readers) and a recovery phase.
    #[arg(long)]
    pub pressure: bool,
    /// Offered jobs/s of --pressure.
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    /// Seconds of --pressure's clean phase.
    #[arg(long, default_value_t = 60)]
    pub clean_secs: u64,
    /// Seconds of --pressure's pressure phase.
    #[arg(long, default_value_t = 600)]
    pub pressure_secs: u64,
    /// Seconds of --pressure's recovery phase.
    #[arg(long, default_value_t = 120)]
    pub recovery_secs: u64,
    /// --pressure's scenarios, comma-separated: held-xmin, readers.
    #[arg(long, default_value = "held-xmin,readers")]
    pub scenarios: String,
    /// The worker's concurrency under --pressure (`--queues default=N`).
    #[arg(long, default_value_t = 50)]
    pub worker_concurrency: usize,
    /// With --pressure: also find the highest rate each queue sustains clean.
    #[arg(long)]
    pub ramp: bool,
    /// Seconds of each step of --ramp.
    #[arg(long, default_value_t = 20)]
    pub ramp_secs: u64,
    /// With --pressure: write a picture (SVG) of completion rate and pickup p95 over time.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

fn rate(s: Option<&Stat>) -> String {
    match s {
        Some(s) => format!("{:>9.0} jobs/s  ({:.0}–{:.0})", s.median, s.min, s.max),
        None => format!("{:>9}", "skipped"),
    }
}

fn ms(s: Option<&Stat>) -> String {
    match s {
        Some(s) => format!("{:>9.2} ms      ({:.2}–{:.2})", s.median, s.min, s.max),
        None => format!("{:>9}", "skipped"),
    }
}

fn ratio(s: Option<&Stat>) -> String {
    match s {
        Some(s) => format!("{:>9.2}         ({:.2}–{:.2})", s.median, s.min, s.max),
        None => format!("{:>9}", "–"),
    }
}

fn med(s: Option<&Stat>, decimals: usize) -> String {
    s.map(|s| format!("{:.*}", decimals, s.median))
        .unwrap_or_else(|| "–".into())
}

fn cost_row(out: &mut String, name: &str, f: Option<&DrainFigures>) {
    let Some(f) = f else { return };
    let _ = writeln!(
        out,
        "   {name:<28} {:>8} {:>12} {:>16} {:>14} {:>14}",
        med(f.idle_pct.as_ref(), 1),
        med(Some(&f.wal_bytes_per_job), 0),
        med(f.commits_per_1000.as_ref(), 1),
        med(f.server_us_per_job.as_ref(), 1),
        med(f.client_us_per_job.as_ref(), 1),
    );
}

/// Rows of the table: each label in one column 38 characters wide, then its figure.
fn lines(out: &mut String, rows: Vec<(String, String)>) {
    for (label, figure) in rows {
        let _ = writeln!(out, "{label:<37} {figure}");
    }
}

fn value(v: f64, unit: &str) -> String {
    match unit {
        "jobs/s" => format!("{v:.0} {unit}"),
        "×" => format!("{v:.2}{unit}"),
        "%" => format!("{v:.1} {unit}"),
        _ => format!("{v:.2} {unit}"),
    }
}

/// The report as the table `scripts/bench` prints.
pub fn render(r: &BenchReport) -> String {
    let s = &r.settings;
    let get = |k: &str| s.get(k).map(String::as_str).unwrap_or("?");
    let mut o = String::new();
    let _ = writeln!(
        o,
        "skiplock-devtools bench: median of {} runs (min–max); {} jobs per drain, concurrency {}, {} connections",
        get("runs"),
        get("jobs"),
        get("concurrency"),
        get("connections")
    );
    let _ = writeln!(
        o,
        "worker: fetch cooldown {}, ack delay {}, claim ahead {}",
        get("fetch_cooldown"),
        get("ack_delay"),
        get("claim_ahead")
    );
    for peer in ["graphile", "awa"] {
        if let Some(g) = s.get(peer) {
            let _ = writeln!(o, "peer: {g}");
        }
    }
    let _ = writeln!(o, "{}", crate::bench::postgres_heading(&r.postgres));
    let _ = writeln!(o);
    let rows: Vec<(String, String)> = vec![
        (
            format!(
                "1. enqueue, single calls, {} clients",
                get("enqueue_clients")
            ),
            rate(r.enqueue_single.as_ref()),
        ),
        (
            "   enqueue_many, batches of 1,000".into(),
            rate(r.enqueue_many.as_ref()),
        ),
        (
            "   baseline: plain 1-row INSERTs".into(),
            rate(r.enqueue_single_plain.as_ref()),
        ),
        (
            "   baseline: plain INSERT … SELECT".into(),
            rate(r.enqueue_many_plain.as_ref()),
        ),
        (
            "   single calls, a backlog waiting, no limit".into(),
            rate(r.enqueue_single_backlog.as_ref()),
        ),
        (
            "   single calls, a backlog waiting, admission limit".into(),
            rate(r.enqueue_single_admission.as_ref()),
        ),
        (
            "2. drain noop jobs, 1 process".into(),
            rate(Some(&r.drain.jobs_per_s)),
        ),
        (
            format!("   {} `skiplock worker` processes", drain::PROCESSES),
            rate(r.drain_processes.as_ref().map(|d| &d.jobs_per_s)),
        ),
        (
            format!(
                "   `skiplock worker --queues default={}`",
                drain::CLI_CONCURRENCY
            ),
            rate(r.drain_cli.as_ref()),
        ),
        (
            "   `skiplock worker` (no flags)".into(),
            rate(r.drain_cli_default.as_ref()),
        ),
        (
            "   its start to its first claim".into(),
            ms(r.first_claim_ms.as_ref()),
        ),
        (
            "   the same through PgBouncer (transaction mode)".into(),
            rate(r.drain_cli_pgbouncer.as_ref()),
        ),
        (
            "3. latency enqueue→start p50".into(),
            ms(r.latency_p50_ms.as_ref()),
        ),
        (
            "   latency enqueue→start p99".into(),
            ms(r.latency_p99_ms.as_ref()),
        ),
        (
            "   floor: plain INSERT+NOTIFY p50".into(),
            ms(r.latency_floor_p50_ms.as_ref()),
        ),
        (
            "   floor: plain INSERT+NOTIFY p99".into(),
            ms(r.latency_floor_p99_ms.as_ref()),
        ),
    ];
    lines(&mut o, rows);
    match (&r.drain_scaled, r.scale_ratio) {
        (Some(d), Some(ratio)) => lines(
            &mut o,
            vec![
                (
                    format!(
                        "4. drain with {} finished + {} future rows",
                        get("scale_finished"),
                        get("scale_future")
                    ),
                    rate(Some(d)),
                ),
                ("   scale ratio (4)/(2)".into(), format!("{ratio:>9.2}")),
            ],
        ),
        _ => {
            let _ = writeln!(o, "4. scale run skipped");
        }
    }
    let crawl = match r.crawl_pages_per_s.as_ref() {
        Some(s) => format!(
            "{:>9.0} pages/s (ideal {:.0})",
            s.median,
            limits::crawl_ideal()
        ),
        None => format!("{:>9}", "skipped"),
    };
    let rows: Vec<(String, String)> = vec![
        (
            "5. ceiling: plain SQL, 100 per txn".into(),
            rate(r.ceiling.as_ref().map(|d| &d.jobs_per_s)),
        ),
        (
            "   ceiling, claim and complete apart".into(),
            rate(r.ceiling_two_commits.as_ref().map(|d| &d.jobs_per_s)),
        ),
        (
            "6. graphile worker, batched".into(),
            rate(r.graphile.as_ref().map(|d| &d.jobs_per_s)),
        ),
        (
            "   awa, queue storage".into(),
            rate(r.awa.as_ref().map(|d| &d.jobs_per_s)),
        ),
        (
            "7. drain, per-key rate never binding".into(),
            rate(r.drain_key_rate.as_ref().map(|d| &d.jobs_per_s)),
        ),
        (
            "   drain, queue limit never binding".into(),
            rate(r.drain_queue_limit.as_ref().map(|d| &d.jobs_per_s)),
        ),
        (
            "   drain, fair queue".into(),
            rate(r.drain_fair.as_ref().map(|d| &d.jobs_per_s)),
        ),
        (
            format!("   drain {} jobs, plain", super::flows::FLOW_JOBS),
            rate(r.drain_flow_plain.as_ref().map(|d| &d.jobs_per_s)),
        ),
        (
            format!(
                "   drain {} jobs, fan-out + fan-in",
                super::flows::FLOW_JOBS
            ),
            rate(r.drain_flow.as_ref().map(|d| &d.jobs_per_s)),
        ),
        (
            format!(
                "   drain {} jobs, release ceiling (no edges, no counts)",
                super::flows::FLOW_JOBS
            ),
            rate(r.drain_flow_ceiling.as_ref().map(|d| &d.jobs_per_s)),
        ),
        (
            format!(
                "   drain {} jobs of {} recorded steps",
                super::steps::STEP_JOBS,
                super::steps::STEPS_PER_JOB
            ),
            rate(r.step_jobs_per_s.as_ref()),
        ),
        (
            format!(
                "   drain {} plain jobs beside it",
                super::steps::STEP_JOBS * super::steps::STEPS_PER_JOB
            ),
            rate(r.step_plain_jobs_per_s.as_ref()),
        ),
        (
            format!("   one checkpoint ({} in a row)", super::steps::IN_A_ROW),
            ms(r.checkpoint_ms.as_ref()),
        ),
        (
            format!("   one recorded step ({} in a row)", super::steps::IN_A_ROW),
            ms(r.step_ms.as_ref()),
        ),
        (
            format!(
                "8. crawl {} hosts × {} pages, {} ms",
                limits::CRAWL_HOSTS,
                limits::CRAWL_PAGES,
                limits::CRAWL_POLITENESS.as_millis()
            ),
            crawl,
        ),
    ];
    lines(&mut o, rows);
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "cost per drain (medians)          idle %   WAL B/job  commits/1k jobs  server µs/job  client µs/job"
    );
    cost_row(&mut o, "skiplock, 1 process", Some(&r.drain));
    cost_row(
        &mut o,
        &format!("skiplock, {} processes", drain::PROCESSES),
        r.drain_processes.as_ref(),
    );
    cost_row(
        &mut o,
        "per-key rate, never binding",
        r.drain_key_rate.as_ref(),
    );
    cost_row(
        &mut o,
        "queue limit, never binding",
        r.drain_queue_limit.as_ref(),
    );
    cost_row(&mut o, "fair queue", r.drain_fair.as_ref());
    cost_row(&mut o, "fan-out + fan-in", r.drain_flow.as_ref());
    cost_row(&mut o, "release ceiling", r.drain_flow_ceiling.as_ref());
    cost_row(&mut o, "ceiling", r.ceiling.as_ref());
    cost_row(
        &mut o,
        "ceiling, two commits",
        r.ceiling_two_commits.as_ref(),
    );
    cost_row(&mut o, "graphile", r.graphile.as_ref());
    cost_row(&mut o, "awa", r.awa.as_ref());
    let _ = writeln!(o);
    let _ = writeln!(o, "same-run ratios (median of the runs' ratios)");
    let processes = format!("{} processes / 1 process", drain::PROCESSES);
    let ratios: Vec<(&str, Option<&Stat>)> = vec![
        (
            "single enqueue / plain INSERT",
            r.enqueue_single_to_plain.as_ref(),
        ),
        (
            "enqueue_many / plain INSERT",
            r.enqueue_many_to_plain.as_ref(),
        ),
        (
            "single enqueue, admission limit / none",
            r.admission_to_single.as_ref(),
        ),
        ("skiplock / graphile", r.drain_to_graphile.as_ref()),
        ("skiplock worker / graphile", r.cli_to_graphile.as_ref()),
        ("skiplock / awa", r.drain_to_awa.as_ref()),
        ("skiplock worker / awa", r.cli_to_awa.as_ref()),
        (
            "skiplock worker via PgBouncer (transaction) / direct",
            r.pgbouncer_to_cli.as_ref(),
        ),
        (
            "skiplock worker, no flags / --queues",
            r.cli_default_to_cli.as_ref(),
        ),
        ("skiplock / ceiling", r.drain_to_ceiling.as_ref()),
        (
            "two-commit ceiling / ceiling",
            r.ceiling_two_commits_to_ceiling.as_ref(),
        ),
        (
            "skiplock / two-commit ceiling",
            r.drain_to_ceiling_two_commits.as_ref(),
        ),
        (
            "server CPU/job, skiplock / ceiling",
            r.server_cpu_to_ceiling.as_ref(),
        ),
        (
            "WAL per job, skiplock / graphile",
            r.wal_to_graphile.as_ref(),
        ),
        ("WAL per job, skiplock / awa", r.wal_to_awa.as_ref()),
        (
            "latency p50, skiplock / floor",
            r.latency_p50_to_floor.as_ref(),
        ),
        (&processes, r.processes_to_drain.as_ref()),
        (
            "per-key rate drain / plain drain",
            r.key_rate_to_drain.as_ref(),
        ),
        (
            "queue limit drain / plain drain",
            r.queue_limit_to_drain.as_ref(),
        ),
        ("fair queue drain / plain drain", r.fair_to_drain.as_ref()),
        (
            "fan-out + fan-in drain / plain drain",
            r.flow_to_drain.as_ref(),
        ),
        (
            "release ceiling / plain drain",
            r.flow_ceiling_to_drain.as_ref(),
        ),
        (
            "fan-out + fan-in drain / release ceiling",
            r.flow_to_ceiling.as_ref(),
        ),
        ("fan-out alone / plain drain", r.fan_out_to_drain.as_ref()),
        ("fan-in alone / plain drain", r.fan_in_to_drain.as_ref()),
        ("crawl pages/s / ideal", r.crawl_to_ideal.as_ref()),
        (
            "a job of 10 recorded steps / 10 plain jobs",
            r.step_job_to_ten_plain.as_ref(),
        ),
    ];
    lines(
        &mut o,
        ratios
            .into_iter()
            .map(|(label, s)| (format!("   {label}"), ratio(s)))
            .collect(),
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "TARGETS (docs/performance.md)");
    for t in &r.targets {
        let cmp = match t.target.cmp {
            Cmp::AtLeast => "≥",
            Cmp::AtMost => "≤",
        };
        let v = t
            .value
            .map(|v| value(v, t.target.unit))
            .unwrap_or_else(|| "–".into());
        let verdict = match t.verdict {
            Verdict::Pass => "PASS",
            Verdict::Miss => "MISS",
            Verdict::NotMeasured => "not measured",
        };
        let _ = writeln!(
            o,
            "   {:<38} {:>15}   target {cmp} {:<14} {verdict}",
            t.target.label,
            v,
            value(t.target.bound, t.target.unit)
        );
    }
    o
}

/// Runs `skiplock-devtools bench`.
pub async fn run_cli(url: Option<&str>, a: BenchArgs) -> anyhow::Result<()> {
    use skiplock_cli::check_flag;
    check_flag("--runs", a.runs as i128, 1, 100)?;
    check_flag("--jobs", a.jobs as i128, 1000, 10_000_000)?;
    check_flag("--concurrency", a.concurrency as i128, 1, 10_000)?;
    check_flag("--connections", a.connections.into(), 2, 1000)?;
    check_flag("--scale-finished", a.scale_finished as i128, 0, 100_000_000)?;
    check_flag("--scale-future", a.scale_future as i128, 0, 100_000_000)?;
    let server = skiplock::config::database_url(url)?;
    if a.apalis {
        return run_apalis(&server, &a).await;
    }
    if a.pressure {
        return run_pressure(&server, a).await;
    }
    let worker_bin = if a.skip_processes {
        None
    } else {
        Some(std::env::current_exe()?)
    };
    let o = BenchOptions {
        runs: a.runs.max(1),
        jobs: a.jobs.max(1000),
        concurrency: a.concurrency.max(1),
        connections: a.connections.max(2),
        enqueue_clients: a.enqueue_clients.max(1),
        latency_jobs: a.latency_jobs.max(1),
        scale_finished: a.scale_finished,
        scale_future: a.scale_future,
        worker_bin,
        graphile: Graphile {
            node: a.node,
            dir: a.graphile_dir,
        },
        skip_enqueue: a.skip_enqueue,
        skip_processes: a.skip_processes,
        skip_latency: a.skip_latency,
        skip_ceiling: a.skip_ceiling,
        skip_graphile: a.skip_graphile,
        awa: Awa { bin: a.awa_bin },
        skip_awa: a.skip_awa,
        skip_scale: a.skip_scale,
        skip_limits: a.skip_limits,
        pgbouncer: if a.skip_pgbouncer {
            None
        } else {
            let found = super::pgbouncer::find();
            if found.is_none() {
                eprintln!(
                    "bench: pgbouncer is not installed (apt-get install pgbouncer): the drain \
                     through it is skipped"
                );
            }
            found
        },
        worker: skiplock::config::QueueSettings::from_env()?,
    };
    // On a terminal a spinner shows the running step and the time; each step also leaves a
    // line (plain stderr lines elsewhere, as before).
    let progress = skiplock_cli::progress::Progress::spinner("bench");
    let report = run(&server, &o, |m| {
        progress.line(&format!("bench: {m}"));
        progress.message(m.to_string());
    })
    .await;
    progress.clear();
    let report = report?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// `skiplock-devtools bench --pressure`.
async fn run_pressure(server: &str, a: BenchArgs) -> anyhow::Result<()> {
    use crate::bench::pressure::{self, PressureOptions, Scenario};
    use skiplock_cli::check_flag;
    check_flag(
        "--worker-concurrency",
        a.worker_concurrency as i128,
        1,
        10_000,
    )?;
    check_flag("--clean-secs", a.clean_secs.into(), 5, 86_400)?;
    check_flag("--pressure-secs", a.pressure_secs.into(), 5, 86_400)?;
    check_flag("--recovery-secs", a.recovery_secs.into(), 5, 86_400)?;
    check_flag("--ramp-secs", a.ramp_secs.into(), 10, 3600)?;
    if !(a.rate.is_finite() && (1.0..=1_000_000.0).contains(&a.rate)) {
        anyhow::bail!("--rate must be 1 to 1000000 jobs/s, got {}", a.rate);
    }
    let scenarios = a
        .scenarios
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(Scenario::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let o = PressureOptions {
        rate: a.rate,
        clean: std::time::Duration::from_secs(a.clean_secs),
        pressure: std::time::Duration::from_secs(a.pressure_secs),
        recovery: std::time::Duration::from_secs(a.recovery_secs),
        scenarios,
        concurrency: a.worker_concurrency,
        worker_bin: std::env::current_exe()?,
        skiplock: !a.skip_skiplock,
        graphile: (!a.skip_graphile).then(|| Graphile {
            node: a.node.clone(),
            dir: a.graphile_dir.clone(),
        }),
        ramp: a.ramp,
        ramp_step: std::time::Duration::from_secs(a.ramp_secs),
    };
    let progress = skiplock_cli::progress::Progress::spinner("bench");
    let report = pressure::run(server, &o, |m| {
        progress.line(&format!("bench: {m}"));
        progress.message(m.to_string());
    })
    .await;
    progress.clear();
    let report = report?;
    if let Some(path) = &a.svg {
        std::fs::write(path, pressure::svg(&report))
            .map_err(|e| anyhow::anyhow!("bench: cannot write {}: {e}", path.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", pressure::render(&report));
    }
    Ok(())
}

/// `skiplock-devtools bench --apalis`.
#[cfg(feature = "apalis-bench")]
async fn run_apalis(server: &str, a: &BenchArgs) -> anyhow::Result<()> {
    use crate::bench::apalis::{ApalisOptions, render, run};
    let o = ApalisOptions {
        jobs: a.jobs,
        concurrency: a.concurrency,
        connections: a.connections,
        runs: a.runs.max(1),
    };
    let progress = skiplock_cli::progress::Progress::spinner("bench");
    let report = run(server, &o, |m| {
        progress.line(&format!("bench: {m}"));
        progress.message(m.to_string());
    })
    .await;
    progress.clear();
    let report = report?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// `skiplock-devtools bench --apalis` in a build without the apalis backend: say how to get one.
#[cfg(not(feature = "apalis-bench"))]
async fn run_apalis(_server: &str, _a: &BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "bench --apalis: this skiplock was built without the `apalis-bench` feature; run \
         `scripts/bench --apalis` (or build with `--features apalis-bench`)"
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::bench::targets::evaluate;

    fn stat(v: f64) -> Stat {
        Stat::of(&[v])
    }

    #[test]
    fn the_table_ends_with_every_target_and_its_verdict() {
        let figures = BTreeMap::from([
            ("drain_to_graphile".to_string(), 0.7),
            ("idle_pct".to_string(), 5.0),
        ]);
        let r = BenchReport {
            settings: BTreeMap::from([
                ("runs".to_string(), "1".to_string()),
                ("awa".to_string(), "awa 0.6.9, queue storage".to_string()),
            ]),
            postgres: BTreeMap::from([("autovacuum".to_string(), "on".to_string())]),
            enqueue_single: None,
            enqueue_many: Some(stat(150_000.0)),
            enqueue_single_plain: None,
            enqueue_many_plain: None,
            enqueue_single_to_plain: None,
            enqueue_many_to_plain: None,
            enqueue_single_backlog: None,
            enqueue_single_admission: None,
            admission_to_single: None,
            drain: DrainFigures {
                jobs_per_s: stat(20_000.0),
                wal_bytes_per_job: stat(929.0),
                commits_per_1000: Some(stat(13.6)),
                idle_pct: Some(stat(5.0)),
                server_us_per_job: Some(stat(37.5)),
                client_us_per_job: None,
            },
            drain_processes: None,
            latency_p50_ms: None,
            latency_p99_ms: None,
            latency_floor_p50_ms: None,
            latency_floor_p99_ms: None,
            latency_p50_to_floor: None,
            drain_scaled: None,
            scale_ratio: None,
            ceiling: None,
            ceiling_two_commits: None,
            graphile: None,
            awa: None,
            drain_to_ceiling: None,
            drain_to_ceiling_two_commits: Some(stat(0.83)),
            ceiling_two_commits_to_ceiling: None,
            drain_to_graphile: Some(stat(0.7)),
            wal_to_graphile: None,
            drain_to_awa: None,
            wal_to_awa: None,
            server_cpu_to_ceiling: Some(stat(1.25)),
            processes_to_drain: None,
            drain_cli: None,
            drain_cli_default: None,
            first_claim_ms: None,
            cli_to_graphile: None,
            cli_to_awa: None,
            cli_default_to_cli: None,
            drain_cli_pgbouncer: None,
            pgbouncer_to_cli: None,
            drain_key_rate: None,
            drain_queue_limit: None,
            key_rate_to_drain: None,
            queue_limit_to_drain: None,
            drain_fair: None,
            fair_to_drain: None,
            drain_flow: None,
            drain_flow_plain: None,
            flow_to_drain: None,
            drain_flow_ceiling: None,
            flow_ceiling_to_drain: None,
            flow_to_ceiling: None,
            fan_out_to_drain: None,
            fan_in_to_drain: None,
            crawl_pages_per_s: Some(stat(450.0)),
            step_jobs_per_s: None,
            step_plain_jobs_per_s: None,
            step_job_to_ten_plain: None,
            checkpoint_ms: None,
            step_ms: None,
            crawl_to_ideal: Some(stat(0.9)),
            targets: evaluate(&figures),
            figures,
        };
        let out = render(&r);
        // The peer's version and the server's autovacuum are in the heading.
        assert!(out.contains("peer: awa 0.6.9, queue storage"), "{out}");
        assert!(out.contains("(autovacuum on, "), "{out}");
        let block = out.split("TARGETS").nth(1).unwrap();
        assert_eq!(
            block.lines().filter(|l| !l.trim().is_empty()).count(),
            1 + crate::bench::targets::TARGETS.len()
        );
        assert!(block.contains("skiplock / graphile (batched)") && block.contains("0.70×"));
        assert!(
            block
                .lines()
                .any(|l| l.contains("graphile (batched)") && l.ends_with("MISS"))
        );
        assert!(
            block
                .lines()
                .any(|l| l.contains("machine idle") && l.ends_with("PASS"))
        );
        assert!(
            block
                .lines()
                .any(|l| l.contains("enqueue_many") && l.ends_with("not measured"))
        );
        assert!(out.contains("   skiplock, 1 process"));
        // The two-commit ceiling's ratio is printed beside the target's one.
        assert!(
            out.lines()
                .any(|l| l.contains("skiplock / two-commit ceiling") && l.contains("0.83")),
            "{out}"
        );
        assert!(out.contains("929"));
        // The server's CPU per job, and the client's left out where not measured.
        assert!(
            out.lines().any(|l| l.starts_with("   skiplock, 1 process")
                && l.contains("37.5")
                && l.trim_end().ends_with('–')),
            "{out}"
        );
        assert!(
            out.lines()
                .any(|l| l.contains("server CPU/job, skiplock / ceiling") && l.contains("1.25")),
            "{out}"
        );
        assert!(out.contains("450 pages/s (ideal 500)"), "{out}");
    }

    /// `skiplock-devtools bench` as the CLI parses it.
    #[derive(Debug, clap::Parser)]
    struct Bench {
        #[command(flatten)]
        args: BenchArgs,
    }

    #[test]
    fn graphile_alone_is_a_pressure_run_only() {
        use clap::Parser;
        let a = Bench::try_parse_from(["bench", "--pressure", "--skip-skiplock"])
            .expect("--pressure --skip-skiplock")
            .args;
        assert!(a.pressure && a.skip_skiplock && !a.skip_graphile);
        for refused in [
            vec!["bench", "--skip-skiplock"],
            vec!["bench", "--pressure", "--skip-skiplock", "--skip-graphile"],
        ] {
            let e = Bench::try_parse_from(&refused).expect_err("refused");
            assert!(e.to_string().contains("--skip-skiplock"), "{e}");
        }
    }
}
