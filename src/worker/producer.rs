//! One producer per queue: claims as many due jobs as it has free slots, spawns an executor
//! task for each, and waits for a reason to claim again (a NOTIFY, a freed slot while work
//! is waiting, or the fallback poll). A full batch means more may be waiting, so the next
//! freed slot triggers the next claim at once. A failed claim (database down) is retried
//! with a capped backoff; the producer itself runs under supervision (`super::supervisor`),
//! and a producer of a queue discovered at run time retires once the queue stays empty.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::faults::{self, Point};
use super::handler::JobContext;
use super::outcome::{Attempt, RetryPolicy, decide};
use super::{Running, Shared, executor};
use crate::db::outage::Backoff;
use crate::queue::Job;
use crate::queue::backoff::random_jitter;
use crate::store::claim::{ClaimParams, claim};
use crate::store::limits::claim_limited;

/// First and longest wait between two failed claims.
pub const CLAIM_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(5));
/// A producer of a discovered queue retires after this many poll intervals without work.
pub const RETIRE_AFTER_POLLS: u32 = 30;

/// What outlives one run of a producer: its slots (running jobs hold permits), its wake-up
/// signals, and whether it is claiming one job at a time.
pub(crate) struct Producer {
    pub queue: String,
    pub limit: usize,
    pub wake: Arc<Notify>,
    pub slots: Arc<Semaphore>,
    pub slot_freed: Arc<Notify>,
    /// Claiming one job per statement (after a failure), so a failure can be blamed on it.
    pub one_at_a_time: AtomicBool,
    /// Retire after this long without work (queues discovered at run time only).
    pub retire_after: Option<Duration>,
}

impl Producer {
    pub fn new(
        queue: &str,
        limit: usize,
        wake: Arc<Notify>,
        retire_after: Option<Duration>,
    ) -> Self {
        Producer {
            queue: queue.to_string(),
            limit,
            wake,
            slots: Arc::new(Semaphore::new(limit)),
            slot_freed: Arc::new(Notify::new()),
            one_at_a_time: AtomicBool::new(false),
            retire_after,
        }
    }
}

/// Why a producer run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// The worker stopped claiming.
    Stopped,
    /// The queue had no work for `retire_after`.
    Retired,
}

