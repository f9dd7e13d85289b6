//! The contract between the bench and a peer's drain harness (`scripts/graphile/drain.js`,
//! `scripts/awa`), and the one function that runs one.
//!
//! A harness is a child process given the benchmark database's URL in `DATABASE_URL`. It
//! installs its peer's schema, pre-inserts the jobs the peer's own way and closes its setup
//! connections, then prints one JSON line `{"ready": true, "<version key>": "<version>"}`
//! and waits for one line on stdin; on that line it drains the jobs and prints one JSON line
//! `{"jobs", "seconds", "jobs_per_s", "polls"}`: the jobs it ran, the time from its worker's
//! start to the last completion written, and how many "done yet" queries it made (each a
//! committed transaction in the database, taken out of the window's commit count). Anything
//! else it says goes to stderr; it exits 0.

use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

use super::DrainRun;
use super::meter::{Meter, cpu_now, idle_pct};
use skiplock::error::{Error, Result};

/// A harness's last line.
#[derive(Debug, Deserialize)]
struct Drained {
    jobs: usize,
    jobs_per_s: f64,
    polls: u64,
}

/// How long a harness may take to install its schema and insert its jobs, and to drain.
fn harness_limit(n: usize) -> Duration {
    Duration::from_secs(600) + Duration::from_millis(n as u64 * 10)
}

/// The version a ready line names under `key`, when the line says it is ready; an error
/// naming the line otherwise (pure: unit-tested).
pub fn ready_version(
    line: &serde_json::Value,
    key: &str,
) -> std::result::Result<Option<String>, String> {
    if line.get("ready").and_then(serde_json::Value::as_bool) != Some(true) {
        return Err(format!("its first line is not a ready line: {line:.200}"));
    }
    Ok(line.get(key).and_then(|v| v.as_str()).map(str::to_string))
}

async fn next_json<T: for<'de> Deserialize<'de>>(
    lines: &mut Lines<BufReader<ChildStdout>>,
    who: &str,
    what: &str,
    limit: Duration,
) -> Result<T> {
    let line = tokio::time::timeout(limit, lines.next_line())
        .await
        .map_err(|_| {
            Error::Other(format!(
                "bench: the {who} harness sent no {what} within {}s",
                limit.as_secs()
            ))
        })??
        .ok_or_else(|| {
            Error::Other(format!(
                "bench: the {who} harness exited before its {what} (its error is above)"
            ))
        })?;
    serde_json::from_str(&line).map_err(|e| {
        Error::Other(format!(
            "bench: the {who} harness's {what} is not what was expected ({e}): {line:.200}"
        ))
    })
}

/// Runs the harness `cmd` (`who` names it in messages; `version_key` is where its ready line
/// names the peer's version) to drain `n` jobs in the database of `url`: jobs/s as the
/// harness timed it, the window's cost, and the peer's version.
pub(crate) async fn drain(
    mut cmd: Command,
    who: &str,
    version_key: &str,
    url: &str,
    n: usize,
    meter: &Meter<'_>,
) -> Result<(DrainRun, Option<String>)> {
    let mut child = cmd
        .env("DATABASE_URL", url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            Error::Other(format!(
                "bench: cannot start the {who} harness ({:?}; or pass --skip-{}): {e}",
                cmd.as_std().get_program(),
                who.to_lowercase()
            ))
        })?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(Error::Other(format!(
            "bench: the {who} harness has no pipes"
        )));
    };
    let mut lines = BufReader::new(stdout).lines();
    let limit = harness_limit(n);
    let ready: serde_json::Value = next_json(&mut lines, who, "ready line", limit).await?;
    let version = ready_version(&ready, version_key)
        .map_err(|e| Error::Other(format!("bench: the {who} harness: {e}")))?;
    let mark = meter.begin().await?;
    let cpu0 = cpu_now();
    stdin.write_all(b"go\n").await?;
    stdin.flush().await?;
    let d: Drained = next_json(&mut lines, who, "result", limit).await?;
    let cpu1 = cpu_now();
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .map_err(|_| Error::Other(format!("bench: the {who} harness did not exit")))??;
    if !status.success() {
        return Err(Error::Other(format!(
            "bench: the {who} harness exited with {status}"
        )));
    }
    if d.jobs != n {
        return Err(Error::Other(format!(
            "bench: the {who} harness drained {} jobs, not {n}",
            d.jobs
        )));
    }
    // The harness's "all done yet" polls are commits in the database: taken out.
    let usage = meter.end(mark, n, d.polls).await?;
    Ok((
        DrainRun {
            jobs_per_s: d.jobs_per_s,
            usage,
            idle_pct: idle_pct(cpu0, cpu1),
        },
        version,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_ready_line_names_its_peers_version_under_its_own_key() {
        let line = json!({"ready": true, "jobs": 10, "awa": "0.6.9"});
        assert_eq!(ready_version(&line, "awa"), Ok(Some("0.6.9".into())));
        assert_eq!(ready_version(&line, "graphile_worker"), Ok(None));
        for not_ready in [json!({"ready": false}), json!({"jobs": 1}), json!("ready")] {
            let e = ready_version(&not_ready, "awa").unwrap_err();
            assert!(e.contains("not a ready line"), "{e}");
        }
    }
}
