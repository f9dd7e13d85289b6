//! The operator console's statements (`sql/web/*.sql`): what its pages read and what its
//! buttons call. Reads go to the tables and views; every change goes through a SQL API
//! function (`skiplock.retry`, `cancel`, `retry_jobs`, `cancel_jobs`, `take_packet`,
//! `complete_packet`, `retry_packet`, `pack_now`), so the console needs no write privilege
//! on any table (the `skiplock_operator` role, `sql/api/90_roles.sql`) and every rule the
//! CLI and SQL obey holds here too.

pub use super::Pool;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::error::Result;
use crate::queue::JobRow;

// The bulk Retry / Cancel and their filter are the core's (`admin::retry_jobs`/`cancel_jobs`
// run them too), named here as the job list's page uses them.
pub use super::bulk::{JobFilter, cancel_jobs, retry_jobs};
use super::bulk::{refusal, state_param};

/// One queue's line on the overview, or the line adding up the queues past the first N.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct QueueCounts {
    /// Queue name (`None`: the line adding up the rest).
    pub queue: Option<String>,
    /// Waiting for dependencies (docs/flows.md).
    pub waiting: i64,
    /// Available and due.
    pub available: i64,
    /// Available, due later (scheduled, snoozed or retrying after a backoff).
    pub scheduled: i64,
    /// Running.
    pub running: i64,
    /// Completed.
    pub completed: i64,
    /// Discarded (failed for good).
    pub discarded: i64,
    /// Cancelled.
    pub cancelled: i64,
    /// Age of the oldest due available job, in seconds (none waiting: `None`).
    pub oldest_wait_secs: Option<f64>,
    /// Whether the queue is paused (`skiplock.queues`).
    pub paused: bool,
    /// Running jobs allowed, all workers together.
    pub concurrency: Option<i32>,
    /// Running jobs allowed per limit_key.
    pub key_concurrency: Option<i32>,
    /// Starts allowed per key and period.
    pub key_rate: Option<i32>,
    /// The rate's period in seconds.
    pub key_period_secs: Option<f64>,
    /// Available jobs the queue admits at most (`skiplock.set_queue_admission`).
    pub max_waiting: Option<i32>,
    /// How many queues the line stands for (1, or the rest's count).
    pub queues: i64,
}

/// Per queue: jobs by state and the oldest waiting job's age, for the `top` queues ranked
/// paused first and then by live jobs, plus one line adding up the rest
/// (`sql/web/queue_counts.sql`).
pub async fn queue_counts(pool: &Pool, top: usize) -> Result<Vec<QueueCounts>> {
    Ok(
        super::query_as(include_str!("../../sql/web/queue_counts.sql"))
            .bind(i64::try_from(top).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await?,
    )
}

/// Jobs finished in one minute.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct MinuteCount {
    /// The minute's start.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub minute: DateTime<Utc>,
    /// Completed in it.
    pub completed: i64,
    /// Discarded in it.
    pub failed: i64,
}

/// Completed and discarded jobs per minute, the last 60 minutes, oldest first.
pub async fn throughput(pool: &Pool) -> Result<Vec<MinuteCount>> {
    Ok(
        super::query_as(include_str!("../../sql/web/throughput.sql"))
            .fetch_all(pool)
            .await?,
    )
}

/// A worker process with a recent heartbeat.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LiveWorker {
    /// Worker id (`host:pid:random`).
    pub id: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: i32,
    /// Queues it serves (empty: every queue it finds).
    pub queues: Vec<String>,
    /// Kinds it has handlers for.
    pub kinds: Vec<String>,
    /// Process start.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub started_at: DateTime<Utc>,
    /// Last heartbeat.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub heartbeat_at: DateTime<Utc>,
    /// Seconds since start (database clock).
    pub uptime_secs: f64,
    /// Seconds since the last heartbeat (database clock).
    pub heartbeat_age_secs: f64,
}

