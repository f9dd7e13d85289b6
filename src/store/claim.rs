//! The claim: one `FOR UPDATE SKIP LOCKED` statement that moves up to `limit` due jobs of the
//! kinds a worker handles to `running` (`sql/queue/claim.sql`), and the two questions a
//! worker asks around it (which queues have work, is anything claimable at all).

use sqlx::Row;
use sqlx::postgres::PgRow;

use super::time::{DbTime, DbTimeOpt};
use super::{Executor, sql};
use crate::error::Result;
use crate::queue::Job;

/// What one claim asks for.
#[derive(Debug, Clone, Copy)]
pub struct ClaimParams<'a> {
    /// The queue to claim from.
    pub queue: &'a str,
    /// Only jobs of these kinds (the worker's handlers).
    pub kinds: &'a [String],
    /// At most this many (the producer's free slots).
    pub limit: usize,
    /// The claiming worker's id (recorded in `attempted_by`).
    pub worker: &'a str,
}

/// Claims up to `p.limit` due jobs of `p.kinds` from `p.queue` for `p.worker`. A claimed row
/// whose attempt counter is at its maximum is discarded with the reason and left out (see
/// `sql/queue/claim.sql`): a second statement, only when such a row comes back.
pub async fn claim<'c, A>(exec: A, p: ClaimParams<'_>) -> Result<Vec<Job>>
where
    A: sqlx::Acquire<'c, Database = sqlx::Postgres>,
{
    if p.limit == 0 || p.kinds.is_empty() {
        return Ok(Vec::new());
    }
    // One connection for both statements (a pool's, or the caller's transaction).
    let mut conn = exec.acquire().await?;
    let mut jobs: Vec<Job> = sqlx::query_as(sql!("queue", "claim"))
        .bind(p.queue)
        .bind(p.kinds)
        .bind(p.limit.min(i64::MAX as usize) as i64)
        .bind(p.worker)
        .fetch_all(&mut *conn)
        .await?;
    let overflow: Vec<i64> = jobs
        .iter()
        .filter(|j| j.attempt == i32::MAX)
        .map(|j| j.id)
        .collect();
    if !overflow.is_empty() {
        sqlx::query(sql!("queue", "discard_overflow"))
            .bind(&overflow)
            .execute(&mut *conn)
            .await?;
        jobs.retain(|j| j.attempt != i32::MAX);
    }
    Ok(jobs)
}

/// Up to `limit` distinct queues, other than `served`, that hold due jobs of `kinds`, in name
/// order after `after` (None: from the first), for workers that serve every queue.
pub async fn discover_queues<'e, E: Executor<'e>>(
    exec: E,
    kinds: &[String],
    served: &[String],
    limit: usize,
    after: Option<&str>,
) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(sql!("queue", "discover_queues"))
        .bind(kinds)
        .bind(served)
        .bind(limit.min(i64::MAX as usize) as i64)
        .bind(after)
        .fetch_all(exec)
        .await?)
}

/// Whether any job of `kinds` (in `queues`, or any queue when `None`) is claimable now.
pub async fn has_claimable<'e, E: Executor<'e>>(
    exec: E,
    kinds: &[String],
    queues: Option<&[String]>,
) -> Result<bool> {
    Ok(sqlx::query_scalar(sql!("queue", "has_claimable"))
        .bind(kinds)
        .bind(queues)
        .fetch_one(exec)
        .await?)
}

/// The columns `sql/queue/claim.sql` returns; times through [`DbTime`] so none can panic.
impl<'r> sqlx::FromRow<'r, PgRow> for Job {
    fn from_row(r: &'r PgRow) -> std::result::Result<Self, sqlx::Error> {
        Ok(Job {
            id: r.try_get("id")?,
            kind: r.try_get("kind")?,
            queue: r.try_get("queue")?,
            args: r.try_get("args")?,
            priority: r.try_get("priority")?,
            attempt: r.try_get("attempt")?,
            max_attempts: r.try_get("max_attempts")?,
            scheduled_at: r.try_get::<DbTime, _>("scheduled_at")?.0,
            created_at: r.try_get::<DbTime, _>("created_at")?.0,
            attempted_at: r.try_get::<DbTimeOpt, _>("attempted_at")?.0,
        })
    }
}
