//! The benchmark's flow figure (docs/flows.md, "What it costs"): a fan-out and fan-in of
//! [`FLOW_JOBS`] noop jobs — a root, its children waiting for it, one job waiting for every
//! child — drained by the same worker as a plain drain of the same count in the same run. The
//! flow pays for the releases: the root's ack and the slices after it release every child
//! (one more write of each), and each child's ack resolves its edge to the fan-in and counts
//! down the fan-in's wait. Reported beside it: the release ceiling, what any flow costs that
//! releases each child with one write and keeps no count at all, and the flow's two halves
//! drained apart ([`Shape`]), which say where the flow's own cost lies.

use serde_json::json;

use super::meter::Meter;
use super::{BenchOptions, DrainRun, drain, fill_noop, store};
use skiplock::Pool as PgPool;
use skiplock::error::Result;
use skiplock::queue::{JobState, NewJob};
use std::time::Duration;

/// Jobs of the flow (and of its plain drain).
pub const FLOW_JOBS: usize = 10_000;

/// The plain drain of [`FLOW_JOBS`] noop jobs: the flow's baseline.
pub(crate) async fn plain_drain(
    url: &str,
    o: &BenchOptions,
    monitor: &PgPool,
    meter: &Meter<'_>,
) -> Result<DrainRun> {
    fill_noop(monitor, FLOW_JOBS).await?;
    drain::in_process(url, o, FLOW_JOBS, meter).await
}

/// Which dependencies the flow drain's jobs have: the whole flow (the figure), or one of its
/// two halves, which the report shows apart so that a run says which half costs what
/// (docs/performance.md, "Flows").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A root, its children waiting for it, one job waiting for every child.
    Whole,
    /// The root and its children; the last job is due from the start.
    OutOnly,
    /// The children are due from the start; the last job waits for all of them.
    InOnly,
}

/// The flow of [`FLOW_JOBS`] noop jobs in `shape`, enqueued before the clock starts (as the
/// plain drain's jobs are).
pub(crate) async fn fan_drain(
    url: &str,
    o: &BenchOptions,
    monitor: &PgPool,
    meter: &Meter<'_>,
    shape: Shape,
) -> Result<DrainRun> {
    let root = skiplock::enqueue_job(monitor, &NewJob::new("noop", json!({})))
        .await?
        .id;
    let args = vec![json!({}); FLOW_JOBS - 2];
    let roots: &[i64] = if shape == Shape::InOnly { &[] } else { &[root] };
    let children = skiplock::enqueue_many(
        monitor,
        skiplock::ManyJobs {
            kind: "noop",
            args: &args,
            queue: "default",
            depends_on: roots,
            ..Default::default()
        },
    )
    .await?;
    let last = NewJob::new("noop", json!({}));
    let last = if shape == Shape::OutOnly {
        last
    } else {
        last.depends_on(children)
    };
    skiplock::enqueue_job(monitor, &last).await?;
    store::analyze_jobs(monitor).await?;
    drain::in_process(url, o, FLOW_JOBS, meter).await
}

/// The release ceiling: the same count of noop jobs, the first due and every other waiting,
/// released once the first has completed by plain UPDATEs of [`RELEASE_SLICE`] jobs each, one
/// after another (sql/bench/release_slice.sql), beside the same worker. The least a flow can
/// cost while the claim reads only `available` rows: one write per released job, and no edge
/// or count read or written. An upper bound, not a flow: the last job does not wait for the
/// others (docs/performance.md, "Flows").
pub(crate) async fn release_ceiling(
    url: &str,
    o: &BenchOptions,
    monitor: &PgPool,
    meter: &Meter<'_>,
) -> Result<DrainRun> {
    fill_noop(monitor, FLOW_JOBS).await?;
    let (first, last) = store::hold_back_all_but_first(monitor).await?;
    store::vacuum_jobs(monitor).await?;
    let release = async move {
        while skiplock::admin::get_job(monitor, first).await?.state != JobState::Completed {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut from = first + 1;
        while from <= last {
            store::release_slice(monitor, from, from + RELEASE_SLICE - 1).await?;
            from += RELEASE_SLICE;
        }
        Ok(())
    };
    drain::in_process_beside(url, o, FLOW_JOBS, meter, release).await
}

/// Jobs per statement of the release ceiling: as many as a worker's slice of a flow's
/// releases (`skiplock::worker`'s settling slice, src/worker/acks.rs).
const RELEASE_SLICE: i64 = 1000;