/// Workers whose heartbeat is newer than `live_secs`.
pub async fn live_workers(pool: &Pool, live_secs: f64) -> Result<Vec<LiveWorker>> {
    Ok(
        super::query_as(include_str!("../../sql/web/live_workers.sql"))
            .bind(live_secs)
            .fetch_all(pool)
            .await?,
    )
}
/// A job on the list (args and last error cut short).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobLine {
    /// Id.
    pub id: i64,
    /// Kind.
    pub kind: String,
    /// Queue.
    pub queue: String,
    /// State name.
    pub state: String,
    /// Priority.
    pub priority: i16,
    /// Attempts made.
    pub attempt: i32,
    /// Attempt limit.
    pub max_attempts: i32,
    /// When due.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub scheduled_at: DateTime<Utc>,
    /// When enqueued.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub created_at: DateTime<Utc>,
    /// When finished.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub finalized_at: Option<DateTime<Utc>>,
    /// The args as JSON text, at most 160 characters.
    pub args_preview: String,
    /// The last error, at most 160 characters.
    pub last_error: Option<String>,
}

/// Which page of the keyset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    /// The newest matches.
    First,
    /// Matches with an id below this one (the next, older page).
    Older(i64),
    /// Matches with an id above this one (the previous, newer page).
    Newer(i64),
}

/// One page of the filtered jobs, newest first, at most `limit` rows.
pub async fn jobs_page(pool: &Pool, f: &JobFilter, page: Page, limit: i64) -> Result<Vec<JobLine>> {
    let state = state_param(f);
    match page {
        Page::First | Page::Older(_) => {
            let before = match page {
                Page::Older(id) => Some(id),
                _ => None,
            };
            Ok(
                super::query_as(include_str!("../../sql/web/jobs_older.sql"))
                    .bind(state)
                    .bind(&f.kind)
                    .bind(&f.queue)
                    .bind(&f.search)
                    .bind(before)
                    .bind(limit)
                    .bind(&f.tag)
                    .bind(&f.meta)
                    .fetch_all(pool)
                    .await?,
            )
        }
        Page::Newer(after) => {
            let mut rows: Vec<JobLine> =
                super::query_as(include_str!("../../sql/web/jobs_newer.sql"))
                    .bind(state)
                    .bind(&f.kind)
                    .bind(&f.queue)
                    .bind(&f.search)
                    .bind(after)
                    .bind(limit)
                    .bind(&f.tag)
                    .bind(&f.meta)
                    .fetch_all(pool)
                    .await?;
            rows.reverse();
            Ok(rows)
        }
    }
}

/// A name the filter form offers.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FilterChoice {
    /// The kind or queue name.
    pub name: String,
    /// `kind` or `queue`.
    pub what: String,
}

/// Kinds and queues for the filter form (running jobs and the newest 10,000).
pub async fn filter_choices(pool: &Pool) -> Result<Vec<FilterChoice>> {
    Ok(
        super::query_as(include_str!("../../sql/web/kinds_and_queues.sql"))
            .fetch_all(pool)
            .await?,
    )
}

/// One job with every column, or `None`.
pub async fn job(pool: &Pool, id: i64) -> Result<Option<JobRow>> {
    Ok(super::query_as(include_str!("../../sql/web/job.sql"))
        .bind(id)
        .fetch_optional(pool)
        .await?)
}

/// Retry one job (`skiplock.retry`); a refusal is [`skiplock::Error::Invalid`].
pub async fn retry_job(pool: &Pool, id: i64) -> Result<()> {
    super::query(include_str!("../../sql/web/retry_job.sql"))
        .bind(id)
        .execute(pool)
        .await
        .map_err(refusal)?;
    Ok(())
}

/// Cancel one job (`skiplock.cancel`); a refusal is [`skiplock::Error::Invalid`].
pub async fn cancel_job(pool: &Pool, id: i64) -> Result<()> {
    super::query(include_str!("../../sql/web/cancel_job.sql"))
        .bind(id)
        .execute(pool)
        .await
        .map_err(refusal)?;
    Ok(())
}

