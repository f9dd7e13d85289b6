//! The pack workflow's statements (`sql/pack/`): the SQL API entry points (`timer_reset`,
//! `pack_now`), the debounced timer (`arm`), what a pack finds when it starts (`pending`),
//! the host's lock row, the pages streamed into the artifact, and the record of a pack.
//! (The artifact's own SQLite statements are the artifact's format: `workflows::pack::artifact`.)

use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;

use super::{Executor, sql};
use crate::error::{Error, Result};

/// Announces that `host`'s content changed (`skiplock.timer_reset`); returns the
/// `timer-reset` job's id.
pub async fn timer_reset<'e, E: Executor<'e>>(exec: E, host: &str) -> Result<i64> {
    Ok(super::query_scalar(sql!("pack", "timer_reset"))
        .bind(host)
        .fetch_one(exec)
        .await?)
}

/// Gives the pack queue a per-key concurrency of 1, keeping its key rate
/// (`skiplock.set_one_pack_per_host`).
pub async fn one_pack_per_host<'e, E: Executor<'e>>(exec: E) -> Result<()> {
    super::query(sql!("pack", "one_pack_per_host"))
        .execute(exec)
        .await?;
    Ok(())
}

/// Packs `host` at once (`skiplock.pack_now`); returns the `do-the-packing` job's id.
pub async fn pack_now<'e, E: Executor<'e>>(exec: E, host: &str) -> Result<i64> {
    Ok(super::query_scalar(sql!("pack", "pack_now"))
        .bind(host)
        .fetch_one(exec)
        .await?)
}

/// A host's pack timer after a reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct Timer {
    /// The timer's job (`do-the-packing`).
    pub timer_id: i64,
    /// When it fires.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub fires_at: DateTime<Utc>,
}

/// Arms (or pushes forward) `host`'s pack timer: `quiet` after this reset, at most
/// `max_wait` after the window's first reset (`skiplock.pack_arm_at`, where the rule lives).
pub async fn arm<'e, E: Executor<'e>>(
    exec: E,
    host: &str,
    quiet: std::time::Duration,
    max_wait: std::time::Duration,
) -> Result<Timer> {
    Ok(super::query_as(sql!("pack", "arm"))
        .bind(host)
        .bind(quiet.as_secs_f64())
        .bind(max_wait.as_secs_f64())
        .fetch_one(exec)
        .await?)
}

/// What a `do-the-packing` job finds when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct Pending {
    /// The database clock.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub now: DateTime<Utc>,
    /// When the job's window began (its `created_at`; `None` if the job is gone).
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub window_start: Option<DateTime<Utc>>,
    /// The host's other, pending timer, if any.
    pub pending_id: Option<i64>,
    /// When that timer fires.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub pending_at: Option<DateTime<Utc>>,
}

/// For job `job_id` packing `host`: the clock, its window start and the pending timer.
pub async fn pending<'e, E: Executor<'e>>(exec: E, job_id: i64, host: &str) -> Result<Pending> {
    Ok(super::query_as(sql!("pack", "pending"))
        .bind(job_id)
        .bind(host)
        .fetch_one(exec)
        .await?)
}

/// Makes `host`'s lock row if it is missing (its own statement, before the pack's
/// transaction, so it never waits for a pack in progress).
pub async fn lock_row<'e, E: Executor<'e>>(exec: E, host: &str) -> Result<()> {
    super::query(sql!("pack", "lock_row"))
        .bind(host)
        .execute(exec)
        .await?;
    Ok(())
}

/// Locks `host`'s row for the rest of the transaction; `false` when another pack of the
/// host holds it (never waits).
pub async fn lock<'e, E: Executor<'e>>(exec: E, host: &str) -> Result<bool> {
    let locked: Option<bool> = super::query_scalar(sql!("pack", "lock"))
        .bind(host)
        .fetch_optional(exec)
        .await?;
    Ok(locked.is_some())
}

/// One page as it goes into the artifact.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PageRow {
    /// Normalised URL.
    pub url: String,
    /// URL path.
    pub path: String,
    /// `<title>`.
    pub title: Option<String>,
    /// Headings text.
    pub headings: Option<String>,
    /// Body text.
    pub body: Option<String>,
    /// When the page was last fetched.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub last_fetched: Option<DateTime<Utc>>,
}

/// `host`'s pages that have content, in a stable order, streamed (a host of any size).
pub fn pages<'e, E: Executor<'e> + 'e>(exec: E, host: &'e str) -> BoxStream<'e, Result<PageRow>> {
    super::query_as(sql!("pack", "pages"))
        .bind(host)
        .fetch(exec)
        .map_err(Error::from)
        .boxed()
}

/// A finished pack, for [`record`].
#[derive(Debug, Clone, Copy)]
pub struct PackRecord<'a> {
    /// The host.
    pub host: &'a str,
    /// Pages written.
    pub pages: i64,
    /// Artifact size.
    pub bytes: i64,
    /// Where in the store.
    pub object_key: &'a str,
    /// Which store.
    pub store: &'a str,
    /// The pack job.
    pub job_id: i64,
    /// How long it took.
    pub duration_ms: i64,
}

/// Records a finished pack in `skiplock.packs`.
pub async fn record<'e, E: Executor<'e>>(exec: E, r: PackRecord<'_>) -> Result<()> {
    super::query(sql!("pack", "record"))
        .bind(r.host)
        .bind(r.pages)
        .bind(r.bytes)
        .bind(r.object_key)
        .bind(r.store)
        .bind(r.job_id)
        .bind(r.duration_ms)
        .execute(exec)
        .await?;
    Ok(())
}

/// One row of `skiplock.pack_status`.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct PackStatus {
    /// The host.
    pub host: Option<String>,
    /// Its last pack.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub packed_at: Option<DateTime<Utc>>,
    /// Pages in it.
    pub pages: Option<i64>,
    /// Its size.
    pub bytes: Option<i64>,
    /// Where in the store.
    pub object_key: Option<String>,
    /// Which store.
    pub store: Option<String>,
    /// Packs so far.
    pub pack_count: Option<i64>,
    /// The last pack's job.
    pub job_id: Option<i64>,
    /// The pending timer's job.
    pub timer_job_id: Option<i64>,
    /// When the pending timer fires.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub timer_at: Option<DateTime<Utc>>,
}

/// Pack status of every host, or of `host`.
pub async fn status<'e, E: Executor<'e>>(exec: E, host: Option<&str>) -> Result<Vec<PackStatus>> {
    Ok(super::query_as(sql!("pack", "status"))
        .bind(host)
        .fetch_all(exec)
        .await?)
}
