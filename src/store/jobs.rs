//! Job statements for callers and operators: enqueue (through the SQL API functions psql
//! users call, so validation, unique keys and NOTIFY live in one place), list, get, cancel,
//! retry, and the counts behind `skiplock stats`. Statements: `sql/queue/`.

use std::borrow::Cow;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::{Executor, sql};
use crate::error::{Error, Result};
use crate::queue::enqueue::{check_key, check_nul, check_reserved_job, check_text};
use crate::queue::{Enqueued, JobRow, JobState, NewJob, OnConflict, OnDependencyFailure, UniqueBy};
use crate::time::{DbTime, DbTimeOpt};

/// Enqueues one job: its id (or the id of the available job holding its key) and what the
/// enqueue did. Refused before the round trip: NUL characters, a reserved key prefix, a
/// reserved queue or kind (`check_reserved_job`), a time skiplock cannot store.
pub async fn enqueue<'e, E: Executor<'e>>(exec: E, job: &NewJob) -> Result<Enqueued> {
    check_nul(
        &job.kind,
        &job.queue,
        job.unique_key.as_deref(),
        job.limit_key.as_deref(),
        &[&job.args],
    )?;
    check_key(job.unique_key.as_deref())?;
    check_reserved_job(&job.kind, &job.queue)?;
    check_extras(&job.tags, job.meta.as_ref())?;
    if let Some(t) = job.run_at {
        crate::time::check("run_at", t)?;
    }
    let meta = meta_to_write(job.meta.as_ref());
    let (id, outcome): (i64, String) = super::query_as(sql!("queue", "enqueue"))
        .bind(&job.kind)
        .bind(&job.args)
        .bind(&job.queue)
        .bind(job.run_at)
        .bind(job.priority)
        .bind(job.max_attempts)
        .bind(&job.unique_key)
        .bind(job.on_conflict.as_str())
        .bind(&job.limit_key)
        .bind(tags_or_null(&job.tags))
        .bind(meta.as_deref())
        .bind(job.unique_by.as_ref().map(UniqueBy::to_sql))
        .bind(job.unique_for)
        .bind((!job.depends_on.is_empty()).then_some(&job.depends_on))
        .bind(job.on_dependency_failure.as_str())
        .fetch_one(exec)
        .await
        .map_err(|e| named(e.into()))?;
    Ok(Enqueued {
        id,
        outcome: outcome.parse().map_err(Error::Other)?,
    })
}

/// NUL characters in tags or meta, refused before the round trip as in args.
fn check_extras(tags: &[String], meta: Option<&Value>) -> Result<()> {
    for t in tags {
        check_text("tag", Some(t))?;
    }
    if let Some(m) = meta
        && let Some(path) = crate::queue::enqueue::find_nul(m)
    {
        return Err(Error::Invalid(format!(
            "job meta contains a NUL character (\\u0000) at {path}, which Postgres cannot store in jsonb"
        )));
    }
    Ok(())
}

/// The meta an enqueue writes: the caller's, with the current trace context added when the
/// `otel` feature is on (src/otel.rs).
fn meta_to_write(meta: Option<&Value>) -> Option<Cow<'_, Value>> {
    #[cfg(feature = "otel")]
    return crate::otel::with_current_context(meta);
    #[cfg(not(feature = "otel"))]
    meta.map(Cow::Borrowed)
}

/// No tags travel as NULL, so the SQL functions take their cheapest path.
fn tags_or_null(tags: &[String]) -> Option<&[String]> {
    (!tags.is_empty()).then_some(tags)
}

/// Many jobs of one kind, for [`enqueue_many`]. Fields other than the first three have
/// defaults: `ManyJobs { kind, args, queue, ..Default::default() }`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ManyJobs<'a> {
    /// Handler name.
    pub kind: &'a str,
    /// One JSON object per job.
    pub args: &'a [Value],
    /// Queue name.
    pub queue: &'a str,
    /// When they become due (`None`: now).
    pub run_at: Option<DateTime<Utc>>,
    /// Smaller runs first.
    pub priority: i16,
    /// The key the queue's per-key limits count every one of these jobs under.
    pub limit_key: Option<&'a str>,
    /// Tags of every one of these jobs.
    pub tags: &'a [String],
    /// Meta of every one of these jobs.
    pub meta: Option<&'a Value>,
    /// Each job unique by its args: enqueued one by one, as [`enqueue`] does.
    pub unique_by: Option<&'a UniqueBy>,
    /// At most one job per window of this length (with `unique_by`: per args).
    pub unique_for: Option<Duration>,
    /// What a duplicate does under `unique_by` / `unique_for`.
    pub on_conflict: OnConflict,
    /// Jobs every one of these waits for (a fan-out; docs/flows.md). Empty: none.
    pub depends_on: &'a [i64],
    /// What a failed dependency does to them.
    pub on_dependency_failure: OnDependencyFailure,
}

