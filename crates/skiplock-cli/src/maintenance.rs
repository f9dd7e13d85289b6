//! `skiplock periodic` (the periodic jobs workers declared, with their last and next run,
//! among them the built-in `reap` and `retain`) and `skiplock reap [--dry-run]` (the reaper,
//! run once by hand, outside the `reap` job).
//!
//! `skiplock reap` without `--dry-run` discards what the reaper would discard (abandoned jobs,
//! never held ones; each with the reason in its `errors`), with the same uptime guard applied
//! to the worker fleet instead of this short-lived command: it discards only if some live
//! worker (heartbeat within `SKIPLOCK_RESCUE_AFTER`) has been up for at least
//! `SKIPLOCK_REAPER_MAX_AGE`. Otherwise it discards nothing and says why: right after an
//! outage every row looks stale, and that is exactly when an operator reaches for the command.

use chrono::{DateTime, Utc};
use clap::Args;
use serde::Serialize;

use super::connect_migrated;
use super::output::{print_json, print_table, say, truncate, ts};
use skiplock::config::{DEFAULT_RESCUE_AFTER, env_duration};
use skiplock::maintenance::periodic::{PeriodicJobs, Schedule};
use skiplock::maintenance::reaper::{self, ReapCandidate, ReaperSettings};
use skiplock::maintenance::{MaintenanceSettings, builtin_jobs};
use skiplock::store;

