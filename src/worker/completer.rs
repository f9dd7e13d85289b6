//! Batches acknowledgements: collects outcomes for a few milliseconds (or up to a batch
//! size) and writes them in one fenced statement. A failed write is retried with backoff;
//! the channel's capacity gives back-pressure meanwhile, and the acks stay pending through
//! a database outage of any length (the heartbeat keeps their jobs alive). Drains on
//! shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::faults::{self, Point};
use crate::db::outage::Backoff;
use crate::metrics::Finish;
use crate::store::ack::{Ack, ack_many};

/// The most acks written in one statement.
pub const MAX_BATCH: usize = 2000;
/// Capacity of the ack channel (back-pressure on executors beyond it).
pub const CHANNEL_CAPACITY: usize = 20_000;
/// First and longest wait between two failed writes (pending acks are kept meanwhile).
pub const ACK_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(5));
/// How long a draining completer keeps retrying a failed write before it gives up (the
/// jobs stay `running` and the rescuer returns them).
pub const DRAIN_RETRY_LIMIT: Duration = Duration::from_secs(30);

/// What outlives one run of the completer: the channel and the acks not yet written.
pub(crate) struct Completer {
    rx: mpsc::Receiver<Ack>,
    buf: Vec<Ack>,
}

impl Completer {
    pub fn new(rx: mpsc::Receiver<Ack>) -> Self {
        Completer {
            rx,
            buf: Vec::new(),
        }
    }
}

/// Runs until `stop`, then writes whatever is still queued and returns. The worker stops it
/// only after every executor has finished or been aborted, so nothing is sent afterwards.
/// If a run fails, the supervisor starts another on the same `state`: acks that were being
/// written are still in its buffer.
pub(crate) async fn run(
    shared: Arc<Shared>,
    state: Arc<tokio::sync::Mutex<Completer>>,
    stop: CancellationToken,
) -> crate::error::Result<()> {
    let mut guard = state.lock().await;
    let Completer { rx, buf } = &mut *guard;
    loop {
        if buf.is_empty() {
            tokio::select! {
                a = rx.recv() => match a {
                    Some(a) => buf.push(a),
                    None => break,
                },
                _ = stop.cancelled() => break,
            }
        }
        let deadline = Instant::now() + shared.settings.ack_delay;
        while buf.len() < MAX_BATCH {
            tokio::select! {
                a = rx.recv() => match a {
                    Some(a) => buf.push(a),
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        flush(&shared, buf, &stop).await;
    }
    // Drain: everything still in the channel, in batches.
    loop {
        while buf.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(a) => buf.push(a),
                Err(_) => break,
            }
        }
        if buf.is_empty() {
            break;
        }
        flush(&shared, buf, &stop).await;
    }
    Ok(())
}

/// Writes `buf`, retrying until it succeeds; once `stop` is cancelled, for at most
/// [`DRAIN_RETRY_LIMIT`] (so a worker stopping during an outage still exits).
async fn flush(shared: &Shared, buf: &mut Vec<Ack>, stop: &CancellationToken) {
    if buf.is_empty() {
        return;
    }
    let mut drain_started: Option<Instant> = None;
    let mut backoff = Backoff::new(ACK_BACKOFF.0, ACK_BACKOFF.1);
    loop {
        faults::hit(&shared.worker_id, Point::CompleterFlush);
        match ack_many(&shared.pool, buf).await {
            Ok(written) => {
                shared.metrics.acked(buf.len());
                // The ids the database accepted; `None`: all of them (the usual case).
                let partial: Option<std::collections::HashSet<i64>> =
                    (written.len() != buf.len()).then(|| written.into_iter().collect());
                if let Some(written) = &partial {
                    for a in buf.iter().filter(|a| !written.contains(&a.id)) {
                        tracing::warn!(
                            job.id = a.id,
                            job.attempt = a.attempt,
                            "ack ignored: the job is no longer running this attempt (rescued, cancelled or retried)"
                        );
                    }
                }
                let mut running = shared.running();
                for a in buf.iter() {
                    if let Some(r) = running.get(&a.id).filter(|r| r.attempt == a.attempt) {
                        let ok = partial.as_ref().is_none_or(|w| w.contains(&a.id));
                        // Still executing: released at shutdown, its handler never returned.
                        r.series
                            .finished(Finish::of(a.state, a.give_back, r.executing, ok));
                        running.remove(&a.id);
                    }
                }
                drop(running);
                buf.clear();
                return;
            }
            Err(e) => {
                shared.db_failed(&e);
                if stop.is_cancelled() {
                    drain_started.get_or_insert_with(Instant::now);
                }
                if drain_started.is_some_and(|t| t.elapsed() > DRAIN_RETRY_LIMIT) {
                    tracing::error!(error = %e, jobs = buf.len(),
                        "could not write acks before exit; the rescuer will return these jobs");
                    buf.clear();
                    return;
                }
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, jobs = buf.len(), "writing acks failed; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
            }
        }
    }
}
