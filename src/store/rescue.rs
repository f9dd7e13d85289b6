//! The rescuer's statements: running jobs whose heartbeat went stale go back to the queue
//! (`sql/queue/rescue.sql`), and worker rows silent for long are forgotten.

use std::time::Duration;

use super::{Executor, sql};
use crate::error::Result;
use crate::queue::JobState;

/// A job [`rescue`] returned to the queue.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RescuedJob {
    /// Job id.
    pub id: i64,
    /// Its kind.
    pub kind: String,
    /// `available`, `discarded` when out of attempts, or `cancelled` when superseded by
    /// another job waiting with its unique_key.
    pub state: JobState,
}

/// Rescues at most `limit` running jobs whose heartbeat is older than `after`.
pub async fn rescue<'e, E: Executor<'e>>(
    exec: E,
    after: Duration,
    limit: i64,
) -> Result<Vec<RescuedJob>> {
    Ok(super::query_as(sql!("queue", "rescue"))
        .bind(after.as_secs_f64())
        .bind(limit)
        .fetch_all(exec)
        .await?)
}

/// Deletes the rows of workers silent for longer than `silent_for`.
pub async fn forget_workers<'e, E: Executor<'e>>(exec: E, silent_for: Duration) -> Result<u64> {
    Ok(super::query(sql!("queue", "forget_workers"))
        .bind(silent_for.as_secs_f64())
        .execute(exec)
        .await?
        .rows_affected())
}
