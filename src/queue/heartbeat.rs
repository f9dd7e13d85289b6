//! Heartbeats: one statement refreshes every job this process runs, and one keeps its row in
//! `skiplock.workers` fresh, so the rescuer can tell live jobs from orphans.

use sqlx::PgExecutor;

use crate::error::Result;

/// Refreshes `heartbeat_at` for `(id, attempt)` pairs; returns the ids still running them.
pub async fn heartbeat_many<'e, E: PgExecutor<'e>>(
    exec: E,
    jobs: &[(i64, i32)],
) -> Result<Vec<i64>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    // Lock rows in id order, the same order as ack_many, so the two never deadlock.
    let mut jobs = jobs.to_vec();
    jobs.sort_unstable();
    let ids: Vec<i64> = jobs.iter().map(|j| j.0).collect();
    let attempts: Vec<i32> = jobs.iter().map(|j| j.1).collect();
    Ok(
        sqlx::query_scalar(include_str!("../../sql/queue/heartbeat_many.sql"))
            .bind(ids)
            .bind(attempts)
            .fetch_all(exec)
            .await?,
    )
}

/// Identity of a worker process, as recorded in `skiplock.workers`.
#[derive(Debug, Clone)]
pub struct WorkerInfo {
    /// Unique id (`host:pid:random`).
    pub id: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: i32,
    /// Queues served (empty: all).
    pub queues: Vec<String>,
    /// Kinds handled.
    pub kinds: Vec<String>,
}

/// Inserts or refreshes this worker's row.
pub async fn upsert_worker<'e, E: PgExecutor<'e>>(exec: E, w: &WorkerInfo) -> Result<()> {
    sqlx::query(include_str!("../../sql/queue/worker_upsert.sql"))
        .bind(&w.id)
        .bind(&w.host)
        .bind(w.pid)
        .bind(&w.queues)
        .bind(&w.kinds)
        .execute(exec)
        .await?;
    Ok(())
}

/// Removes this worker's row on a clean exit.
pub async fn remove_worker<'e, E: PgExecutor<'e>>(exec: E, id: &str) -> Result<()> {
    sqlx::query("DELETE FROM skiplock.workers WHERE id = $1")
        .bind(id)
        .execute(exec)
        .await?;
    Ok(())
}
