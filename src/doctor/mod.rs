//! `skiplock doctor`'s judgement: what holds the vacuum horizon back, how skiplock's tables
//! fare, what the runtime left stuck, and which server settings work against the queue, each
//! as a [`Finding`] with its evidence, its cost and the fix (docs/operations.md, "Keeping the
//! database healthy"). The reads are the store's (`src/store/doctor.rs`, read-only and bounded
//! in time); the decisions are the pure functions here, so each threshold has a unit test.

mod checks;

use std::time::Duration;

use serde::Serialize;

pub use checks::examine;

/// How urgent a finding is; the worst one is the exit status of `skiplock doctor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing, nothing to do (exit 0).
    Info,
    /// Will hurt if it lasts (exit 1).
    Warning,
    /// Needs action now (exit 2).
    Action,
}

impl Severity {
    /// The exit status a report whose worst finding has this severity ends with.
    pub fn exit_code(self) -> u8 {
        match self {
            Severity::Info => 0,
            Severity::Warning => 1,
            Severity::Action => 2,
        }
    }

    /// How a person reads it.
    pub fn label(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Action => "ACTION",
        }
    }
}

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Area {
    /// Whatever keeps vacuum from removing dead tuples.
    Horizon,
    /// skiplock's tables.
    Tables,
    /// Workers, jobs, queues and keys.
    Runtime,
    /// Server and schema settings.
    Settings,
}

impl Area {
    /// How a person reads it.
    pub fn label(self) -> &'static str {
        match self {
            Area::Horizon => "vacuum horizon",
            Area::Tables => "tables",
            Area::Runtime => "runtime",
            Area::Settings => "settings",
        }
    }
}

/// One named fact and its value, as the doctor saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// What it is (`pid`, `state`, `age`, …).
    pub name: String,
    /// Its value, as text.
    pub value: String,
}

/// One thing the doctor found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// A stable name for the check (`idle_in_transaction`, `replication_slot`, …;
    /// docs/operations.md lists them).
    pub check: &'static str,
    /// What it is about.
    pub area: Area,
    /// How urgent.
    pub severity: Severity,
    /// One line: what was found.
    pub summary: String,
    /// The facts behind it.
    pub evidence: Vec<Evidence>,
    /// What it costs while it lasts.
    pub cost: String,
    /// What to do.
    pub fix: String,
}

impl Finding {
    fn new(check: &'static str, area: Area, severity: Severity, summary: String) -> Finding {
        Finding {
            check,
            area,
            severity,
            summary,
            evidence: Vec::new(),
            cost: String::new(),
            fix: String::new(),
        }
    }

    fn with(mut self, name: &str, value: impl ToString) -> Finding {
        self.evidence.push(Evidence {
            name: name.to_string(),
            value: value.to_string(),
        });
        self
    }

    fn with_opt(self, name: &str, value: Option<impl ToString>) -> Finding {
        match value {
            Some(v) => self.with(name, v),
            None => self,
        }
    }

    fn cost(mut self, cost: impl Into<String>) -> Finding {
        self.cost = cost.into();
        self
    }

    fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = fix.into();
        self
    }
}

/// One of skiplock's tables, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableReport {
    /// The table, in schema `skiplock`.
    pub table: String,
    /// Live tuples (the statistics' estimate).
    pub live_tuples: i64,
    /// Dead tuples not yet removed.
    pub dead_tuples: i64,
    /// Size with indexes and TOAST.
    pub total_bytes: i64,
    /// Seconds since its latest vacuum (`None`: none recorded).
    pub vacuumed_seconds_ago: Option<f64>,
    /// Seconds since its latest analyze (`None`: none recorded).
    pub analyzed_seconds_ago: Option<f64>,
}

/// Everything one run found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// The exit status: the worst finding's ([`exit_code`]).
    pub exit_code: u8,
    /// The findings, worst first ([`Report::sort`]).
    pub findings: Vec<Finding>,
    /// skiplock's tables, most dead tuples first.
    pub tables: Vec<TableReport>,
    /// Seconds since the oldest transaction that holds the horizon began (a session's or a
    /// prepared one; 0: none).
    pub horizon_seconds: f64,
    /// Transactions since the oldest xmin a session, a prepared transaction or a replication
    /// slot holds (0: none).
    pub horizon_xid_age: i64,
    /// Dead tuples in skiplock's tables now: what vacuum cannot remove while the horizon is
    /// held (and what it has not reached yet).
    pub dead_tuples: i64,
}

impl Report {
    /// Orders the findings worst first, then by area and check, and sets the exit code.
    pub fn sort(&mut self) {
        self.findings
            .sort_by(|a, b| (b.severity, a.area, a.check).cmp(&(a.severity, b.area, b.check)));
        self.exit_code = exit_code(&self.findings);
    }
}

