//! The maintenance services' statements (`sql/maintenance/`): the reaper's candidates and
//! deletes, retention's deletes, the periodic jobs' declarations and once-per-period enqueue.

use std::time::Duration;

use super::{Executor, sql};
use crate::error::Result;
use crate::queue::{JobState, NewJob};
use crate::time::{DbTime, DbTimeOpt};
use chrono::{DateTime, Utc};

/// The database's clock.
pub async fn db_now<'e, E: Executor<'e>>(exec: E) -> Result<DateTime<Utc>> {
    Ok(
        super::query_scalar::<DbTime>(sql!("maintenance", "db_now"))
            .fetch_one(exec)
            .await?
            .0,
    )
}

/// What the reaper needs to know about a job to judge it: its timestamps, and whether
/// something holds it back (for an `available` job; see `reaper::is_too_old`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReapCandidate {
    /// Row id.
    pub id: i64,
    /// Handler name.
    pub kind: String,
    /// Queue name.
    pub queue: String,
    /// Arguments as the database prints them (text, never decoded: any jsonb the table holds
    /// can be listed, however deep or large its numbers).
    pub args: String,
    /// Its state.
    pub state: JobState,
    /// Attempts so far.
    pub attempt: i32,
    /// When it became (or becomes) due.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub scheduled_at: Option<DateTime<Utc>>,
    /// When it was enqueued.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub created_at: DateTime<Utc>,
    /// When the current or last attempt started.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub attempted_at: Option<DateTime<Utc>>,
    /// The worker of that attempt.
    pub attempted_by: Option<String>,
    /// Last heartbeat of a running attempt.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Its queue is paused.
    pub queue_paused: bool,
    /// A limit of its queue may be what keeps it waiting: the queue's concurrency, or (for a
    /// job with a `limit_key`) a key's concurrency or rate.
    pub queue_limited: bool,
    /// Some live worker handles its kind in its queue (could claim it).
    pub claimable: bool,
}

/// A candidate with the database's `now()` it was read at.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CandidateRow {
    /// The database's clock.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub db_now: DateTime<Utc>,
    /// The job.
    #[sqlx(flatten)]
    pub job: ReapCandidate,
}

/// Up to `limit` unfinished jobs that may be abandoned (older than `max_age`, not held; a
/// worker is live with a heartbeat within `live_within`), locked (`FOR NO KEY UPDATE SKIP LOCKED`)
/// until the transaction ends so no worker claims one while the reaper decides. The same
/// candidate query as [`reap_candidates_preview`] (`reap_candidates.sql`).
pub async fn reap_candidates_locked<'e, E: Executor<'e>>(
    exec: E,
    max_age: Duration,
    live_within: Duration,
    limit: i64,
) -> Result<Vec<CandidateRow>> {
    Ok(super::query_as(concat!(
        include_str!("../../sql/maintenance/reap_candidates.sql"),
        "LIMIT $2 FOR NO KEY UPDATE OF j SKIP LOCKED"
    ))
    .bind(max_age.as_secs_f64())
    .bind(limit)
    .bind(live_within.as_secs_f64())
    .fetch_all(exec)
    .await?)
}

/// Up to `limit` unfinished jobs that may be abandoned, in id order, unlocked
/// (`skiplock reap --dry-run`).
pub async fn reap_candidates_preview<'e, E: Executor<'e>>(
    exec: E,
    max_age: Duration,
    live_within: Duration,
    limit: i64,
) -> Result<Vec<CandidateRow>> {
    Ok(super::query_as(concat!(
        include_str!("../../sql/maintenance/reap_candidates.sql"),
        "ORDER BY j.id LIMIT $2"
    ))
    .bind(max_age.as_secs_f64())
    .bind(limit)
    .bind(live_within.as_secs_f64())
    .fetch_all(exec)
    .await?)
}

/// Discards the jobs `ids` the reaper judged abandoned (still unfinished), each with the
/// reason in its `errors` naming the maximum age `max_age` (as written, e.g. `2days`);
/// returns how many.
pub async fn reap_discard<'e, E: Executor<'e>>(exec: E, ids: &[i64], max_age: &str) -> Result<u64> {
    Ok(super::query(sql!("maintenance", "reap_discard"))
        .bind(ids)
        .bind(max_age)
        .execute(exec)
        .await?
        .rows_affected())
}

/// A queue whose per-key rate period is longer than the reaper's maximum age.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct LongKeyPeriod {
    /// The queue.
    pub queue: String,
    /// Its key rate period, in seconds.
    pub period_s: f64,
}

/// The queues (at most 100) whose per-key rate period is longer than `max_age`.
pub async fn long_key_periods<'e, E: Executor<'e>>(
    exec: E,
    max_age: Duration,
) -> Result<Vec<LongKeyPeriod>> {
    Ok(super::query_as(sql!("maintenance", "long_key_periods"))
        .bind(max_age.as_secs_f64())
        .fetch_all(exec)
        .await?)
}

/// When the longest-running live worker started, and the database's `now()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OldestLiveWorker {
    /// The database's clock.
    pub db_now: DateTime<Utc>,
    /// When the oldest live worker started (`None`: no live worker).
    pub started_at: Option<DateTime<Utc>>,
}

