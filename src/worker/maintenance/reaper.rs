//! The reaper: discards unfinished jobs (available or running) abandoned far longer than any
//! job should wait or run, so a stuck row cannot sit in the queue forever. It never takes a
//! job that is held rather than abandoned (a paused queue's, one a limit keeps waiting, one
//! no live worker handles), and what it takes it discards with the reason in `errors`, never
//! deletes: the row stays until retention deletes discarded rows (docs/maintenance.md, "The
//! reaper").
//!
//! It runs as a periodic job of kind [`KIND`] (`reap`), declared by every worker that
//! registers the maintenance jobs (`super::register_all`) and enqueued once per
//! `SKIPLOCK_REAPER_INTERVAL` across all processes, so each run is a row an operator can read
//! with psql: its `result` says what it did ([`ReapRun`]). The [`Reaper`] is the handler. It
//! remembers when it was built (the process's start, in memory) and, until this process has
//! been up for the maximum age, takes nothing: after an outage every row would otherwise
//! look stale. Every discard is also logged at WARN (id, kind, queue, state, timestamps).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::IgnoredAny;

use crate::error::{Error, Result};
use crate::queue::JobState;
use crate::store::{self, Pool};

pub use crate::store::maintenance::ReapCandidate;
use crate::worker::handler::{Handler, JobContext};
use crate::worker::outcome::{HandlerResult, Outcome};

/// The kind of the reaper's periodic job.
pub const KIND: &str = "reap";

/// Default maximum age of an unfinished job.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(48 * 3600);
/// Default time between reaper (and retention) runs.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
/// Rows examined per transaction: small, so row locks are short.
pub const BATCH: i64 = 500;
/// Batches per run at most; the next run continues.
pub const MAX_BATCHES: usize = 20;
/// A worker is live for the reaper while its last heartbeat is this recent (the window
/// `skiplock stats` reports unhandled kinds by; workers send one every 15 s at most, see
/// `worker::heartbeat`): a job no live worker handles in its queue is held, not abandoned.
pub const LIVE_WITHIN: Duration = Duration::from_secs(120);

/// The reaper's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaperSettings {
    /// An unfinished job abandoned for longer than this is discarded
    /// (`SKIPLOCK_REAPER_MAX_AGE`, 48h).
    pub max_age: Duration,
    /// Time between runs, the period of the `reap` job (`SKIPLOCK_REAPER_INTERVAL`, 30s, at
    /// least 1s); the `retain` job runs on it too.
    pub interval: Duration,
}

impl Default for ReaperSettings {
    fn default() -> Self {
        ReaperSettings {
            max_age: DEFAULT_MAX_AGE,
            interval: DEFAULT_INTERVAL,
        }
    }
}

impl ReaperSettings {
    /// Rejects values that parse but make no sense.
    pub fn validate(&self) -> Result<()> {
        if self.max_age < Duration::from_secs(1) {
            return Err(Error::config(
                "SKIPLOCK_REAPER_MAX_AGE",
                "must be at least 1s",
            ));
        }
        crate::config::check_duration("SKIPLOCK_REAPER_INTERVAL", self.interval)?;
        Ok(())
    }
}

/// What one run of the reaper did: the `result` of its `reap` job, e.g.
/// `{"discarded": 3, "guarded": false, "uptime_s": 180000, "max_age_s": 172800}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReapRun {
    /// Jobs discarded.
    pub discarded: u64,
    /// The uptime guard held: the process was younger than the maximum age, nothing was read.
    pub guarded: bool,
    /// How long the process running it had been up (whole seconds).
    pub uptime_s: u64,
    /// The maximum age it judged by (whole seconds).
    pub max_age_s: u64,
}

/// Whether the uptime guard holds for a process up for `uptime`: until it has been up for the
/// whole maximum age, the reaper takes nothing (after an outage every row looks stale).
pub fn guarded(uptime: Duration, max_age: Duration) -> bool {
    uptime < max_age
}

/// What holds an `available` job back, if anything: its queue is paused, a limit of its
/// queue may be what keeps it waiting, or no live worker handles its kind in its queue. Such a
/// job is waiting, not abandoned, however long it has waited: the reaper never takes it.
pub fn hold(job: &ReapCandidate) -> Option<&'static str> {
    if job.queue_paused {
        Some("its queue is paused")
    } else if job.queue_limited {
        Some("a limit of its queue holds it")
    } else if !job.claimable {
        Some("no live worker handles its kind in its queue")
    } else {
        None
    }
}

