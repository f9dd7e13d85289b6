//! A producer's claim-ahead buffer (`SKIPLOCK_CLAIM_AHEAD`): the jobs a claim brought back
//! beyond its free slots wait here, held by this process like started ones (in
//! `Jobs::running`, heartbeated, released at shutdown or rescued after a crash), and start in
//! claim order as slots free. How large it may grow ([`claim_ahead`], [`buffer_ahead`]), whether
//! its jobs may still start after a pause or a limit ([`buffer_may_stay`]), and letting go of
//! it on every exit of a producer run ([`BufferGuard`]). The claim loop is `super::producer`;
//! a started job's run is `super::executor`.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::producer::state::Producer;
use super::executor::spawn_job;
use super::{Jobs, Running, Shared};
use crate::queue::Job;
use crate::store::control::BufferControl;

/// How much queued work, per slot, a buffer holds at most: a job claimed ahead waits about
/// this long before it starts, so a worker never sits on much more than this of the work
/// other workers could run (long jobs are not hoarded), while short jobs are claimed in
/// batches large enough to keep every slot busy.
pub const BUFFER_WINDOW: Duration = Duration::from_millis(100);

/// The most jobs a producer of a queue of concurrency `limit` claims ahead: `setting`
/// (`SKIPLOCK_CLAIM_AHEAD`), but no more than [`BUFFER_WINDOW`] of work per slot for jobs that
/// take `run_time` on average; before any of its jobs has finished (`run_time` None), no more
/// than `limit`.
pub fn claim_ahead(setting: usize, limit: usize, run_time: Option<Duration>) -> usize {
    match run_time {
        None => setting.min(limit),
        Some(t) => {
            let per_slot = BUFFER_WINDOW.as_secs_f64() / t.as_secs_f64().max(1e-6);
            let room = (limit as f64 * per_slot).floor();
            if room >= setting as f64 {
                setting
            } else {
                room as usize
            }
        }
    }
}


/// The buffer's bound for the next claim: `ahead` (`SKIPLOCK_CLAIM_AHEAD`), or for a controlled
/// queue no more than the room its last claim reported (`room`; None: no bound).
pub fn buffer_ahead(ahead: usize, controlled: bool, room: Option<usize>) -> usize {
    match (controlled, room) {
        (true, Some(r)) => ahead.min(r),
        _ => ahead,
    }
}

/// Whether the jobs waiting in a producer's buffer may still start, given their queue's
/// control row now (`None`: none) and whether they were claimed by the limited claim
/// (`claimed_limited`: within the queue's concurrency, counted as running). A pause or a key's
/// limits send them back (the limited claim buffers nothing under a key's limits: a key's rate
/// counts a start at the claim); so does a concurrency limit set after the plain claim took
/// them, or lowered below the jobs running now.
pub fn buffer_may_stay(control: Option<BufferControl>, claimed_limited: bool) -> bool {
    match control {
        None => true,
        Some(c) => !c.paused && !c.key_limits && !c.over_limit && (claimed_limited || !c.limited),
    }
}


/// On every exit of a producer run (stopped, retired, or a panic unwinding it), the jobs
/// still in its buffer stop being held: removed from `Jobs::running`, they are the
/// claimed-but-never-started jobs the worker's shutdown, or the producer's next run, puts
/// back at once (`super::release`).
pub(super) struct BufferGuard {
    shared: Arc<Shared>,
    p: Arc<Producer>,
}

impl BufferGuard {
    pub fn new(shared: Arc<Shared>, p: Arc<Producer>) -> Self {
        BufferGuard { shared, p }
    }
}

impl Drop for BufferGuard {
    fn drop(&mut self) {
        let_go_of_buffer(&self.shared.jobs, &self.p);
    }
}

/// Empties the buffer and stops holding its jobs (they are no longer in `Jobs::running`);
/// returns how many there were. They are `running` in the database until
/// `super::release::unstarted` puts them back.
pub(super) fn let_go_of_buffer(held: &Jobs, p: &Producer) -> usize {
    let jobs: Vec<Job> = p.buffer().drain(..).collect();
    if jobs.is_empty() {
        return 0;
    }
    let mut running = held.running();
    for j in &jobs {
        if running
            .get(&j.id)
            .is_some_and(|r| r.buffered && r.attempt == j.attempt)
        {
            running.remove(&j.id);
        }
    }
    jobs.len()
}


