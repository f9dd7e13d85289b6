//! **Dev-tool statements**: only chaos runs (`skiplock-devtools chaos`, `tests/faults.rs`) run these
//! (`sql/chaos/`): the side tables that record executions and kills, the run's jobs, and the
//! verdict. Nothing in the worker or the CLI proper calls them.

pub mod partitions;

use chrono::{DateTime, Utc};

use skiplock::error::{Error, Result};
use sqlx::PgExecutor as Executor;

/// (Re)creates the side tables of a run (`skiplock_chaos.executions`, `.kills`).
pub async fn install<'e, E: Executor<'e>>(exec: E) -> Result<()> {
    sqlx::raw_sql(sql!("chaos", "schema")).execute(exec).await?;
    Ok(())
}

/// How many jobs the table holds (a run needs an empty one).
pub async fn job_count<'e, E: Executor<'e>>(exec: E) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("chaos", "job_count"))
        .fetch_one(exec)
        .await?)
}

/// Enqueues `chaos_record` jobs `first..=last`, each working 0..=`work_ms` ms.
pub async fn fill<'e, E: Executor<'e>>(exec: E, first: i64, last: i64, work_ms: i64) -> Result<()> {
    sqlx::query(sql!("chaos", "fill"))
        .bind(first)
        .bind(last)
        .bind(work_ms)
        .execute(exec)
        .await?;
    Ok(())
}

/// How many of the jobs `first..=last` exist (0 or all: a batch is one statement).
pub async fn filled<'e, E: Executor<'e>>(exec: E, first: i64, last: i64) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("chaos", "filled"))
        .bind(first)
        .bind(last)
        .fetch_one(exec)
        .await?)
}

/// Per failover (began at `starts[i]`, healed at `healed[i]`): the longest time without a
/// completed job that began in it, in seconds, and when it began (`sql/chaos/failover_gaps.sql`).
pub async fn failover_gaps<'e, E: Executor<'e>>(
    exec: E,
    starts: &[DateTime<Utc>],
    healed: &[DateTime<Utc>],
) -> Result<Vec<(f64, Option<DateTime<Utc>>)>> {
    Ok(sqlx::query_as(sql!("chaos", "failover_gaps"))
        .bind(starts)
        .bind(healed)
        .fetch_all(exec)
        .await?)
}

/// The process ids of the registered workers.
pub async fn registered_pids<'e, E: Executor<'e>>(exec: E) -> Result<Vec<i32>> {
    Ok(sqlx::query_scalar(sql!("chaos", "registered_pids"))
        .fetch_all(exec)
        .await?)
}

/// Completed `chaos_record` jobs so far.
pub async fn progress<'e, E: Executor<'e>>(exec: E) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("chaos", "progress"))
        .fetch_one(exec)
        .await?)
}

/// One execution of a `chaos_record` handler, for [`record`].
#[derive(Debug, Clone, Copy)]
pub struct Execution<'a> {
    /// The job.
    pub job_id: i64,
    /// Its attempt.
    pub attempt: i32,
    /// The worker that ran it.
    pub worker_id: &'a str,
    /// That worker's process id.
    pub pid: i32,
}

/// Records one execution (committed on its own, before the ack).
pub async fn record<'e, E: Executor<'e>>(exec: E, x: Execution<'_>) -> Result<()> {
    sqlx::query(sql!("chaos", "record"))
        .bind(x.job_id)
        .bind(x.attempt)
        .bind(x.worker_id)
        .bind(x.pid)
        .execute(exec)
        .await?;
    Ok(())
}

/// Records SIGKILLs: process ids and the times they were gone.
pub async fn kill<'e, E: Executor<'e>>(exec: E, pids: &[i32], ats: &[DateTime<Utc>]) -> Result<()> {
    sqlx::query(sql!("chaos", "kill"))
        .bind(pids)
        .bind(ats)
        .execute(exec)
        .await?;
    Ok(())
}

/// The verdict of a run (`sql/chaos/verify.sql`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Verdict {
    /// Jobs of the run.
    pub jobs: i64,
    /// Of them completed.
    pub completed: i64,
    /// Handler executions recorded.
    pub executions: i64,
    /// Jobs that ran more than once.
    pub duplicates: i64,
    /// Re-runs explained by the handler's own error.
    pub retried_after_error: i64,
    /// Re-runs nothing explains.
    pub unexplained: i64,
    /// Their jobs.
    pub unexplained_jobs: Vec<i64>,
    /// Jobs not completed, or completed without an execution.
    pub lost: i64,
}

/// Judges the run.
pub async fn verify<'e, E: Executor<'e>>(exec: E) -> Result<Verdict> {
    Ok(sqlx::query_as(sql!("chaos", "verify"))
        .fetch_one(exec)
        .await?)
}

/// One execution of a job, for the post-mortem of a failed run.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ExecutionDetail {
    /// The job.
    pub job_id: i64,
    /// Its attempt.
    pub attempt: i32,
    /// The process that ran it.
    pub pid: i32,
    /// The worker.
    pub worker_id: String,
    /// When (as text).
    pub at: String,
    /// The job's errors (as text).
    pub errors: String,
}

/// The executions and errors of `jobs`.
pub async fn explain<'e, E: Executor<'e>>(exec: E, jobs: &[i64]) -> Result<Vec<ExecutionDetail>> {
    Ok(sqlx::query_as(sql!("chaos", "explain"))
        .bind(jobs)
        .fetch_all(exec)
        .await?)
}

/// Refuses a database name that is not a plain lower-case identifier (the name goes into
/// the statement text: identifiers cannot be bound).
fn check_db_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "invalid database name {name:?}: lower-case letters, digits and _ only"
        )))
    }
}

/// `CREATE DATABASE name` (the chaos run's own database).
pub async fn create_database<'e, E: Executor<'e>>(exec: E, name: &str) -> Result<()> {
    check_db_name(name)?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(exec)
        .await?;
    Ok(())
}
