//! What `skiplock doctor` reads (`sql/doctor/*.sql`): the sessions, replication slots and
//! prepared transactions that hold the vacuum horizon, skiplock's tables as the statistics
//! see them, the runtime's rows a stuck fleet leaves behind, and the server settings. Read
//! only: each check runs in a transaction begun by [`begin`] (read-only, with its own
//! `statement_timeout`), and every listing is bounded by a `LIMIT`. The judgement lives in
//! [`crate::doctor`].

use std::time::Duration;

use super::{Pool, Transaction, sql};
use crate::error::Result;

/// Begins a read-only transaction whose statements may run `timeout` at most
/// (`sql/doctor/begin.sql`).
pub async fn begin(pool: &Pool, timeout: Duration) -> Result<Transaction<'static>> {
    let mut tx = pool.begin().await?;
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128).to_string();
    super::query(sql!("doctor", "begin"))
        .bind(ms)
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// The server process two client connections of `pool`, held at once, are answered by, if it
/// is the same one (`sql/doctor/backend_pid.sql`): only a pooler that lends server connections
/// per transaction does that; a direct connection or a pooler in session mode never does (a
/// pooler with several server connections may also lend two, so `None` proves nothing). A
/// pool of one connection cannot hold two: `None` without asking.
pub async fn shared_backend(pool: &Pool) -> Result<Option<i32>> {
    if pool.options().get_max_connections() < 2 {
        return Ok(None);
    }
    let mut a = pool.acquire().await?;
    let mut b = pool.acquire().await?;
    let pa: i32 = super::query_scalar(sql!("doctor", "backend_pid"))
        .fetch_one(&mut *a)
        .await?;
    let pb: i32 = super::query_scalar(sql!("doctor", "backend_pid"))
        .fetch_one(&mut *b)
        .await?;
    Ok((pa == pb).then_some(pa))
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A session with a transaction id or a snapshot (`sql/doctor/backends.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Backend {
    /// Its process id (`pg_terminate_backend` takes it).
    pub pid: i32,
    /// The login.
    pub user_name: Option<String>,
    /// `application_name`.
    pub application_name: Option<String>,
    /// The client's address (`None`: a Unix socket, or not visible).
    pub client: Option<String>,
    /// `active`, `idle in transaction`, … (`None`: not visible to this login).
    pub state: Option<String>,
    /// Its transaction id, if it wrote.
    pub xid: Option<String>,
    /// Its snapshot's xmin.
    pub xmin: Option<String>,
    /// Transactions since the older of the two.
    pub xid_age: Option<i64>,
    /// Seconds since its transaction began.
    pub xact_seconds: f64,
    /// Seconds in its current state.
    pub state_seconds: f64,
    /// The first line of its latest statement.
    pub query: Option<String>,
}

/// The sessions holding the horizon, oldest transaction first, at most `n`.
pub async fn backends(tx: &mut Transaction<'_>, n: usize) -> Result<Vec<Backend>> {
    Ok(super::query_as(sql!("doctor", "backends"))
        .bind(limit(n))
        .fetch_all(&mut **tx)
        .await?)
}

/// How many other logins' sessions this login may not see (`sql/doctor/hidden.sql`).
pub async fn hidden(tx: &mut Transaction<'_>) -> Result<i64> {
    Ok(super::query_scalar(sql!("doctor", "hidden"))
        .fetch_one(&mut **tx)
        .await?)
}

/// A replication slot (`sql/doctor/slots.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Slot {
    /// Its name (`pg_drop_replication_slot` takes it).
    pub slot_name: String,
    /// `physical` or `logical`.
    pub slot_type: Option<String>,
    /// The database of a logical slot.
    pub database: Option<String>,
    /// A consumer is connected.
    pub active: bool,
    /// The xmin it holds.
    pub xmin: Option<String>,
    /// The catalog xmin it holds.
    pub catalog_xmin: Option<String>,
    /// Transactions since the older of the two.
    pub xid_age: Option<i64>,
    /// WAL kept for it, in bytes.
    pub retained_wal_bytes: Option<i64>,
}

/// The replication slots, inactive first, at most `n`.
pub async fn slots(tx: &mut Transaction<'_>, n: usize) -> Result<Vec<Slot>> {
    Ok(super::query_as(sql!("doctor", "slots"))
        .bind(limit(n))
        .fetch_all(&mut **tx)
        .await?)
}

/// A prepared transaction (`sql/doctor/prepared.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Prepared {
    /// Its global id (`COMMIT PREPARED` / `ROLLBACK PREPARED` take it).
    pub gid: String,
    /// The login that prepared it.
    pub owner: Option<String>,
    /// Its database.
    pub database: Option<String>,
    /// Its transaction id.
    pub xid: Option<String>,
    /// Transactions since.
    pub xid_age: Option<i64>,
    /// Seconds since it was prepared.
    pub seconds: f64,
}

/// The prepared transactions, oldest first, at most `n`.
pub async fn prepared(tx: &mut Transaction<'_>, n: usize) -> Result<Vec<Prepared>> {
    Ok(super::query_as(sql!("doctor", "prepared"))
        .bind(limit(n))
        .fetch_all(&mut **tx)
        .await?)
}

/// One of skiplock's tables (`sql/doctor/tables.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct TableStats {
    /// The table, in schema `skiplock`.
    pub table_name: String,
    /// Live tuples (estimate).
    pub live_tuples: i64,
    /// Dead tuples not yet removed.
    pub dead_tuples: i64,
    /// Size with indexes and TOAST.
    pub total_bytes: i64,
    /// Seconds since the latest vacuum (`None`: none recorded).
    pub vacuumed_seconds_ago: Option<f64>,
    /// Seconds since the latest analyze.
    pub analyzed_seconds_ago: Option<f64>,
    /// Vacuums recorded.
    pub vacuums: i64,
}

