//! The Prometheus exporter: the recorder the worker's series (`skiplock::metrics`, recorded
//! through the `metrics` facade) go to, the database's part of a scrape ([`render`]) and the
//! `/metrics` endpoint a worker process serves ([`serve`]) on the console's HTTP server
//! ([`crate::http`]).

pub mod render;
pub mod serve;

use std::sync::OnceLock;

use metrics::Unit;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use skiplock::metrics::{
    ACK_BATCH, BATCH_BUCKETS, CLAIM_BATCH, DURATION_BUCKETS, ENQUEUE_REFUSED, JOB_DURATION,
    JOBS_FINISHED, RESCUED,
};
use skiplock_workflows::metrics::{FETCHES, PACK_DURATION, PACKS};

use crate::error::{Error, Result};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder for this process (once; later calls return the same
/// handle) and describes every series. Fails when another recorder is already installed.
pub fn install() -> Result<PrometheusHandle> {
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let fail = |e: metrics_exporter_prometheus::BuildError| {
        Error::Other(format!("installing the metrics recorder: {e}"))
    };
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), DURATION_BUCKETS)
        .map_err(fail)?
        .set_buckets_for_metric(Matcher::Suffix("_batch_size".into()), BATCH_BUCKETS)
        .map_err(fail)?
        .install_recorder()
        .map_err(fail)?;
    describe();
    Ok(HANDLE.get_or_init(|| handle).clone())
}

/// The `# HELP` text of every series the recorder holds.
fn describe() {
    use metrics::{describe_counter, describe_histogram};
    describe_counter!(
        JOBS_FINISHED,
        Unit::Count,
        "Job attempts finished by this worker, by kind, queue and outcome (completed, retried, discarded, cancelled, snoozed, released, lost)."
    );
    describe_histogram!(
        JOB_DURATION,
        Unit::Seconds,
        "How long handlers ran, by kind."
    );
    describe_histogram!(
        CLAIM_BATCH,
        Unit::Count,
        "Jobs per claim statement (0: the claim found none)."
    );
    describe_histogram!(ACK_BATCH, Unit::Count, "Acks per write of the ack writer.");
    describe_counter!(
        RESCUED,
        Unit::Count,
        "Running jobs this worker's rescuer returned (their worker stopped sending heartbeats), by kind and new state."
    );
    describe_counter!(
        FETCHES,
        Unit::Count,
        "HTTP requests of the fetch workflow by status code (error: no response)."
    );
    describe_counter!(PACKS, Unit::Count, "Packs written.");
    describe_counter!(
        ENQUEUE_REFUSED,
        Unit::Count,
        "Enqueue statements of this process refused because their queue was at its admission limit (SK429), by queue."
    );
    describe_histogram!(
        PACK_DURATION,
        Unit::Seconds,
        "How long a pack took, from taking the host's lock to the commit."
    );
}
