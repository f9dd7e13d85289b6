//! Periodic jobs: a job enqueued on a schedule, a cron expression or a fixed interval,
//! declared in code ([`PeriodicJobs`] builder) or in a TOML file (`SKIPLOCK_PERIODIC_FILE`).
//!
//! Every worker process runs the [`Scheduler`]; no leader is needed. Each period has a start
//! (its fire time) that every process computes identically from the schedule: the latest cron
//! tick, or the interval's multiple since the Unix epoch. Enqueueing goes through
//! `skiplock.enqueue_periodic`, which inserts `(name, period_start)` into
//! `skiplock.periodic_runs` (primary key) in the same transaction as the job, so a period's
//! job is enqueued once however many processes try, and even after that job has run and left
//! the `available` state (which the jobs table's unique index alone would not cover).
//!
//! Missed periods (all workers down) are not replayed one by one: the latest one is enqueued
//! once when a worker comes back. A periodic job that has never run starts with its next fire
//! time, so deploying one does not run it at once.
//!
//! A cron expression reads in UTC, or in a time zone of the tz database (`in Europe/Berlin`).
//! On the days the clocks change ([`zoned`]): a local time the clocks skip fires as much later
//! as they jumped (02:30 becomes 03:30 when 02:00 jumps to 03:00); a local time they pass
//! twice fires once, at its first pass. Periods are instants, so processes still agree on them.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde::Deserialize;

use crate::config::{env_opt, parse_duration};
use crate::error::{Error, Result};
use crate::queue::{NewJob, OnConflict};
use crate::store::maintenance::{PeriodicDecl, PeriodicRun};
use crate::store::{self, Pool};
use crate::worker::handler::BoxFuture;
use crate::worker::service::Service;

/// The setting naming the TOML file of periodic jobs.
pub const FILE_SETTING: &str = "SKIPLOCK_PERIODIC_FILE";
/// The shortest interval allowed.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The longest interval allowed (ten years; the period arithmetic stays far from overflow).
pub const MAX_INTERVAL: Duration = Duration::from_secs(3650 * 86_400);

/// When a periodic job fires.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// Every `Duration`, at multiples of it since 1970-01-01T00:00:00Z (so every process
    /// agrees on the period boundaries without talking to the others).
    Every(Duration),
    /// A cron expression, with seconds: `sec min hour day-of-month month day-of-week
    /// [year]`; five-field expressions get `0` seconds prepended. Read in the time zone, or in
    /// UTC without one.
    Cron(Box<cron::Schedule>, Option<chrono_tz::Tz>),
}

impl Schedule {
    /// A fixed interval of at least [`MIN_INTERVAL`], in whole milliseconds.
    pub fn every(d: Duration) -> Result<Schedule> {
        if d < MIN_INTERVAL {
            return Err(Error::Invalid(format!(
                "periodic interval {} is too short (at least 1s)",
                humantime::format_duration(d)
            )));
        }
        if d > MAX_INTERVAL {
            return Err(Error::Invalid(
                "periodic interval is too long (at most 3650d)".into(),
            ));
        }
        if !d.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(Error::Invalid(
                "periodic interval must be whole milliseconds".into(),
            ));
        }
        Ok(Schedule::Every(d))
    }

    /// Parses a cron expression (6 or 7 fields, or 5 without seconds, or `@daily` etc.).
    pub fn cron(expr: &str) -> Result<Schedule> {
        let e = expr.trim();
        let full = if !e.starts_with('@') && e.split_whitespace().count() == 5 {
            format!("0 {e}")
        } else {
            e.to_string()
        };
        cron::Schedule::from_str(&full)
            .map(|s| Schedule::Cron(Box::new(s), None))
            .map_err(|err| Error::Invalid(format!("invalid cron expression {e:?}: {err}")))
    }

    /// A cron expression read in the time zone `tz` (a tz database name, `Europe/Berlin`).
    pub fn cron_in(expr: &str, tz: &str) -> Result<Schedule> {
        let zone = zoned::parse(tz)?;
        match Schedule::cron(expr)? {
            Schedule::Cron(c, _) => Ok(Schedule::Cron(c, Some(zone))),
            every => Ok(every),
        }
    }

    /// Parses the form [`Schedule::describe`] writes: `every 15m` or `cron 0 0 3 * * *`.
    pub fn parse(s: &str) -> Result<Schedule> {
        let s = s.trim();
        if let Some(d) = s.strip_prefix("every ") {
            let d = parse_duration(d).map_err(Error::Invalid)?;
            return Schedule::every(d);
        }
        if let Some(e) = s.strip_prefix("cron ") {
            return match e.rsplit_once(" in ") {
                Some((expr, tz)) => Schedule::cron_in(expr, tz),
                None => Schedule::cron(e),
            };
        }
        Err(Error::Invalid(format!(
            "invalid schedule {s:?} (write `every 15m`, `cron 0 0 3 * * *` or `cron 0 0 3 * * * in Europe/Berlin`)"
        )))
    }

    /// Human- and machine-readable form, stored in `skiplock.periodic_jobs.schedule`.
    pub fn describe(&self) -> String {
        match self {
            Schedule::Every(d) => format!("every {}", humantime::format_duration(*d)),
            Schedule::Cron(c, None) => format!("cron {}", c.source()),
            Schedule::Cron(c, Some(tz)) => format!("cron {} in {}", c.source(), tz.name()),
        }
    }

    /// The start of the period `now` is in: the latest fire time at or before `now`.
    pub fn period_start(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Every(d) => {
                let iv = d.as_millis() as i64;
                let ms = now.timestamp_millis();
                Utc.timestamp_millis_opt(ms - ms.rem_euclid(iv)).single()
            }
            Schedule::Cron(c, None) => {
                // The cron crate's backwards iteration is strictly before its start; start
                // one microsecond later so a fire time equal to `now` counts.
                let probe = now + chrono::Duration::microseconds(1);
                c.after(&probe).next_back()
            }
            Schedule::Cron(c, Some(tz)) => zoned::period_start(c, *tz, now),
        }
    }

    /// The first fire time strictly after `now`.
    pub fn next_after(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Every(d) => {
                let start = self.period_start(now)?;
                Some(start + chrono::Duration::from_std(*d).ok()?)
            }
            Schedule::Cron(c, None) => c.after(&now).next(),
            Schedule::Cron(c, Some(tz)) => zoned::next_after(c, *tz, now),
        }
    }
}