/// skiplock's tables, most dead tuples first, at most `n`.
pub async fn tables(tx: &mut Transaction<'_>, n: usize) -> Result<Vec<TableStats>> {
    Ok(super::query_as(sql!("doctor", "tables"))
        .bind(limit(n))
        .fetch_all(&mut **tx)
        .await?)
}

/// A worker row without a recent heartbeat (`sql/doctor/stale_workers.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct StaleWorker {
    /// Its id.
    pub id: String,
    /// Its host.
    pub host: String,
    /// Its process id there.
    pub pid: i32,
    /// Seconds since its heartbeat.
    pub heartbeat_seconds: f64,
}

/// Workers silent for more than `window`, at most `n`.
pub async fn stale_workers(
    tx: &mut Transaction<'_>,
    window: Duration,
    n: usize,
) -> Result<Vec<StaleWorker>> {
    Ok(super::query_as(sql!("doctor", "stale_workers"))
        .bind(window.as_secs_f64())
        .bind(limit(n))
        .fetch_all(&mut **tx)
        .await?)
}

/// A running job without a recent heartbeat (`sql/doctor/stuck_jobs.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct StuckJob {
    /// Its id.
    pub id: i64,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// The worker that claimed it.
    pub attempted_by: Option<String>,
    /// Seconds since its heartbeat.
    pub heartbeat_seconds: f64,
    /// Seconds since it started.
    pub running_seconds: f64,
}

/// Running jobs silent for more than `window`, at most `n`.
pub async fn stuck_jobs(
    tx: &mut Transaction<'_>,
    window: Duration,
    n: usize,
) -> Result<Vec<StuckJob>> {
    Ok(super::query_as(sql!("doctor", "stuck_jobs"))
        .bind(window.as_secs_f64())
        .bind(limit(n))
        .fetch_all(&mut **tx)
        .await?)
}

/// A running job of a live worker that started long ago (`sql/doctor/long_running_jobs.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct LongRunningJob {
    /// Its id.
    pub id: i64,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// The worker that claimed it.
    pub attempted_by: Option<String>,
    /// Seconds since it started (what the reaper judges it by).
    pub running_seconds: f64,
    /// Seconds since its heartbeat.
    pub heartbeat_seconds: f64,
}

/// Running jobs with a heartbeat within `window` that started more than `older_than` ago, at
/// most `n`.
pub async fn long_running_jobs(
    tx: &mut Transaction<'_>,
    window: Duration,
    older_than: Duration,
    n: usize,
) -> Result<Vec<LongRunningJob>> {
    Ok(super::query_as(sql!("doctor", "long_running_jobs"))
        .bind(window.as_secs_f64())
        .bind(older_than.as_secs_f64())
        .bind(limit(n))
        .fetch_all(&mut **tx)
        .await?)
}

/// A job left waiting although its dependencies have all finished
/// (`sql/doctor/stranded_dependents.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct StrandedDependent {
    /// Its id.
    pub id: i64,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// How many dependencies it has.
    pub dependencies: i64,
    /// Seconds since it was enqueued.
    pub waiting_seconds: f64,
    /// Seconds since its last dependency finished (`None`: they were all deleted).
    pub last_finished_seconds: Option<f64>,
}

/// Waiting jobs whose dependencies all finished more than `settled_after` ago, at most `n`.
pub async fn stranded_dependents(
    tx: &mut Transaction<'_>,
    settled_after: Duration,
    n: usize,
) -> Result<Vec<StrandedDependent>> {
    Ok(super::query_as(sql!("doctor", "stranded_dependents"))
        .bind(settled_after.as_secs_f64())
        .bind(limit(n))
        .fetch_all(&mut **tx)
        .await?)
}

/// One of skiplock's tables against autovacuum's threshold (`sql/doctor/autovacuum.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AutovacuumTable {
    /// The table, in schema `skiplock`.
    pub table_name: String,
    /// Dead tuples not yet removed.
    pub dead_tuples: i64,
    /// The dead tuples past which autovacuum vacuums it.
    pub threshold: i64,
    /// Its `autovacuum_enabled` (true unless the table turns it off).
    pub enabled: bool,
    /// Seconds since its latest vacuum (`None`: none recorded).
    pub vacuumed_seconds_ago: Option<f64>,
}