/// Enqueues many jobs of one kind in one statement; returns their ids in order.
pub async fn enqueue_many<'e, E: Executor<'e>>(exec: E, jobs: ManyJobs<'_>) -> Result<Vec<i64>> {
    check_nul(
        jobs.kind,
        jobs.queue,
        None,
        jobs.limit_key,
        &jobs.args.iter().collect::<Vec<_>>(),
    )?;
    check_reserved_job(jobs.kind, jobs.queue)?;
    check_extras(jobs.tags, jobs.meta)?;
    let meta = meta_to_write(jobs.meta);
    if let Some(t) = jobs.run_at {
        crate::time::check("run_at", t)?;
    }
    super::query_scalar(sql!("queue", "enqueue_many"))
        .bind(jobs.kind)
        .bind(jobs.args)
        .bind(jobs.queue)
        .bind(jobs.run_at)
        .bind(jobs.priority)
        .bind(jobs.limit_key)
        .bind(tags_or_null(jobs.tags))
        .bind(meta.as_deref())
        .bind(jobs.unique_by.map(UniqueBy::to_sql))
        .bind(jobs.unique_for)
        .bind(jobs.on_conflict.as_str())
        .bind((!jobs.depends_on.is_empty()).then_some(jobs.depends_on))
        .bind(jobs.on_dependency_failure.as_str())
        .fetch_one(exec)
        .await
        .map_err(|e| named(e.into()))
}

/// An enqueue's error, a login without `skiplock_enqueuer` named with the grant it needs
/// ([`crate::error::missing_grant`]).
fn named(e: Error) -> Error {
    crate::error::missing_grant(e, "skiplock_enqueuer", None)
}

/// Holds the limit key of job `id` for `d` from the database's clock (`skiplock.hold_key`):
/// how many waiting jobs of the key moved, `None` when the job has no limit key.
pub async fn hold_job_key<'e, E: Executor<'e>>(
    exec: E,
    id: i64,
    d: Duration,
) -> Result<Option<i64>> {
    Ok(super::query_scalar(sql!("queue", "hold_job_key"))
        .bind(id)
        .bind(d.as_secs_f64())
        .fetch_optional(exec)
        .await?)
}

/// Holds limit key `key` of `queue` until `until` (`skiplock.hold_key`): how many waiting jobs
/// of the key moved to `until`.
pub async fn hold_key<'e, E: Executor<'e>>(
    exec: E,
    queue: &str,
    key: &str,
    until: DateTime<Utc>,
) -> Result<i64> {
    Ok(super::query_scalar(sql!("queue", "hold_key"))
        .bind(queue)
        .bind(key)
        .bind(until)
        .fetch_one(exec)
        .await?)
}

/// Filters for `list_jobs`.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only this state.
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only jobs with this tag.
    pub tag: Option<String>,
    /// Only jobs whose meta contains this JSON object (jsonb `@>`).
    pub meta: Option<Value>,
    /// At most this many (newest first).
    pub limit: i64,
}

/// Lists jobs, newest first.
pub async fn list_jobs<'e, E: Executor<'e>>(exec: E, f: &JobFilter) -> Result<Vec<JobRow>> {
    Ok(super::query_as(sql!("queue", "list_jobs"))
        .bind(f.state)
        .bind(&f.kind)
        .bind(&f.queue)
        .bind(f.limit.max(1))
        .bind(&f.tag)
        .bind(&f.meta)
        .fetch_all(exec)
        .await?)
}

/// One job by id, or [`Error::NotFound`].
pub async fn get_job<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<JobRow> {
    super::query_as(sql!("queue", "get_job"))
        .bind(id)
        .fetch_optional(exec)
        .await?
        .ok_or_else(|| Error::NotFound(format!("job {id}")))
}

/// Cancels an available or running job (`skiplock.cancel`); returns its new state. A job
/// that does not exist or is finished is an [`Error::Refused`] naming it.
pub async fn cancel_job<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<JobState> {
    Ok(super::query_scalar(sql!("queue", "cancel_job"))
        .bind(id)
        .fetch_one(exec)
        .await?)
}

/// Makes a finished or waiting job available now (`skiplock.retry`); returns its new state.
pub async fn retry_job<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<JobState> {
    Ok(super::query_scalar(sql!("queue", "retry_job"))
        .bind(id)
        .fetch_one(exec)
        .await?)
}

/// Cancels the waiting and running jobs whose unique key is `key` (of `kind`, in `queue`;
/// None: any), each as [`cancel_job`] does (`skiplock.cancel_by_key`); how many (0: none with
/// the key was unfinished).
pub async fn cancel_by_key<'e, E: Executor<'e>>(
    exec: E,
    key: &str,
    kind: Option<&str>,
    queue: Option<&str>,
) -> Result<i64> {
    Ok(super::query_scalar(sql!("queue", "cancel_by_key"))
        .bind(key)
        .bind(kind)
        .bind(queue)
        .fetch_one(exec)
        .await?)
}