/// Holds freshly claimed jobs: each goes into `Jobs::running` as buffered (so the heartbeat
/// covers it from now on) and into the producer's buffer, then as many as there are free
/// slots are started. `lane_order`: the claim picked in claim order (priority, scheduled_at,
/// id), and its jobs take their place in that order among those already buffered; otherwise
/// (a fair queue's round-robin pick) they go after them, so a later batch never overtakes an
/// earlier one (docs/concepts.md, "Fair queues").
pub(super) fn hold(shared: &Arc<Shared>, p: &Arc<Producer>, jobs: Vec<Job>, lane_order: bool) {
    if jobs.is_empty() {
        return;
    }
    // The metrics series once per kind of the batch (one queue), before taking the locks.
    let series: Vec<Arc<crate::metrics::JobSeries>> = {
        let mut by_kind: Vec<(&str, Arc<crate::metrics::JobSeries>)> = Vec::new();
        jobs.iter()
            .map(|j| match by_kind.iter().find(|(k, _)| *k == j.kind) {
                Some((_, s)) => s.clone(),
                None => {
                    let s = shared.report.metrics.series(&j.kind, &j.queue);
                    by_kind.push((&j.kind, s.clone()));
                    s
                }
            })
            .collect()
    };
    {
        let mut running = shared.jobs.running();
        let mut buffer = p.buffer();
        for (job, series) in jobs.into_iter().zip(series) {
            running.insert(
                job.id,
                Running {
                    attempt: job.attempt,
                    lost: CancellationToken::new(),
                    abort: None,
                    executing: false,
                    series,
                    buffered: true,
                    started_at: None,
                },
            );
            if lane_order {
                buffer_in_claim_order(&mut buffer, job);
            } else {
                buffer.push_back(job);
            }
        }
    }
    start_buffered(shared, p);
}

/// Puts `job` into `buffer` at its place in claim order (priority, scheduled_at, id: the order
/// of each claim's answer, `store::claim`), so the buffer starts what it holds in that order
/// whichever of two claims in flight answers first. Appended per answer, the jobs of a later
/// claim that answered first (lower priorities: the earlier one had locked the higher ones)
/// started before the earlier claim's even once both sat in the buffer (priority 3 before 0 in
/// a run of tests/flows.rs `released_jobs_wait_for_a_paused_queue_and_run_in_priority_order`).
/// A job that started before the earlier claim answered is not undone: docs/internals.md,
/// "Claim".
fn buffer_in_claim_order(buffer: &mut std::collections::VecDeque<Job>, job: Job) {
    let key = |j: &Job| (j.priority, j.scheduled_at, j.id);
    let at = buffer.partition_point(|b| key(b) <= key(&job));
    buffer.insert(at, job);
}