/// Cron in a time zone: the expression is evaluated on the zone's wall clock (as if it were
/// UTC, which has no transitions), and each wall-clock fire time is turned into an instant by
/// [`zoned::instant`]'s rule. Around a jump forward that map goes back (a skipped 02:45 fires
/// after 03:15 does), so a scan keeps going one jump's worth past the first fire time it meets
/// and takes the nearest.
pub mod zoned {
    use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
    use chrono_tz::Tz;

    use crate::error::{Error, Result};

    /// Longest a wall clock jumps at one change (a margin: real zones jump at most 2 hours).
    const JUMP: Duration = Duration::hours(3);

    /// A tz database name.
    pub fn parse(name: &str) -> Result<Tz> {
        name.trim().parse::<Tz>().map_err(|_| {
            Error::Invalid(format!(
                "unknown time zone {:?} (a tz database name, e.g. Europe/Berlin or UTC)",
                name.trim()
            ))
        })
    }

    /// The instant of the wall-clock time `local` in `tz`: the only one; the first of two (the
    /// clocks go back and pass it twice); or, inside a gap (the clocks jump forward over it),
    /// `local` read with the offset from before the jump, so it fires as much after the jump as
    /// it was into the gap.
    pub fn instant(tz: Tz, local: NaiveDateTime) -> DateTime<Utc> {
        match tz.from_local_datetime(&local) {
            LocalResult::Single(t) => t.with_timezone(&Utc),
            LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc),
            LocalResult::None => {
                // Half a day before, the offset is the one from before the jump.
                let before = tz
                    .offset_from_utc_datetime(&(local - Duration::hours(12)))
                    .fix();
                Utc.from_utc_datetime(&(local - Duration::seconds(before.local_minus_utc() as i64)))
            }
        }
    }

    /// The wall-clock time of `t` in `tz`, as a UTC date-time (for the cron crate).
    fn wall(tz: Tz, t: DateTime<Utc>) -> DateTime<Utc> {
        Utc.from_utc_datetime(&t.with_timezone(&tz).naive_local())
    }

    /// The first fire time strictly after `now`. No wall-clock time more than [`JUMP`] before
    /// `now`'s can fire after `now`: the scan starts there.
    pub fn next_after(c: &cron::Schedule, tz: Tz, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut fires = c
            .after(&(wall(tz, now) - JUMP))
            .map(|w| (w, instant(tz, w.naive_utc())));
        let (w0, t0) = fires.by_ref().find(|(_, t)| *t > now)?;
        Some(
            fires
                .take_while(|(w, _)| *w <= w0 + JUMP)
                .map(|(_, t)| t)
                .filter(|t| *t > now)
                .fold(t0, std::cmp::min),
        )
    }

    /// The latest fire time at or before `now` (scanning back from [`JUMP`] after `now`'s
    /// wall clock, as [`next_after`] scans forward).
    pub fn period_start(c: &cron::Schedule, tz: Tz, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut fires = c
            .after(&(wall(tz, now) + JUMP))
            .rev()
            .map(|w| (w, instant(tz, w.naive_utc())));
        let (w0, t0) = fires.by_ref().find(|(_, t)| *t <= now)?;
        Some(
            fires
                .take_while(|(w, _)| *w >= w0 - JUMP)
                .map(|(_, t)| t)
                .filter(|t| *t <= now)
                .fold(t0, std::cmp::max),
        )
    }
}

/// One periodic job: a name (unique, the key of its periods), a schedule and the job to
/// enqueue each period.
#[derive(Debug, Clone)]
pub struct PeriodicJob {
    /// Unique name.
    pub name: String,
    /// When it fires.
    pub schedule: Schedule,
    /// What it enqueues (kind, args, queue, priority, max_attempts, unique_key; `run_at` is
    /// ignored: the job is due when its period starts).
    pub job: NewJob,
}

