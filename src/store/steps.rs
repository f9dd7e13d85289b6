//! Durable steps (docs/steps.md): what a running attempt records as it goes, read back by a
//! later attempt of the same job, and the signals a job waits for. The rules live in the SQL
//! API (`sql/api/16_steps.sql`); statements: `sql/steps/`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::{Executor, sql};
use crate::error::Result;
use crate::queue::stored::StoredJson;

/// One thing a job recorded: a step's result, its cursor, a sleep or a wait.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct StepRecord {
    /// Its place in the order the job recorded them (1-based; 0 is the cursor).
    pub seq: i32,
    /// `step`, `cursor`, `sleep` or `wait`.
    pub kind: String,
    /// Its name within its kind (`""` for the cursor).
    pub name: String,
    /// The attempt that recorded it (or last wrote it, for the cursor and a wait).
    pub attempt: i32,
    /// What it recorded (a step's result, the cursor's value, a sleep's or wait's record).
    pub result: Option<StoredJson>,
    /// Why it was recorded out of the order of earlier attempts, if it was (docs/steps.md,
    /// "When the handler changed").
    pub note: Option<String>,
    /// When it was recorded.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub recorded_at: DateTime<Utc>,
}

/// What [`record`] writes.
#[derive(Debug, Clone, Copy)]
pub struct NewStep<'a> {
    /// The job.
    pub job: i64,
    /// The attempt running (the fence, with `worker`).
    pub attempt: i32,
    /// The worker running it.
    pub worker: &'a str,
    /// `step`, `cursor`, `sleep` or `wait`.
    pub kind: &'a str,
    /// Its name within its kind.
    pub name: &'a str,
    /// What to record.
    pub result: &'a Value,
    /// A note on its order (docs/steps.md).
    pub note: Option<&'a str>,
}

/// Every record of job `job`, in order.
pub async fn load<'e, E: Executor<'e>>(exec: E, job: i64) -> Result<Vec<StepRecord>> {
    Ok(super::query_as(sql!("steps", "load"))
        .bind(job)
        .fetch_all(exec)
        .await?)
}

/// Records `s`: its seq, `None` when the attempt is no longer running (taken away).
pub async fn record<'e, E: Executor<'e>>(exec: E, s: NewStep<'_>) -> Result<Option<i32>> {
    Ok(super::query_scalar(sql!("steps", "record"))
        .bind(s.job)
        .bind(s.attempt)
        .bind(s.worker)
        .bind(s.kind)
        .bind(s.name)
        .bind(s.result)
        .bind(s.note)
        .fetch_one(exec)
        .await?)
}
