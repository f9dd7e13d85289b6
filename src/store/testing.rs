//! The statements of `skiplock::testing` (test helpers for programs that use skiplock):
//! `sql/testing/`.

use super::{Executor, sql};
use crate::error::{Error, Result};
use crate::queue::JobState;

/// The args, as stored, of the waiting jobs of `kind`, oldest first.
pub(crate) async fn available_args<'e, E: Executor<'e>>(
    exec: E,
    kind: &str,
) -> Result<Vec<String>> {
    Ok(super::query_scalar(sql!("testing", "available_args"))
        .bind(kind)
        .fetch_all(exec)
        .await?)
}

/// How many jobs of `kinds` are in each state.
pub(crate) async fn count_by_state<'e, E: Executor<'e>>(
    exec: E,
    kinds: &[String],
) -> Result<Vec<(JobState, i64)>> {
    let rows: Vec<(String, i64)> = super::query_as(sql!("testing", "count_by_state"))
        .bind(kinds)
        .fetch_all(exec)
        .await?;
    rows.into_iter()
        .map(|(s, n)| Ok((s.parse().map_err(Error::Other)?, n)))
        .collect()
}