impl PeriodicJob {
    /// A job enqueued every `interval`.
    pub fn every(name: impl Into<String>, interval: Duration, job: NewJob) -> Result<Self> {
        Ok(PeriodicJob {
            name: checked_name(name.into())?,
            schedule: Schedule::every(interval)?,
            job,
        })
    }

    /// A job enqueued on a cron expression (UTC).
    pub fn cron(name: impl Into<String>, expr: &str, job: NewJob) -> Result<Self> {
        Ok(PeriodicJob {
            name: checked_name(name.into())?,
            schedule: Schedule::cron(expr)?,
            job,
        })
    }

    /// A job enqueued on a cron expression read in the time zone `tz` (`Europe/Berlin`; the
    /// rule on the days the clocks change: the module documentation).
    pub fn cron_in(name: impl Into<String>, expr: &str, tz: &str, job: NewJob) -> Result<Self> {
        Ok(PeriodicJob {
            name: checked_name(name.into())?,
            schedule: Schedule::cron_in(expr, tz)?,
            job,
        })
    }
}

fn checked_name(name: String) -> Result<String> {
    if name.trim().is_empty() || name.len() > 200 {
        return Err(Error::Invalid(
            "periodic job name must be 1 to 200 characters".into(),
        ));
    }
    Ok(name)
}

/// The periodic jobs of a worker, built in code and/or read from the config file.
///
/// ```
/// use std::time::Duration;
/// use skiplock::maintenance::periodic::{PeriodicJob, PeriodicJobs};
/// use skiplock::queue::NewJob;
/// let jobs = PeriodicJobs::new()
///     .add(PeriodicJob::every("heartbeat-ping", Duration::from_secs(60), NewJob::new("noop", serde_json::json!({})))?)
///     .add(PeriodicJob::cron("nightly", "0 3 * * *", NewJob::new("noop", serde_json::json!({})))?);
/// assert_eq!(jobs.len(), 2);
/// # Ok::<(), skiplock::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct PeriodicJobs {
    jobs: Vec<PeriodicJob>,
}