/// skiplock's tables with autovacuum's threshold, most dead tuples first, at most `n`.
pub async fn autovacuum(tx: &mut Transaction<'_>, n: usize) -> Result<Vec<AutovacuumTable>> {
    Ok(super::query_as(sql!("doctor", "autovacuum"))
        .bind(limit(n))
        .fetch_all(&mut **tx)
        .await?)
}

/// A paused queue (`sql/doctor/paused_queues.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PausedQueue {
    /// The queue.
    pub queue: String,
    /// Seconds since its control row changed.
    pub paused_seconds: f64,
    /// Available jobs in it (at most the cap passed).
    pub waiting: i64,
}

/// Paused queues, at most `n`, their waiting jobs counted up to `cap`.
pub async fn paused_queues(
    tx: &mut Transaction<'_>,
    n: usize,
    cap: usize,
) -> Result<Vec<PausedQueue>> {
    Ok(super::query_as(sql!("doctor", "paused_queues"))
        .bind(limit(n))
        .bind(limit(cap))
        .fetch_all(&mut **tx)
        .await?)
}

/// A queue with an admission limit (`sql/doctor/full_queues.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AdmissionQueue {
    /// The queue.
    pub queue: String,
    /// Its limit on waiting jobs.
    pub max_waiting: i32,
    /// Available jobs in it (counted up to the limit + 1, at most the cap passed + 1).
    pub waiting: i64,
}

/// Queues with an admission limit, at most `n`, their waiting jobs counted up to `cap` + 1.
pub async fn full_queues(
    tx: &mut Transaction<'_>,
    n: usize,
    cap: usize,
) -> Result<Vec<AdmissionQueue>> {
    Ok(super::query_as(sql!("doctor", "full_queues"))
        .bind(limit(n))
        .bind(limit(cap))
        .fetch_all(&mut **tx)
        .await?)
}

/// A key held now (`sql/doctor/held_keys.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct HeldKey {
    /// Its queue.
    pub queue: String,
    /// The key.
    pub limit_key: String,
    /// Seconds until it is released.
    pub seconds_left: f64,
}

/// Keys held now, the longest hold first, at most `n`.
pub async fn held_keys(tx: &mut Transaction<'_>, n: usize) -> Result<Vec<HeldKey>> {
    Ok(super::query_as(sql!("doctor", "held_keys"))
        .bind(limit(n))
        .fetch_all(&mut **tx)
        .await?)
}

/// A periodic job whose latest enqueue failed (`sql/doctor/periodic_failures.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PeriodicFailure {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// The error.
    pub last_error: Option<String>,
    /// Seconds since.
    pub seconds_ago: Option<f64>,
}

/// Periodic jobs whose latest enqueue failed, at most `n`.
pub async fn periodic_failures(
    tx: &mut Transaction<'_>,
    n: usize,
) -> Result<Vec<PeriodicFailure>> {
    Ok(super::query_as(sql!("doctor", "periodic_failures"))
        .bind(limit(n))
        .fetch_all(&mut **tx)
        .await?)
}

/// The server settings the doctor judges (`sql/doctor/settings.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ServerSettings {
    /// `synchronous_commit`.
    pub synchronous_commit: String,
    /// `idle_in_transaction_session_timeout` (`0`: none).
    pub idle_in_transaction_session_timeout: String,
    /// `max_connections`.
    pub max_connections: i32,
    /// `superuser_reserved_connections`.
    pub reserved_connections: i32,
    /// Client connections now.
    pub connections: i64,
    /// A standby (read only).
    pub in_recovery: bool,
    /// `server_version`.
    pub server_version: String,
    /// `autovacuum`.
    pub autovacuum: bool,
    /// `track_counts` (autovacuum needs it).
    pub track_counts: bool,
}

/// What a worker needs that the connected login lacks (`sql/doctor/worker_grants.sql`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct WorkerGrants {
    /// The connected login (`current_user`).
    pub login: String,
    /// Whether the role `skiplock_worker` exists.
    pub worker_role: bool,
    /// Whether the login is an operator's (a member of `skiplock_operator`, not of
    /// `skiplock_worker`): never a worker's.
    pub operator_login: bool,
    /// What it lacks, one privilege per entry (`EXECUTE on function skiplock._claim(…)`).
    pub missing: Vec<String>,
}

/// What a worker needs that the connected login lacks.
pub async fn worker_grants(tx: &mut Transaction<'_>) -> Result<WorkerGrants> {
    Ok(super::query_as(sql!("doctor", "worker_grants"))
        .fetch_one(&mut **tx)
        .await?)
}

/// The server settings.
pub async fn settings(tx: &mut Transaction<'_>) -> Result<ServerSettings> {
    Ok(super::query_as(sql!("doctor", "settings"))
        .fetch_one(&mut **tx)
        .await?)
}

/// The SQL API version recorded (`None`: none).
pub async fn api_version(tx: &mut Transaction<'_>) -> Result<Option<super::schema::SchemaInfo>> {
    Ok(super::query_as(sql!("doctor", "api_version"))
        .fetch_optional(&mut **tx)
        .await?)
}