/// Runs the producer until `shared.stop_claiming` (or retirement). `careful`: claim one job
/// per statement for the first `limit` jobs (set after a failed run, so that if a row makes
/// the producer fail again, it fails alone).
pub(crate) async fn run(shared: Arc<Shared>, p: Arc<Producer>, careful: bool) -> Exit {
    let stop = shared.stop_claiming.clone();
    let limit = p.limit;
    let slots = &p.slots;
    let mut careful_left = if careful { limit } else { 0 };
    p.one_at_a_time.store(careful_left > 0, Ordering::Relaxed);
    let mut backlog = true; // try at once on start
    let mut backoff = Backoff::new(CLAIM_BACKOFF.0, CLAIM_BACKOFF.1);
    let cooldown = shared.settings.fetch_cooldown;
    let mut last_claim = Instant::now() - cooldown;
    let mut last_work = Instant::now();
    // Whether the queue has limits or is paused (skiplock.queues): then every claim goes
    // through skiplock._claim_limited; otherwise the plain claim, which says so by coming
    // back empty (it never claims from a controlled queue).
    let mut controlled = false;
    // A limit held jobs back: claim again when one of ours finishes, and at `wait_until`.
    let mut held_back = false;
    let mut wait_until: Option<chrono::DateTime<chrono::Utc>> = None;
    loop {
        if stop.is_cancelled() {
            return Exit::Stopped;
        }
        let mut free = slots.available_permits();
        if free > 0 && backlog {
            let since = last_claim.elapsed();
            if free < limit && since < cooldown {
                // Busy: let a few more slots free up so the next claim is a batch rather
                // than one statement per finished job.
                tokio::select! {
                    _ = stop.cancelled() => return Exit::Stopped,
                    _ = tokio::time::sleep(cooldown - since) => {}
                }
                free = slots.available_permits();
            }
            let want = if careful_left > 0 { 1 } else { free };
            last_claim = Instant::now();
            let params = ClaimParams {
                queue: &p.queue,
                kinds: &shared.kinds,
                limit: want,
                worker: &shared.worker_id,
            };
            match claim_any(&shared.pool, params, &mut controlled).await {
                Ok((jobs, held, until)) => {
                    shared.metrics.claimed(jobs.len());
                    backoff.reset();
                    backlog = jobs.len() == want;
                    held_back = held && !backlog;
                    wait_until = until;
                    if !jobs.is_empty() {
                        faults::hit(&shared.worker_id, Point::ProducerClaimed);
                        last_work = Instant::now();
                        careful_left = careful_left.saturating_sub(jobs.len());
                    }
                    for job in jobs {
                        let permit = slots
                            .clone()
                            .try_acquire_owned()
                            .expect("free slot counted");
                        spawn_job(&shared, job, permit, p.slot_freed.clone(), p.wake.clone());
                    }
                    if careful_left == 0 {
                        p.one_at_a_time.store(false, Ordering::Relaxed);
                    }
                }
                Err(e) => {
                    shared.db_failed(&e);
                    let delay = backoff.next_delay();
                    tracing::warn!(queue = %p.queue, error = %e, "claim failed; retrying in {delay:?}");
                    tokio::select! {
                        _ = stop.cancelled() => return Exit::Stopped,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    continue;
                }
            }
            if backlog && slots.available_permits() > 0 {
                continue;
            }
        }
        if slots.available_permits() < limit {
            last_work = Instant::now();
        }
        if p.retire_after
            .is_some_and(|after| last_work.elapsed() >= after)
        {
            return Exit::Retired;
        }
        let nap = limit_nap(
            shared.settings.poll_interval,
            wait_until,
            chrono::Utc::now(),
        );
        tokio::select! {
            _ = stop.cancelled() => return Exit::Stopped,
            _ = p.wake.notified() => backlog = true,
            _ = p.slot_freed.notified(), if backlog => {}
            _ = p.slot_freed.notified(), if held_back && !backlog => {
                // Our job's ack is written a moment later; until then it still counts.
                tokio::time::sleep(ACK_SETTLE).await;
                backlog = true;
            }
            _ = tokio::time::sleep(nap) => backlog = true,
        }
    }
}

/// How long a finished job's ack takes to be written, about (the completer batches for a
/// couple of milliseconds): a producer held back by a limit waits this long after one of its
/// jobs finished before it claims again, so the job no longer counts as running.
const ACK_SETTLE: Duration = Duration::from_millis(20);

/// The plain claim, or the limited one for a controlled queue (`controlled` tracks which
/// applies). Returns the jobs, whether a limit or a pause may have held jobs back, and when
/// a job held back by a key's rate may start.
async fn claim_any(
    pool: &crate::store::Pool,
    params: ClaimParams<'_>,
    controlled: &mut bool,
) -> crate::Result<(Vec<Job>, bool, Option<chrono::DateTime<chrono::Utc>>)> {
    if !*controlled {
        let jobs = claim(pool, params).await?;
        if !jobs.is_empty() || params.limit == 0 || params.kinds.is_empty() {
            return Ok((jobs, false, None));
        }
    }
    let got = claim_limited(pool, params).await?;
    *controlled = got.controlled;
    Ok((got.jobs, got.controlled, got.wait_until))
}

/// How long an idle producer waits at most before claiming again: the poll interval, or
/// less when a job held back by a key's rate may start sooner (a few ms after it may).
pub(crate) fn limit_nap(
    poll: Duration,
    wait_until: Option<chrono::DateTime<chrono::Utc>>,
    now: chrono::DateTime<chrono::Utc>,
) -> Duration {
    match wait_until {
        Some(at) => {
            ((at - now).to_std().unwrap_or(Duration::ZERO) + Duration::from_millis(2)).min(poll)
        }
        None => poll,
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
        pool: shared.handler_pool.clone(),
        worker_id: shared.worker_id.clone(),
        shutdown: shared.shutdown.clone(),
        lost: lost.clone(),
    };
    let series = shared.metrics.series(&job.kind, &job.queue);
    shared.running().insert(
        job.id,
        Running {
            attempt: job.attempt,
            lost,
            abort: None,
            executing: true,
            series: series.clone(),
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
        let began = Instant::now();
        let attempt = {
            use tracing::Instrument;
            executor::execute(handler, ctx, job.args, sh.settings.job_timeout)
                .instrument(span)
                .await
        };
        series.ran(began.elapsed());
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
        if let Some(r) = sh.running().get_mut(&job.id) {
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
    if let Some(r) = shared.running().get_mut(&id) {
        r.abort = Some(handle.abort_handle());
    }
}

/// A retry or snooze due before the next poll would wait up to a poll interval; instead,
/// wake this queue's producer when it is due (plus a little for the ack to be written).
/// Jobs scheduled by other processes still rely on NOTIFY (due now) or the poll.
fn wake_when_due(ack: &crate::store::ack::Ack, poll: Duration, wake: Arc<Notify>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limited_producer_naps_until_the_next_allowed_start() {
        let poll = Duration::from_secs(1);
        let now = chrono::Utc::now();
        assert_eq!(limit_nap(poll, None, now), poll);
        let soon = now + chrono::TimeDelta::milliseconds(300);
        assert_eq!(limit_nap(poll, Some(soon), now), Duration::from_millis(302));
        let late = now + chrono::TimeDelta::seconds(30);
        assert_eq!(limit_nap(poll, Some(late), now), poll);
        let past = now - chrono::TimeDelta::seconds(3);
        assert_eq!(limit_nap(poll, Some(past), now), Duration::from_millis(2));
    }
}