/// What the doctor counts as too old or too many; [`Thresholds::default`] is what
/// `skiplock doctor` uses without flags.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// A transaction (a session's or a prepared one) older than this is a warning.
    pub warn_age: Duration,
    /// … and older than this needs action.
    pub action_age: Duration,
    /// The workers' rescue window (`SKIPLOCK_RESCUE_AFTER`): a heartbeat older than this is
    /// stale.
    pub rescue_after: Duration,
    /// The reaper's maximum age (`SKIPLOCK_REAPER_MAX_AGE`): a running job that started
    /// longer ago is discarded, heartbeat or not.
    pub reaper_max_age: Duration,
    /// How long each check's statement may run.
    pub statement_timeout: Duration,
    /// The most rows each listing reads.
    pub limit: usize,
    /// The workers' `SKIPLOCK_LISTEN_URL` (the CLI reads it from the environment, as the
    /// worker does): in transaction mode the worker LISTENs there, and the doctor checks that
    /// it does not go through a pooler in transaction mode (`listen_url`). `None`: not set.
    pub listen_url: Option<String>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            warn_age: Duration::from_secs(5 * 60),
            action_age: Duration::from_secs(60 * 60),
            rescue_after: crate::config::DEFAULT_RESCUE_AFTER,
            reaper_max_age: crate::worker::maintenance::reaper::DEFAULT_MAX_AGE,
            statement_timeout: Duration::from_secs(5),
            limit: 20,
            listen_url: None,
        }
    }
}

/// Transactions of age past which a holder needs action whatever its time: half of
/// Postgres's default `autovacuum_freeze_max_age` (200 million), so there is room to act
/// before anti-wraparound vacuums start.
pub const XID_AGE_ACTION: i64 = 100_000_000;

/// WAL a slot may keep before it needs action (1 GiB).
pub const WAL_ACTION_BYTES: i64 = 1 << 30;

/// The exit status of a run that found `findings`: 0 all well (or information only), 1 a
/// warning, 2 something needs action now.
pub fn exit_code(findings: &[Finding]) -> u8 {
    findings
        .iter()
        .map(|f| f.severity.exit_code())
        .max()
        .unwrap_or(0)
}

/// The severity of something that has lasted `seconds` (`None`: young enough to be normal).
pub fn age_severity(seconds: f64, t: &Thresholds) -> Option<Severity> {
    if seconds >= t.action_age.as_secs_f64() {
        Some(Severity::Action)
    } else if seconds >= t.warn_age.as_secs_f64() {
        Some(Severity::Warning)
    } else {
        None
    }
}

/// The severity of a horizon holder, a session or a prepared transaction: by its age in time,
/// and [`Severity::Action`] past [`XID_AGE_ACTION`] transactions, however short the time.
pub fn holder_severity(seconds: f64, xid_age: Option<i64>, t: &Thresholds) -> Option<Severity> {
    let by_xid = xid_age
        .filter(|a| *a >= XID_AGE_ACTION)
        .map(|_| Severity::Action);
    age_severity(seconds, t).max(by_xid)
}

/// The severity of a replication slot: none while a consumer is connected and it keeps
/// little; an inactive slot is a warning (it keeps WAL and its xmin until dropped), and
/// either kind needs action once it keeps [`WAL_ACTION_BYTES`] or holds [`XID_AGE_ACTION`]
/// transactions.
pub fn slot_severity(
    active: bool,
    xid_age: Option<i64>,
    retained_wal: Option<i64>,
) -> Option<Severity> {
    let heavy = xid_age.is_some_and(|a| a >= XID_AGE_ACTION)
        || retained_wal.is_some_and(|b| b >= WAL_ACTION_BYTES);
    if heavy {
        Some(Severity::Action)
    } else if !active {
        Some(Severity::Warning)
    } else {
        None
    }
}

/// The severity of a table's dead tuples: a warning once there are at least 100,000 and more
/// dead than live (autovacuum is not keeping up, or cannot), action at 1,000,000 and four
/// times the live ones.
pub fn table_severity(live: i64, dead: i64) -> Option<Severity> {
    if dead >= 1_000_000 && dead >= live.saturating_mul(4) {
        Some(Severity::Action)
    } else if dead >= 100_000 && dead > live {
        Some(Severity::Warning)
    } else {
        None
    }
}

/// The severity of a running job whose heartbeat is `heartbeat_seconds` old: a live worker's
/// rescuer moves it back within one window, so past the window it is a warning, and past two
/// no worker is rescuing: action.
pub fn stuck_severity(heartbeat_seconds: f64, rescue_after: Duration) -> Option<Severity> {
    let w = rescue_after.as_secs_f64();
    if heartbeat_seconds >= 2.0 * w {
        Some(Severity::Action)
    } else if heartbeat_seconds >= w {
        Some(Severity::Warning)
    } else {
        None
    }
}

