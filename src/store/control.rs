//! Queue control (docs/concepts.md, "Limits and pause"): limits enforced at claim time and pause/resume.
//! The settings live in `skiplock.queues`; the SQL API (`sql/api/15_control.sql`) sets them
//! and `skiplock._claim_limited` claims within them. Statements: `sql/control/`, and
//! `sql/queue/claim_limited.sql` for the claim.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::postgres::PgRow;
use sqlx::{FromRow, Row};

use super::claim::{ClaimParams, Claimed, LaneReads};
use super::{Executor, sql};
use crate::error::{Error, Result};
use crate::queue::Job;
use crate::time::DbTimeOpt;

/// What a claim of a controlled queue answered.
#[derive(Debug, Clone, Default)]
pub struct LimitedClaim {
    /// The jobs claimed (within the limits).
    pub jobs: Vec<Job>,
    /// Whether the queue is still limited or paused (false: the plain claim applies again).
    pub controlled: bool,
    /// The earliest time a job held back by its key's rate may start (None: none was, or
    /// only a finishing job can free a slot).
    pub wait_until: Option<DateTime<Utc>>,
    /// How many jobs the queue let this claim put in the worker's buffer at most (None: no
    /// bound; 0 under a key's limits, while paused, or while the concurrency limit binds).
    pub buffer_room: Option<usize>,
}

/// The claim a worker makes (`store::claim::claim_from`): the plain claim, or for a queue
/// with limits or paused the limited one, which the database picks. Of the `params.limit`
/// jobs asked for, `free` are for free slots and the rest for the buffer: the limited claim
/// gives the buffer only part of the room a concurrency limit leaves, and nothing under a
/// key's limits (`skiplock._claim_limited`).
pub async fn claim_any(
    pool: &super::Pool,
    params: ClaimParams<'_>,
    free: usize,
    lanes: LaneReads<'_>,
) -> Result<Claimed> {
    match pool.mode() {
        super::PoolMode::Session => {
            super::claim::claim_from(pool.pg(), params, free, lanes).await
        }
        // Both of the claim's statements in one transaction: the pooler lends a server
        // connection for no longer (src/store/pool.rs).
        super::PoolMode::Transaction => {
            let mut tx = pool.begin().await?;
            let claimed = super::claim::claim_on(&mut tx, params, free, lanes).await?;
            tx.commit().await?;
            Ok(claimed)
        }
    }
}

/// Claims from a queue that has limits or is paused (`sql/queue/claim_limited.sql`): up to
/// `p.limit` jobs, of which `ahead` are for the worker's buffer rather than its free slots.
pub async fn claim_limited<'e, E: Executor<'e>>(
    exec: E,
    p: ClaimParams<'_>,
    ahead: usize,
) -> Result<LimitedClaim> {
    let ahead = ahead.min(p.limit);
    let rows: Vec<PgRow> = super::query(sql!("queue", "claim_limited"))
        .bind(p.queue)
        .bind(p.kinds)
        .bind((p.limit - ahead).min(i32::MAX as usize) as i32)
        .bind(p.worker)
        .bind(ahead.min(i32::MAX as usize) as i32)
        .fetch_all(exec)
        .await?;
    let mut out = LimitedClaim::default();
    for r in &rows {
        out.controlled = r.try_get("controlled")?;
        out.wait_until = r.try_get::<DbTimeOpt, _>("wait_until")?.0;
        out.buffer_room = r
            .try_get::<Option<i32>, _>("buffer_room")?
            .map(|n| n.max(0) as usize);
        if r.try_get::<Option<i64>, _>("id")?.is_some() {
            out.jobs.push(Job::from_row(r)?);
        }
    }
    Ok(out)
}

/// Sets (or with `None` clears) the queue's concurrency: running jobs, all workers together.
pub async fn set_queue_limit<'e, E: Executor<'e>>(
    exec: E,
    queue: &str,
    concurrency: Option<i32>,
) -> Result<()> {
    check_queue(queue)?;
    super::query(sql!("control", "set_queue_limit"))
        .bind(queue)
        .bind(concurrency)
        .execute(exec)
        .await?;
    Ok(())
}

/// A rate: at most `count` starts per `period` (GCRA: a burst of `count`, then one start
/// every `period / count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Starts allowed per period.
    pub count: i32,
    /// The period.
    pub period: Duration,
}