/// Starts buffered jobs, in claim order, while there are free slots. A job taken away while
/// it waited (cancelled, or rescued: the heartbeat found it gone) is dropped, not started.
pub(super) fn start_buffered(shared: &Arc<Shared>, p: &Arc<Producer>) {
    loop {
        let Ok(permit) = p.slots.clone().try_acquire_owned() else {
            return;
        };
        let Some(job) = p.buffer().pop_front() else {
            return;
        };
        let lost = {
            // Starts in place: the entry `hold` made becomes the executing one.
            let mut running = shared.jobs.running();
            match running
                .get_mut(&job.id)
                .filter(|r| r.buffered && r.attempt == job.attempt)
            {
                Some(r) if !r.lost.is_cancelled() => {
                    r.buffered = false;
                    r.executing = true;
                    // The start the limited claim counted, else now (db_clock.rs).
                    let started = job.attempted_at.unwrap_or_else(|| shared.db.clock.now());
                    r.started_at = Some(started);
                    Some((r.lost.clone(), r.series.clone(), started))
                }
                Some(_) => {
                    running.remove(&job.id);
                    None
                }
                None => None,
            }
        };
        let Some((lost, series, started)) = lost else {
            tracing::warn!(
                job.id = job.id,
                job.attempt = job.attempt,
                "job was taken away before it started (cancelled or rescued); not starting it"
            );
            continue;
        };
        spawn_job(shared, p, job, permit, (lost, series, started));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::producer::policy::{ClaimNow, next_claim};

    fn job(id: i64, priority: i16) -> Job {
        let at = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        Job {
            id,
            kind: "k".into(),
            queue: "q".into(),
            args: crate::queue::RawArgs::new("{}"),
            priority,
            attempt: 1,
            max_attempts: 25,
            scheduled_at: at,
            created_at: at,
            attempted_at: None,
            tags: Vec::new(),
            meta: Default::default(),
        }
    }

    #[test]
    fn the_buffer_starts_its_jobs_in_claim_order_whichever_claim_answered_first() {
        // Two claims in flight: the earlier one locked the job of priority 0, the later one
        // skipped it and took priorities 1 and 3, and answered first (its first job started
        // at once).
        let mut buffer = std::collections::VecDeque::new();
        for j in [job(4, 1), job(2, 3)] {
            buffer_in_claim_order(&mut buffer, j);
        }
        assert_eq!(buffer.pop_front().map(|j| j.id), Some(4));
        buffer_in_claim_order(&mut buffer, job(5, 0));
        let order: Vec<i64> = buffer.iter().map(|j| j.id).collect();
        assert_eq!(order, [5, 2]);
        // Equal priorities and times keep id order.
        for j in [job(9, 0), job(7, 0)] {
            buffer_in_claim_order(&mut buffer, j);
        }
        let order: Vec<i64> = buffer.iter().map(|j| j.id).collect();
        assert_eq!(order, [5, 7, 9, 2]);
    }

    #[test]
    fn the_buffer_holds_about_a_tenth_of_a_second_of_work_per_slot() {
        let ms = Duration::from_millis;
        // Nothing measured yet: at most the queue's concurrency.
        assert_eq!(claim_ahead(200, 10, None), 10);
        assert_eq!(claim_ahead(200, 500, None), 200);
        // Short jobs: the whole setting, whatever the concurrency.
        assert_eq!(claim_ahead(200, 10, Some(Duration::from_micros(20))), 200);
        // 20 ms jobs on 10 slots: 50 ms of work each.
        assert_eq!(claim_ahead(200, 10, Some(ms(20))), 50);
        // Jobs of a second: none ahead; a slot takes its next job when it frees.
        assert_eq!(claim_ahead(200, 10, Some(ms(1000))), 1);
        assert_eq!(claim_ahead(200, 4, Some(ms(1000))), 0);
        assert_eq!(claim_ahead(0, 10, Some(Duration::from_micros(20))), 0);
    }

    #[test]
    fn a_controlled_queue_buffers_no_more_than_its_last_claim_allowed() {
        assert_eq!(buffer_ahead(200, false, None), 200);
        // The plain claim's queue: no room is reported, the setting applies.
        assert_eq!(buffer_ahead(200, false, Some(0)), 200);
        assert_eq!(buffer_ahead(200, true, None), 200);
        assert_eq!(buffer_ahead(200, true, Some(70)), 70);
        assert_eq!(buffer_ahead(200, true, Some(500)), 200);
        // A binding limit or a key's limits: nothing ahead, as without a buffer.
        assert_eq!(buffer_ahead(200, true, Some(0)), 0);
        assert_eq!(
            next_claim(0, 0, 0, 10, buffer_ahead(200, true, Some(0)), false, true),
            ClaimNow::Wait
        );
    }

    #[test]
    fn buffered_jobs_go_back_on_a_pause_a_key_limit_or_a_limit_they_were_not_claimed_under() {
        let ctl = |paused, limited, key_limits| {
            Some(BufferControl {
                paused,
                limited,
                key_limits,
                over_limit: false,
            })
        };
        // A limit lowered below the jobs running now: they go.
        let over = Some(BufferControl {
            paused: false,
            limited: true,
            key_limits: false,
            over_limit: true,
        });
        assert!(!buffer_may_stay(over, true));
        // No control row: they stay.
        assert!(buffer_may_stay(None, false));
        assert!(buffer_may_stay(None, true));
        // Claimed within the concurrency limit: they stay while it is the only control.
        assert!(buffer_may_stay(ctl(false, true, false), true));
        // A limit set after the plain claim took them: they go.
        assert!(!buffer_may_stay(ctl(false, true, false), false));
        // A row without limits (a resumed queue): they stay.
        assert!(buffer_may_stay(ctl(false, false, false), false));
        // Paused, or a key's limits: they go, however they were claimed.
        for claimed_limited in [false, true] {
            assert!(!buffer_may_stay(ctl(true, false, false), claimed_limited));
            assert!(!buffer_may_stay(ctl(true, true, false), claimed_limited));
            assert!(!buffer_may_stay(ctl(false, true, true), claimed_limited));
            assert!(!buffer_may_stay(ctl(false, false, true), claimed_limited));
        }
    }
}
