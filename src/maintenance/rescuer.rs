//! The rescuer: running jobs whose heartbeat is older than the rescue timeout belonged to a
//! worker that died. They go back to `available` (or `discarded` when out of attempts), with
//! the reason appended to `errors`. A live worker beats four times per timeout, so it is
//! never rescued; if it was merely stalled, its late ack is fenced off.

use std::time::Duration;

use sqlx::PgPool;

use super::Service;
use crate::error::Result;
use crate::worker::handler::BoxFuture;

/// Rows handled per statement.
pub const BATCH: i64 = 1000;

/// Returns orphaned running jobs to the queue.
pub struct Rescuer {
    /// Heartbeat age after which a job is an orphan.
    pub rescue_after: Duration,
}

/// Rescues up to [`BATCH`] rows per statement until none are left; returns how many.
pub async fn rescue(pool: &PgPool, rescue_after: Duration) -> Result<u64> {
    let mut total = 0u64;
    loop {
        let rows: Vec<(i64, String, String)> =
            sqlx::query_as(include_str!("../../sql/queue/rescue.sql"))
                .bind(rescue_after.as_secs_f64())
                .bind(BATCH)
                .fetch_all(pool)
                .await?;
        for (id, kind, state) in &rows {
            tracing::warn!(job.id = id, job.kind = %kind, new_state = %state, "rescued a job whose worker stopped sending heartbeats");
        }
        total += rows.len() as u64;
        if (rows.len() as i64) < BATCH {
            break;
        }
    }
    // Forget worker rows that have been silent for much longer than the rescue timeout.
    sqlx::query(
        "DELETE FROM skiplock.workers WHERE heartbeat_at < now() - make_interval(secs => $1)",
    )
    .bind((rescue_after * 10).as_secs_f64().max(600.0))
    .execute(pool)
    .await?;
    Ok(total)
}

impl Service for Rescuer {
    fn name(&self) -> &'static str {
        "rescuer"
    }
    fn interval(&self) -> Duration {
        (self.rescue_after / 2).clamp(Duration::from_millis(100), Duration::from_secs(30))
    }
    fn run_once(&self, pool: PgPool) -> BoxFuture<Result<u64>> {
        let after = self.rescue_after;
        Box::pin(async move { rescue(&pool, after).await })
    }
}