/// The per-key limits of a queue (each `None`: no such limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyLimit {
    /// Running jobs per key.
    pub concurrency: Option<i32>,
    /// Starts per key and period.
    pub rate: Option<Rate>,
}

/// Replaces the per-key limits of `queue` with `limit`.
pub async fn set_key_limit<'e, E: Executor<'e>>(
    exec: E,
    queue: &str,
    limit: KeyLimit,
) -> Result<()> {
    check_queue(queue)?;
    super::query(sql!("control", "set_key_limit"))
        .bind(queue)
        .bind(limit.concurrency)
        .bind(limit.rate.map(|r| r.count))
        .bind(limit.rate.map(|r| r.period.as_secs_f64()))
        .execute(exec)
        .await?;
    Ok(())
}

/// A change to a queue's per-key limits: for each, `None` keeps it, `Some(None)` clears it,
/// `Some(Some(v))` sets it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyLimitChange {
    /// Running jobs per key.
    pub concurrency: Option<Option<i32>>,
    /// Starts per key and period.
    pub rate: Option<Option<Rate>>,
}

/// Changes the per-key limits of `queue` as `change` says, in one statement that locks the
/// queue's row: a concurrent change to the other limit is kept, not overwritten.
pub async fn change_key_limit<'e, E: Executor<'e>>(
    exec: E,
    queue: &str,
    change: KeyLimitChange,
) -> Result<()> {
    check_queue(queue)?;
    let rate = change.rate.flatten();
    super::query(sql!("control", "change_key_limit"))
        .bind(queue)
        .bind(change.concurrency.is_some())
        .bind(change.concurrency.flatten())
        .bind(change.rate.is_some())
        .bind(rate.map(|r| r.count))
        .bind(rate.map(|r| r.period.as_secs_f64()))
        .execute(exec)
        .await?;
    Ok(())
}


/// Turns fair mode of `queue` on or off (`skiplock.set_queue_fairness`): a fair queue's claims
/// serve its limit keys round-robin, so one key's backlog delays another key's first job by at
/// most one claim (docs/concepts.md, "Fair queues").
pub async fn set_queue_fairness<'e, E: Executor<'e>>(
    exec: E,
    queue: &str,
    fair: bool,
) -> Result<()> {
    check_queue(queue)?;
    super::query(sql!("control", "set_queue_fairness"))
        .bind(queue)
        .bind(fair)
        .execute(exec)
        .await?;
    Ok(())
}
/// Pauses `queue`; returns whether it was running before.
pub async fn pause<'e, E: Executor<'e>>(exec: E, queue: &str) -> Result<bool> {
    check_queue(queue)?;
    Ok(super::query_scalar(sql!("control", "pause"))
        .bind(queue)
        .fetch_one(exec)
        .await?)
}

/// Resumes `queue`; returns whether it was paused.
pub async fn resume<'e, E: Executor<'e>>(exec: E, queue: &str) -> Result<bool> {
    check_queue(queue)?;
    Ok(super::query_scalar(sql!("control", "resume"))
        .bind(queue)
        .fetch_one(exec)
        .await?)
}

/// The per-key rate `queue` has now (None: none).
pub async fn key_rate<'e, E: Executor<'e>>(exec: E, queue: &str) -> Result<Option<Rate>> {
    check_queue(queue)?;
    let row: Option<KeyRateRow> = super::query_as(sql!("control", "key_rate"))
        .bind(queue)
        .fetch_optional(exec)
        .await?;
    Ok(row.and_then(|r| rate_of(r.key_rate, r.key_period_secs)))
}

/// The rate a row's `key_rate` and `key_period_secs` make (None: no rate). The period is kept
/// within 1 ms and 1e9 s, so no value a row can hold makes the conversion panic.
pub fn rate_of(count: Option<i32>, period_secs: Option<f64>) -> Option<Rate> {
    let secs = period_secs?;
    let secs = if secs.is_nan() {
        0.001
    } else {
        secs.clamp(0.001, 1e9)
    };
    Some(Rate {
        count: count?,
        period: Duration::from_secs_f64(secs),
    })
}

/// A queue's limits as words, one per limit set ("concurrency 2", "per key 1",
/// "rate 1/500ms"), for the CLI and the console to say them alike.
pub fn describe_limits(
    concurrency: Option<i32>,
    key_concurrency: Option<i32>,
    rate: Option<Rate>,
) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(n) = concurrency {
        parts.push(format!("concurrency {n}"));
    }
    if let Some(n) = key_concurrency {
        parts.push(format!("per key {n}"));
    }
    if let Some(r) = rate {
        parts.push(format!(
            "rate {}/{}",
            r.count,
            crate::config::format_duration(r.period)
        ));
    }
    parts
}

