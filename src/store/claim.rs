//! The claim: one `FOR NO KEY UPDATE SKIP LOCKED` statement that moves up to `limit` due jobs of the
//! kinds a worker handles to `running` (`sql/queue/claim.sql`), and the two questions a
//! worker asks around it (which queues have work, is anything claimable at all).

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{FromRow, Row};

use super::{Executor, sql};
use crate::error::Result;
use crate::queue::Job;
use crate::time::{DbTime, DbTimeOpt};

/// What one claim asks for.
#[derive(Debug, Clone, Copy)]
pub struct ClaimParams<'a> {
    /// The queue to claim from.
    pub queue: &'a str,
    /// Only jobs of these kinds (the worker's handlers).
    pub kinds: &'a [String],
    /// At most this many (the producer's free slots).
    pub limit: usize,
    /// The claiming worker's id (recorded in `attempted_by`).
    pub worker: &'a str,
}

/// Where one lane of a queue (one priority) is read from by a claim: jobs with an older
/// `scheduled_at` are not looked at (`skiplock._claim` in `sql/api/13_claim.sql` says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneStart {
    /// The lane's priority.
    pub priority: i16,
    /// The oldest `scheduled_at` the claim reads in it.
    pub since: DateTime<Utc>,
}

/// What one claim brought back.
#[derive(Debug, Clone, Default)]
pub struct Claimed {
    /// The jobs claimed, in claim order (priority, scheduled_at, id).
    pub jobs: Vec<Job>,
    /// The queue has limits or is paused (its claim went through `skiplock._claim_limited`).
    pub controlled: bool,
    /// A limit or a pause may have held jobs back.
    pub held: bool,
    /// When a job held back by a key's rate may start.
    pub wait_until: Option<DateTime<Utc>>,
    /// How many jobs the next claim may ask for the buffer (None: no bound).
    pub buffer_room: Option<usize>,
    /// The claim's clock (the database's), None when it said none.
    pub clock: Option<DateTime<Utc>>,
    /// The lanes the claim read to their end.
    pub exhausted: Vec<i16>,
    /// The claim read as many lanes as one claim may (`skiplock._claim_max_lanes`) without
    /// filling its batch: the next claim resumes after this lane, at once.
    pub lanes_after: Option<i16>,
}

impl Claimed {
    /// Whether the claim wrote its jobs' starts itself: it reports no clock of its own then
    /// (a pick that did not go lane by lane). Under a key's limits the limited claim decides
    /// each start (a key's rate counts it) and buffers nothing: each job's `attempted_at` is
    /// the start it counted, and the job starts at once. A fair queue's pick writes none
    /// (NULL): its jobs' starts are noted when a slot takes them, as with a plain claim
    /// (docs/internals.md, "When a job started").
    pub fn counted_starts(&self) -> bool {
        self.controlled && self.clock.is_none()
    }
}

/// Claims up to `p.limit` due jobs of `p.kinds` from `p.queue` for `p.worker`, reading every
/// lane from its start (`claim_from` with no lanes, every job for a free slot).
pub async fn claim<'c, A>(exec: A, p: ClaimParams<'_>) -> Result<Vec<Job>>
where
    A: sqlx::Acquire<'c, Database = sqlx::Postgres>,
{
    Ok(claim_from(exec, p, p.limit, LaneReads::default())
        .await?
        .jobs)
}

/// Where a claim reads a queue's lanes: each lane from its [`LaneStart`] (`starts` None: every
/// lane from its start), the lanes after priority `after` only (None: from the first).
#[derive(Debug, Clone, Copy, Default)]
pub struct LaneReads<'a> {
    /// Each lane's bound.
    pub starts: Option<&'a [LaneStart]>,
    /// Resume after this lane (the previous claim's `lanes_after`).
    pub after: Option<i16>,
}

/// Claims up to `p.limit` due jobs of `p.kinds` from `p.queue` for `p.worker`
/// (`sql/queue/claim.sql`): `free` of them for free slots, the rest for the worker's buffer (a
/// controlled queue may give the buffer less: `skiplock._claim_limited`), each lane read as
/// `lanes` says. A claimed row whose attempt counter is at its maximum is discarded with the
/// reason and left out (a second statement, only when such a row comes back).
pub async fn claim_from<'c, A>(
    exec: A,
    p: ClaimParams<'_>,
    free: usize,
    lanes: LaneReads<'_>,
) -> Result<Claimed>
where
    A: sqlx::Acquire<'c, Database = sqlx::Postgres>,
{
    // One connection for both statements (a pool's, or the caller's transaction).
    let mut conn = exec.acquire().await?;
    claim_on(&mut conn, p, free, lanes).await
}