/// The severity of a running job of a live worker that started `running_seconds` ago: the
/// reaper discards a running job once its start is older than `reaper_max_age`
/// (`SKIPLOCK_REAPER_MAX_AGE`), heartbeat or not, so past half of that it is a warning, and
/// past nine tenths action (the job is discarded soon, its work lost).
pub fn long_running_severity(running_seconds: f64, reaper_max_age: Duration) -> Option<Severity> {
    let max = reaper_max_age.as_secs_f64();
    if running_seconds >= 0.9 * max {
        Some(Severity::Action)
    } else if running_seconds >= 0.5 * max {
        Some(Severity::Warning)
    } else {
        None
    }
}

/// The severity of a table's dead tuples against autovacuum's threshold when autovacuum may
/// vacuum it: none at or under the threshold (autovacuum has not been due), and past it by
/// how long ago the table was last vacuumed ([`age_severity`]); a table never vacuumed since
/// the statistics were reset is not judged (its wait is not known: `dead_tuples` still
/// judges its count).
pub fn lagging_severity(
    dead: i64,
    threshold: i64,
    vacuumed_seconds_ago: Option<f64>,
    t: &Thresholds,
) -> Option<Severity> {
    if dead <= threshold {
        return None;
    }
    age_severity(vacuumed_seconds_ago?, t)
}

/// The severity of a table autovacuum may not vacuum (it is off on the server, or the table's
/// `autovacuum_enabled` is false): action once its dead tuples pass the threshold autovacuum
/// would have vacuumed at, a warning before.
pub fn autovacuum_off_severity(dead: i64, threshold: i64) -> Severity {
    if dead > threshold {
        Severity::Action
    } else {
        Severity::Warning
    }
}

/// The severity of the connections in use: a warning at 80% of those a login without
/// superuser may open (`max_connections` less the reserved ones), action at 95%.
pub fn headroom_severity(
    connections: i64,
    max_connections: i32,
    reserved: i32,
) -> Option<Severity> {
    let usable = i64::from(max_connections) - i64::from(reserved);
    if usable <= 0 {
        return Some(Severity::Action);
    }
    let used = connections as f64 / usable as f64;
    if used >= 0.95 {
        Some(Severity::Action)
    } else if used >= 0.8 {
        Some(Severity::Warning)
    } else {
        None
    }
}

/// Whether a value of `idle_in_transaction_session_timeout` leaves it unset (`0`, in any
/// unit).
pub fn timeout_unset(value: &str) -> bool {
    let digits: String = value.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse::<u64>().map(|n| n == 0).unwrap_or(false)
}

/// A duration in seconds the way a person reads an age: `45s`, `12m 5s`, `3h 20m`, `2d 4h`.
pub fn format_age(seconds: f64) -> String {
    let s = if seconds.is_finite() && seconds > 0.0 {
        seconds as u64
    } else {
        0
    };
    crate::text::two_units(s)
}

