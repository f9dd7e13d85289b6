//! Flow statements (docs/flows.md): a DAG enqueued in one call, what a job's dependencies
//! returned, who waits for a job, a flow's progress, watching a job finish, and the
//! maintenance's sweep. The rules live in the SQL API (`sql/api/12_flows.sql`); statements:
//! `sql/flows/`.

use serde_json::Value;
use sqlx::postgres::PgListener;

use super::{Executor, Pool, sql};
use crate::error::{Error, Result};
use crate::queue::JobState;
use crate::queue::flow::{
    DependencyCounts, DependencyResult, Dependent, FlowIds, FlowMember, FlowProgress,
};

/// Enqueues the flow `spec` (the JSON array `skiplock.enqueue_flow` takes) atomically.
pub async fn enqueue_flow<'e, E: Executor<'e>>(exec: E, spec: &Value) -> Result<FlowIds> {
    let v: Value = super::query_scalar(sql!("flows", "enqueue_flow"))
        .bind(spec)
        .fetch_one(exec)
        .await?;
    serde_json::from_value(v).map_err(|e| Error::Other(format!("enqueue_flow answered {e}")))
}

/// The dependencies of job `id` with their states and results, by id: all of them (what a
/// handler reads; a batch's callback counts them).
pub async fn dependency_results<'e, E: Executor<'e>>(
    exec: E,
    id: i64,
) -> Result<Vec<DependencyResult>> {
    Ok(super::query_as(sql!("flows", "dependency_results"))
        .bind(id)
        .fetch_all(exec)
        .await?)
}

/// The first `limit` dependencies of job `id` by id, with their states and results: what a
/// page shows (any enqueuer may give a job 100,000 of them; [`dependency_counts`] says how
/// many there are).
pub async fn first_dependency_results<'e, E: Executor<'e>>(
    exec: E,
    id: i64,
    limit: i64,
) -> Result<Vec<DependencyResult>> {
    Ok(super::query_as(sql!("flows", "first_dependency_results"))
        .bind(id)
        .bind(limit)
        .fetch_all(exec)
        .await?)
}

/// The jobs that depend on job `id`, by id: all of them (any enqueuer may add millions; a page
/// reads [`first_dependents`]).
pub async fn dependents<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<Vec<Dependent>> {
    Ok(super::query_as(sql!("flows", "dependents"))
        .bind(id)
        .fetch_all(exec)
        .await?)
}

/// The first `limit` jobs that depend on job `id`, by id.
pub async fn first_dependents<'e, E: Executor<'e>>(
    exec: E,
    id: i64,
    limit: i64,
) -> Result<Vec<Dependent>> {
    Ok(super::query_as(sql!("flows", "first_dependents"))
        .bind(id)
        .bind(limit)
        .fetch_all(exec)
        .await?)
}

/// How many dependencies job `id` has and how many jobs depend on it, each counted up to
/// `up_to` (a page says "and N more" past the rows it shows).
pub async fn dependency_counts<'e, E: Executor<'e>>(
    exec: E,
    id: i64,
    up_to: i64,
) -> Result<DependencyCounts> {
    Ok(super::query_as(sql!("flows", "dependency_counts"))
        .bind(id)
        .bind(up_to)
        .fetch_one(exec)
        .await?)
}

/// The progress of flow `flow` (an id `enqueue_flow` returned, or any job's: it and its
/// dependents).
pub async fn flow_progress<'e, E: Executor<'e>>(exec: E, flow: i64) -> Result<FlowProgress> {
    Ok(super::query_as(sql!("flows", "flow_progress"))
        .bind(flow)
        .fetch_one(exec)
        .await?)
}

/// The first `limit` jobs of flow `flow` (as [`flow_progress`] counts them), by id.
pub async fn flow_members<'e, E: Executor<'e>>(
    exec: E,
    flow: i64,
    limit: i64,
) -> Result<Vec<FlowMember>> {
    Ok(super::query_as(sql!("flows", "flow_members"))
        .bind(flow)
        .bind(limit)
        .fetch_all(exec)
        .await?)
}