/// When the longest-running worker with a heartbeat within `live_within` started.
pub async fn oldest_live_worker<'e, E: Executor<'e>>(
    exec: E,
    live_within: Duration,
) -> Result<OldestLiveWorker> {
    #[derive(sqlx::FromRow)]
    struct Row {
        db_now: DbTime,
        started_at: DbTimeOpt,
    }
    let r: Row = super::query_as(sql!("maintenance", "oldest_live_worker"))
        .bind(live_within.as_secs_f64())
        .fetch_one(exec)
        .await?;
    Ok(OldestLiveWorker {
        db_now: r.db_now.0,
        started_at: r.started_at.0,
    })
}

/// Deletes at most `limit` jobs in `state` finished more than `older_than` ago, oldest first;
/// returns how many.
pub async fn retention<'e, E: Executor<'e>>(
    exec: E,
    state: JobState,
    older_than: Duration,
    limit: i64,
) -> Result<u64> {
    let n: i64 = super::query_scalar(sql!("maintenance", "retention"))
        .bind(state)
        .bind(older_than.as_secs_f64())
        .bind(limit)
        .fetch_one(exec)
        .await?;
    Ok(n as u64)
}

/// Forgets at most `limit` job watches nobody has refreshed for a day; returns how many.
pub async fn retention_job_watches<'e, E: Executor<'e>>(exec: E, limit: i64) -> Result<u64> {
    Ok(super::query(sql!("maintenance", "retention_job_watches"))
        .bind(limit)
        .execute(exec)
        .await?
        .rows_affected())
}

/// Forgets period records older than `older_than`, keeping each periodic job's latest.
pub async fn retention_periodic_runs<'e, E: Executor<'e>>(
    exec: E,
    older_than: Duration,
) -> Result<u64> {
    Ok(super::query(sql!("maintenance", "retention_periodic_runs"))
        .bind(older_than.as_secs_f64())
        .execute(exec)
        .await?
        .rows_affected())
}

/// Forgets at most `limit` per-key rate records whose time has passed (they decide nothing);
/// returns how many.
pub async fn retention_key_rates<'e, E: Executor<'e>>(exec: E, limit: i64) -> Result<u64> {
    Ok(super::query(sql!("maintenance", "retention_key_rates"))
        .bind(limit)
        .execute(exec)
        .await?
        .rows_affected())
}

/// Forgets at most `limit` `unique_for` windows that have ended (they refuse nothing any
/// more); returns how many.
pub async fn retention_unique_windows<'e, E: Executor<'e>>(exec: E, limit: i64) -> Result<u64> {
    Ok(super::query(sql!("maintenance", "retention_unique_windows"))
        .bind(limit)
        .execute(exec)
        .await?
        .rows_affected())
}

/// Forgets at most `limit` key holds that have passed; returns how many.
pub async fn retention_key_holds<'e, E: Executor<'e>>(exec: E, limit: i64) -> Result<u64> {
    Ok(super::query(sql!("maintenance", "retention_key_holds"))
        .bind(limit)
        .execute(exec)
        .await?
        .rows_affected())
}

/// A periodic job as a worker declares it, for [`declare_periodic`].
#[derive(Debug, Clone, Copy)]
pub struct PeriodicDecl<'a> {
    /// Its unique name.
    pub name: &'a str,
    /// Its schedule as written (`every 5m`, a cron expression).
    pub schedule: &'a str,
    /// The job it enqueues.
    pub job: &'a NewJob,
    /// The declaring process.
    pub declared_by: &'a str,
}

/// Records a periodic job as this worker declares it (for `skiplock periodic`).
pub async fn declare_periodic<'e, E: Executor<'e>>(exec: E, d: PeriodicDecl<'_>) -> Result<()> {
    super::query(sql!("maintenance", "declare_periodic"))
        .bind(d.name)
        .bind(d.schedule)
        .bind(&d.job.kind)
        .bind(&d.job.queue)
        .bind(&d.job.args)
        .bind(d.declared_by)
        .execute(exec)
        .await?;
    Ok(())
}

/// One period of a periodic job, for [`enqueue_periodic`].
#[derive(Debug, Clone, Copy)]
pub struct PeriodicRun<'a> {
    /// The periodic job's name.
    pub name: &'a str,
    /// The period's start (its fire time).
    pub period_start: DateTime<Utc>,
    /// A job that never ran starts with its first period after this (the scheduler's start).
    pub first_after: DateTime<Utc>,
    /// The job to enqueue.
    pub job: &'a NewJob,
}

/// Enqueues period `r.period_start` of `r.name` unless some process already did
/// (`skiplock.enqueue_periodic`); returns the new job's id, or `None`.
pub async fn enqueue_periodic<'e, E: Executor<'e>>(
    exec: E,
    r: PeriodicRun<'_>,
) -> Result<Option<i64>> {
    Ok(super::query_scalar(sql!("maintenance", "enqueue_periodic"))
        .bind(r.name)
        .bind(r.period_start)
        .bind(r.first_after)
        .bind(&r.job.kind)
        .bind(&r.job.args)
        .bind(&r.job.queue)
        .bind(r.job.priority)
        .bind(r.job.max_attempts)
        .bind(&r.job.unique_key)
        .bind(r.job.on_conflict.as_str())
        .fetch_one(exec)
        .await?)
}

