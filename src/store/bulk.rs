//! The bulk statements over a filtered set of jobs (`sql/bulk/*.sql`): `skiplock.cancel_jobs`
//! and `retry_jobs`, which [`crate::admin::cancel_jobs`]/[`retry_jobs`](crate::admin::retry_jobs)
//! run, and the filter they share with the console's job list (crates/skiplock-console, whose
//! own statements bind a [`JobFilter`] the same way through [`state_param`]).

use super::Pool;
use crate::error::{Error, Result};
use crate::queue::JobState;

/// A SQL API refusal (`RAISE EXCEPTION 'skiplock: …'`) or a missing privilege becomes
/// [`Error::Invalid`] with the database's own words (written for people); anything else
/// stays a database error.
pub fn refusal(e: sqlx::Error) -> Error {
    if let sqlx::Error::Database(d) = &e {
        let m = d.message();
        if let Some(rest) = m.strip_prefix("skiplock: ") {
            return Error::Invalid(rest.to_string());
        }
        if d.code().as_deref() == Some("42501") {
            return Error::Invalid(m.to_string());
        }
    }
    Error::Database(e)
}

/// A job state bound as `skiplock.job_state` itself, not as text: a text parameter cast in
/// SQL (`$1::skiplock.job_state`) goes through `enum_in`, which is only STABLE, so even a
/// custom plan cannot fold it into a constant, and `state = 'available'` would not match the
/// partial index of available rows (a full scan instead of a few index pages).
#[derive(Debug, Clone, Copy)]
pub struct StateParam(JobState);

impl sqlx::Type<sqlx::Postgres> for StateParam {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        sqlx::postgres::PgTypeInfo::with_name("skiplock.job_state")
    }
}

impl sqlx::Encode<'_, sqlx::Postgres> for StateParam {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> std::result::Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <&str as sqlx::Encode<sqlx::Postgres>>::encode_by_ref(&self.0.as_str(), buf)
    }
}

/// The filter's state, bound as [`StateParam`] (`None`: any).
pub fn state_param(f: &JobFilter) -> Option<StateParam> {
    f.state.map(StateParam)
}

/// The job list's filter (each `None`: any). `search` is a plain substring looked for in
/// args and errors, ignoring case (`skiplock._job_matches`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only this state.
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only jobs whose args or errors contain this.
    pub search: Option<String>,
    /// Only jobs with this tag.
    pub tag: Option<String>,
    /// Only jobs whose meta contains this JSON object (jsonb `@>`).
    pub meta: Option<serde_json::Value>,
}


/// Retry the filtered finished jobs, at most `max_rows` (`skiplock.retry_jobs`); how many.
pub async fn retry_jobs(pool: &Pool, f: &JobFilter, max_rows: i32) -> Result<i64> {
    bulk(pool, super::sql!("bulk", "retry_jobs"), f, max_rows).await
}

/// Cancel the filtered unfinished jobs, at most `max_rows` (`skiplock.cancel_jobs`); how many.
pub async fn cancel_jobs(pool: &Pool, f: &JobFilter, max_rows: i32) -> Result<i64> {
    bulk(pool, super::sql!("bulk", "cancel_jobs"), f, max_rows).await
}

/// Runs one of the bulk statements, which take the filter's parameters in one order.
async fn bulk(pool: &Pool, sql: &'static str, f: &JobFilter, max_rows: i32) -> Result<i64> {
    super::query_scalar(sql)
        .bind(state_param(f))
        .bind(&f.kind)
        .bind(&f.queue)
        .bind(&f.search)
        .bind(max_rows)
        .bind(&f.tag)
        .bind(&f.meta)
        .fetch_one(pool)
        .await
        .map_err(refusal)
}