impl PeriodicJobs {
    /// No periodic jobs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one (names are checked for duplicates when the scheduler is built).
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, job: PeriodicJob) -> Self {
        self.jobs.push(job);
        self
    }

    /// Adds all of `other`.
    pub fn extend(mut self, other: PeriodicJobs) -> Self {
        self.jobs.extend(other.jobs);
        self
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The jobs.
    pub fn jobs(&self) -> &[PeriodicJob] {
        &self.jobs
    }

    /// Parses the TOML config format (see `docs/maintenance.md`):
    ///
    /// ```toml
    /// [[job]]
    /// name = "nightly-pack"
    /// cron = "0 3 * * *"      # or: every = "15m"
    /// tz = "Europe/Berlin"    # optional, with cron: its time zone (UTC without)
    /// kind = "pack"
    /// args = { host = "example.com" }
    /// queue = "default"       # optional, like priority, max_attempts, unique_key
    /// ```
    ///
    /// Errors name the line and column and what is wrong, never the file's text (the
    /// setting may point at any readable file; see [`crate::config::toml_error`]).
    pub fn from_toml(text: &str) -> Result<Self> {
        let file: FileFormat = toml::from_str(text)
            .map_err(|e| Error::Invalid(crate::config::toml_error(text, &e)))?;
        let at = |span: std::ops::Range<usize>, what: &str| {
            Error::Invalid(format!(
                "{}: {what}",
                crate::config::position(text, span.start)
            ))
        };
        let mut out = PeriodicJobs::new();
        let mut seen = BTreeSet::new();
        for e in file.job {
            let name_span = e.name.span();
            let name = checked_name(e.name.into_inner())
                .map_err(|err| at(name_span.clone(), &err.to_string()))?;
            if !seen.insert(name.clone()) {
                return Err(at(name_span, "a second periodic job with this name"));
            }
            let schedule = match (e.every, e.cron) {
                (Some(_), None) if e.tz.is_some() => {
                    return Err(at(name_span, "`tz` goes with `cron`, not with `every`"));
                }
                (Some(d), None) => {
                    let span = d.span();
                    let d = parse_duration(d.get_ref()).map_err(|_| {
                        at(span.clone(), "invalid duration (write e.g. 30s, 15m, 24h)")
                    })?;
                    Schedule::every(d).map_err(|err| at(span, &err.to_string()))?
                }
                (None, Some(c)) => {
                    let span = c.span();
                    let cron = Schedule::cron(c.get_ref()).map_err(|_| {
                        at(span, "invalid cron expression (5 to 7 fields, e.g. \"0 3 * * *\", or @daily)")
                    })?;
                    match e.tz {
                        None => cron,
                        Some(tz) => {
                            let span = tz.span();
                            Schedule::cron_in(c.get_ref(), tz.get_ref())
                                .map_err(|err| at(span, &err.to_string()))?
                        }
                    }
                }
                _ => return Err(at(name_span, "give exactly one of `every` and `cron`")),
            };
            let args = match e.args {
                None => serde_json::json!({}),
                Some(v) => {
                    let span = v.span();
                    serde_json::to_value(v.into_inner())
                        .map_err(|_| at(span, "args cannot be turned into JSON"))?
                }
            };
            if e.max_attempts.is_some_and(|n| n < 1) {
                return Err(at(name_span, "max_attempts must be at least 1"));
            }
            let mut job = NewJob::new(e.kind, args)
                .queue(
                    e.queue
                        .unwrap_or_else(|| crate::names::DEFAULT_QUEUE.into()),
                )
                .priority(e.priority.unwrap_or(0))
                .max_attempts(e.max_attempts.unwrap_or(25));
            if let Some(k) = e.unique_key {
                let span = k.span();
                job = job.unique_key(k.into_inner(), OnConflict::Keep);
                // Refused here, at load, not on every tick: the database refuses every
                // enqueue of such a key (skiplock._reserved_key_prefix).
                if let Some(prefix) = reserved_key(&job) {
                    return Err(at(span, &reserved_key_message(prefix)));
                }
            }
            out = out.add(PeriodicJob {
                name,
                schedule,
                job,
            });
        }
        Ok(out)
    }

    /// Reads the file named by `path`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::config(FILE_SETTING, format!("cannot read {}: {e}", path.display()))
        })?;
        Self::from_toml(&text)
            .map_err(|e| Error::config(FILE_SETTING, format!("{}: {e}", path.display())))
    }

    /// The jobs of the file named by `SKIPLOCK_PERIODIC_FILE`, or none when it is not set.
    pub fn from_env() -> Result<Self> {
        match env_opt(FILE_SETTING) {
            None => Ok(PeriodicJobs::new()),
            Some(p) => Self::from_file(Path::new(p.trim())),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    #[serde(default)]
    job: Vec<FileEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    name: toml::Spanned<String>,
    every: Option<toml::Spanned<String>>,
    cron: Option<toml::Spanned<String>>,
    tz: Option<toml::Spanned<String>>,
    kind: String,
    args: Option<toml::Spanned<toml::Value>>,
    queue: Option<String>,
    priority: Option<i16>,
    max_attempts: Option<i32>,
    unique_key: Option<toml::Spanned<String>>,
}

/// Enqueues each periodic job once per period. Run by every worker process.
///
/// Each job is enqueued on its own: one whose enqueue the database refuses (its unique_key
/// held by another kind or queue, say) is logged, recorded in `skiplock.periodic_jobs` for
/// `skiplock periodic`, and tried again on the next tick, while every other job goes on
/// (docs/maintenance.md, "When an enqueue fails"). Jobs are enqueued in the order given;
/// [`super::parts_from`] puts the built-in `reap` and `retain` first.
#[derive(Clone)]
pub struct Scheduler {
    jobs: Arc<Vec<PeriodicJob>>,
    tick: Duration,
    started_at: DateTime<Utc>,
    declared_by: String,
    state: Arc<Mutex<SchedulerState>>,
}

#[derive(Default)]
struct SchedulerState {
    /// The jobs declared in `skiplock.periodic_jobs` so far.
    declared: BTreeSet<String>,
    /// The last period this process has settled per job (enqueued, or found taken).
    settled: HashMap<String, DateTime<Utc>>,
    /// Per job whose enqueue is failing: what was last logged and recorded.
    failing: HashMap<String, Failing>,
}

/// A job whose enqueue is failing, as this process last reported it.
struct Failing {
    /// The error last logged at WARN, and when.
    warned: String,
    warned_at: std::time::Instant,
    /// The period last recorded in the database, with its error.
    recorded: Option<(DateTime<Utc>, String)>,
    /// Failed attempts since the WARN (logged at DEBUG).
    since_warn: u64,
}

/// A failing job's WARN is repeated (with the count of failures since) at most this often,
/// unless its error changes: a job retried every tick must not flood the log.
pub const REWARN_AFTER: Duration = Duration::from_secs(300);

/// Whether `e` says the database could not be reached (every job of the tick would fail the
/// same way after a pool timeout each), rather than that it refused this one job.
fn unreachable(e: &Error) -> bool {
    match e {
        Error::Database(sqlx::Error::Database(_)) | Error::Refused { .. } => false,
        Error::Database(_) | Error::Unavailable(_) | Error::Io(_) => true,
        _ => false,
    }
}

/// Refuses a periodic job whose unique_key is in a reserved namespace: every enqueue of it
/// would fail (`skiplock.enqueue` refuses such keys). The prefix found.
fn reserved_key(job: &NewJob) -> Option<&'static str> {
    let key = job.unique_key.as_deref()?;
    crate::names::reserved_key_prefix(key).map(|r| r.name)
}

fn reserved_key_message(prefix: &str) -> String {
    format!(
        "unique_key starts with {prefix}, a prefix reserved for skiplock's own functions (use {})",
        crate::names::reserved_key_prefix(prefix)
            .map(|r| r.use_instead)
            .unwrap_or("skiplock's own functions")
    )
}

