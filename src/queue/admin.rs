//! Operator views and actions: list, show, cancel, retry, stats. Used by the CLI and by
//! library users who build their own dashboards.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

use super::{JobRow, JobState};
use crate::error::{Error, Result};

/// Filters for [`list_jobs`].
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only this state.
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
    /// At most this many (newest first).
    pub limit: i64,
}

/// Lists jobs, newest first.
pub async fn list_jobs<'e, E: PgExecutor<'e>>(exec: E, f: &JobFilter) -> Result<Vec<JobRow>> {
    Ok(
        sqlx::query_as::<_, JobRow>(include_str!("../../sql/queue/list_jobs.sql"))
            .bind(f.state.map(|s| s.as_str()))
            .bind(&f.kind)
            .bind(&f.queue)
            .bind(f.limit.max(1))
            .fetch_all(exec)
            .await?,
    )
}

/// One job by id.
pub async fn get_job<'e, E: PgExecutor<'e>>(exec: E, id: i64) -> Result<JobRow> {
    sqlx::query_as::<_, JobRow>(
        "SELECT id, kind, queue, args, state::text AS state, priority, attempt, max_attempts, \
         scheduled_at, created_at, attempted_at, attempted_by, heartbeat_at, finalized_at, \
         unique_key, errors, result FROM skiplock.jobs WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(exec)
    .await?
    .ok_or_else(|| Error::NotFound(format!("job {id}")))
}

fn sql_error(e: sqlx::Error) -> Error {
    match &e {
        sqlx::Error::Database(d) if d.message().starts_with("skiplock: ") => {
            Error::Invalid(d.message().trim_start_matches("skiplock: ").to_string())
        }
        _ => Error::Database(e),
    }
}

/// Cancels an available or running job (`skiplock.cancel`).
pub async fn cancel<'e, E: PgExecutor<'e>>(exec: E, id: i64) -> Result<()> {
    sqlx::query("SELECT skiplock.cancel($1)::text")
        .bind(id)
        .execute(exec)
        .await
        .map_err(sql_error)?;
    Ok(())
}

/// Makes a finished or waiting job available now (`skiplock.retry`).
pub async fn retry<'e, E: PgExecutor<'e>>(exec: E, id: i64) -> Result<()> {
    sqlx::query("SELECT skiplock.retry($1)::text")
        .bind(id)
        .execute(exec)
        .await
        .map_err(sql_error)?;
    Ok(())
}

/// One line of `skiplock.queue_stats`.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct QueueStat {
    /// Queue name.
    pub queue: String,
    /// State name.
    pub state: String,
    /// How many jobs.
    pub count: i64,
    /// Oldest `scheduled_at` among them.
    #[sqlx(try_from = "crate::dbtime::DbTimeOpt")]
    pub oldest_scheduled_at: Option<DateTime<Utc>>,
}

/// Available jobs of a kind that no live worker handles.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct UnhandledKind {
    /// The kind.
    pub kind: String,
    /// How many available jobs have it.
    pub count: i64,
}

/// Counts per queue and state.
pub async fn stats<'e, E: PgExecutor<'e>>(exec: E) -> Result<Vec<QueueStat>> {
    Ok(
        sqlx::query_as::<_, QueueStat>(include_str!("../../sql/queue/stats.sql"))
            .fetch_all(exec)
            .await?,
    )
}

/// Kinds waiting in `available` that no worker seen within `live_secs` can run.
pub async fn unhandled_kinds<'e, E: PgExecutor<'e>>(
    exec: E,
    live_secs: f64,
) -> Result<Vec<UnhandledKind>> {
    Ok(
        sqlx::query_as::<_, UnhandledKind>(include_str!("../../sql/queue/unhandled_kinds.sql"))
            .bind(live_secs)
            .fetch_all(exec)
            .await?,
    )
}
