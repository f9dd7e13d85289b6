//! Heartbeats: one statement refreshes every job a process runs, and one keeps its row in
//! `skiplock.workers` fresh, so the rescuer can tell live jobs from orphans.

use super::schema::SchemaInfo;
use super::{Executor, sql};
use crate::error::Result;

/// A job a worker still runs: the pair the heartbeat is fenced on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HeldJob {
    /// Job id.
    pub id: i64,
    /// The attempt the worker runs.
    pub attempt: i32,
    /// When its handler started (`None`: waiting in the worker's buffer); written to
    /// `attempted_at`.
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Refreshes `heartbeat_at` of `jobs`; returns the ids still running those attempts.
pub async fn heartbeat_many<'e, E: Executor<'e>>(exec: E, jobs: &[HeldJob]) -> Result<Vec<i64>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    // Lock rows in id order, the same order as ack_many, so the two never deadlock.
    let mut jobs = jobs.to_vec();
    jobs.sort_unstable();
    let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
    let attempts: Vec<i32> = jobs.iter().map(|j| j.attempt).collect();
    let starts: Vec<Option<chrono::DateTime<chrono::Utc>>> =
        jobs.iter().map(|j| j.started_at).collect();
    Ok(super::query_scalar(sql!("queue", "heartbeat_many"))
        .bind(ids)
        .bind(attempts)
        .bind(starts)
        .fetch_all(exec)
        .await?)
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

/// Inserts or refreshes this worker's row; returns what `skiplock.schema_info` records (read
/// in the same statement, for [`super::schema::mismatch_of`]).
pub async fn worker_upsert<'e, E: Executor<'e>>(
    exec: E,
    w: &WorkerInfo,
) -> Result<Option<SchemaInfo>> {
    Ok(super::query_as(sql!("queue", "worker_upsert"))
        .bind(&w.id)
        .bind(&w.host)
        .bind(w.pid)
        .bind(&w.queues)
        .bind(&w.kinds)
        .fetch_optional(exec)
        .await?)
}

/// Removes this worker's row on a clean exit.
pub async fn worker_remove<'e, E: Executor<'e>>(exec: E, id: &str) -> Result<()> {
    super::query(sql!("queue", "worker_remove"))
        .bind(id)
        .execute(exec)
        .await?;
    Ok(())
}
