//! The statements of `skiplock::testing` (test helpers for programs that use skiplock):
//! `sql/testing/`.

use super::{Executor, sql};
use crate::error::{Error, Result};
use crate::queue::JobState;

/// The args, as stored, of the waiting jobs of `kind`, oldest first.
pub(crate) async fn available_args<'e, E: Executor<'e>>(
    exec: E,
    kind: &str,
) -> Result<Vec<String>> {
    Ok(super::query_scalar(sql!("testing", "available_args"))
        .bind(kind)
        .fetch_all(exec)
        .await?)
}

/// How many jobs of `kinds` are in each state.
pub(crate) async fn count_by_state<'e, E: Executor<'e>>(
    exec: E,
    kinds: &[String],
) -> Result<Vec<(JobState, i64)>> {
    let rows: Vec<(String, i64)> = super::query_as(sql!("testing", "count_by_state"))
        .bind(kinds)
        .fetch_all(exec)
        .await?;
    rows.into_iter()
        .map(|(s, n)| Ok((s.parse().map_err(Error::Other)?, n)))
        .collect()
}

/// A job [`claim_job`] claimed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct ClaimedJob {
    pub id: i64,
    pub kind: String,
    pub queue: String,
    /// As stored (the handler parses them, as a worker's does).
    pub args: String,
    pub attempt: i32,
    pub max_attempts: i32,
    #[sqlx(try_from = "crate::time::DbTime")]
    pub scheduled_at: chrono::DateTime<chrono::Utc>,
    #[sqlx(try_from = "crate::time::DbTime")]
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub tags: Vec<String>,
    pub meta: serde_json::Value,
}

/// Claims available job `id` for an inline run by `worker`, whatever its run time; `None`
/// when it is not available.
pub(crate) async fn claim_job<'e, E: Executor<'e>>(
    exec: E,
    id: i64,
    worker: &str,
) -> Result<Option<ClaimedJob>> {
    Ok(super::query_as(sql!("testing", "claim_job"))
        .bind(id)
        .bind(worker)
        .fetch_optional(exec)
        .await?)
}