/// Whether the reaper may discard `job` at `now`, in a process whose reaper started at
/// `started_at`. The one place the rule lives:
///
/// - nothing is too old until the process has been up for at least `max_age` (uptime guard);
/// - finished jobs (completed, discarded, cancelled) are retention's business, never the reaper's;
/// - an available job that something holds ([`hold`]) is never too old: it waits by design;
/// - a job scheduled in the future is never too old, however long ago it was created;
/// - a running job is judged by `attempted_at`, any other by `scheduled_at` (when it became
///   due); if that one is missing the other is used, and if neither is set, `created_at`; a
///   running job without `attempted_at` waits in a worker's buffer (claimed ahead, not
///   started: docs/internals.md, "When a job started") and is judged by its heartbeat first;
/// - too old means strictly older than `max_age`: exactly `max_age` old is kept.
pub fn is_too_old(
    job: &ReapCandidate,
    now: DateTime<Utc>,
    started_at: DateTime<Utc>,
    max_age: Duration,
) -> bool {
    let Ok(max_age) = chrono::Duration::from_std(max_age) else {
        return false;
    };
    if now.signed_duration_since(started_at) < max_age {
        return false;
    }
    let running = match job.state {
        JobState::Running => true,
        JobState::Available if hold(job).is_some() => return false,
        JobState::Available => false,
        _ => return false,
    };
    if job.scheduled_at.is_some_and(|s| s > now) {
        return false;
    }
    let reference = if running {
        job.attempted_at.or(job.heartbeat_at).or(job.scheduled_at)
    } else {
        job.scheduled_at.or(job.attempted_at)
    }
    .unwrap_or(job.created_at);
    now.signed_duration_since(reference) > max_age
}

/// Discards abandoned jobs past the maximum age; the handler of the `reap` job. Cheap to
/// clone: clones share the start instant and counters (tests and callers can watch the one
/// the worker runs).
#[derive(Clone)]
pub struct Reaper {
    pool: Pool,
    settings: ReaperSettings,
    inner: Arc<Inner>,
}

struct Inner {
    started: Instant,
    runs: AtomicU64,
    discarded: AtomicU64,
    /// The key period this process last warned about per queue (warned once, not per run).
    warned: Mutex<HashMap<String, u64>>,
}

