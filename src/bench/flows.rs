//! The benchmark's flow figure (docs/flows.md, "What it costs"): a fan-out and fan-in of
//! [`FLOW_JOBS`] noop jobs — a root, its children waiting for it, one job waiting for every
//! child — drained by the same worker as a plain drain of the same count in the same run. The
//! flow pays for the releases: the root's ack and the slices after it release every child
//! (one more write of each), and each child's ack resolves its edge to the fan-in and counts
//! down the fan-in's wait.

use serde_json::json;

use super::meter::Meter;
use super::{BenchOptions, DrainRun, drain, fill_noop, store};
use skiplock::Pool as PgPool;
use skiplock::error::Result;
use skiplock::queue::NewJob;

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

/// The fan-out and fan-in of [`FLOW_JOBS`] noop jobs, enqueued before the clock starts (as
/// the plain drain's jobs are).
pub(crate) async fn fan_drain(
    url: &str,
    o: &BenchOptions,
    monitor: &PgPool,
    meter: &Meter<'_>,
) -> Result<DrainRun> {
    let root = skiplock::enqueue_job(monitor, &NewJob::new("noop", json!({})))
        .await?
        .id;
    let args = vec![json!({}); FLOW_JOBS - 2];
    let children = skiplock::enqueue_many(
        monitor,
        skiplock::ManyJobs {
            kind: "noop",
            args: &args,
            queue: "default",
            depends_on: &[root],
            ..Default::default()
        },
    )
    .await?;
    skiplock::enqueue_job(
        monitor,
        &NewJob::new("noop", json!({})).depends_on(children),
    )
    .await?;
    store::analyze_jobs(monitor).await?;
    drain::in_process(url, o, FLOW_JOBS, meter).await
}
