//! **Dev-tool statements** of the partition run (`skiplock-devtools chaos --partitions`,
//! tests/partitions.rs): its history tables (`sql/chaos/partitions/`), its workload's enqueues,
//! the handler's execution records and what the history checker reads.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use skiplock::error::Result;
use sqlx::PgExecutor as Executor;

/// (Re)creates the history tables and the transition trigger (`skiplock_faults`).
pub async fn install<'e, E: Executor<'e>>(exec: E) -> Result<()> {
    sqlx::raw_sql(sql!("chaos/partitions", "schema"))
        .execute(exec)
        .await?;
    Ok(())
}

/// Limits `queue` to `rate` starts per key per second.
pub async fn key_limit<'e, E: Executor<'e>>(exec: E, queue: &str, rate: i32) -> Result<()> {
    sqlx::query(sql!("chaos/partitions", "key_limit"))
        .bind(queue)
        .bind(rate)
        .execute(exec)
        .await?;
    Ok(())
}

/// Enqueues `count` jobs of `kind` numbered from `first`, each working `extra_ms` plus up to
/// `work_ms` milliseconds; their ids.
pub async fn enqueue_plain<'e, E: Executor<'e>>(
    exec: E,
    kind: &str,
    first: i64,
    count: i32,
    work_ms: i32,
    extra_ms: i32,
) -> Result<Vec<i64>> {
    Ok(
        sqlx::query_scalar(sql!("chaos/partitions", "enqueue_plain"))
            .bind(kind)
            .bind(first)
            .bind(count)
            .bind(work_ms)
            .bind(extra_ms)
            .fetch_one(exec)
            .await?,
    )
}

/// Enqueues `count` jobs of `kind` numbered from `first` into the key-limited `queue`, over
/// `keys` limit keys; their ids.
pub async fn enqueue_limited<'e, E: Executor<'e>>(
    exec: E,
    kind: &str,
    queue: &str,
    first: i64,
    count: i32,
    keys: i32,
    work_ms: i32,
) -> Result<Vec<i64>> {
    Ok(
        sqlx::query_scalar(sql!("chaos/partitions", "enqueue_limited"))
            .bind(kind)
            .bind(queue)
            .bind(first)
            .bind(count)
            .bind(keys)
            .bind(work_ms)
            .fetch_one(exec)
            .await?,
    )
}

/// Enqueues a fan-in: `children` jobs numbered from `first`, then one depending on them all;
/// their ids, the fan-in's last.
pub async fn enqueue_flow<'e, E: Executor<'e>>(
    exec: E,
    kind: &str,
    first: i64,
    children: i32,
) -> Result<Vec<i64>> {
    Ok(sqlx::query_scalar(sql!("chaos/partitions", "enqueue_flow"))
        .bind(kind)
        .bind(first)
        .bind(children)
        .fetch_one(exec)
        .await?)
}

/// Enqueues job `n` under `key`, replacing the waiting job holding it, due in `due_ms`; its id
/// and what happened (`inserted`, `replaced`, ...).
pub async fn enqueue_replace<'e, E: Executor<'e>>(
    exec: E,
    kind: &str,
    n: i64,
    key: &str,
    due_ms: i32,
) -> Result<(i64, String)> {
    Ok(sqlx::query_as(sql!("chaos/partitions", "enqueue_replace"))
        .bind(kind)
        .bind(n)
        .bind(key)
        .bind(due_ms)
        .fetch_one(exec)
        .await?)
}

/// Records that a handler started; the execution's id.
pub async fn started<'e, E: Executor<'e>>(
    exec: E,
    job_id: i64,
    attempt: i32,
    worker_id: &str,
    pid: i32,
) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("chaos/partitions", "started"))
        .bind(job_id)
        .bind(attempt)
        .bind(worker_id)
        .bind(pid)
        .fetch_one(exec)
        .await?)
}

/// Records how execution `id` ended.
pub async fn ended<'e, E: Executor<'e>>(exec: E, id: i64, outcome: &str) -> Result<()> {
    sqlx::query(sql!("chaos/partitions", "ended"))
        .bind(id)
        .bind(outcome)
        .execute(exec)
        .await?;
    Ok(())
}

