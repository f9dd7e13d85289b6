//! **Dev-tool statements**: only `skiplock bench` runs these (`sql/bench/`). They create and
//! drop the benchmark's own database, reset and vacuum the jobs table between runs, build the
//! plain-SQL ceiling table and read the results. Nothing in the worker or the CLI proper
//! calls them.

use super::{Executor, sql};
use crate::error::{Error, Result};

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

/// `CREATE DATABASE name` (the benchmark's and chaos runs' own databases).
pub async fn create_database<'e, E: Executor<'e>>(exec: E, name: &str) -> Result<()> {
    check_db_name(name)?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(exec)
        .await?;
    Ok(())
}

/// `DROP DATABASE IF EXISTS name WITH (FORCE)`.
pub async fn drop_database<'e, E: Executor<'e>>(exec: E, name: &str) -> Result<()> {
    check_db_name(name)?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(exec)
    .await?;
    Ok(())
}

/// Empties `skiplock.jobs`.
pub async fn truncate_jobs<'e, E: Executor<'e>>(exec: E) -> Result<()> {
    sqlx::query(sql!("bench", "truncate_jobs"))
        .execute(exec)
        .await?;
    Ok(())
}

/// `VACUUM ANALYZE skiplock.jobs` (outside a transaction).
pub async fn vacuum_jobs<'e, E: Executor<'e>>(exec: E) -> Result<()> {
    sqlx::query(sql!("bench", "vacuum_jobs"))
        .execute(exec)
        .await?;
    Ok(())
}

/// `ANALYZE skiplock.jobs`.
pub async fn analyze_jobs<'e, E: Executor<'e>>(exec: E) -> Result<()> {
    sqlx::query(sql!("bench", "analyze_jobs"))
        .execute(exec)
        .await?;
    Ok(())
}

/// How many jobs are `running` (a drain is over when none are and every handler ran).
pub async fn running_count<'e, E: Executor<'e>>(exec: E) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("bench", "running_count"))
        .fetch_one(exec)
        .await?)
}

/// Enqueue-to-start of the jobs `ids`, in milliseconds.
pub async fn latency_ms<'e, E: Executor<'e>>(exec: E, ids: &[i64]) -> Result<Vec<f64>> {
    Ok(sqlx::query_scalar(sql!("bench", "latency_ms"))
        .bind(ids)
        .fetch_all(exec)
        .await?)
}

/// (Re)creates the ceiling's table.
pub async fn ceiling_table<'e, E: Executor<'e>>(exec: E) -> Result<()> {
    sqlx::raw_sql(sql!("bench", "ceiling_table"))
        .execute(exec)
        .await?;
    Ok(())
}

/// Fills the ceiling's table with `n` due rows.
pub async fn ceiling_fill<'e, E: Executor<'e>>(exec: E, n: i64) -> Result<()> {
    sqlx::query(sql!("bench", "ceiling_fill"))
        .bind(n)
        .execute(exec)
        .await?;
    Ok(())
}

/// `VACUUM ANALYZE` of the ceiling's table.
pub async fn vacuum_ceiling<'e, E: Executor<'e>>(exec: E) -> Result<()> {
    sqlx::query(sql!("bench", "vacuum_ceiling"))
        .execute(exec)
        .await?;
    Ok(())
}

/// One step of the plain-SQL loop; returns the rows it completed (0: done).
pub async fn ceiling_step<'e, E: Executor<'e>>(exec: E) -> Result<u64> {
    Ok(sqlx::query(sql!("bench", "ceiling_step"))
        .execute(exec)
        .await?
        .rows_affected())
}

/// Drops the ceiling's table.
pub async fn drop_ceiling<'e, E: Executor<'e>>(exec: E) -> Result<()> {
    sqlx::query(sql!("bench", "drop_ceiling"))
        .execute(exec)
        .await?;
    Ok(())
}

/// A server setting's value (`current_setting(name)`), for the report.
pub async fn setting<'e, E: Executor<'e>>(exec: E, name: &str) -> Result<String> {
    Ok(sqlx::query_scalar(sql!("bench", "setting"))
        .bind(name)
        .fetch_one(exec)
        .await?)
}

/// Ballast: `n` finished rows.
pub async fn scale_fill<'e, E: Executor<'e>>(exec: E, n: i64) -> Result<()> {
    sqlx::query(sql!("bench", "scale_fill"))
        .bind(n)
        .execute(exec)
        .await?;
    Ok(())
}

/// Ballast: `n` rows scheduled a day ahead.
pub async fn scale_future<'e, E: Executor<'e>>(exec: E, n: i64) -> Result<()> {
    sqlx::query(sql!("bench", "scale_future"))
        .bind(n)
        .execute(exec)
        .await?;
    Ok(())
}

/// Deletes the newest `n` completed jobs (the scale run keeps its ballast at its size).
pub async fn trim_completed<'e, E: Executor<'e>>(exec: E, n: i64) -> Result<()> {
    sqlx::query(sql!("bench", "trim_completed"))
        .bind(n)
        .execute(exec)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_database_names_reach_the_statement() {
        assert!(check_db_name("skiplock_bench_0a1b").is_ok());
        for bad in ["", "Bench", "a;drop", "a b", "1abc", &"x".repeat(64)] {
            assert!(check_db_name(bad).is_err(), "{bad:?}");
        }
    }
}
