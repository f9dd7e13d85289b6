//! The claim: one `FOR UPDATE SKIP LOCKED` statement that moves up to `n` due jobs of the
//! kinds this worker handles to `running` (see `sql/queue/claim.sql`).

use sqlx::PgExecutor;

use super::Job;
use crate::error::Result;

/// Claims up to `limit` due jobs of `kinds` from `queue` for `worker`.
pub async fn claim<'e, E: PgExecutor<'e>>(
    exec: E,
    queue: &str,
    kinds: &[String],
    limit: usize,
    worker: &str,
) -> Result<Vec<Job>> {
    if limit == 0 || kinds.is_empty() {
        return Ok(Vec::new());
    }
    let jobs = sqlx::query_as::<_, Job>(include_str!("../../sql/queue/claim.sql"))
        .bind(queue)
        .bind(kinds)
        .bind(limit as i64)
        .bind(worker)
        .fetch_all(exec)
        .await?;
    Ok(jobs)
}

/// Up to `limit` distinct queues, other than `served`, that hold due jobs of `kinds` (for
/// workers that serve every queue).
pub async fn discover_queues<'e, E: PgExecutor<'e>>(
    exec: E,
    kinds: &[String],
    served: &[String],
    limit: usize,
) -> Result<Vec<String>> {
    Ok(
        sqlx::query_scalar(include_str!("../../sql/queue/discover_queues.sql"))
            .bind(kinds)
            .bind(served)
            .bind(limit.min(i64::MAX as usize) as i64)
            .fetch_all(exec)
            .await?,
    )
}

/// Whether any job of `kinds` (in `queues`, or any queue when `None`) is claimable now.
pub async fn has_claimable<'e, E: PgExecutor<'e>>(
    exec: E,
    kinds: &[String],
    queues: Option<&[String]>,
) -> Result<bool> {
    Ok(
        sqlx::query_scalar(include_str!("../../sql/queue/has_claimable.sql"))
            .bind(kinds)
            .bind(queues)
            .fetch_one(exec)
            .await?,
    )
}