/// Which waiting jobs [`reschedule`] changes, and how.
#[derive(Debug, Clone, Default)]
pub struct Reschedule<'a> {
    /// These jobs (those still waiting)…
    pub ids: Option<&'a [i64]>,
    /// …or those whose unique key this is (exactly one of the two).
    pub key: Option<&'a str>,
    /// Only jobs of this kind (None: any).
    pub kind: Option<&'a str>,
    /// Only jobs in this queue (None: any).
    pub queue: Option<&'a str>,
    /// New due time (None: unchanged; a past one means now).
    pub run_at: Option<DateTime<Utc>>,
    /// New priority (None: unchanged).
    pub priority: Option<i16>,
    /// New attempt limit (None: unchanged).
    pub max_attempts: Option<i32>,
}

/// Gives waiting jobs, by id or by unique key, a new due time, priority or attempt limit
/// (`skiplock.reschedule`); the ids changed. Running and finished jobs are left as they are.
pub async fn reschedule<'e, E: Executor<'e>>(exec: E, r: &Reschedule<'_>) -> Result<Vec<i64>> {
    Ok(super::query_scalar(sql!("queue", "reschedule"))
        .bind(r.ids)
        .bind(r.key)
        .bind(r.kind)
        .bind(r.queue)
        .bind(r.run_at)
        .bind(r.priority)
        .bind(r.max_attempts)
        .fetch_all(exec)
        .await?)
}

/// One line of `skiplock.queue_stats`.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct QueueStat {
    /// Queue name.
    pub queue: String,
    /// The state counted.
    pub state: JobState,
    /// How many jobs.
    pub count: i64,
    /// Oldest `scheduled_at` among them.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub oldest_scheduled_at: Option<DateTime<Utc>>,
}

/// Counts per queue and state.
pub async fn queue_stats<'e, E: Executor<'e>>(exec: E) -> Result<Vec<QueueStat>> {
    Ok(super::query_as(sql!("queue", "queue_stats"))
        .fetch_all(exec)
        .await?)
}

/// Available jobs of a kind that no live worker handles.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct UnhandledKind {
    /// The kind.
    pub kind: String,
    /// How many available jobs have it.
    pub count: i64,
    /// Seconds the oldest of them has been due.
    pub oldest_seconds: f64,
}

/// Kinds waiting in `available` that no worker seen within `live_secs` can run, at most
/// `limit` of them (`None`: all), in kind order (`sql/queue/unhandled_kinds.sql`; `skiplock
/// stats` and `skiplock doctor` read it).
pub async fn unhandled_kinds<'e, E: Executor<'e>>(
    exec: E,
    live_secs: f64,
    limit: Option<usize>,
) -> Result<Vec<UnhandledKind>> {
    Ok(super::query_as(sql!("queue", "unhandled_kinds"))
        .bind(live_secs)
        .bind(limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX)))
        .fetch_all(exec)
        .await?)
}

/// How many workers sent a heartbeat within `live_secs`.
pub async fn live_workers<'e, E: Executor<'e>>(exec: E, live_secs: f64) -> Result<i64> {
    Ok(super::query_scalar(sql!("queue", "live_workers"))
        .bind(live_secs)
        .fetch_one(exec)
        .await?)
}

/// The columns of `sql/queue/get_job.sql` and `list_jobs.sql`; times through `DbTime` so
/// none can panic.
impl<'r> sqlx::FromRow<'r, PgRow> for JobRow {
    fn from_row(r: &'r PgRow) -> std::result::Result<Self, sqlx::Error> {
        Ok(JobRow {
            id: r.try_get("id")?,
            kind: r.try_get("kind")?,
            queue: r.try_get("queue")?,
            args: r.try_get("args")?,
            state: r.try_get("state")?,
            priority: r.try_get("priority")?,
            attempt: r.try_get("attempt")?,
            max_attempts: r.try_get("max_attempts")?,
            scheduled_at: r.try_get::<DbTime, _>("scheduled_at")?.0,
            created_at: r.try_get::<DbTime, _>("created_at")?.0,
            attempted_at: r.try_get::<DbTimeOpt, _>("attempted_at")?.0,
            attempted_by: r.try_get("attempted_by")?,
            heartbeat_at: r.try_get::<DbTimeOpt, _>("heartbeat_at")?.0,
            finalized_at: r.try_get::<DbTimeOpt, _>("finalized_at")?.0,
            unique_key: r.try_get("unique_key")?,
            errors: r.try_get("errors")?,
            result: r.try_get("result")?,
            tags: r.try_get("tags")?,
            meta: r.try_get("meta")?,
        })
    }
}
