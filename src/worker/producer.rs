//! One producer per queue: claims as many due jobs as it has free slots, spawns an executor
//! task for each, and waits for a reason to claim again (a NOTIFY, a freed slot while work
//! is waiting, or the fallback poll). A full batch means more may be waiting, so the next
//! freed slot triggers the next claim at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::handler::JobContext;
use super::outcome::{Attempt, RetryPolicy, decide};
use super::{Running, Shared, executor};
use crate::queue::Job;
use crate::queue::backoff::random_jitter;
use crate::queue::claim::claim;

/// Runs the producer of `queue` with `limit` slots until `shared.stop_claiming`.
pub(crate) async fn run(shared: Arc<Shared>, queue: String, limit: usize, wake: Arc<Notify>) {
    let slots = Arc::new(Semaphore::new(limit));
    let slot_freed = Arc::new(Notify::new());
    let stop = shared.stop_claiming.clone();
    let mut backlog = true; // try at once on start
    let mut error_delay = Duration::from_millis(100);
    let cooldown = shared.settings.fetch_cooldown;
    let mut last_claim = Instant::now() - cooldown;
    loop {
        if stop.is_cancelled() {
            break;
        }
        let mut free = slots.available_permits();
        if free > 0 && backlog {
            let since = last_claim.elapsed();
            if free < limit && since < cooldown {
                // Busy: let a few more slots free up so the next claim is a batch rather
                // than one statement per finished job.
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(cooldown - since) => {}
                }
                free = slots.available_permits();
            }
            last_claim = Instant::now();
            match claim(&shared.pool, &queue, &shared.kinds, free, &shared.worker_id).await {
                Ok(jobs) => {
                    error_delay = Duration::from_millis(100);
                    backlog = jobs.len() == free;
                    for job in jobs {
                        let permit = slots
                            .clone()
                            .try_acquire_owned()
                            .expect("free slot counted");
                        spawn_job(&shared, job, permit, slot_freed.clone(), wake.clone());
                    }
                }
                Err(e) => {
                    tracing::warn!(queue = %queue, error = %e, "claim failed; retrying in {error_delay:?}");
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(error_delay) => {}
                    }
                    error_delay = (error_delay * 2).min(Duration::from_secs(5));
                    continue;
                }
            }
            if backlog && slots.available_permits() > 0 {
                continue;
            }
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = wake.notified() => backlog = true,
            _ = slot_freed.notified(), if backlog => {}
            _ = tokio::time::sleep(shared.settings.poll_interval) => backlog = true,
        }
    }
}

fn spawn_job(
    shared: &Arc<Shared>,
    job: Job,
    permit: OwnedSemaphorePermit,
    slot_freed: Arc<Notify>,
    wake: Arc<Notify>,
) {
    let lost = CancellationToken::new();
    let ctx = JobContext {
        id: job.id,
        kind: job.kind.clone(),
        queue: job.queue.clone(),
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        pool: shared.pool.clone(),
        worker_id: shared.worker_id.clone(),
        shutdown: shared.shutdown.clone(),
        lost: lost.clone(),
    };
    shared.running.lock().unwrap().insert(
        job.id,
        Running {
            attempt: job.attempt,
            lost,
            abort: None,
            executing: true,
        },
    );
    let sh = shared.clone();
    let id = job.id;
    let handle = tokio::spawn(async move {
        let _permit = permit;
        let handler = sh.registry.get(&job.kind).cloned();
        // A debug-level span: at the default level it costs nothing per job; warnings below
        // carry the job's fields themselves.
        let span = tracing::debug_span!("job", job.id = job.id, job.kind = %job.kind,
            job.queue = %job.queue, job.attempt = job.attempt);
        let attempt = {
            use tracing::Instrument;
            executor::execute(handler, ctx, job.args, sh.settings.job_timeout)
                .instrument(span)
                .await
        };
        match &attempt {
            Attempt::Returned(Ok(_)) => {}
            Attempt::Returned(Err(e)) => tracing::warn!(job.id = job.id, job.kind = %job.kind,
                job.attempt = job.attempt, error = %e.message, "job failed"),
            other => tracing::warn!(job.id = job.id, job.kind = %job.kind,
                job.attempt = job.attempt, outcome = ?other, "job did not finish normally"),
        }
        let policy = RetryPolicy {
            unit: sh.settings.backoff_unit,
            max: sh.settings.backoff_max,
        };
        let ack = decide(
            job.id,
            job.attempt,
            job.max_attempts,
            attempt,
            chrono::Utc::now(),
            policy,
            random_jitter(),
        );
        if let Some(r) = sh.running.lock().unwrap().get_mut(&job.id) {
            r.executing = false;
        }
        wake_when_due(&ack, sh.settings.poll_interval, wake);
        if sh.acks.send(ack).await.is_err() {
            tracing::error!(
                job.id = job.id,
                "completer gone; the rescuer will return this job"
            );
        }
        drop(_permit);
        slot_freed.notify_one();
    });
    if let Some(r) = shared.running.lock().unwrap().get_mut(&id) {
        r.abort = Some(handle.abort_handle());
    }
}

/// A retry or snooze due before the next poll would wait up to a poll interval; instead,
/// wake this queue's producer when it is due (plus a little for the ack to be written).
/// Jobs scheduled by other processes still rely on NOTIFY (due now) or the poll.
fn wake_when_due(ack: &crate::queue::ack::Ack, poll: Duration, wake: Arc<Notify>) {
    if ack.state != crate::queue::JobState::Available || ack.give_back && ack.scheduled_at.is_none()
    {
        return;
    }
    let Some(at) = ack.scheduled_at else { return };
    let wait =
        (at - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO) + Duration::from_millis(5);
    if wait >= poll {
        return;
    }
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        wake.notify_one();
    });
}