/// One enqueue of the driver and its result.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct EnqueueRow {
    /// Its number in the run.
    pub op: i32,
    /// What it enqueued: `plain`, `long`, `limited`, `flow`, `replace:<key>`.
    pub what: String,
    /// The job numbers it carried.
    pub ns: Vec<i64>,
    /// Whether it returned without an error.
    pub ok: bool,
    /// The ids it returned (a flow's fan-in last).
    pub ids: Vec<i64>,
    /// A replace's outcome.
    pub outcome: Option<String>,
    /// Its error.
    pub error: Option<String>,
}

/// Writes the driver's enqueues (`at`: when each was answered).
pub async fn record_enqueues<'e, E: Executor<'e>>(
    exec: E,
    rows: &[EnqueueRow],
    at: &[DateTime<Utc>],
) -> Result<()> {
    let text = |v: &Vec<i64>| {
        v.iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    sqlx::query(sql!("chaos/partitions", "record_enqueues"))
        .bind(rows.iter().map(|r| r.op).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.what.clone()).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.ok).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.outcome.clone()).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.error.clone()).collect::<Vec<_>>())
        .bind(at)
        .bind(rows.iter().map(|r| text(&r.ns)).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| text(&r.ids)).collect::<Vec<_>>())
        .execute(exec)
        .await?;
    Ok(())
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FaultRow {
    /// Its kind's name.
    pub kind: String,
    /// The worker slot it hit (`None`: the server, for every worker).
    pub slot: Option<i32>,
    /// That worker's process.
    pub pid: Option<i32>,
    /// The one connection it hit (its port on the worker; `None`: all of them).
    pub port: Option<i32>,
    /// When it began.
    pub started_at: DateTime<Utc>,
    /// When it was healed.
    pub ended_at: DateTime<Utc>,
}

/// Writes the injected faults.
pub async fn record_faults<'e, E: Executor<'e>>(exec: E, rows: &[FaultRow]) -> Result<()> {
    sqlx::query(sql!("chaos/partitions", "record_faults"))
        .bind(rows.iter().map(|r| r.kind.clone()).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.slot).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.pid).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.port).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.started_at).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.ended_at).collect::<Vec<_>>())
        .execute(exec)
        .await?;
    Ok(())
}

/// The state changes the worker connection from `addr`, `port` committed since `since`.
pub async fn commits_since<'e, E: Executor<'e>>(
    exec: E,
    addr: &str,
    port: i32,
    since: DateTime<Utc>,
) -> Result<i64> {
    Ok(
        sqlx::query_scalar(sql!("chaos/partitions", "commits_since"))
            .bind(addr)
            .bind(port)
            .bind(since)
            .fetch_one(exec)
            .await?,
    )
}

/// The port of the worker connection from `addr` that most recently claimed or acked.
pub async fn claiming_port<'e, E: Executor<'e>>(exec: E, addr: &str) -> Result<Option<i32>> {
    Ok(
        sqlx::query_scalar(sql!("chaos/partitions", "claiming_port"))
            .bind(addr)
            .fetch_optional(exec)
            .await?,
    )
}

/// Jobs not finished yet.
pub async fn unfinished<'e, E: Executor<'e>>(exec: E) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("chaos/partitions", "unfinished"))
        .fetch_one(exec)
        .await?)
}

/// A job at the end of a run.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct JobRow {
    /// Its id.
    pub id: i64,
    /// Its state.
    pub state: String,
    /// Its attempt counter.
    pub attempt: i32,
    /// Its number in the run (args `n`).
    pub n: Option<i64>,
    /// Its unique key.
    pub unique_key: Option<String>,
    /// The execution whose completion was recorded (result `exec`).
    pub result_exec: Option<i64>,
    /// When it finished.
    pub finalized_at: Option<DateTime<Utc>>,
    /// Its last heartbeat.
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// The worker that ran its last attempt.
    pub attempted_by: Option<String>,
}

/// One execution.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ExecutionRow {
    /// Its id.
    pub id: i64,
    /// The job.
    pub job_id: i64,
    /// The attempt it ran.
    pub attempt: i32,
    /// The worker.
    pub worker_id: String,
    /// The worker's process.
    pub pid: i32,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it ended (`None`: that write failed).
    pub ended_at: Option<DateTime<Utc>>,
    /// How (`done`, `lost`).
    pub outcome: Option<String>,
}