impl Scheduler {
    /// Builds a scheduler; fails on duplicate names and on a unique_key in a built-in
    /// workflow's namespace (`fetch:`, `pack:`, `packet:`). `declared_by` names this process
    /// in `skiplock.periodic_jobs` (e.g. host and pid).
    pub fn new(jobs: PeriodicJobs, declared_by: impl Into<String>) -> Result<Self> {
        let mut seen = BTreeSet::new();
        for j in &jobs.jobs {
            if !seen.insert(j.name.clone()) {
                return Err(Error::Invalid(format!(
                    "periodic job {:?} is declared twice",
                    j.name
                )));
            }
            if let Some(prefix) = reserved_key(&j.job) {
                return Err(Error::Invalid(format!(
                    "periodic job {:?}: {}",
                    j.name,
                    reserved_key_message(prefix)
                )));
            }
        }
        Ok(Scheduler {
            tick: tick_for(&jobs.jobs),
            jobs: Arc::new(jobs.jobs),
            started_at: Utc::now(),
            declared_by: declared_by.into(),
            state: Arc::new(Mutex::new(SchedulerState::default())),
        })
    }

    /// The jobs it schedules.
    pub fn jobs(&self) -> &[PeriodicJob] {
        &self.jobs
    }

    /// One tick: declares the jobs not declared yet, then enqueues every job whose current
    /// period this process has not settled yet, each on its own (a refused enqueue is logged
    /// and recorded, and the job tried again next tick). Returns how many jobs it enqueued;
    /// fails only when the database cannot be reached (the supervisor then waits and retries).
    pub async fn tick_once(&self, pool: &Pool) -> Result<u64> {
        for j in self.jobs.iter() {
            if self.state.lock().unwrap().declared.contains(&j.name) {
                continue;
            }
            let schedule = j.schedule.describe();
            let d = PeriodicDecl {
                name: &j.name,
                schedule: &schedule,
                job: &j.job,
                declared_by: &self.declared_by,
            };
            match store::maintenance::declare_periodic(pool, d).await {
                Ok(()) => {}
                Err(e) if unreachable(&e) => return Err(e),
                // Listed by `skiplock periodic` or not, the job is still scheduled.
                Err(e) => {
                    tracing::warn!(periodic = %j.name, error = %e, "could not declare periodic job")
                }
            }
            self.state.lock().unwrap().declared.insert(j.name.clone());
        }
        let now = Utc::now();
        let mut enqueued = 0u64;
        for j in self.jobs.iter() {
            let Some(period) = j.schedule.period_start(now) else {
                continue;
            };
            if self.state.lock().unwrap().settled.get(&j.name) == Some(&period) {
                continue;
            }
            let run = PeriodicRun {
                name: &j.name,
                period_start: period,
                first_after: self.started_at,
                job: &j.job,
            };
            let id = match store::maintenance::enqueue_periodic(pool, run).await {
                Ok(id) => id,
                Err(e) if unreachable(&e) => return Err(e),
                Err(e) => {
                    self.failed(pool, j, period, &e).await;
                    continue;
                }
            };
            match id {
                Some(id) => {
                    enqueued += 1;
                    tracing::info!(periodic = %j.name, period = %period.to_rfc3339(), job.id = id, job.kind = %j.job.kind, "enqueued periodic job");
                }
                None => {
                    tracing::debug!(periodic = %j.name, period = %period.to_rfc3339(), "periodic period already enqueued (or not due for a first run)");
                }
            }
            let mut st = self.state.lock().unwrap();
            if let Some(f) = st.failing.remove(&j.name) {
                tracing::info!(periodic = %j.name, period = %period.to_rfc3339(), failures = f.since_warn + 1, "periodic job enqueues again");
            }
            st.settled.insert(j.name.clone(), period);
        }
        Ok(enqueued)
    }

    /// A refused enqueue of `j`'s `period`: logged at WARN the first time, when its error
    /// changes, and every [`REWARN_AFTER`] (DEBUG otherwise), and recorded in the database
    /// once per period and error. The period stays unsettled: the next tick tries it again.
    async fn failed(&self, pool: &Pool, j: &PeriodicJob, period: DateTime<Utc>, e: &Error) {
        let msg = e.to_string();
        let (warn, since, record) = {
            let mut st = self.state.lock().unwrap();
            let f = st.failing.entry(j.name.clone()).or_insert_with(|| Failing {
                warned: String::new(),
                warned_at: std::time::Instant::now(),
                recorded: None,
                since_warn: 0,
            });
            let warn = f.warned != msg || f.warned_at.elapsed() >= REWARN_AFTER;
            let since = f.since_warn;
            if warn {
                f.warned = msg.clone();
                f.warned_at = std::time::Instant::now();
                f.since_warn = 0;
            } else {
                f.since_warn += 1;
            }
            let record = f.recorded.as_ref() != Some(&(period, msg.clone()));
            if record {
                f.recorded = Some((period, msg.clone()));
            }
            (warn, since, record)
        };
        if warn {
            tracing::warn!(periodic = %j.name, period = %period.to_rfc3339(), job.kind = %j.job.kind, job.queue = %j.job.queue, error = %msg, failures_since_last_warning = since, "could not enqueue periodic job; the others go on, this one is tried again next tick");
        } else {
            tracing::debug!(periodic = %j.name, period = %period.to_rfc3339(), error = %msg, "could not enqueue periodic job (again)");
        }
        if record
            && let Err(e) =
                store::maintenance::record_periodic_failure(pool, &j.name, period, &msg).await
        {
            tracing::debug!(periodic = %j.name, error = %e, "could not record the failed enqueue");
            // Not recorded: try recording again on the next failure.
            if let Some(f) = self.state.lock().unwrap().failing.get_mut(&j.name) {
                f.recorded = None;
            }
        }
    }
}