/// Bytes the way a person reads a size: `512 B`, `3.2 MiB`.
pub fn format_bytes(bytes: i64) -> String {
    let mut v = bytes.max(0) as f64;
    for unit in ["B", "KiB", "MiB", "GiB", "TiB"] {
        if v < 1024.0 || unit == "TiB" {
            return if unit == "B" {
                format!("{v} {unit}")
            } else {
                format!("{v:.1} {unit}")
            };
        }
        v /= 1024.0;
    }
    unreachable!()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Thresholds {
        Thresholds::default()
    }

    fn finding(s: Severity) -> Finding {
        Finding::new("x", Area::Runtime, s, String::new())
    }

    #[test]
    fn the_exit_code_is_the_worst_findings() {
        assert_eq!(exit_code(&[]), 0);
        assert_eq!(exit_code(&[finding(Severity::Info)]), 0);
        assert_eq!(
            exit_code(&[finding(Severity::Info), finding(Severity::Warning)]),
            1
        );
        assert_eq!(
            exit_code(&[finding(Severity::Action), finding(Severity::Warning)]),
            2
        );
    }

    #[test]
    fn a_report_sorts_worst_first_then_by_area() {
        let mut r = Report {
            findings: vec![
                Finding::new("b", Area::Settings, Severity::Warning, String::new()),
                Finding::new("a", Area::Runtime, Severity::Info, String::new()),
                Finding::new("c", Area::Horizon, Severity::Warning, String::new()),
                Finding::new("d", Area::Tables, Severity::Action, String::new()),
            ],
            ..Report::default()
        };
        r.sort();
        let order: Vec<_> = r.findings.iter().map(|f| f.check).collect();
        assert_eq!(order, ["d", "c", "b", "a"]);
        assert_eq!(r.exit_code, 2);
    }

    #[test]
    fn ages_warn_then_need_action() {
        assert_eq!(age_severity(0.0, &t()), None);
        assert_eq!(age_severity(299.0, &t()), None);
        assert_eq!(age_severity(300.0, &t()), Some(Severity::Warning));
        assert_eq!(age_severity(3599.0, &t()), Some(Severity::Warning));
        assert_eq!(age_severity(3600.0, &t()), Some(Severity::Action));
    }

    #[test]
    fn a_holder_past_the_xid_age_needs_action_however_young() {
        assert_eq!(holder_severity(1.0, Some(10), &t()), None);
        assert_eq!(holder_severity(1.0, None, &t()), None);
        assert_eq!(
            holder_severity(1.0, Some(XID_AGE_ACTION), &t()),
            Some(Severity::Action)
        );
        assert_eq!(
            holder_severity(400.0, Some(5), &t()),
            Some(Severity::Warning)
        );
    }

    #[test]
    fn an_inactive_slot_warns_and_a_heavy_one_needs_action() {
        assert_eq!(slot_severity(true, Some(3), Some(1024)), None);
        assert_eq!(slot_severity(false, None, None), Some(Severity::Warning));
        assert_eq!(
            slot_severity(true, None, Some(WAL_ACTION_BYTES)),
            Some(Severity::Action)
        );
        assert_eq!(
            slot_severity(false, Some(XID_AGE_ACTION), None),
            Some(Severity::Action)
        );
    }

    #[test]
    fn dead_tuples_warn_when_they_outnumber_the_live_ones() {
        assert_eq!(table_severity(0, 99_999), None);
        assert_eq!(table_severity(200_000, 150_000), None);
        assert_eq!(table_severity(50_000, 100_000), Some(Severity::Warning));
        assert_eq!(table_severity(300_000, 1_000_000), Some(Severity::Warning));
        assert_eq!(table_severity(250_000, 1_000_000), Some(Severity::Action));
    }

    #[test]
    fn a_stuck_job_warns_after_one_window_and_needs_action_after_two() {
        let w = Duration::from_secs(60);
        assert_eq!(stuck_severity(59.0, w), None);
        assert_eq!(stuck_severity(60.0, w), Some(Severity::Warning));
        assert_eq!(stuck_severity(120.0, w), Some(Severity::Action));
    }

    #[test]
    fn a_long_running_job_warns_at_half_the_reapers_age() {
        let max = Duration::from_secs(100);
        assert_eq!(long_running_severity(49.0, max), None);
        assert_eq!(long_running_severity(50.0, max), Some(Severity::Warning));
        assert_eq!(long_running_severity(90.0, max), Some(Severity::Action));
    }

    #[test]
    fn autovacuum_lags_when_dead_tuples_pass_its_threshold_and_no_vacuum_came() {
        assert_eq!(lagging_severity(50, 50, Some(86_400.0), &t()), None);
        assert_eq!(lagging_severity(51, 50, Some(10.0), &t()), None);
        assert_eq!(lagging_severity(51, 50, None, &t()), None);
        assert_eq!(
            lagging_severity(51, 50, Some(300.0), &t()),
            Some(Severity::Warning)
        );
        assert_eq!(
            lagging_severity(51, 50, Some(3600.0), &t()),
            Some(Severity::Action)
        );
        assert_eq!(autovacuum_off_severity(50, 50), Severity::Warning);
        assert_eq!(autovacuum_off_severity(51, 50), Severity::Action);
    }

    #[test]
    fn connection_headroom() {
        assert_eq!(headroom_severity(10, 100, 3), None);
        assert_eq!(headroom_severity(78, 100, 3), Some(Severity::Warning));
        assert_eq!(headroom_severity(93, 100, 3), Some(Severity::Action));
        assert_eq!(headroom_severity(0, 3, 3), Some(Severity::Action));
    }

    #[test]
    fn an_idle_timeout_of_zero_in_any_unit_is_unset() {
        assert!(timeout_unset("0"));
        assert!(timeout_unset("0ms"));
        assert!(!timeout_unset("1h"));
        assert!(!timeout_unset("500ms"));
    }

    #[test]
    fn ages_and_sizes_read_as_people_write_them() {
        assert_eq!(format_age(45.2), "45s");
        assert_eq!(format_age(725.0), "12m 5s");
        assert_eq!(format_age(12_000.0), "3h 20m");
        assert_eq!(format_age(187_200.0), "2d 4h");
        assert_eq!(format_age(f64::NAN), "0s");
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(3 * 1024 * 1024 + 200 * 1024), "3.2 MiB");
    }
}