/// One state change of a job.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TransitionRow {
    /// The job.
    pub job_id: i64,
    /// Its attempt before and after.
    pub old_attempt: i32,
    /// After.
    pub new_attempt: i32,
    /// Its state before.
    pub old_state: String,
    /// After.
    pub new_state: String,
    /// The worker that held the attempt before.
    pub old_owner: Option<String>,
    /// After.
    pub new_owner: Option<String>,
    /// The address of the session that made the change (a worker's, or the driver's 127.0.0.1).
    pub changed_by: String,
    /// That session's port.
    pub port: Option<i32>,
    /// Whether it was a rescue.
    pub rescue: bool,
    /// The job's last heartbeat (or start) before the change.
    pub last_beat: Option<DateTime<Utc>>,
    /// When.
    pub at: DateTime<Utc>,
}

/// Everything a run recorded.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The jobs at the end.
    pub jobs: Vec<JobRow>,
    /// Every execution.
    pub executions: Vec<ExecutionRow>,
    /// Every change of a job's state or attempt.
    pub transitions: Vec<TransitionRow>,
    /// Every enqueue with its result.
    pub enqueues: Vec<EnqueueRow>,
    /// Every injected fault.
    pub faults: Vec<FaultRow>,
    /// (job, attempt) pairs whose handler reported an error (not a rescue).
    pub handler_errors: Vec<(i64, i32)>,
    /// The worker processes of the run: the address each connects from, by process id.
    pub slots: BTreeMap<i32, String>,
}

/// The whole history of a run, as the checker reads it.
pub async fn history(pool: &skiplock::Pool) -> Result<History> {
    Ok(History {
        jobs: sqlx::query_as(sql!("chaos/partitions", "history_jobs"))
            .fetch_all(pool)
            .await?,
        executions: sqlx::query_as(sql!("chaos/partitions", "history_executions"))
            .fetch_all(pool)
            .await?,
        transitions: sqlx::query_as(sql!("chaos/partitions", "history_transitions"))
            .fetch_all(pool)
            .await?,
        enqueues: sqlx::query_as(sql!("chaos/partitions", "history_enqueues"))
            .fetch_all(pool)
            .await?,
        faults: sqlx::query_as(sql!("chaos/partitions", "history_faults"))
            .fetch_all(pool)
            .await?,
        handler_errors: sqlx::query_as(sql!("chaos/partitions", "history_errors"))
            .fetch_all(pool)
            .await?,
        slots: Default::default(),
    })
}

/// Refuses a name that is not a plain lower-case identifier (names go into the statement
/// text: identifiers cannot be bound).
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(skiplock::error::Error::Invalid(format!(
            "invalid name {name:?}: lower-case letters, digits and _ only"
        )))
    }
}

/// `CREATE TABLESPACE name LOCATION 'location'` (a folder of the run's own).
pub async fn create_tablespace<'e, E: Executor<'e>>(
    exec: E,
    name: &str,
    location: &str,
) -> Result<()> {
    check_name(name)?;
    if !location.starts_with('/') || location.contains('\'') {
        return Err(skiplock::error::Error::Invalid(format!(
            "invalid location {location:?}"
        )));
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLESPACE {name} LOCATION '{location}'"
    )))
    .execute(exec)
    .await?;
    Ok(())
}

/// `CREATE DATABASE name TABLESPACE tablespace` (a schedule's own database).
pub async fn create_database<'e, E: Executor<'e>>(
    exec: E,
    name: &str,
    tablespace: &str,
) -> Result<()> {
    check_name(name)?;
    check_name(tablespace)?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {name} TABLESPACE {tablespace}"
    )))
    .execute(exec)
    .await?;
    Ok(())
}

/// `DROP DATABASE IF EXISTS name WITH (FORCE)` (a finished schedule's database).
pub async fn drop_database<'e, E: Executor<'e>>(exec: E, name: &str) -> Result<()> {
    check_name(name)?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(exec)
    .await?;
    Ok(())
}