/// A packet on the board.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PacketLine {
    /// Id.
    pub id: i64,
    /// Its folder.
    pub source: String,
    /// A label.
    pub name: Option<String>,
    /// State name.
    pub state: String,
    /// Why processing failed.
    pub error: Option<String>,
    /// Its last process-packet job.
    pub job_id: Option<i64>,
    /// Submitted.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub created_at: DateTime<Utc>,
    /// Last change.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub updated_at: DateTime<Utc>,
}

/// Packets not done, at most `per_state` of each state, oldest first.
pub async fn open_packets(pool: &Pool, per_state: i64) -> Result<Vec<PacketLine>> {
    Ok(
        super::query_as(include_str!("../../sql/web/packets_open.sql"))
            .bind(per_state)
            .fetch_all(pool)
            .await?,
    )
}

/// The `limit` packets finished last.
pub async fn done_packets(pool: &Pool, limit: i64) -> Result<Vec<PacketLine>> {
    Ok(
        super::query_as(include_str!("../../sql/web/packets_done.sql"))
            .bind(limit)
            .fetch_all(pool)
            .await?,
    )
}

/// One packet, or `None`.
pub async fn packet(pool: &Pool, id: i64) -> Result<Option<PacketLine>> {
    Ok(super::query_as(include_str!("../../sql/web/packet.sql"))
        .bind(id)
        .fetch_optional(pool)
        .await?)
}

/// What processing produced for a packet.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PacketResult {
    /// The processor's output (JSON), if any.
    pub result: Option<Value>,
}

/// A packet's result (`None`: no such packet).
pub async fn packet_result(pool: &Pool, id: i64) -> Result<Option<PacketResult>> {
    Ok(
        super::query_as(include_str!("../../sql/web/packet_result.sql"))
            .bind(id)
            .fetch_optional(pool)
            .await?,
    )
}

/// One move in a packet's history.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PacketEventLine {
    /// Event id.
    pub id: i64,
    /// The packet.
    pub packet_id: i64,
    /// Previous state (`None`: the submit).
    pub from_state: Option<String>,
    /// New state.
    pub to_state: String,
    /// When.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub at: DateTime<Utc>,
    /// Who.
    pub actor: String,
    /// Why.
    pub note: Option<String>,
}

/// The history of the packets `ids`, oldest first per packet.
pub async fn packet_events(pool: &Pool, ids: &[i64]) -> Result<Vec<PacketEventLine>> {
    Ok(
        super::query_as(include_str!("../../sql/web/packet_events.sql"))
            .bind(ids)
            .fetch_all(pool)
            .await?,
    )
}

/// Packets per state ("whose move is it?").
#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct PacketCounts {
    /// queued + processing.
    pub machine: i64,
    /// ready_for_review + in_review + error.
    pub people: i64,
    /// Waiting for a worker.
    pub queued: i64,
    /// Being processed.
    pub processing: i64,
    /// Waiting for an operator.
    pub ready_for_review: i64,
    /// Being checked.
    pub in_review: i64,
    /// Failed.
    pub error: i64,
    /// Finished.
    pub done: i64,
}

/// The "whose move" counts.
pub async fn packet_counts(pool: &Pool) -> Result<PacketCounts> {
    Ok(
        super::query_as(include_str!("../../sql/web/packet_counts.sql"))
            .fetch_one(pool)
            .await?,
    )
}

/// Take a packet for review (`skiplock.take_packet`); a refused move is [`skiplock::Error::Invalid`].
pub async fn take_packet(pool: &Pool, id: i64, actor: Option<&str>) -> Result<()> {
    super::query(include_str!("../../sql/web/take_packet.sql"))
        .bind(id)
        .bind(actor)
        .execute(pool)
        .await
        .map_err(refusal)?;
    Ok(())
}

