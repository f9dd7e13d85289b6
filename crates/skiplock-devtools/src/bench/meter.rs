//! What a drain costs besides time: the machine's idle share (from `/proc/stat`), the WAL the
//! server wrote (`pg_current_wal_lsn`), the transactions committed in the benchmark's
//! database (`pg_stat_database.xact_commit`), and the CPU time the server and the benchmark's
//! own process spent (from `/proc/<pid>/stat`, where the server runs on this machine), per
//! job. The CPU figures say where a drain's time goes: a job that costs the server twice the
//! ceiling's CPU cannot drain faster than half the ceiling's rate on the same cores.
//!
//! A window opens and closes *settled*: no client of the benchmark's database is connected but
//! the monitor, and the monitor's own statistics are flushed, so every commit made by the
//! drain (and nothing made before it) is in the counter. WAL is server-wide: anything else
//! the server does meanwhile counts too (compare figures from one run on a quiet server).

use std::time::{Duration, Instant};

use serde::Serialize;
use skiplock::Pool as PgPool;

use super::store;
use skiplock::error::{Error, Result};

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

/// µs per tick of the process CPU times in `/proc` (`USER_HZ`: 100 on every Linux we know of,
/// asked of the system anyway).
fn tick_us() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1e6 / if hz > 0 { hz as f64 } else { 100.0 }
}

/// What one line of `/proc/<pid>/stat` says of a process's CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcCpu {
    /// Whether its command name is `postgres` (the server's processes all are).
    pub comm_is_postgres: bool,
    /// Its parent process.
    pub ppid: i32,
    /// Ticks it ran itself: user plus system.
    pub own: u64,
    /// Ticks its children ran that it has waited for (they stay here after they exit).
    pub reaped: u64,
}

/// A process's CPU from the text of its `/proc/<pid>/stat`; None when the text is not one.
pub fn parse_pid_stat(text: &str) -> Option<ProcCpu> {
    // Field 2, the command name, is in parentheses and may hold spaces and parentheses:
    // it ends at the last ')'. The fields after it start at field 3 (the state).
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?;
    let f: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(ProcCpu {
        comm_is_postgres: comm == "postgres",
        ppid: f.get(1)?.parse().ok()?,
        own: num(11)? + num(12)?,
        reaped: num(13)? + num(14)?,
    })
}

fn proc_cpu(pid: &str) -> Option<ProcCpu> {
    parse_pid_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// CPU ticks of the Postgres server that `backend_pid` (a connection's server process) belongs
/// to: its postmaster's own and reaped children's, and every live child's (backends,
/// autovacuum, the WAL writer, …). A backend that exits is counted by the postmaster once it
/// is reaped, so a window's difference holds the drain's connections after they closed.
/// None where that process is not a `postgres` process of this machine (a remote server, a
/// container) or `/proc` cannot be read.
pub fn server_cpu(backend_pid: i32) -> Option<u64> {
    let backend = proc_cpu(&backend_pid.to_string())?;
    let pm = backend.ppid.to_string();
    if !backend.comm_is_postgres || !proc_cpu(&pm)?.comm_is_postgres {
        return None;
    }
    // A child reaped between reading the postmaster and scanning its children would be in
    // neither (one reaped during the scan, in both): read the postmaster before and after
    // the scan, and take a scan during which none was reaped.
    for _ in 0..10 {
        let before = proc_cpu(&pm)?;
        let mut children = 0;
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            if let Some(p) = proc_cpu(pid).filter(|p| p.ppid == backend.ppid) {
                children += p.own;
            }
        }
        let after = proc_cpu(&pm)?;
        if after.reaped == before.reaped {
            return Some(after.own + after.reaped + children);
        }
    }
    None
}

/// CPU ticks of this process and of the children it has waited for (the benchmark's worker
/// processes and peers).
pub fn client_cpu() -> Option<u64> {
    proc_cpu("self").map(|p| p.own + p.reaped)
}

/// µs per job between two tick readings; None without both.
fn us_per_job(before: Option<u64>, after: Option<u64>, jobs: f64) -> Option<f64> {
    Some(after?.checked_sub(before?)? as f64 * tick_us() / jobs)
}

/// Per-job cost of one drain.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    /// WAL bytes written by the server during the window, per job.
    pub wal_bytes_per_job: f64,
    /// Transactions committed in the benchmark's database per 1,000 jobs, the benchmark's own
    /// bookkeeping queries taken out; None before Postgres 15 (no forced stats flush).
    pub commits_per_1000: Option<f64>,
    /// CPU time of the Postgres server during the window, per job, in µs (all its processes;
    /// None where the server is not on this machine).
    pub server_us_per_job: Option<f64>,
    /// CPU time of the benchmark's process and the children it waited for during the window,
    /// per job, in µs: the worker of an in-process drain, the worker processes of the
    /// multi-process drain, the peer's Node.js process (a child's whole life, its start-up
    /// included, so the peer's figure is high by that much).
    pub client_us_per_job: Option<f64>,
}

/// Readings at the opening of a window.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    wal: i64,
    commits: i64,
    server_cpu: Option<u64>,
    client_cpu: Option<u64>,
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
    /// The monitor's server process, to find the server's processes (see [`server_cpu`]).
    pub server_pid: i32,
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
            server_cpu: server_cpu(self.server_pid),
            client_cpu: client_cpu(),
        })
    }

    /// Closes the window of `jobs` jobs once the drain's connections are closed;
    /// `own_commits` are the benchmark's bookkeeping queries on the database inside the
    /// window (e.g. "are all acks written" polls), taken out of the count.
    pub async fn end(&self, m: Mark, jobs: usize, own_commits: u64) -> Result<Usage> {
        self.settle().await?;
        let (server, client) = (server_cpu(self.server_pid), client_cpu());
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
            server_us_per_job: us_per_job(m.server_cpu, server, jobs),
            client_us_per_job: us_per_job(m.client_cpu, client, jobs),
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
    fn a_process_stat_line_with_spaces_and_parentheses_in_its_name() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime ...
        let line = "4242 (postgres) S 4200 4200 4200 0 -1 4194560 10 0 0 0 7 3 20 5 20 0 1 0";
        assert_eq!(
            parse_pid_stat(line),
            Some(ProcCpu {
                comm_is_postgres: true,
                ppid: 4200,
                own: 10,
                reaped: 25,
            })
        );
        let odd = "7 (tokio rt (x)) R 1 7 7 0 -1 0 0 0 0 0 100 50 0 0 20 0";
        let p = parse_pid_stat(odd).unwrap();
        assert!(!p.comm_is_postgres);
        assert_eq!((p.ppid, p.own, p.reaped), (1, 150, 0));
        assert!(parse_pid_stat("7 (x) R 1 7").is_none());
        assert!(parse_pid_stat("no parentheses").is_none());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn this_process_has_cpu_ticks_and_only_a_postgres_process_is_a_server() {
        assert!(client_cpu().is_some());
        // This process is not a Postgres backend, so it names no server.
        assert_eq!(server_cpu(std::process::id() as i32), None);
        assert_eq!(
            us_per_job(Some(100), Some(300), 1000.0),
            Some(200.0 * tick_us() / 1000.0)
        );
        assert_eq!(us_per_job(Some(300), Some(100), 1000.0), None);
        assert_eq!(us_per_job(None, Some(100), 1000.0), None);
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