/// [`claim_from`] on one connection (or a transaction's).
pub async fn claim_on(
    conn: &mut sqlx::PgConnection,
    p: ClaimParams<'_>,
    free: usize,
    lanes: LaneReads<'_>,
) -> Result<Claimed> {
    if p.kinds.is_empty() {
        return Ok(Claimed::default());
    }
    let n = free.min(p.limit);
    let ahead = p.limit - n;
    let (priorities, since): (Option<Vec<i16>>, Option<Vec<DateTime<Utc>>>) = match lanes.starts {
        Some(l) => (
            Some(l.iter().map(|l| l.priority).collect()),
            Some(l.iter().map(|l| l.since).collect()),
        ),
        None => (None, None),
    };
    let rows: Vec<PgRow> = super::query(sql!("queue", "claim"))
        .bind(p.queue)
        .bind(p.kinds)
        .bind(n.min(i32::MAX as usize) as i32)
        .bind(p.worker)
        .bind(ahead.min(i32::MAX as usize) as i32)
        .bind(priorities)
        .bind(since)
        .bind(lanes.after)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Claimed::default();
    for r in &rows {
        if let Some(id) = r.try_get::<Option<i64>, _>("id")? {
            // One row that cannot be read is left out alone: its job stays running, unheld, so
            // the rescuer returns it (and discards it once out of attempts); failing the claim
            // stranded every job it had just claimed (tests/hardening_sql.rs,
            // a_claim_gets_past_a_row_it_cannot_read).
            match Job::from_row(r) {
                Ok(j) => out.jobs.push(j),
                Err(e) => tracing::error!(job.id = id, error = %e,
                    "a claimed job's row could not be read; left out of the claim for the rescuer"),
            }
        } else {
            out.controlled = r.try_get::<Option<bool>, _>("controlled")?.unwrap_or(false);
            out.wait_until = r.try_get::<DbTimeOpt, _>("wait_until")?.0;
            out.buffer_room = r
                .try_get::<Option<i32>, _>("buffer_room")?
                .map(|n| n.max(0) as usize);
            out.clock = r.try_get::<DbTimeOpt, _>("attempted_at")?.0;
            out.exhausted = r
                .try_get::<Option<Vec<i16>>, _>("exhausted")?
                .unwrap_or_default();
            out.lanes_after = r.try_get("lanes_after")?;
        }
    }
    out.held = out.controlled;
    // The UPDATE returns rows in the order it met them; a buffer starts them in claim order.
    out.jobs.sort_by(|a, b| {
        (a.priority, a.scheduled_at, a.id).cmp(&(b.priority, b.scheduled_at, b.id))
    });
    let overflow: Vec<i64> = out
        .jobs
        .iter()
        .filter(|j| j.attempt == i32::MAX)
        .map(|j| j.id)
        .collect();
    if !overflow.is_empty() {
        super::query(sql!("queue", "discard_overflow"))
            .bind(&overflow)
            .execute(&mut *conn)
            .await?;
        out.jobs.retain(|j| j.attempt != i32::MAX);
    }
    Ok(out)
}

/// Up to `limit` distinct queues, other than `served`, that hold due jobs of `kinds`, in name
/// order after `after` (None: from the first), for workers that serve every queue.
pub async fn discover_queues<'e, E: Executor<'e>>(
    exec: E,
    kinds: &[String],
    served: &[String],
    limit: usize,
    after: Option<&str>,
) -> Result<Vec<String>> {
    Ok(super::query_scalar(sql!("queue", "discover_queues"))
        .bind(kinds)
        .bind(served)
        .bind(limit.min(i64::MAX as usize) as i64)
        .bind(after)
        .fetch_all(exec)
        .await?)
}

/// Whether any job of `kinds` (in `queues`, or any queue when `None`) is claimable now.
pub async fn has_claimable<'e, E: Executor<'e>>(
    exec: E,
    kinds: &[String],
    queues: Option<&[String]>,
) -> Result<bool> {
    Ok(super::query_scalar(sql!("queue", "has_claimable"))
        .bind(kinds)
        .bind(queues)
        .fetch_one(exec)
        .await?)
}

/// The columns `sql/queue/claim.sql` returns; times through `DbTime` so none can panic.
impl<'r> sqlx::FromRow<'r, PgRow> for Job {
    fn from_row(r: &'r PgRow) -> std::result::Result<Self, sqlx::Error> {
        Ok(Job {
            id: r.try_get("id")?,
            kind: r.try_get("kind")?,
            queue: r.try_get("queue")?,
            args: r.try_get("args")?,
            priority: r.try_get("priority")?,
            attempt: r.try_get("attempt")?,
            max_attempts: r.try_get("max_attempts")?,
            scheduled_at: r.try_get::<DbTime, _>("scheduled_at")?.0,
            created_at: r.try_get::<DbTime, _>("created_at")?.0,
            attempted_at: r.try_get::<DbTimeOpt, _>("attempted_at")?.0,
            // A NULL element (only a plain UPDATE can write one) is no tag.
            tags: r
                .try_get::<Vec<Option<String>>, _>("tags")?
                .into_iter()
                .flatten()
                .collect(),
            meta: r.try_get("meta")?,
        })
    }
}