/// How often to look: a quarter of the shortest interval, between 50 ms and 1 s.
fn tick_for(jobs: &[PeriodicJob]) -> Duration {
    jobs.iter()
        .filter_map(|j| match j.schedule {
            Schedule::Every(d) => Some(d / 4),
            Schedule::Cron(..) => None,
        })
        .min()
        .unwrap_or(Duration::from_secs(1))
        .clamp(Duration::from_millis(50), Duration::from_secs(1))
}

impl Service for Scheduler {
    fn name(&self) -> &'static str {
        "periodic"
    }
    fn interval(&self) -> Duration {
        self.tick
    }
    fn run_once(&self, pool: Pool) -> BoxFuture<Result<u64>> {
        let me = self.clone();
        Box::pin(async move { me.tick_once(&pool).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn intervals_align_to_the_epoch() {
        let s = Schedule::every(Duration::from_secs(15 * 60)).unwrap();
        assert_eq!(
            s.period_start(at("2026-11-29T10:44:59.999Z")),
            Some(at("2026-11-29T10:30:00Z"))
        );
        assert_eq!(
            s.period_start(at("2026-11-29T10:45:00Z")),
            Some(at("2026-11-29T10:45:00Z"))
        );
        assert_eq!(
            s.next_after(at("2026-11-29T10:45:00Z")),
            Some(at("2026-11-29T11:00:00Z"))
        );
        // Two processes a few hundred ms apart inside one period agree on it.
        assert_eq!(
            s.period_start(at("2026-11-29T10:50:00.100Z")),
            s.period_start(at("2026-11-29T10:59:59.900Z"))
        );
    }

    #[test]
    fn cron_period_is_the_latest_tick_at_or_before_now() {
        let s = Schedule::cron("0 0 3 * * *").unwrap();
        assert_eq!(
            s.period_start(at("2026-11-29T10:00:00Z")),
            Some(at("2026-11-29T03:00:00Z"))
        );
        assert_eq!(
            s.period_start(at("2026-11-29T03:00:00Z")),
            Some(at("2026-11-29T03:00:00Z"))
        );
        assert_eq!(
            s.period_start(at("2026-11-29T02:59:59Z")),
            Some(at("2026-11-28T03:00:00Z"))
        );
        assert_eq!(
            s.next_after(at("2026-11-29T03:00:00Z")),
            Some(at("2026-11-30T03:00:00Z"))
        );
    }

    #[test]
    fn five_field_cron_gets_seconds() {
        let s = Schedule::cron("*/5 * * * *").unwrap();
        assert_eq!(
            s.period_start(at("2026-11-29T10:07:30Z")),
            Some(at("2026-11-29T10:05:00Z"))
        );
        assert!(
            Schedule::cron("not cron")
                .unwrap_err()
                .to_string()
                .contains("not cron")
        );
    }

    /// Fire times of a daily 02:30 (Europe/Berlin) around `day`, as instants.
    fn berlin_0230_after(from: &str, n: usize) -> Vec<DateTime<Utc>> {
        let s = Schedule::cron_in("30 2 * * *", "Europe/Berlin").unwrap();
        let mut out = vec![];
        let mut t = at(from);
        for _ in 0..n {
            t = s.next_after(t).unwrap();
            out.push(t);
        }
        out
    }

    #[test]
    fn cron_in_a_time_zone_on_the_day_the_clocks_go_forward() {
        // 2027-03-28: at 02:00 CET the clocks jump to 03:00 CEST, so 02:30 is skipped by the
        // clocks; it fires as much after the jump, at 03:30 CEST (01:30Z), once that day.
        assert_eq!(
            berlin_0230_after("2027-03-26T12:00:00Z", 4),
            [
                at("2027-03-27T01:30:00Z"), // 02:30 CET
                at("2027-03-28T01:30:00Z"), // 03:30 CEST
                at("2027-03-29T00:30:00Z"), // 02:30 CEST
                at("2027-03-30T00:30:00Z"),
            ]
        );
        let s = Schedule::cron_in("30 2 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            s.period_start(at("2027-03-28T01:29:59Z")),
            Some(at("2027-03-27T01:30:00Z"))
        );
        assert_eq!(
            s.period_start(at("2027-03-28T01:30:00Z")),
            Some(at("2027-03-28T01:30:00Z"))
        );
        // Every quarter hour: the skipped hour's four fire at the jump's instants once each.
        let q = Schedule::cron_in("*/15 * * * *", "Europe/Berlin").unwrap();
        let mut t = at("2027-03-28T00:40:00Z"); // 01:40 CET
        let mut seen = vec![];
        for _ in 0..6 {
            t = q.next_after(t).unwrap();
            seen.push(t);
        }
        assert_eq!(
            seen,
            [
                at("2027-03-28T00:45:00Z"), // 01:45 CET
                at("2027-03-28T01:00:00Z"), // 02:00 (skipped) -> 03:00 CEST, and 03:00 itself
                at("2027-03-28T01:15:00Z"),
                at("2027-03-28T01:30:00Z"),
                at("2027-03-28T01:45:00Z"),
                at("2027-03-28T02:00:00Z"), // 04:00 CEST
            ]
        );
    }

    #[test]
    fn a_skipped_time_fires_after_an_earlier_instant_past_the_jump() {
        // Lord Howe Island jumps half an hour, 02:00 (+10:30) to 02:30 (+11:00), on
        // 2027-10-03. 02:20 is skipped and fires at 15:50Z; 02:40 comes after it on the wall
        // clock but is the earlier instant, 15:40Z: the earlier one is next.
        let s = Schedule::cron_in("20,40 2 * * *", "Australia/Lord_Howe").unwrap();
        assert_eq!(
            s.next_after(at("2027-10-02T15:35:00Z")),
            Some(at("2027-10-02T15:40:00Z"))
        );
        assert_eq!(
            s.next_after(at("2027-10-02T15:40:00Z")),
            Some(at("2027-10-02T15:50:00Z"))
        );
        assert_eq!(
            s.period_start(at("2027-10-02T15:45:00Z")),
            Some(at("2027-10-02T15:40:00Z"))
        );
    }

    #[test]
    fn cron_in_a_time_zone_on_the_day_the_clocks_go_back() {
        // 2027-10-31: at 03:00 CEST the clocks go back to 02:00 CET, so 02:30 comes twice; it
        // fires once, at the first (02:30 CEST = 00:30Z).
        assert_eq!(
            berlin_0230_after("2027-10-29T12:00:00Z", 4),
            [
                at("2027-10-30T00:30:00Z"), // 02:30 CEST
                at("2027-10-31T00:30:00Z"), // 02:30 CEST, not again at 02:30 CET
                at("2027-11-01T01:30:00Z"), // 02:30 CET
                at("2027-11-02T01:30:00Z"),
            ]
        );
        let s = Schedule::cron_in("30 2 * * *", "Europe/Berlin").unwrap();
        // During the second pass of 02:xx the period is still the one that began at the first.
        assert_eq!(
            s.period_start(at("2027-10-31T01:45:00Z")),
            Some(at("2027-10-31T00:30:00Z"))
        );
        assert_eq!(
            s.next_after(at("2027-10-31T01:29:00Z")),
            Some(at("2027-11-01T01:30:00Z"))
        );
    }

    #[test]
    fn unknown_time_zones_are_refused_by_name() {
        let e = Schedule::cron_in("0 3 * * *", "Mars/Olympus").unwrap_err();
        assert!(
            e.to_string().contains("unknown time zone \"Mars/Olympus\""),
            "{e}"
        );
        let toml = "[[job]]\nname='x'\ncron='0 3 * * *'\ntz='Europe/Nowhere'\nkind='noop'\n";
        let e = PeriodicJobs::from_toml(toml).err().unwrap().to_string();
        assert!(e.starts_with("line 4, column 4: unknown time zone"), "{e}");
        let toml = "[[job]]\nname='x'\nevery='1m'\ntz='Europe/Berlin'\nkind='noop'\n";
        let e = PeriodicJobs::from_toml(toml).err().unwrap().to_string();
        assert!(e.contains("`tz` goes with `cron`"), "{e}");
        let toml = "[[job]]\nname='x'\ncron='30 2 * * *'\ntz='Europe/Berlin'\nkind='noop'\n";
        let jobs = PeriodicJobs::from_toml(toml).unwrap();
        assert_eq!(
            jobs.jobs()[0].schedule.describe(),
            "cron 0 30 2 * * * in Europe/Berlin"
        );
    }

    #[test]
    fn describe_round_trips() {
        for text in [
            "every 15m",
            "cron 0 0 3 * * *",
            "every 1s",
            "cron 0 30 2 * * * in Europe/Berlin",
        ] {
            let s = Schedule::parse(text).unwrap();
            assert_eq!(s.describe(), text);
        }
        assert!(Schedule::parse("hourly").is_err());
        assert!(Schedule::every(Duration::from_millis(500)).is_err());
    }

    #[test]
    fn toml_config_parses_and_rejects_mistakes() {
        let jobs = PeriodicJobs::from_toml(
            r#"
            [[job]]
            name = "a"
            every = "10s"
            kind = "noop"
            args = { x = 1, y = ["z"] }
            queue = "maint"
            priority = -1

            [[job]]
            name = "b"
            cron = "0 3 * * *"
            kind = "noop"
            "#,
        )
        .unwrap();
        assert_eq!(jobs.len(), 2);
        let a = &jobs.jobs()[0];
        assert_eq!(a.job.args, serde_json::json!({"x": 1, "y": ["z"]}));
        assert_eq!(a.job.queue, "maint");
        assert_eq!(a.job.priority, -1);
        assert_eq!(a.schedule.describe(), "every 10s");
        assert_eq!(jobs.jobs()[1].job.args, serde_json::json!({}));

        let err = |text: &str| PeriodicJobs::from_toml(text).unwrap_err().to_string();
        let both = "[[job]]\nname='x'\nevery='1m'\ncron='* * * * *'\nkind='noop'\n";
        assert_eq!(
            err(both),
            "line 2, column 6: give exactly one of `every` and `cron`"
        );
        let typo = "[[job]]\nname='x'\nevry='1m'\nkind='noop'\n";
        assert!(
            err(typo).starts_with("line 3, column 1: unknown field, expected one of `name`"),
            "{}",
            err(typo)
        );
        let bad = "[[job]]\nname='x'\nevery='soon'\nkind='noop'\n";
        assert_eq!(
            err(bad),
            "line 3, column 7: invalid duration (write e.g. 30s, 15m, 24h)"
        );
        let cron = "[[job]]\nname='x'\ncron='hunter2 * *'\nkind='noop'\n";
        assert!(err(cron).starts_with("line 3, column 6: invalid cron expression"));
        let long = "[[job]]\nname='x'\nevery='99999999999d'\nkind='noop'\n";
        assert!(err(long).starts_with("line 3, column 7: "), "{}", err(long));
        let twice = "[[job]]\nname='x'\nevery='1m'\nkind='noop'\n[[job]]\nname='x'\nevery='1m'\nkind='noop'\n";
        assert_eq!(
            err(twice),
            "line 6, column 6: a second periodic job with this name"
        );
        let zero = "[[job]]\nname='x'\nevery='1m'\nkind='noop'\nmax_attempts=0\n";
        assert_eq!(
            err(zero),
            "line 2, column 6: max_attempts must be at least 1"
        );
        // A file of secrets (or /etc/shadow) is never quoted back.
        for text in [
            "root:$6$hunter2:19000:0:99999:7:::\n",
            "[[job]]\nname='x'\nevery='hunter2'\nkind='noop'\n",
            "[[job]]\nname='x'\nhunter2='1m'\nkind='noop'\n",
            "[[job]]\nname='x'\nevery='1m'\nkind='noop'\npriority='hunter2'\n",
        ] {
            assert!(!err(text).contains("hunter2"), "{}", err(text));
        }
    }

    #[test]
    fn reserved_unique_keys_are_refused_when_the_file_is_loaded() {
        for r in crate::names::reserved_names()
            .into_iter()
            .filter(|r| r.what == crate::names::Reserved::KeyPrefix)
        {
            let prefix = r.name;
            let text = format!(
                "[[job]]\nname='x'\nevery='1m'\nkind='noop'\nunique_key='{prefix}hunter2'\n"
            );
            let e = PeriodicJobs::from_toml(&text).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "line 5, column 12: unique_key starts with {prefix}, a prefix reserved for skiplock's own functions (use {})",
                    r.use_instead
                )
            );
        }
        // A key that merely contains one is fine.
        let ok = "[[job]]\nname='x'\nevery='1m'\nkind='noop'\nunique_key='nightly:packet:1'\n";
        assert!(PeriodicJobs::from_toml(ok).is_ok());
        // The same rule for a job declared in code, named in the error (the core's own
        // prefix: the keys `unique_by` derives).
        let j = PeriodicJob::every(
            "nightly",
            Duration::from_secs(60),
            NewJob::new("noop", serde_json::json!({})).unique_key("args:1", OnConflict::Keep),
        )
        .unwrap();
        let e = Scheduler::new(PeriodicJobs::new().add(j), "t")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("\"nightly\"") && e.contains("args:"), "{e}");
    }

    #[test]
    fn duplicate_names_are_rejected() {
        let j = PeriodicJob::every(
            "same",
            Duration::from_secs(5),
            NewJob::new("noop", serde_json::json!({})),
        )
        .unwrap();
        let e = Scheduler::new(PeriodicJobs::new().add(j.clone()).add(j), "t")
            .err()
            .unwrap();
        assert!(e.to_string().contains("twice"));
    }

    #[test]
    fn tick_follows_the_shortest_interval() {
        let j = |d| {
            PeriodicJob::every(
                "x",
                Duration::from_secs(d),
                NewJob::new("noop", serde_json::json!({})),
            )
            .unwrap()
        };
        assert_eq!(tick_for(&[j(2)]), Duration::from_millis(500));
        assert_eq!(tick_for(&[j(3600)]), Duration::from_secs(1));
        assert_eq!(tick_for(&[]), Duration::from_secs(1));
    }
}