impl Reaper {
    /// Builds the reaper; its uptime starts now.
    pub fn new(pool: Pool, settings: ReaperSettings) -> Self {
        Reaper {
            pool,
            settings,
            inner: Arc::new(Inner {
                started: Instant::now(),
                runs: AtomicU64::new(0),
                discarded: AtomicU64::new(0),
                warned: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> ReaperSettings {
        self.settings
    }

    /// How long ago it was built (monotonic clock).
    pub fn uptime(&self) -> Duration {
        self.inner.started.elapsed()
    }

    /// Completed runs in this process so far (a run the uptime guard stopped counts too).
    pub fn runs(&self) -> u64 {
        self.inner.runs.load(Ordering::SeqCst)
    }

    /// Jobs discarded so far.
    pub fn discarded(&self) -> u64 {
        self.inner.discarded.load(Ordering::SeqCst)
    }

    /// One run on its own pool (outside a `reap` job); returns how many jobs it discarded.
    pub async fn reap_once(&self) -> Result<u64> {
        Ok(self.reap_with(&self.pool, None).await?.discarded)
    }

    /// One run: warns about key periods longer than the maximum age (once per queue and
    /// period, `warn_long_key_periods`), then discards too-old jobs in batches of [`BATCH`]
    /// (at most [`MAX_BATCHES`]), never job `spare` (the `reap` job running it). Reads no job
    /// while the uptime guard holds.
    pub async fn reap_with(&self, pool: &Pool, spare: Option<i64>) -> Result<ReapRun> {
        let uptime = self.uptime();
        let guarded = guarded(uptime, self.settings.max_age);
        // Before the guard: the first run comes one interval after the worker's start, so
        // this is the start-up warning too, not one two days later.
        self.warn_long_key_periods(pool).await?;
        let discarded = if guarded {
            0
        } else {
            let started = self.inner.started;
            reap(pool, self.settings.max_age, spare, move |db_now| {
                db_now
                    - chrono::Duration::from_std(started.elapsed())
                        .unwrap_or(chrono::TimeDelta::MAX)
            })
            .await?
        };
        self.inner.discarded.fetch_add(discarded, Ordering::SeqCst);
        self.inner.runs.fetch_add(1, Ordering::SeqCst);
        Ok(ReapRun {
            discarded,
            guarded,
            uptime_s: uptime.as_secs(),
            max_age_s: self.settings.max_age.as_secs(),
        })
    }

    /// Warns (once per queue and period in this process) about every queue whose per-key
    /// rate period is longer than the maximum age: its keyed jobs may wait longer than that
    /// by design. The reaper leaves them alone (a limit holds them, [`hold`]), but a maximum
    /// age chosen as "nothing waits longer" no longer says what it meant. `set_key_limit`
    /// cannot refuse such a period itself: the maximum age is a worker setting, not in the
    /// database. Returns the queues found.
    pub async fn warn_long_key_periods(
        &self,
        pool: &Pool,
    ) -> Result<Vec<store::maintenance::LongKeyPeriod>> {
        let long = store::maintenance::long_key_periods(pool, self.settings.max_age).await?;
        let mut warned = self.inner.warned.lock().unwrap();
        for q in &long {
            let secs = q.period_s.round() as u64;
            if warned.insert(q.queue.clone(), secs) == Some(secs) {
                continue;
            }
            tracing::warn!(
                queue = %q.queue,
                key_period = %humantime::format_duration(Duration::from_secs(secs)),
                max_age = %humantime::format_duration(self.settings.max_age),
                "a queue's key rate period is longer than SKIPLOCK_REAPER_MAX_AGE: its keyed jobs may wait longer than the maximum age (the reaper leaves held jobs alone)"
            );
        }
        Ok(long)
    }
}

/// The `reap` job: one run in the process that claimed it, judged by that process's uptime;
/// completes with the [`ReapRun`] as its result. Args are ignored.
impl Handler for Reaper {
    type Args = IgnoredAny;
    fn kind(&self) -> &'static str {
        KIND
    }
    async fn run(&self, ctx: JobContext, _args: IgnoredAny) -> HandlerResult {
        let run = self.reap_with(&ctx.pool, Some(ctx.id)).await?;
        if run.discarded > 0 {
            tracing::info!(
                job.id = ctx.id,
                discarded = run.discarded,
                "reaper run discarded jobs"
            );
        }
        Ok(Outcome::CompleteWith(serde_json::to_value(run)?))
    }
}

/// Discards the jobs [`is_too_old`] condemns, batch by batch, each batch in a transaction that
/// holds the candidates' row locks from the decision to the discard (so a job claimed in the
/// meantime is never discarded as stale), each with the reason in its `errors`. Job `spare`
/// is never taken (the `reap` job that runs this must not discard its own row mid-run,
/// however small the maximum age). `started_at` maps the database's `now()` to the start the
/// uptime guard measures from. Logs each discard at WARN.
pub async fn reap(
    pool: &Pool,
    max_age: Duration,
    spare: Option<i64>,
    started_at: impl Fn(DateTime<Utc>) -> DateTime<Utc>,
) -> Result<u64> {
    let mut total = 0u64;
    for _ in 0..MAX_BATCHES {
        let mut tx = pool.begin().await?;
        let rows =
            store::maintenance::reap_candidates_locked(&mut *tx, max_age, LIVE_WITHIN, BATCH)
                .await?;
        let fetched = rows.len();
        let doomed: Vec<ReapCandidate> = rows
            .into_iter()
            .filter(|r| Some(r.job.id) != spare)
            .filter(|r| is_too_old(&r.job, r.db_now, started_at(r.db_now), max_age))
            .map(|r| r.job)
            .collect();
        if doomed.is_empty() {
            tx.commit().await?;
            break;
        }
        let ids: Vec<i64> = doomed.iter().map(|j| j.id).collect();
        let max = humantime::format_duration(max_age).to_string();
        let discarded = store::maintenance::reap_discard(&mut *tx, &ids, &max).await?;
        tx.commit().await?;
        for j in &doomed {
            log_reaped(j, max_age);
        }
        total += discarded;
        if (fetched as i64) < BATCH {
            break;
        }
    }
    Ok(total)
}

fn log_reaped(j: &ReapCandidate, max_age: Duration) {
    let t = |d: Option<DateTime<Utc>>| d.map(|d| d.to_rfc3339()).unwrap_or_else(|| "-".into());
    tracing::warn!(
        job.id = j.id,
        job.kind = %j.kind,
        job.queue = %j.queue,
        job.state = %j.state,
        job.attempt = j.attempt,
        job.created_at = %j.created_at.to_rfc3339(),
        job.scheduled_at = %t(j.scheduled_at),
        job.attempted_at = %t(j.attempted_at),
        job.attempted_by = j.attempted_by.as_deref().unwrap_or("-"),
        job.heartbeat_at = %t(j.heartbeat_at),
        max_age = %humantime::format_duration(max_age),
        "reaper discarded a job left unfinished past the maximum age"
    );
}

/// The jobs that are abandoned past the maximum age right now, ignoring the uptime guard
/// (what `skiplock reap --dry-run` lists), with the database's `now()`.
pub async fn preview(
    pool: &Pool,
    max_age: Duration,
    limit: i64,
) -> Result<(DateTime<Utc>, Vec<ReapCandidate>)> {
    let rows =
        store::maintenance::reap_candidates_preview(pool, max_age, LIVE_WITHIN, limit).await?;
    let now = match rows.first() {
        Some(r) => r.db_now,
        None => store::maintenance::db_now(pool).await?,
    };
    let jobs = rows
        .into_iter()
        .filter(|r| is_too_old(&r.job, r.db_now, DateTime::<Utc>::MIN_UTC, max_age))
        .map(|r| r.job)
        .collect();
    Ok((now, jobs))
}

/// When the longest-running live worker started (heartbeat within `live_within`), and the
/// database's `now()`: `skiplock reap` applies the uptime guard to the worker fleet.
pub async fn oldest_live_worker(
    pool: &Pool,
    live_within: Duration,
) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>)> {
    let w = store::maintenance::oldest_live_worker(pool, live_within).await?;
    Ok((w.db_now, w.started_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(3600);

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-01T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }
    fn ago(secs: i64) -> DateTime<Utc> {
        t0() - chrono::Duration::seconds(secs)
    }
    /// A reaper that has been up for a day (the guard does not hold).
    fn old_start() -> DateTime<Utc> {
        ago(86_400)
    }
    fn job(state: JobState) -> ReapCandidate {
        ReapCandidate {
            id: 1,
            kind: "k".into(),
            queue: "default".into(),
            args: "{}".into(),
            state,
            attempt: 0,
            scheduled_at: None,
            created_at: ago(100_000),
            attempted_at: None,
            attempted_by: None,
            heartbeat_at: None,
            queue_paused: false,
            queue_limited: false,
            claimable: true,
        }
    }

    #[test]
    fn running_is_judged_by_attempted_at() {
        let mut j = job(JobState::Running);
        j.scheduled_at = Some(ago(90_000));
        j.attempted_at = Some(ago(3599));
        assert!(
            !is_too_old(&j, t0(), old_start(), MAX),
            "recent attempt, old schedule"
        );
        j.attempted_at = Some(ago(3601));
        assert!(is_too_old(&j, t0(), old_start(), MAX));
    }

    #[test]
    fn available_is_judged_by_scheduled_at() {
        let mut j = job(JobState::Available);
        j.scheduled_at = Some(ago(3599));
        j.attempted_at = Some(ago(90_000)); // an old earlier attempt does not matter
        assert!(!is_too_old(&j, t0(), old_start(), MAX));
        j.scheduled_at = Some(ago(3601));
        j.attempted_at = None;
        assert!(is_too_old(&j, t0(), old_start(), MAX));
    }

    #[test]
    fn missing_timestamp_falls_back_to_the_other() {
        let mut j = job(JobState::Running);
        j.scheduled_at = Some(ago(3601));
        assert!(
            is_too_old(&j, t0(), old_start(), MAX),
            "running without attempted_at: scheduled_at"
        );
        j.scheduled_at = Some(ago(10));
        assert!(!is_too_old(&j, t0(), old_start(), MAX));
        // Claimed ahead, waiting in a live worker's buffer: its heartbeat, not how long ago
        // it became due, says whether it was abandoned.
        j.scheduled_at = Some(ago(90_000));
        j.heartbeat_at = Some(ago(5));
        assert!(!is_too_old(&j, t0(), old_start(), MAX));
        j.heartbeat_at = Some(ago(3601));
        assert!(is_too_old(&j, t0(), old_start(), MAX));
        let mut a = job(JobState::Available);
        a.attempted_at = Some(ago(3601));
        assert!(
            is_too_old(&a, t0(), old_start(), MAX),
            "available without scheduled_at: attempted_at"
        );
    }

    #[test]
    fn neither_timestamp_uses_created_at() {
        for state in [JobState::Available, JobState::Running] {
            let mut j = job(state);
            j.created_at = ago(3601);
            assert!(is_too_old(&j, t0(), old_start(), MAX), "{state}");
            j.created_at = ago(3599);
            assert!(!is_too_old(&j, t0(), old_start(), MAX), "{state}");
        }
    }

    #[test]
    fn future_scheduled_is_never_too_old() {
        for state in [JobState::Available, JobState::Running] {
            let mut j = job(state);
            j.created_at = ago(10 * 86_400);
            j.scheduled_at = Some(t0() + chrono::Duration::seconds(1));
            assert!(!is_too_old(&j, t0(), old_start(), MAX), "{state}");
        }
    }

    #[test]
    fn a_held_available_job_is_never_too_old_a_running_one_still_is() {
        type Set = fn(&mut ReapCandidate);
        let holds: [(Set, &str); 3] = [
            (|j| j.queue_paused = true, "its queue is paused"),
            (|j| j.queue_limited = true, "a limit of its queue holds it"),
            (
                |j| j.claimable = false,
                "no live worker handles its kind in its queue",
            ),
        ];
        for (set, why) in holds {
            let mut j = job(JobState::Available);
            j.scheduled_at = Some(ago(90 * 86_400));
            assert!(is_too_old(&j, t0(), old_start(), MAX), "{why}: unheld");
            set(&mut j);
            assert_eq!(hold(&j), Some(why));
            assert!(!is_too_old(&j, t0(), old_start(), MAX), "{why}");
            // A running attempt is not held by anything: it is judged by its age.
            j.state = JobState::Running;
            j.attempted_at = Some(ago(3601));
            assert!(is_too_old(&j, t0(), old_start(), MAX), "{why}: running");
        }
    }

    #[test]
    fn finished_states_are_never_reaped() {
        // (An unknown state can no longer reach the rule: `state` is a JobState, and the
        // store refuses to decode a label it does not know.)
        for state in [
            JobState::Completed,
            JobState::Discarded,
            JobState::Cancelled,
        ] {
            let mut j = job(state);
            j.scheduled_at = Some(ago(90_000));
            j.attempted_at = Some(ago(90_000));
            assert!(!is_too_old(&j, t0(), old_start(), MAX), "{state}");
        }
    }

    #[test]
    fn exact_boundary_is_kept_one_microsecond_more_is_not() {
        let mut j = job(JobState::Available);
        j.scheduled_at = Some(ago(3600));
        assert!(!is_too_old(&j, t0(), old_start(), MAX));
        j.scheduled_at = Some(ago(3600) - chrono::Duration::microseconds(1));
        assert!(is_too_old(&j, t0(), old_start(), MAX));
    }

    #[test]
    fn uptime_guard_holds_until_the_process_is_max_age_old() {
        let mut j = job(JobState::Available);
        j.scheduled_at = Some(ago(10 * 86_400));
        // Up for one microsecond less than the maximum age: nothing is taken.
        let young = ago(3600) + chrono::Duration::microseconds(1);
        assert!(!is_too_old(&j, t0(), young, MAX));
        // Up for exactly the maximum age: the guard is over.
        assert!(is_too_old(&j, t0(), ago(3600), MAX));
        // A start "in the future" (clock oddity) also counts as too young.
        assert!(!is_too_old(
            &j,
            t0(),
            t0() + chrono::Duration::seconds(5),
            MAX
        ));
    }

    #[test]
    fn guard_holds_until_uptime_reaches_max_age() {
        assert!(guarded(Duration::from_secs(3599), MAX));
        assert!(!guarded(MAX, MAX));
        assert!(!guarded(Duration::from_secs(3601), MAX));
    }

    #[test]
    fn a_run_is_reported_as_the_jobs_result() {
        let run = ReapRun {
            discarded: 3,
            guarded: false,
            uptime_s: 180_000,
            max_age_s: 172_800,
        };
        assert_eq!(
            serde_json::to_value(run).unwrap(),
            serde_json::json!({"discarded": 3, "guarded": false, "uptime_s": 180000, "max_age_s": 172800})
        );
    }

    #[test]
    fn settings_validate() {
        assert!(ReaperSettings::default().validate().is_ok());
        let bad = ReaperSettings {
            max_age: Duration::ZERO,
            ..ReaperSettings::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("SKIPLOCK_REAPER_MAX_AGE")
        );
        let bad = ReaperSettings {
            interval: Duration::from_millis(999),
            ..ReaperSettings::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("SKIPLOCK_REAPER_INTERVAL")
        );
    }
}
