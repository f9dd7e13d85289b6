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

/// What [`wait`] asks.
#[derive(Debug, Clone, Copy)]
pub struct NewWait<'a> {
    /// The job.
    pub job: i64,
    /// The attempt running (the fence, with `worker`).
    pub attempt: i32,
    /// The worker running it.
    pub worker: &'a str,
    /// The signal's name.
    pub name: &'a str,
    /// How long to wait, from the first time the job waits for it.
    pub timeout_secs: f64,
    /// The key scopes whose signals it takes (`None`: any).
    pub scopes: Option<&'a [String]>,
}

/// The answer of [`wait`].
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct WaitAnswer {
    /// `signal`, `timed_out`, `waiting` or `fenced`.
    pub outcome: String,
    /// The signal's payload.
    pub payload: Option<StoredJson>,
    /// The sender's key scope.
    pub scope: Option<String>,
    /// When it was sent.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub sent_at: Option<DateTime<Utc>>,
    /// When the wait times out.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub until: Option<DateTime<Utc>>,
}

/// A wait for a signal by a running attempt (`skiplock._wait_step`).
pub async fn wait<'e, E: Executor<'e>>(exec: E, w: NewWait<'_>) -> Result<WaitAnswer> {
    Ok(super::query_as(sql!("steps", "wait"))
        .bind(w.job)
        .bind(w.attempt)
        .bind(w.worker)
        .bind(w.name)
        .bind(w.timeout_secs)
        .bind(w.scopes)
        .fetch_one(exec)
        .await?)
}

/// After the ack of an attempt that ended waiting for `name`: makes the job due if the signal
/// came meanwhile. `running`, `woken` or `done`.
pub async fn wake_signalled<'e, E: Executor<'e>>(
    exec: E,
    job: i64,
    attempt: i32,
    worker: &str,
    name: &str,
) -> Result<String> {
    Ok(super::query_scalar(sql!("steps", "wake_signalled"))
        .bind(job)
        .bind(attempt)
        .bind(worker)
        .bind(name)
        .fetch_one(exec)
        .await?)
}

/// Sends signal `name` with `payload` to job `job` (`skiplock.signal`): whether it was kept
/// (false: this key scope already sent one of that name).
pub async fn signal<'e, E: Executor<'e>>(
    exec: E,
    job: i64,
    name: &str,
    payload: Option<&Value>,
) -> Result<bool> {
    Ok(super::query_scalar(sql!("steps", "signal"))
        .bind(job)
        .bind(name)
        .bind(payload)
        .fetch_one(exec)
        .await?)
}