/// Records that period `period_start` of periodic job `name` could not be enqueued, with
/// `error` (shown by `skiplock periodic` until the job's next successful enqueue).
pub async fn record_periodic_failure<'e, E: Executor<'e>>(
    exec: E,
    name: &str,
    period_start: DateTime<Utc>,
    error: &str,
) -> Result<()> {
    super::query(sql!("maintenance", "record_periodic_failure"))
        .bind(name)
        .bind(period_start)
        .bind(error)
        .execute(exec)
        .await?;
    Ok(())
}

/// A periodic job as declared by a worker, with its latest run.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeclaredPeriodic {
    /// Its name.
    pub name: String,
    /// Its schedule as written.
    pub schedule: String,
    /// The kind it enqueues.
    pub kind: String,
    /// The queue.
    pub queue: String,
    /// The process that declared it last.
    pub declared_by: String,
    /// The latest period enqueued.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub last_period: Option<DateTime<Utc>>,
    /// That period's job.
    pub last_job_id: Option<i64>,
    /// That job's state (`None`: gone, or never run).
    pub last_job_state: Option<JobState>,
    /// Why its latest failed enqueue failed (`None`: none since its last successful one).
    pub last_error: Option<String>,
    /// When that was.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub last_error_at: Option<DateTime<Utc>>,
}

/// Every periodic job workers declared, by name.
pub async fn list_periodic<'e, E: Executor<'e>>(exec: E) -> Result<Vec<DeclaredPeriodic>> {
    Ok(super::query_as(sql!("maintenance", "list_periodic"))
        .fetch_all(exec)
        .await?)
}

/// Step 1 of the lanes' upkeep (`skiplock._lanes_mark`, sql/api/50_maintenance.sql): wakes
/// the lanes whose time came, registers lanes with available jobs and no row, and marks the
/// rows it means to change; returns how many it marked.
pub async fn lanes_mark<'e, E: Executor<'e>>(exec: E) -> Result<i64> {
    Ok(super::query_scalar(sql!("maintenance", "lanes_mark"))
        .fetch_one(exec)
        .await?)
}

/// What step 2 of the lanes' upkeep found: the rows marked (lanes', fair queues' keys'), and
/// the transactions writing jobs when it looked.
#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct LanesMarked {
    /// Marked rows of `skiplock.lanes` (their ctids, as text).
    pub lane_rows: Vec<String>,
    /// Marked rows of `skiplock.key_lanes`.
    pub key_rows: Vec<String>,
    /// The virtual transaction ids of the transactions then writing jobs.
    pub writers: Vec<String>,
}

/// Step 2 of the lanes' upkeep (`skiplock._lanes_marked`).
pub async fn lanes_marked<'e, E: Executor<'e>>(exec: E) -> Result<LanesMarked> {
    Ok(super::query_as(sql!("maintenance", "lanes_marked"))
        .fetch_one(exec)
        .await?)
}

/// How many of `writers` are still running (`skiplock._lanes_writers_left`).
pub async fn lanes_writers_left<'e, E: Executor<'e>>(exec: E, writers: &[String]) -> Result<i32> {
    Ok(super::query_scalar(sql!("maintenance", "lanes_writers_left"))
        .bind(writers)
        .fetch_one(exec)
        .await?)
}

/// Step 3 of the lanes' upkeep (`skiplock._lanes_settle`): the marked rows decided again;
/// returns how many it removed.
pub async fn lanes_settle<'e, E: Executor<'e>>(exec: E, m: &LanesMarked) -> Result<i64> {
    Ok(super::query_scalar(sql!("maintenance", "lanes_settle"))
        .bind(&m.lane_rows)
        .bind(&m.key_rows)
        .fetch_one(exec)
        .await?)
}

/// How often [`tidy_lanes`] looks whether the writers it waits for have ended.
const WRITERS_POLL: Duration = Duration::from_millis(10);

/// The lanes' upkeep, retention's last step (docs/internals.md, "Claims when Postgres cannot
/// vacuum"): marks the lane rows to change, waits at most `wait` for every transaction that
/// was writing jobs when the marks committed, then decides those rows again. Returns the rows
/// removed, or None when a writer was still running at the deadline (a long transaction): the
/// marks stay, and the next pass waits again.
pub async fn tidy_lanes(pool: &super::Pool, wait: Duration) -> Result<Option<i64>> {
    lanes_mark(pool).await?;
    let m = lanes_marked(pool).await?;
    if m.lane_rows.is_empty() && m.key_rows.is_empty() {
        return Ok(Some(0));
    }
    let deadline = std::time::Instant::now() + wait;
    while lanes_writers_left(pool, &m.writers).await? > 0 {
        if std::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(WRITERS_POLL).await;
    }
    Ok(Some(lanes_settle(pool, &m).await?))
}
