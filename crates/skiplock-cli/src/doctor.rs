//! `skiplock doctor`: the checks of [`skiplock::doctor`], printed for people (worst first, grouped
//! by area, coloured on a terminal) or as JSON, with the exit status 0 (all well), 1 (a
//! warning) or 2 (something needs action now, or the database cannot be reached) for cron and
//! monitoring probes (docs/operations.md, "Keeping the database healthy").

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;

use super::ExitStatus;
use super::output::escape;
use skiplock::config;
use skiplock::doctor::{self, Report, Severity, Thresholds};

/// `skiplock doctor`'s flags.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// A transaction holding the vacuum horizon this long is a warning.
    #[arg(long, value_parser = config::parse_duration, default_value = "5m")]
    pub warn_age: Duration,
    /// A transaction holding the vacuum horizon this long needs action.
    #[arg(long, value_parser = config::parse_duration, default_value = "1h")]
    pub action_age: Duration,
    /// How long each check's statement may run.
    #[arg(long, value_parser = config::parse_duration, default_value = "5s")]
    pub statement_timeout: Duration,
    /// The most rows each listing shows.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
}

/// Runs the checks and exits with the report's status.
pub async fn run(url: Option<&str>, a: DoctorArgs) -> anyhow::Result<()> {
    super::check_flag("--limit", a.limit as i128, 1, 1000)?;
    super::check_duration_flag(
        "--statement-timeout",
        a.statement_timeout,
        Duration::from_millis(10),
        Duration::from_secs(600),
    )?;
    if a.action_age < a.warn_age {
        anyhow::bail!("invalid --action-age: must be at least --warn-age");
    }
    let t = Thresholds {
        warn_age: a.warn_age,
        action_age: a.action_age,
        rescue_after: config::env_duration("SKIPLOCK_RESCUE_AFTER", config::DEFAULT_RESCUE_AFTER)?,
        reaper_max_age: config::env_duration(
            "SKIPLOCK_REAPER_MAX_AGE",
            skiplock::maintenance::reaper::DEFAULT_MAX_AGE,
        )?,
        statement_timeout: a.statement_timeout,
        limit: a.limit,
        // Where a worker with this environment LISTENs in transaction mode.
        listen_url: config::env_opt("SKIPLOCK_LISTEN_URL").filter(|u| !u.trim().is_empty()),
    };
    // Not `connect_migrated`: a database at another SQL API version is one of the findings.
    let report = match super::connect(url, 2).await {
        Ok(pool) => doctor::examine(&pool, &t)
            .await
            .map_err(anyhow::Error::from),
        Err(e) => Err(e),
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("skiplock doctor: cannot check the database: {e}");
            return Err(ExitStatus(2).into());
        }
    };
    if a.json {
        super::output::print_json(&report)?;
    } else {
        print_human(&report);
    }
    match report.exit_code {
        0 => Ok(()),
        n => Err(ExitStatus(n).into()),
    }
}

fn print_human(r: &Report) {
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let paint = |sev: Severity, text: &str| -> String {
        let code = match sev {
            Severity::Action => "1;31",
            Severity::Warning => "33",
            Severity::Info => "36",
        };
        if colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    };
    if r.findings.is_empty() {
        println!("all well: nothing holds the vacuum horizon, nothing is stuck");
    }
    let mut last: Option<(Severity, doctor::Area)> = None;
    for f in &r.findings {
        if last != Some((f.severity, f.area)) {
            println!(
                "{} {}",
                paint(f.severity, &format!("[{}]", f.severity.label())),
                f.area.label()
            );
            last = Some((f.severity, f.area));
        }
        println!("  {} ({})", escape(&f.summary), f.check);
        for e in &f.evidence {
            println!("      {}: {}", escape(&e.name), escape(&e.value));
        }
        println!("    cost: {}", escape(&f.cost));
        println!("    fix:  {}", escape(&f.fix));
    }
    if !r.tables.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = r
            .tables
            .iter()
            .filter(|t| t.live_tuples + t.dead_tuples > 0)
            .map(|t| {
                vec![
                    format!("skiplock.{}", t.table),
                    t.live_tuples.to_string(),
                    t.dead_tuples.to_string(),
                    doctor::format_bytes(t.total_bytes),
                    t.vacuumed_seconds_ago
                        .map_or("never".into(), |s| format!("{} ago", doctor::format_age(s))),
                    t.analyzed_seconds_ago
                        .map_or("never".into(), |s| format!("{} ago", doctor::format_age(s))),
                ]
            })
            .collect();
        if !rows.is_empty() {
            super::output::print_table(
                &["table", "live", "dead", "size", "vacuumed", "analyzed"],
                &rows,
            );
        }
    }
    println!(
        "{}",
        match r.exit_code {
            0 => "exit 0: all well",
            1 => "exit 1: warnings",
            _ => "exit 2: action needed",
        }
    );
}
