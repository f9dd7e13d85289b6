//! Enqueueing from Rust, through the same SQL functions psql users call, so the rules
//! (validation, unique keys, NOTIFY) live in one place.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;

use crate::error::Result;

/// What to do when an available job already holds the new job's `unique_key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    /// Leave the existing job untouched and return its id.
    #[default]
    Keep,
    /// Move the existing job's args and `scheduled_at` to the new values (debounce).
    Replace,
}

impl OnConflict {
    fn as_str(self) -> &'static str {
        match self {
            OnConflict::Keep => "keep",
            OnConflict::Replace => "replace",
        }
    }
}

/// A job to enqueue. Built with [`NewJob::new`] and the chained setters.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Handler name.
    pub kind: String,
    /// Arguments, a JSON object.
    pub args: Value,
    /// Queue name (default `default`).
    pub queue: String,
    /// When it becomes due (`None`: now).
    pub run_at: Option<DateTime<Utc>>,
    /// Smaller runs first (default 0).
    pub priority: i16,
    /// Attempt limit (default 25).
    pub max_attempts: i32,
    /// Dedup / debounce key.
    pub unique_key: Option<String>,
    /// Conflict rule for `unique_key`.
    pub on_conflict: OnConflict,
}

impl NewJob {
    /// A job of `kind` with `args`, due now, in the default queue.
    pub fn new(kind: impl Into<String>, args: Value) -> Self {
        NewJob {
            kind: kind.into(),
            args,
            queue: "default".into(),
            run_at: None,
            priority: 0,
            max_attempts: 25,
            unique_key: None,
            on_conflict: OnConflict::Keep,
        }
    }
    /// Sets the queue.
    pub fn queue(mut self, q: impl Into<String>) -> Self {
        self.queue = q.into();
        self
    }
    /// Sets when the job becomes due.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }
    /// Sets the priority.
    pub fn priority(mut self, p: i16) -> Self {
        self.priority = p;
        self
    }
    /// Sets the attempt limit.
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = n;
        self
    }
    /// Sets the unique key and what to do on conflict.
    pub fn unique_key(mut self, key: impl Into<String>, on_conflict: OnConflict) -> Self {
        self.unique_key = Some(key.into());
        self.on_conflict = on_conflict;
        self
    }
}

/// Enqueues one job and returns its id (or the id of the available job holding its key).
pub async fn enqueue<'e, E: PgExecutor<'e>>(exec: E, job: &NewJob) -> Result<i64> {
    let id: i64 = sqlx::query_scalar(include_str!("../../sql/queue/enqueue.sql"))
        .bind(&job.kind)
        .bind(&job.args)
        .bind(&job.queue)
        .bind(job.run_at)
        .bind(job.priority)
        .bind(job.max_attempts)
        .bind(&job.unique_key)
        .bind(job.on_conflict.as_str())
        .fetch_one(exec)
        .await?;
    Ok(id)
}

/// Enqueues many jobs of one kind in one statement; returns their ids in order.
pub async fn enqueue_many<'e, E: PgExecutor<'e>>(
    exec: E,
    kind: &str,
    args: &[Value],
    queue: &str,
    run_at: Option<DateTime<Utc>>,
    priority: i16,
) -> Result<Vec<i64>> {
    let ids: Vec<i64> = sqlx::query_scalar(include_str!("../../sql/queue/enqueue_many.sql"))
        .bind(kind)
        .bind(args)
        .bind(queue)
        .bind(run_at)
        .bind(priority)
        .fetch_one(exec)
        .await?;
    Ok(ids)
}