/// The flow job `id` belongs to, for a link to its page: the recorded flow's id, else `id`
/// itself when it has dependencies or dependents, else `None`.
pub async fn flow_of<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<Option<i64>> {
    Ok(super::query_scalar(sql!("flows", "flow_of"))
        .bind(id)
        .fetch_one(exec)
        .await?)
}

/// Registers a watch on job `id` (its finish is then announced on the finished channel,
/// [`finished_channel`]) and returns its state and result now.
pub async fn watch<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<(JobState, Option<Value>)> {
    Ok(super::query_as(sql!("flows", "watch"))
        .bind(id)
        .fetch_one(exec)
        .await?)
}

/// The channel a watched job's finish is announced on, its id as the payload
/// (`skiplock.finished_channel()`): a name only those who may read the jobs can read, so no
/// other login learns which jobs finished when (docs/security.md).
pub async fn finished_channel<'e, E: Executor<'e>>(exec: E) -> Result<String> {
    Ok(super::query_scalar(sql!("flows", "finished_channel"))
        .fetch_one(exec)
        .await?)
}

/// A connection listening on the finished channel ([`finished_channel`]).
pub async fn finished_listener(pool: &Pool) -> Result<PgListener> {
    let channel = finished_channel(pool).await?;
    let mut l = PgListener::connect_with(pool).await?;
    l.listen(&channel).await?;
    Ok(l)
}

/// The maintenance's sweep: settles at most `limit` edges of finished jobs whose dependents
/// were not told yet, cancel cascades included (`skiplock.settle_dependencies`); returns how
/// many (0: none was left). A call that settles `limit` may have left more.
pub async fn settle_dependencies<'e, E: Executor<'e>>(exec: E, limit: i32) -> Result<i64> {
    Ok(super::query_scalar(sql!("flows", "settle_dependencies"))
        .bind(limit)
        .fetch_one(exec)
        .await?)
}

/// Where a job's edges left to settle start: its first dependent, or after the one a slice
/// before settled last (the dependent's id).
pub const FROM_THE_START: i64 = i64::MIN;

/// What is left after a slice ([`settle_slice`]): jobs that may still have edges to settle,
/// each with the cursor to resume from.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Left {
    /// The finished jobs.
    pub jobs: Vec<i64>,
    /// Per job, the greatest dependent id already settled ([`FROM_THE_START`]: none).
    pub after: Vec<i64>,
}

/// Settles one slice of what acks left (their [`super::ack::Acked::unsettled`], each
/// [`FROM_THE_START`] at first): at most `max_edges` unresolved edges of finished jobs
/// `jobs`, each read in dependent order from its cursor in `after`, in one transaction of its
/// own (`skiplock._settle_slice`). Returns what is left, cursors included, for the next slice.
pub async fn settle_slice<'e, E: Executor<'e>>(
    exec: E,
    jobs: &[i64],
    after: &[i64],
    max_edges: i32,
) -> Result<Left> {
    let (jobs, after): (Option<Vec<i64>>, Option<Vec<i64>>) =
        super::query_as(sql!("flows", "settle_slice"))
            .bind(jobs)
            .bind(after)
            .bind(max_edges)
            .fetch_one(exec)
            .await?;
    Ok(Left {
        jobs: jobs.unwrap_or_default(),
        after: after.unwrap_or_default(),
    })
}

/// What a settle hint left ([`settle_added`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Hinted {
    /// Jobs another transaction was writing: to try again a moment later.
    pub busy: Vec<i64>,
    /// Jobs that may have edges left, for the slices ([`settle_slice`], from the start).
    pub left: Vec<i64>,
}

/// Settles the edges of the jobs of a settle hint (`jobs`: new edges committed while they may
/// have been finishing) that have finished, at most `max_edges` of them, in one transaction
/// of its own (`skiplock._settle_added`).
pub async fn settle_added<'e, E: Executor<'e>>(
    exec: E,
    jobs: &[i64],
    max_edges: i32,
) -> Result<Hinted> {
    let (busy, left): (Option<Vec<i64>>, Option<Vec<i64>>) =
        super::query_as(sql!("flows", "settle_added"))
            .bind(jobs)
            .bind(max_edges)
            .fetch_one(exec)
            .await?;
    Ok(Hinted {
        busy: busy.unwrap_or_default(),
        left: left.unwrap_or_default(),
    })
}
