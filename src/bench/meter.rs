//! What a drain costs besides time: the machine's idle share (from `/proc/stat`), the WAL the
//! server wrote (`pg_current_wal_lsn`) and the transactions committed in the benchmark's
//! database (`pg_stat_database.xact_commit`), per job.
//!
//! A window opens and closes *settled*: no client of the benchmark's database is connected but
//! the monitor, and the monitor's own statistics are flushed, so every commit made by the
//! drain (and nothing made before it) is in the counter. WAL is server-wide: anything else
//! the server does meanwhile counts too (compare figures from one run on a quiet server).

use std::time::{Duration, Instant};

use crate::store::Pool as PgPool;
use serde::Serialize;

use super::store;
use crate::error::{Error, Result};

/// How long the settle step waits for the drain's connections to close.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Cumulative CPU time of the whole machine, in `/proc/stat` ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    /// Ticks spent idle (iowait not included, as vmstat's `id`).
    pub idle: u64,
    /// Ticks spent waiting for I/O.
    pub iowait: u64,
    /// All ticks: user, nice, system, idle, iowait, irq, softirq, steal.
    pub total: u64,
}

/// The machine's CPU times from the text of `/proc/stat` (its first `cpu ` line); None when
/// the text has no such line.
pub fn parse_proc_stat(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 5 {
        return None;
    }
    Some(CpuTimes {
        idle: v[3],
        iowait: v[4],
        // guest time is already inside user, so it is not added again
        total: v.iter().sum(),
    })
}

/// The machine's CPU times now, or None where `/proc/stat` cannot be read (not Linux).
pub fn cpu_now() -> Option<CpuTimes> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Idle share of the machine, in %, between two readings; None without both or with no
/// ticks between them.
pub fn idle_pct(before: Option<CpuTimes>, after: Option<CpuTimes>) -> Option<f64> {
    let (a, b) = (before?, after?);
    let total = b.total.checked_sub(a.total)?;
    let idle = b.idle.checked_sub(a.idle)?;
    (total > 0).then(|| idle as f64 * 100.0 / total as f64)
}

/// Per-job cost of one drain.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    /// WAL bytes written by the server during the window, per job.
    pub wal_bytes_per_job: f64,
    /// Transactions committed in the benchmark's database per 1,000 jobs, the benchmark's own
    /// bookkeeping queries taken out; None before Postgres 15 (no forced stats flush).
    pub commits_per_1000: Option<f64>,
}

/// Readings at the opening of a window.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    wal: i64,
    commits: i64,
}

/// Opens and closes settled windows on the benchmark's database.
pub struct Meter<'a> {
    /// A connection to another database of the server (reading adds no commit here).
    pub admin: &'a PgPool,
    /// The benchmark's one connection to its own database.
    pub monitor: &'a PgPool,
    /// The benchmark's database.
    pub db: &'a str,
    /// Whether the server can flush a connection's statistics on request (15+).
    pub flushes: bool,
}

impl Meter<'_> {
    /// Waits until only the monitor is connected to the database and its statistics are
    /// written. Costs one commit of the monitor, counted before [`Meter::begin`]'s readings
    /// and taken out by [`Meter::end`].
    async fn settle(&self) -> Result<()> {
        if self.flushes {
            store::flush_stats(self.monitor).await?;
        }
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let n = store::other_clients(self.admin, self.db).await?;
            if n == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Other(format!(
                    "bench: {n} connection(s) to {} still open {}s after the drain",
                    self.db,
                    SETTLE_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Opens a window (call just before the drain starts).
    pub async fn begin(&self) -> Result<Mark> {
        self.settle().await?;
        Ok(Mark {
            wal: store::wal_position(self.admin).await?,
            commits: store::database_commits(self.admin, self.db).await?,
        })
    }

    /// Closes the window of `jobs` jobs once the drain's connections are closed;
    /// `own_commits` are the benchmark's bookkeeping queries on the database inside the
    /// window (e.g. "are all acks written" polls), taken out of the count.
    pub async fn end(&self, m: Mark, jobs: usize, own_commits: u64) -> Result<Usage> {
        self.settle().await?;
        let wal = store::wal_position(self.admin).await?;
        let commits = store::database_commits(self.admin, self.db).await?;
        let jobs = jobs.max(1) as f64;
        // + 1: this settle's own flush request is a commit of the monitor inside the window.
        let own = own_commits as i64 + i64::from(self.flushes);
        Ok(Usage {
            wal_bytes_per_job: (wal - m.wal) as f64 / jobs,
            commits_per_1000: self
                .flushes
                .then(|| (commits - m.commits - own).max(0) as f64 * 1000.0 / jobs),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 800 20 1 2 3 7 0\ncpu0 50 2 25 400 10 0 1 1 3 0\nintr 1 2\n";

    #[test]
    fn proc_stat_first_cpu_line() {
        let c = parse_proc_stat(STAT).unwrap();
        assert_eq!(c.idle, 800);
        assert_eq!(c.iowait, 20);
        // user..steal, not guest
        assert_eq!(c.total, 100 + 5 + 50 + 800 + 20 + 1 + 2 + 3);
        assert!(parse_proc_stat("intr 1 2\n").is_none());
        assert!(parse_proc_stat("cpu  1 2 x 4 5\n").is_none());
        assert!(parse_proc_stat("cpu  1 2 3\n").is_none());
    }

    #[test]
    fn idle_share_between_two_readings() {
        let a = CpuTimes {
            idle: 800,
            iowait: 20,
            total: 1000,
        };
        let b = CpuTimes {
            idle: 850,
            iowait: 30,
            total: 1200,
        };
        assert_eq!(idle_pct(Some(a), Some(b)), Some(25.0));
        assert_eq!(idle_pct(Some(a), Some(a)), None);
        assert_eq!(idle_pct(None, Some(b)), None);
        // a counter that went backwards gives no figure rather than nonsense
        assert_eq!(idle_pct(Some(b), Some(a)), None);
    }
}