/// The row of `sql/control/key_rate.sql`.
#[derive(sqlx::FromRow)]
struct KeyRateRow {
    key_rate: Option<i32>,
    key_period_secs: Option<f64>,
}

/// One line of `skiplock queue list` (`skiplock.queue_control`).
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct QueueControl {
    /// Queue name.
    pub queue: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Running jobs allowed, all workers together.
    pub concurrency: Option<i32>,
    /// Running jobs allowed per limit_key.
    pub key_concurrency: Option<i32>,
    /// Starts allowed per key and period.
    pub key_rate: Option<i32>,
    /// The rate's period in seconds.
    pub key_period_secs: Option<f64>,
    /// Available jobs.
    pub available: i64,
    /// Running jobs.
    pub running: i64,
    /// Its claims serve its limit keys round-robin ([`set_queue_fairness`]).
    pub fair: bool,
}

/// Every queue with control settings or live jobs.
pub async fn list<'e, E: Executor<'e>>(exec: E) -> Result<Vec<QueueControl>> {
    Ok(super::query_as(sql!("control", "list"))
        .fetch_all(exec)
        .await?)
}

/// What a producer holding jobs in its buffer needs to know of its queue's control row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
pub struct BufferControl {
    /// The queue is paused.
    pub paused: bool,
    /// The queue has a concurrency limit.
    pub limited: bool,
    /// The queue has a per-key concurrency or rate.
    pub key_limits: bool,
    /// More of its jobs are running (buffered ones included) than its concurrency limit
    /// allows: it was lowered after they were claimed.
    pub over_limit: bool,
}

/// The control row of `queue` as far as a producer's buffer is concerned (None: no row, the
/// queue is neither limited nor paused).
pub async fn buffer_control<'e, E: Executor<'e>>(
    exec: E,
    queue: &str,
) -> Result<Option<BufferControl>> {
    Ok(
        super::query_as::<BufferControl>(sql!("control", "buffer_control"))
            .bind(queue)
            .fetch_optional(exec)
            .await?,
    )
}

/// When `key` of `queue` may start next under its rate limit (None: now, or no rate limit).
pub async fn next_key_start<'e, E: Executor<'e>>(
    exec: E,
    queue: &str,
    key: &str,
) -> Result<Option<DateTime<Utc>>> {
    check_queue(queue)?;
    crate::queue::enqueue::check_text("limit_key", Some(key))?;
    let t: Option<DbTimeOpt> = super::query_scalar(sql!("control", "next_key_start"))
        .bind(queue)
        .bind(key)
        .fetch_optional(exec)
        .await?;
    Ok(t.and_then(|t| t.0))
}

/// The rule for a queue name (the table's CHECK and `skiplock._check_queue_name`): 1 to 200
/// characters, and no NUL, which would get an obscure error from Postgres. Checked here, before
/// any statement, so the CLI and the console refuse a bad name in the same words.
pub fn check_queue(queue: &str) -> Result<()> {
    if queue.is_empty() || queue.chars().count() > 200 || queue.contains('\0') {
        return Err(Error::Invalid(format!(
            "invalid queue name {queue:?}: must be 1 to 200 characters and contain no NUL character"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_needs_both_columns_and_any_period_converts() {
        assert_eq!(rate_of(None, Some(1.0)), None);
        assert_eq!(rate_of(Some(1), None), None);
        assert_eq!(
            rate_of(Some(2), Some(0.5)),
            Some(Rate {
                count: 2,
                period: Duration::from_millis(500)
            })
        );
        for odd in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 0.0, 1e300] {
            let r = rate_of(Some(1), Some(odd)).unwrap();
            assert!(r.period >= Duration::from_millis(1), "{odd}: {r:?}");
            assert!(
                r.period <= Duration::from_secs(1_000_000_000),
                "{odd}: {r:?}"
            );
        }
    }

    #[test]
    fn limits_are_described_in_order() {
        assert!(describe_limits(None, None, None).is_empty());
        let rate = rate_of(Some(1), Some(0.5));
        assert_eq!(
            describe_limits(Some(2), Some(1), rate).join(", "),
            "concurrency 2, per key 1, rate 1/500ms"
        );
        assert_eq!(describe_limits(None, None, rate), ["rate 1/500ms"]);
    }
}
