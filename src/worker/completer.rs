//! Batches acknowledgements: collects outcomes for a few milliseconds (or up to a batch
//! size) and writes them in one fenced statement. A failed write is retried with backoff;
//! the channel's capacity gives back-pressure meanwhile. Drains on shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::queue::ack::{Ack, ack_many};

/// The most acks written in one statement.
pub const MAX_BATCH: usize = 2000;
/// Capacity of the ack channel (back-pressure on executors beyond it).
pub const CHANNEL_CAPACITY: usize = 20_000;
/// How long a draining completer keeps retrying a failed write before it gives up (the
/// jobs stay `running` and the rescuer returns them).
pub const DRAIN_RETRY_LIMIT: Duration = Duration::from_secs(30);

/// Runs until `stop`, then writes whatever is still queued and returns. The worker stops it
/// only after every executor has finished or been aborted, so nothing is sent afterwards.
pub(crate) async fn run(shared: Arc<Shared>, mut rx: mpsc::Receiver<Ack>, stop: CancellationToken) {
    let mut buf: Vec<Ack> = Vec::new();
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
        flush(&shared, &mut buf, stop.is_cancelled()).await;
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
        flush(&shared, &mut buf, true).await;
    }
}

async fn flush(shared: &Shared, buf: &mut Vec<Ack>, draining: bool) {
    if buf.is_empty() {
        return;
    }
    let started = Instant::now();
    let mut delay = Duration::from_millis(50);
    loop {
        match ack_many(&shared.pool, buf).await {
            Ok(written) => {
                if written.len() != buf.len() {
                    let written: std::collections::HashSet<i64> = written.into_iter().collect();
                    for a in buf.iter().filter(|a| !written.contains(&a.id)) {
                        tracing::warn!(
                            job.id = a.id,
                            job.attempt = a.attempt,
                            "ack ignored: the job is no longer running this attempt (rescued, cancelled or retried)"
                        );
                    }
                }
                let mut running = shared.running.lock().unwrap();
                for a in buf.iter() {
                    if running.get(&a.id).is_some_and(|r| r.attempt == a.attempt) {
                        running.remove(&a.id);
                    }
                }
                drop(running);
                shared.acked.notify_waiters();
                buf.clear();
                return;
            }
            Err(e) => {
                if draining && started.elapsed() > DRAIN_RETRY_LIMIT {
                    tracing::error!(error = %e, jobs = buf.len(),
                        "could not write acks before exit; the rescuer will return these jobs");
                    buf.clear();
                    return;
                }
                tracing::warn!(error = %e, jobs = buf.len(), "writing acks failed; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}
