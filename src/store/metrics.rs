//! What `/metrics` reads from the database at scrape time: queue depth and the oldest
//! waiting job per queue (`sql/metrics/queue_depth.sql`), paused queues and limits
//! (`sql/metrics/queue_control.sql`), what holds the vacuum horizon
//! (`sql/metrics/horizon.sql`), all in one read-only transaction under a short
//! `statement_timeout` (`sql/metrics/scrape_timeout.sql`), in which the optional parts read
//! their gauges too ([`Gauge`], `skiplock::part::Part::gauges`).

use std::time::Duration;

use super::{Executor, Pool, sql};
use crate::error::Result;

/// One queue's live jobs (or, as [`Snapshot::others`], the sum over the queues past the
/// first N).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct QueueDepth {
    /// Queue name (`None`: the sum over the rest).
    pub queue: Option<String>,
    /// Available and due now.
    pub available: i64,
    /// Available, due later (retries, snoozes, scheduled jobs).
    pub scheduled: i64,
    /// Running.
    pub running: i64,
    /// Age of the oldest due job (0 when none waits).
    pub oldest_wait_seconds: f64,
    /// Paused (any of the rest, for the sum).
    pub paused: bool,
    /// Queues it stands for (1, or how many the sum adds up).
    pub queues: i64,
    /// Paused queues among them.
    pub paused_queues: i64,
}

/// One sample of an optional part's gauge (`skiplock::part::Part::gauges`):
/// `name{labels} value`, with the series' help text.
#[derive(Debug, Clone, PartialEq)]
pub struct Gauge {
    /// The series' name (`skiplock_…`).
    pub name: &'static str,
    /// The series' help text.
    pub help: &'static str,
    /// Its labels, in order.
    pub labels: Vec<(&'static str, String)>,
    /// Its value.
    pub value: f64,
}

/// One queue's control settings (a queue without them is unpaused and unlimited).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct QueueControl {
    /// Queue name.
    pub queue: String,
    /// Paused: no claims.
    pub paused: bool,
    /// Running jobs allowed, all workers together.
    pub concurrency: Option<i32>,
    /// Running jobs allowed per limit_key.
    pub key_concurrency: Option<i32>,
    /// Starts allowed per limit_key and second.
    pub key_rate_per_second: Option<f64>,
}

/// What holds the vacuum horizon back, and what it costs (`sql/metrics/horizon.sql`).
#[derive(Debug, Clone, Default, PartialEq, sqlx::FromRow)]
pub struct Horizon {
    /// Seconds since the oldest transaction with an xid or a snapshot began (0: none).
    pub age_seconds: f64,
    /// The largest xid age a session, a prepared transaction or a slot holds (0: none).
    pub xid_age: i64,
    /// Dead tuples in skiplock's tables now.
    pub dead_tuples: i64,
}

/// Everything a scrape reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Per queue, the first N (paused first, then by live jobs), ordered by name.
    pub queues: Vec<QueueDepth>,
    /// The sum over the queues past the first N (`None`: there are none).
    pub others: Option<QueueDepth>,
    /// The optional parts' gauges (read by the caller in the same transaction: [`begin`]).
    pub parts: Vec<Gauge>,
    /// Per queue with control settings, ordered by name.
    pub control: Vec<QueueControl>,
    /// What holds the vacuum horizon.
    pub horizon: Horizon,
}

/// Sets the `statement_timeout` of the current transaction (at least 1 ms).
pub async fn scrape_timeout<'e, E: Executor<'e>>(exec: E, timeout: Duration) -> Result<()> {
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128).to_string();
    super::query(sql!("metrics", "scrape_timeout"))
        .bind(ms)
        .execute(exec)
        .await?;
    Ok(())
}

/// Live jobs per queue: the `top` queues (paused first, then by live jobs), ordered by name,
/// then one row adding up the rest (queue `None`), if any (`sql/metrics/queue_depth.sql`).
pub async fn queue_depth<'e, E: Executor<'e>>(exec: E, top: usize) -> Result<Vec<QueueDepth>> {
    Ok(super::query_as(sql!("metrics", "queue_depth"))
        .bind(i64::try_from(top).unwrap_or(i64::MAX))
        .fetch_all(exec)
        .await?)
}

/// Paused and limited queues.
pub async fn queue_control<'e, E: Executor<'e>>(exec: E) -> Result<Vec<QueueControl>> {
    Ok(super::query_as(sql!("metrics", "queue_control"))
        .fetch_all(exec)
        .await?)
}

/// What holds the vacuum horizon.
pub async fn horizon<'e, E: Executor<'e>>(exec: E) -> Result<Horizon> {
    Ok(super::query_as(sql!("metrics", "horizon"))
        .fetch_one(exec)
        .await?)
}

/// Opens a scrape's transaction (only read in, then rolled back) whose statements may run
/// `timeout` at most.
pub async fn begin(pool: &Pool, timeout: Duration) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let mut tx = pool.begin().await?;
    scrape_timeout(&mut *tx, timeout).await?;
    Ok(tx)
}

/// Reads a [`Snapshot`] of the `top` queues on a scrape's connection ([`begin`]); its `parts`
/// are left empty for the caller.
pub async fn read(conn: &mut sqlx::PgConnection, top: usize) -> Result<Snapshot> {
    let (queues, others): (Vec<_>, Vec<_>) = queue_depth(&mut *conn, top)
        .await?
        .into_iter()
        .partition(|q| q.queue.is_some());
    let control = queue_control(&mut *conn).await?;
    let horizon = horizon(&mut *conn).await?;
    Ok(Snapshot {
        queues,
        others: others.into_iter().next(),
        parts: Vec::new(),
        control,
        horizon,
    })
}