/// `skiplock periodic`.
#[derive(Debug, Args)]
pub struct PeriodicArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `skiplock reap [--dry-run]`.
#[derive(Debug, Args)]
pub struct ReapArgs {
    /// List what would be discarded, discard nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: list at most this many.
    #[arg(long, default_value_t = 100)]
    pub limit: i64,
    /// With --dry-run: print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One line of `skiplock periodic`.
#[derive(Debug, Serialize)]
struct PeriodicLine {
    name: String,
    schedule: String,
    kind: String,
    queue: String,
    last_period: Option<DateTime<Utc>>,
    last_job_id: Option<i64>,
    last_job_state: Option<String>,
    next_run: Option<DateTime<Utc>>,
    declared_by: Option<String>,
    /// Why its latest enqueue failed (none since its last successful one: `None`).
    last_error: Option<String>,
    last_error_at: Option<DateTime<Utc>>,
    /// What to show when no worker has declared it yet.
    #[serde(skip)]
    source: &'static str,
}

/// Runs `skiplock periodic`: the jobs declared by workers (`skiplock.periodic_jobs`), plus
/// the built-in ones and any in this environment's `SKIPLOCK_PERIODIC_FILE` that no worker
/// has declared yet.
pub async fn periodic(url: Option<&str>, a: PeriodicArgs) -> anyhow::Result<()> {
    let (reaper, retention) = MaintenanceSettings::services_from_env()?;
    let builtin = builtin_jobs(&reaper, &retention)?;
    let file_jobs = PeriodicJobs::from_env()?;
    let pool = connect_migrated(url).await?;
    let rows = store::maintenance::list_periodic(&pool).await?;
    let now = store::maintenance::db_now(&pool).await?;
    let mut lines: Vec<PeriodicLine> = rows
        .into_iter()
        .map(|r| PeriodicLine {
            next_run: Schedule::parse(&r.schedule)
                .ok()
                .and_then(|s| s.next_after(now)),
            name: r.name,
            schedule: r.schedule,
            kind: r.kind,
            queue: r.queue,
            last_period: r.last_period,
            last_job_id: r.last_job_id,
            last_job_state: r.last_job_state.map(|s| s.to_string()),
            declared_by: Some(r.declared_by),
            last_error: r.last_error,
            last_error_at: r.last_error_at,
            source: "",
        })
        .collect();
    let undeclared = builtin
        .jobs()
        .iter()
        .map(|j| (j, "(built in; no worker yet)"))
        .chain(
            file_jobs
                .jobs()
                .iter()
                .map(|j| (j, "(file; no worker yet)")),
        );
    for (j, source) in undeclared {
        if !lines.iter().any(|l| l.name == j.name) {
            lines.push(PeriodicLine {
                name: j.name.clone(),
                schedule: j.schedule.describe(),
                kind: j.job.kind.clone(),
                queue: j.job.queue.clone(),
                last_period: None,
                last_job_id: None,
                last_job_state: None,
                next_run: j.schedule.next_after(now),
                declared_by: None,
                last_error: None,
                last_error_at: None,
                source,
            });
        }
    }
    if a.json {
        return print_json(&lines);
    }
    if lines.is_empty() {
        say!(
            "no periodic jobs (declare them in code or in SKIPLOCK_PERIODIC_FILE; workers list them here)"
        );
        return Ok(());
    }
    let table: Vec<Vec<String>> = lines
        .iter()
        .map(|l| {
            let last = match (l.last_period, l.last_job_id) {
                (Some(p), Some(id)) => format!(
                    "{} (job {id}, {})",
                    ts(Some(p)),
                    l.last_job_state.as_deref().unwrap_or("deleted")
                ),
                (Some(p), None) => ts(Some(p)),
                _ => "never".into(),
            };
            // A failing enqueue shows in place of the last run it stops.
            let last = match &l.last_error {
                Some(e) => format!(
                    "failed {}: {} (last run {last})",
                    ts(l.last_error_at),
                    truncate(e, 120)
                ),
                None => last,
            };
            vec![
                l.name.clone(),
                l.schedule.clone(),
                l.kind.clone(),
                l.queue.clone(),
                last,
                ts(l.next_run),
                l.declared_by.clone().unwrap_or_else(|| l.source.into()),
            ]
        })
        .collect();
    print_table(
        &[
            "NAME",
            "SCHEDULE",
            "KIND",
            "QUEUE",
            "LAST RUN",
            "NEXT RUN",
            "DECLARED BY",
        ],
        &table,
    );
    Ok(())
}

/// Whether the fleet's uptime lets the reaper discard, and a sentence saying why (not).
fn fleet_guard(
    now: DateTime<Utc>,
    oldest: Option<DateTime<Utc>>,
    s: &ReaperSettings,
) -> (bool, String) {
    let max = humantime::format_duration(s.max_age);
    match oldest {
        None => (
            false,
            format!("no live worker, so the uptime guard holds (a worker must be up for {max})"),
        ),
        Some(started) => {
            let up = (now - started).to_std().unwrap_or_default();
            let up_s = humantime::format_duration(std::time::Duration::from_secs(up.as_secs()));
            if up >= s.max_age {
                (
                    true,
                    format!("the oldest live worker has been up {up_s} (at least {max})"),
                )
            } else {
                (
                    false,
                    format!(
                        "the uptime guard holds: the oldest live worker has been up {up_s} of {max}"
                    ),
                )
            }
        }
    }
}

/// Runs `skiplock reap`.
pub async fn reap(url: Option<&str>, a: ReapArgs) -> anyhow::Result<()> {
    super::check_flag("--limit", a.limit.into(), 1, super::MAX_LIMIT)?;
    let settings = MaintenanceSettings::reaper_from_env()?;
    let live_within = env_duration("SKIPLOCK_RESCUE_AFTER", DEFAULT_RESCUE_AFTER)?;
    let pool = connect_migrated(url).await?;
    let (now, oldest) = reaper::oldest_live_worker(&pool, live_within).await?;
    let (allowed, why) = fleet_guard(now, oldest, &settings);
    let max = humantime::format_duration(settings.max_age);

    if a.dry_run {
        let (_, jobs) = reaper::preview(&pool, settings.max_age, a.limit).await?;
        // Held jobs (paused queue, limits, no worker for the kind) are never listed: the
        // reaper never takes them (docs/maintenance.md, "The reaper").
        if a.json {
            return print_json(&jobs.iter().map(CandidateJson::from).collect::<Vec<_>>());
        }
        if jobs.is_empty() {
            say!("no unfinished job is abandoned past {max} (held jobs are never reaped)");
            return Ok(());
        }
        let rows: Vec<Vec<String>> = jobs
            .iter()
            .map(|j| {
                vec![
                    j.id.to_string(),
                    j.kind.clone(),
                    j.queue.clone(),
                    j.state.to_string(),
                    ts(j.scheduled_at),
                    ts(j.attempted_at),
                    ts(Some(j.created_at)),
                    truncate(&j.args, 60),
                ]
            })
            .collect();
        print_table(
            &[
                "ID",
                "KIND",
                "QUEUE",
                "STATE",
                "SCHEDULED",
                "ATTEMPTED",
                "CREATED",
                "ARGS",
            ],
            &rows,
        );
        let verdict = if allowed {
            "`skiplock reap` would discard them now"
        } else {
            "`skiplock reap` would discard none yet"
        };
        say!(
            "{} job(s) past the maximum age of {max}; {verdict}: {why}",
            jobs.len()
        );
        return Ok(());
    }

    let Some(started) = oldest.filter(|_| allowed) else {
        say!("discarded nothing: {why}");
        return Ok(());
    };
    let progress = crate::progress::Progress::spinner("reap");
    progress.message(format!("discarding jobs abandoned past {max}, in batches"));
    let n = reaper::reap(&pool, settings.max_age, None, move |_| started).await;
    progress.clear();
    let n = n?;
    say!(
        "discarded {n} job(s) abandoned past the maximum age of {max} (the reason is in their errors; retention deletes them after SKIPLOCK_RETAIN_FAILED)"
    );
    Ok(())
}

#[derive(Serialize)]
struct CandidateJson<'a> {
    id: i64,
    kind: &'a str,
    queue: &'a str,
    state: &'a str,
    /// As the database prints it (never decoded, so any row can be listed).
    args: &'a str,
    scheduled_at: Option<DateTime<Utc>>,
    attempted_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
}

impl<'a> From<&'a ReapCandidate> for CandidateJson<'a> {
    fn from(j: &'a ReapCandidate) -> Self {
        CandidateJson {
            id: j.id,
            kind: &j.kind,
            queue: &j.queue,
            state: j.state.as_str(),
            args: &j.args,
            scheduled_at: j.scheduled_at,
            attempted_at: j.attempted_at,
            created_at: j.created_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fleet_guard_needs_a_worker_up_for_the_max_age() {
        let s = ReaperSettings {
            max_age: Duration::from_secs(3600),
            interval: Duration::from_secs(30),
        };
        let now = Utc::now();
        assert!(!fleet_guard(now, None, &s).0);
        assert!(!fleet_guard(now, Some(now - chrono::Duration::seconds(3599)), &s).0);
        let (ok, why) = fleet_guard(now, Some(now - chrono::Duration::seconds(3600)), &s);
        assert!(ok, "{why}");
    }
}
