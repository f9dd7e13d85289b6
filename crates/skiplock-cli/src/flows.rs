//! `wait` and `flow`: waiting for a job's end, and a flow's progress (docs/flows.md).

use std::time::Duration;

use clap::Args;

use super::output::{print_json, print_table, say};
use super::{ExitStatus, check_duration_flag, connect_migrated};
use skiplock::config::parse_duration;
use skiplock::queue::JobState;
use skiplock::store::flows;

/// `skiplock wait`.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Job id.
    pub id: i64,
    /// How long to wait at most (e.g. 30s, 5m; at most 24h).
    #[arg(long, default_value = "30s")]
    pub timeout: String,
    /// Print JSON ({"state", "result", "finished"}).
    #[arg(long)]
    pub json: bool,
}

/// The exit status `skiplock wait` reports for what it saw (docs/cli.md, "skiplock wait"):
/// 0 completed, 3 discarded, 4 cancelled, 5 not finished within the timeout.
pub fn wait_status(state: JobState, finished: bool) -> u8 {
    match (finished, state) {
        (true, JobState::Completed) => 0,
        (true, JobState::Discarded) => 3,
        (true, JobState::Cancelled) => 4,
        _ => 5,
    }
}

/// Waits for a job to finish; prints its state and result; the exit status says how it ended.
pub async fn wait(url: Option<&str>, a: WaitArgs) -> anyhow::Result<()> {
    let timeout =
        parse_duration(&a.timeout).map_err(|e| anyhow::anyhow!("invalid --timeout: {e}"))?;
    check_duration_flag(
        "--timeout",
        timeout,
        Duration::ZERO,
        Duration::from_secs(24 * 3600),
    )?;
    let pool = connect_migrated(url).await?;
    let w = skiplock::wait_for(&pool, a.id, timeout).await?;
    if a.json {
        print_json(&w)?;
    } else {
        say!(
            "{}{}",
            w.state,
            if w.finished { "" } else { " (timed out)" }
        );
        if let Some(r) = &w.result {
            say!("{r}");
        }
    }
    match wait_status(w.state, w.finished) {
        0 => Ok(()),
        code => Err(ExitStatus(code).into()),
    }
}

/// `skiplock flow`.
#[derive(Debug, Args)]
pub struct FlowArgs {
    /// The flow's id (what `skiplock.enqueue_flow` returned), or any job's id: that job and
    /// everything that depends on it.
    pub id: i64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Shows a flow's progress and its jobs.
pub async fn flow(url: Option<&str>, a: FlowArgs) -> anyhow::Result<()> {
    let pool = connect_migrated(url).await?;
    let p = flows::flow_progress(&pool, a.id).await?;
    if p.total == 0 {
        anyhow::bail!("no flow or job {}", a.id);
    }
    let members = flows::flow_members(&pool, a.id, super::MAX_LIMIT as i64).await?;
    if a.json {
        return print_json(&serde_json::json!({ "progress": p, "jobs": members }));
    }
    say!(
        "{} jobs: {} waiting, {} available, {} running, {} completed, {} discarded, {} cancelled",
        p.total,
        p.waiting,
        p.available,
        p.running,
        p.completed,
        p.discarded,
        p.cancelled
    );
    if p.truncated {
        say!(
            "(the dependents of job {} go on past the first {} jobs reached: setting flow_members.max_jobs)",
            a.id,
            p.total
        );
    }
    print_table(
        &["NAME", "ID", "KIND", "STATE", "WAITS FOR"],
        &members
            .iter()
            .map(|m| {
                vec![
                    m.name.clone().unwrap_or_else(|| "-".into()),
                    m.id.to_string(),
                    m.kind.clone(),
                    m.state.to_string(),
                    if m.pending > 0 {
                        format!("{} more", m.pending)
                    } else {
                        "-".into()
                    },
                ]
            })
            .collect::<Vec<_>>(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_status_tells_how_the_job_ended() {
        assert_eq!(wait_status(JobState::Completed, true), 0);
        assert_eq!(wait_status(JobState::Discarded, true), 3);
        assert_eq!(wait_status(JobState::Cancelled, true), 4);
        assert_eq!(wait_status(JobState::Running, false), 5);
        assert_eq!(wait_status(JobState::Waiting, false), 5);
    }
}
