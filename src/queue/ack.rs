//! Writing outcomes: many acknowledgements in one fenced statement
//! (`sql/queue/ack_many.sql`). The worker's completer batches them.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;

use super::JobState;
use crate::error::Result;

/// The new state of one job after an attempt, ready to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Ack {
    /// Job id.
    pub id: i64,
    /// The attempt this outcome belongs to (the fence).
    pub attempt: i32,
    /// New state.
    pub state: JobState,
    /// New `scheduled_at` (retries, snoozes); `None` keeps it.
    pub scheduled_at: Option<DateTime<Utc>>,
    /// Give the attempt back (snooze, shutdown): the attempt counter goes down by one.
    pub give_back: bool,
    /// Error to append to `errors`.
    pub error: Option<String>,
    /// Result to store.
    pub result: Option<Value>,
}

/// Writes `acks` in one statement; returns the ids that were still running their attempt
/// (the others were rescued, cancelled or retried meanwhile and are left alone).
pub async fn ack_many<'e, E: PgExecutor<'e>>(exec: E, acks: &[Ack]) -> Result<Vec<i64>> {
    if acks.is_empty() {
        return Ok(Vec::new());
    }
    // Lock rows in id order, the same order as heartbeat_many, so the two never deadlock.
    let mut sorted: Vec<&Ack> = acks.iter().collect();
    sorted.sort_by_key(|a| a.id);
    let acks = sorted;
    let ids: Vec<i64> = acks.iter().map(|a| a.id).collect();
    let attempts: Vec<i32> = acks.iter().map(|a| a.attempt).collect();
    let states: Vec<&str> = acks.iter().map(|a| a.state.as_str()).collect();
    let sched: Vec<Option<DateTime<Utc>>> = acks.iter().map(|a| a.scheduled_at).collect();
    let give_back: Vec<bool> = acks.iter().map(|a| a.give_back).collect();
    let errors: Vec<Option<String>> = acks.iter().map(|a| a.error.clone()).collect();
    let results: Vec<Option<Value>> = acks.iter().map(|a| a.result.clone()).collect();
    let written: Vec<i64> = sqlx::query_scalar(include_str!("../../sql/queue/ack_many.sql"))
        .bind(ids)
        .bind(attempts)
        .bind(states)
        .bind(sched)
        .bind(give_back)
        .bind(errors)
        .bind(results)
        .fetch_all(exec)
        .await?;
    Ok(written)
}