/// Finish a packet's review (`skiplock.complete_packet`).
pub async fn complete_packet(pool: &Pool, id: i64, actor: Option<&str>) -> Result<()> {
    super::query(include_str!("../../sql/web/complete_packet.sql"))
        .bind(id)
        .bind(actor)
        .execute(pool)
        .await
        .map_err(refusal)?;
    Ok(())
}

/// Process a packet again, with a reason (`skiplock.retry_packet`); returns the new job.
pub async fn retry_packet(
    pool: &Pool,
    id: i64,
    reason: Option<&str>,
    actor: Option<&str>,
) -> Result<i64> {
    super::query_scalar(include_str!("../../sql/web/retry_packet.sql"))
        .bind(id)
        .bind(reason)
        .bind(actor)
        .fetch_one(pool)
        .await
        .map_err(refusal)
}

/// A host on the crawl page.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HostLine {
    /// Host (`name` or `name:port`).
    pub host: String,
    /// Pages known.
    pub pages: i64,
    /// Pages fetched at least once.
    pub fetched: i64,
    /// Latest fetch.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub last_fetched: Option<DateTime<Utc>>,
    /// Earliest next fetch.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub next_fetch: Option<DateTime<Utc>>,
    /// The earliest next fetch start the host's politeness (the fetch queue's per-key
    /// rate limit) allows; None: a fetch may start now.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub next_start: Option<DateTime<Utc>>,
}

/// Hosts with their counts and next allowed fetch start, at most `limit`.
pub async fn hosts(pool: &Pool, limit: i64) -> Result<Vec<HostLine>> {
    Ok(super::query_as(include_str!("../../sql/web/hosts.sql"))
        .bind(limit)
        .fetch_all(pool)
        .await?)
}

/// A page of a host.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PageLine {
    /// Id.
    pub id: i64,
    /// Normalised URL.
    pub url: String,
    /// Last status code.
    pub http_status: Option<i32>,
    /// Title.
    pub title: Option<String>,
    /// Last fetch.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub last_fetched: Option<DateTime<Utc>>,
    /// Next fetch due.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub next_fetch: Option<DateTime<Utc>>,
    /// Why the last request stored no content.
    pub note: Option<String>,
}

/// Pages of `host` with an id above `after`, at most `limit`, in id order.
pub async fn host_pages(
    pool: &Pool,
    host: &str,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<PageLine>> {
    Ok(
        super::query_as(include_str!("../../sql/web/host_pages.sql"))
            .bind(host)
            .bind(after)
            .bind(limit)
            .fetch_all(pool)
            .await?,
    )
}

/// A host's last pack and pending timer.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PackLine {
    /// Host.
    pub host: String,
    /// Last pack's upload end.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub packed_at: Option<DateTime<Utc>>,
    /// Pages in the artifact.
    pub pages: Option<i64>,
    /// Artifact size.
    pub bytes: Option<i64>,
    /// Artifact key in the store.
    pub object_key: Option<String>,
    /// The store.
    pub store: Option<String>,
    /// Packs so far.
    pub pack_count: Option<i64>,
    /// The pending do-the-packing job.
    pub timer_job_id: Option<i64>,
    /// When it fires.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub timer_at: Option<DateTime<Utc>>,
}

/// Packs and pending timers, at most `limit` hosts.
pub async fn packs(pool: &Pool, limit: i64) -> Result<Vec<PackLine>> {
    Ok(super::query_as(include_str!("../../sql/web/packs.sql"))
        .bind(limit)
        .fetch_all(pool)
        .await?)
}

/// Pack a host now (`skiplock.pack_now`); returns the do-the-packing job.
pub async fn pack_now(pool: &Pool, host: &str) -> Result<i64> {
    super::query_scalar(include_str!("../../sql/web/pack_now.sql"))
        .bind(host)
        .fetch_one(pool)
        .await
        .map_err(refusal)
}

/// The console's database login.
pub async fn session_user(pool: &Pool) -> Result<String> {
    Ok(
        super::query_scalar(include_str!("../../sql/web/session_user.sql"))
            .fetch_one(pool)
            .await?,
    )
}
