//! Writing outcomes: many acknowledgements in one fenced statement
//! (`sql/queue/ack_many.sql`; the worker's ack writer batches them), and putting back jobs a
//! worker claimed but never started (`sql/queue/release_unstarted.sql`).

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Executor, sql};
use crate::error::Result;
use crate::queue::JobState;

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
    /// When the attempt's handler started, on the database's clock (becomes `attempted_at`;
    /// `None` keeps it).
    pub started_at: Option<DateTime<Utc>>,
}

/// What [`ack_many`] wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Acked {
    /// The ids that were still running their attempt (the others were rescued, cancelled or
    /// retried meanwhile and are left alone).
    pub ids: Vec<i64>,
    /// Finished jobs of the batch whose dependents the statement may not all have settled (it
    /// settles a bounded slice; `sql/api/14_ack.sql`, `skiplock._ack`): the caller settles
    /// the rest with [`super::flows::settle_slice`].
    pub unsettled: Vec<i64>,
}

/// Writes `acks` in one statement.
pub async fn ack_many<'e, E: Executor<'e>>(exec: E, acks: &[Ack]) -> Result<Acked> {
    if acks.is_empty() {
        return Ok(Acked::default());
    }
    // Lock rows in id order, the same order as heartbeat_many, so the two never deadlock.
    let mut acks: Vec<&Ack> = acks.iter().collect();
    acks.sort_by_key(|a| a.id);
    let ids: Vec<i64> = acks.iter().map(|a| a.id).collect();
    let attempts: Vec<i32> = acks.iter().map(|a| a.attempt).collect();
    // As labels, cast in the statement: a parameter of the enum's own type costs every new
    // connection two catalog lookups by sqlx before its first ack (the array type by name,
    // then its element by OID), on the path from a job's end to its dependents' release.
    let states: Vec<&str> = acks.iter().map(|a| a.state.as_str()).collect();
    let sched: Vec<Option<DateTime<Utc>>> = acks.iter().map(|a| a.scheduled_at).collect();
    let give_back: Vec<bool> = acks.iter().map(|a| a.give_back).collect();
    let errors: Vec<Option<String>> = acks.iter().map(|a| a.error.clone()).collect();
    let results: Vec<Option<Value>> = acks.iter().map(|a| a.result.clone()).collect();
    let starts: Vec<Option<DateTime<Utc>>> = acks.iter().map(|a| a.started_at).collect();
    let rows: Vec<(i64, Option<Vec<i64>>)> = super::query_as(sql!("queue", "ack_many"))
        .bind(ids)
        .bind(attempts)
        .bind(states)
        .bind(sched)
        .bind(give_back)
        .bind(errors)
        .bind(results)
        .bind(starts)
        .fetch_all(exec)
        .await?;
    let unsettled = rows
        .first()
        .and_then(|(_, u)| u.clone())
        .unwrap_or_default();
    Ok(Acked {
        ids: rows.into_iter().map(|(id, _)| id).collect(),
        unsettled,
    })
}

/// What [`release_unstarted`] puts back.
#[derive(Debug, Clone, Copy)]
pub struct ReleaseParams<'a> {
    /// The worker that claimed them.
    pub worker: &'a str,
    /// Only jobs of this queue (`None`: every queue).
    pub queue: Option<&'a str>,
    /// The ids the worker still holds: never released.
    pub held: &'a [i64],
    /// Whether the released jobs use up their attempt (see
    /// `worker::release::count_attempt_after`).
    pub count_attempt: bool,
    /// Why, appended to each job's `errors`.
    pub reason: &'a str,
}

/// A job [`release_unstarted`] put back.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ReleasedJob {
    /// Job id.
    pub id: i64,
    /// `available`, `discarded` when out of attempts, or `cancelled` when superseded by
    /// another job waiting with its unique_key.
    pub state: JobState,
}

/// Puts back every job `p.worker` claimed (from `p.queue`) that is still `running` and not in
/// `p.held`.
pub async fn release_unstarted<'e, E: Executor<'e>>(
    exec: E,
    p: ReleaseParams<'_>,
) -> Result<Vec<ReleasedJob>> {
    Ok(super::query_as(sql!("queue", "release_unstarted"))
        .bind(p.worker)
        .bind(p.queue)
        .bind(p.held)
        .bind(p.count_attempt)
        .bind(p.reason)
        .fetch_all(exec)
        .await?)
}
