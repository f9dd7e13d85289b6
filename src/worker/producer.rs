//! One producer per queue, its claim loop: claims due jobs for its free slots plus a bounded
//! buffer (`SKIPLOCK_CLAIM_AHEAD`, `super::buffer`), from which each job starts on its own
//! task as a slot frees (`super::executor`), and claims the next batch while the current one
//! runs, so slots do not sit empty for a claim's round trip. A full batch means more may be
//! waiting, so the producer claims again as the buffer runs low; otherwise it waits for a
//! reason to claim (a NOTIFY, or the fallback poll). A failed claim (database down) is retried
//! with a capped backoff while buffered jobs keep being started; the producer itself runs
//! under supervision (`super::supervisor`), and a producer of a queue discovered at run time
//! retires once the queue stays empty.
//!
//! Inserts notify only queues a producer waits on (`skiplock.waiting`): a producer whose
//! claim came back short registers, then claims once more (a job inserted before the
//! registration was visible is found by that claim), and refreshes its registration at each
//! poll; while its claims come back full it is not waiting, and unregisters.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use super::buffer::{
    BufferGuard, buffer_ahead, buffer_may_stay, claim_ahead, hold, let_go_of_buffer,
    start_buffered,
};
use super::cursor::Answer;
use super::faults::{self, Point};
use super::{Shared, release};
use crate::db::outage::Backoff;
use crate::error::Result;
use crate::store::claim::Claimed;
use crate::store::claim::{ClaimParams, LaneReads};
use crate::store::control::{buffer_control, claim_any};
use crate::store::notify::{waiting_add, waiting_remove};

pub(crate) mod policy;
pub(crate) mod state;
pub(crate) use policy::limit_nap;
pub(crate) use state::Producer;
pub use policy::{ClaimNow, look_again, next_claim, next_claim_cap};

/// First and longest wait between two failed claims.
pub const CLAIM_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(5));
/// A producer of a discovered queue retires after this many poll intervals without work.
pub const RETIRE_AFTER_POLLS: u32 = 30;
/// The most claim statements one producer has in flight (except after a failure, or while a
/// limit holds jobs back): the next claim is sent before the previous one's commit is back,
/// so the database is not left idle between them (docs/internals.md). SKIP LOCKED keeps the two
/// claims apart; a limited queue's claims wait for each other on the queue's row.
pub const MAX_CLAIMS_IN_FLIGHT: usize = 2;

/// Why a producer run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// The worker stopped claiming.
    Stopped,
    /// The queue had no work for `retire_after`.
    Retired,
}

/// A claim in flight: answers with how many jobs it asked for, the [`run`] loop's count of
/// wake-ups when it started, and what came back.
type ClaimFuture = BoxFuture<'static, (usize, u64, Result<Claimed>)>;

/// How long a producer's claims must have come back full before it stops being registered
/// as waiting (`skiplock.waiting`). Every registration and removal is a row written and
/// deleted, and while Postgres cannot vacuum each one leaves a version that every insert's
/// wake-up check (`skiplock._notify_inserted`) steps over; a queue whose claims alternate
/// between full and short would write them several times a second.
const UNREGISTER_AFTER: Duration = Duration::from_secs(1);

/// Runs the producer until `shared.stop.claiming` (or retirement). `careful`: claim one job
/// per statement for the first `limit` jobs (set after a failed run, so that if a row makes
/// the producer fail again, it fails alone). Each turn of the loop settles what waits for no
/// claim in flight, starts buffered jobs, sends a claim if one is due, then waits for the next
/// event; [`ClaimLoop`] holds the state and has one method per event.
pub(crate) async fn run(shared: Arc<Shared>, p: Arc<Producer>, careful: bool) -> Exit {
    let _guard = BufferGuard::new(shared.clone(), p.clone());
    let mut l = ClaimLoop::new(shared, p, careful);
    loop {
        if l.stop.is_cancelled() {
            l.on_stop().await;
            return Exit::Stopped;
        }
        l.settle().await;
        start_buffered(&l.shared, &l.p);
        let cooldown_at = l.maybe_claim();
        if l.retire_if_due().await {
            return Exit::Retired;
        }
        let poll = limit_nap(
            l.shared.settings.poll_interval,
            l.wait_until,
            l.held_back && l.listens,
            chrono::Utc::now(),
        );
        tokio::select! {
            _ = l.stop.cancelled() => {}
            Some((want, started_at, r)) = l.inflight.next(), if !l.inflight.is_empty() => {
                l.on_answer(want, started_at, r).await;
            }
            _ = l.p.wake.notified() => l.on_wake(),
            _ = l.p.slot_freed.notified() => l.on_slot_freed(),
            _ = sleep_until_some(l.settle_at), if l.settle_at.is_some() => l.on_settled(),
            _ = sleep_until_some(l.retry_at), if l.retry_at.is_some() => l.on_retry_due(),
            _ = l.shared.db.availability.back(), if l.retry_at.is_some() => l.on_retry_due(),
            _ = sleep_until_some(cooldown_at), if cooldown_at.is_some() => {}
            _ = tokio::time::sleep(poll) => l.on_poll(),
        }
    }
}

/// Sleeps until `at` (the `if` guard of the select arm makes sure it is set).
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    tokio::time::sleep_until(at.unwrap_or_else(tokio::time::Instant::now)).await
}

/// The state of one run of a producer's claim loop ([`run`]).
struct ClaimLoop {
    shared: Arc<Shared>,
    p: Arc<Producer>,
    stop: CancellationToken,
    /// Jobs still to claim one per statement (see [`run`]'s `careful`).
    careful_left: usize,
    /// Claim when a claim is due: try at once on start.
    backlog: bool,
    /// Wake-ups, slots freed and polls so far: a claim that started before the latest one may
    /// not have seen what it announced (a job inserted, a slot freed after the claim's
    /// snapshot), so an empty answer from it does not mean the queue is drained.
    wakes: u64,
    backoff: Backoff,
    /// The most jobs a claim asks for while claims are being refused ([`next_claim_cap`]).
    claim_cap: Option<usize>,
    /// A failed claim: the next one waits until then.
    retry_at: Option<tokio::time::Instant>,
    last_claim: Instant,
    last_work: Instant,
    inflight: FuturesUnordered<ClaimFuture>,
    /// Jobs asked for by the claims in flight (see `next_claim`: with a buffer they count as
    /// buffered, without one as slots already asked for).
    inflight_want: usize,
    /// Registered in skiplock.waiting (as far as this run knows); `register`: (re)register
    /// before the next claim.
    waiting: bool,
    register: bool,
    /// Since when its claims have come back full without a short one (see UNREGISTER_AFTER).
    busy_since: Option<Instant>,
    /// Whether the queue has limits or is paused (skiplock.queues): then its claim goes
    /// through skiplock._claim_limited, which gives the buffer only part of the room a
    /// concurrency limit leaves (a buffered job counts against it without running) and
    /// nothing under a key's limits.
    controlled: bool,
    /// For a controlled queue: how many jobs its last claim said the buffer may take at most
    /// (None: no bound). 0 while a key's limits apply or the concurrency limit binds: then the
    /// producer claims for free slots only, as without a buffer.
    buffer_room: Option<usize>,
    /// A limit held jobs back: claim again when one of ours finishes, and at `wait_until`.
    held_back: bool,
    /// A wake-up or a poll while jobs wait in the buffer: ask whether the queue was paused or
    /// limited meanwhile (a claim would say so, but a full buffer sends none; see
    /// `buffer_may_stay`).
    check_control: bool,
    /// Buffered jobs let go of because they must not start (see `buffer_may_stay`, and the
    /// plain claim's jobs once the queue became controlled): put them back once no claim is
    /// in flight (a claim in flight may have committed jobs nobody holds yet, which the
    /// release must not take).
    put_back: bool,
    /// When to claim again after one of our jobs freed a slot of a held-back queue.
    settle_at: Option<tokio::time::Instant>,
    /// When a job held back by a key's rate may start (or, the claim's own clock: claim again
    /// at once). Cleared once the claim it asked for is sent.
    wait_until: Option<chrono::DateTime<chrono::Utc>>,
    /// The worker LISTENs for wake-ups (a session pool, or `SKIPLOCK_LISTEN_URL`): a producer
    /// held back by a key's rate may then sleep until its next start.
    listens: bool,
}

impl ClaimLoop {
    fn new(shared: Arc<Shared>, p: Arc<Producer>, careful: bool) -> Self {
        let careful_left = if careful { p.limit } else { 0 };
        p.one_at_a_time.store(careful_left > 0, Ordering::Relaxed);
        let stop = shared.stop.claiming.clone();
        let cooldown = shared.settings.fetch_cooldown;
        let listens = shared.db.pool.mode() == crate::store::PoolMode::Session
            || shared.settings.listen_url.is_some();
        ClaimLoop {
            shared,
            p,
            stop,
            careful_left,
            backlog: true,
            wakes: 0,
            backoff: Backoff::new(CLAIM_BACKOFF.0, CLAIM_BACKOFF.1),
            claim_cap: None,
            retry_at: None,
            last_claim: Instant::now() - cooldown,
            last_work: Instant::now(),
            inflight: FuturesUnordered::new(),
            inflight_want: 0,
            waiting: false,
            register: false,
            busy_since: None,
            controlled: false,
            buffer_room: None,
            held_back: false,
            check_control: false,
            put_back: false,
            settle_at: None,
            wait_until: None,
            listens,
        }
    }

    /// Stopping: a claim in flight may have committed, so its answer is awaited; its jobs are
    /// then released with the rest of the unstarted ones.
    async fn on_stop(&mut self) {
        while self.inflight.next().await.is_some() {}
    }

    /// What waits for no claim in flight: whether buffered jobs may still start after a
    /// pause or a limit, putting back those that may not, and (re)registering as waiting.
    async fn settle(&mut self) {
        let (sh, p) = (&self.shared, &self.p);
        if self.check_control && self.inflight.is_empty() {
            self.check_control = false;
            if !p.buffer().is_empty() {
                match buffer_control(&sh.db.pool, &p.queue).await {
                    // No claim is in flight here, so they are put back below at once.
                    Ok(c) if !buffer_may_stay(c, self.controlled) => {
                        self.put_back |= let_go_of_buffer(&sh.jobs, p) > 0;
                    }
                    Ok(_) => {}
                    Err(e) => sh.db.failed(&e),
                }
            }
        }
        if self.put_back && self.inflight.is_empty() {
            self.put_back = false;
            // Not started before the pause or limit: they wait for it like the others (the
            // attempt given back), and count against no limit meanwhile.
            if let Err(e) = release::unstarted(
                sh,
                Some(&p.queue),
                false,
                "released: the queue was paused or limited while the job waited in the buffer",
            )
            .await
            {
                sh.db.failed(&e);
                tracing::warn!(queue = %p.queue, error = %e, "could not put back buffered jobs; the rescuer will");
            }
        }
        if self.register && self.inflight.is_empty() {
            self.register = false;
            match waiting_add(&sh.db.pool, &sh.worker_id, &p.queue).await {
                Ok(()) => {
                    // Claim once more: a job inserted before the registration was visible
                    // sent no NOTIFY.
                    self.waiting = true;
                    self.backlog = true;
                }
                Err(e) => {
                    sh.db.failed(&e);
                    tracing::debug!(queue = %p.queue, error = %e, "could not register as waiting; the poll finds new jobs");
                }
            }
        }
    }

    /// Sends a claim if one is due ([`next_claim`]); returns when the cooldown ends if the
    /// claim waits for it.
    fn maybe_claim(&mut self) -> Option<tokio::time::Instant> {
        let (sh, p) = (&self.shared, &self.p);
        let limit = p.limit;
        let free = p.slots.available_permits();
        let buffered = p.buffer().len();
        let ahead = claim_ahead(sh.settings.claim_ahead, limit, p.run_time());
        let ahead_now = buffer_ahead(ahead, self.controlled, self.buffer_room);
        // One claim at a time after a failure (so a failure can be blamed on it) and while a
        // limit holds jobs back (a second claim would find it binding too). A limited
        // queue's claims wait for each other on the queue's row, and each counts the running
        // jobs the one before committed, so two in flight keep its limits.
        let max_inflight = if self.careful_left > 0 || self.held_back {
            1
        } else {
            MAX_CLAIMS_IN_FLIGHT
        };
        // Not while buffered jobs wait to be put back: that waits for no claim in flight,
        // and a drain that keeps claiming would put it off while they count as running.
        let giving_way = p.give_way.load(Ordering::Relaxed);
        let mut cooldown_at = None;
        if self.inflight.len() < max_inflight
            && self.backlog
            && self.retry_at.is_none()
            && !self.put_back
            && !giving_way
        {
            let cooldown = sh.settings.fetch_cooldown;
            match next_claim(
                free,
                buffered,
                self.inflight_want,
                limit,
                ahead_now,
                self.careful_left > 0,
                self.last_claim.elapsed() >= cooldown,
            ) {
                ClaimNow::Now(want) => {
                    let want = self.claim_cap.map_or(want, |c| want.min(c));
                    // The wait the last answer named is over once this claim is sent: kept, an
                    // elapsed one would fire a poll at every turn of the loop while this claim is
                    // in flight, and each would count as a wake-up it may have missed
                    // (look_again), so the claims never stopped while a key's rate held jobs
                    // back (crates/skiplock-cli/tests/limits.rs
                    // `a_worker_does_not_claim_in_a_loop_while_every_due_key_waits_for_its_rate`).
                    self.wait_until = None;
                    self.last_claim = Instant::now();
                    self.inflight_want += want;
                    self.inflight
                        .push(start_claim(sh, p, want, free, self.wakes));
                }
                ClaimNow::AfterCooldown => {
                    cooldown_at = Some(tokio::time::Instant::from_std(self.last_claim + cooldown));
                }
                ClaimNow::Wait => {}
            }
        }
        if buffered > 0 || p.slots.available_permits() < limit {
            self.last_work = Instant::now();
        }
        cooldown_at
    }

    /// Whether this run ends: a discovered queue idle for its retirement time, or asked to
    /// make room for another queue (never with a claim in flight: its jobs would have nobody
    /// to start them; when making room, not with jobs in the buffer either: they would wait
    /// for the rescuer).
    async fn retire_if_due(&mut self) -> bool {
        let (sh, p) = (&self.shared, &self.p);
        let giving_way = p.give_way.load(Ordering::Relaxed);
        let retire = self.inflight.is_empty()
            && (p
                .retire_after
                .is_some_and(|after| self.last_work.elapsed() >= after)
                || giving_way && p.buffer().is_empty());
        if retire
            && self.waiting
            && let Err(e) = waiting_remove(&sh.db.pool, &sh.worker_id, &p.queue).await
        {
            tracing::debug!(queue = %p.queue, error = %e, "could not unregister as waiting");
        }
        retire
    }

    /// A claim answered: hold its jobs, and learn from it whether to claim again, whether the
    /// queue is controlled, and whether to stay registered as waiting.
    async fn on_answer(&mut self, want: usize, started_at: u64, r: Result<Claimed>) {
        let (sh, p) = (self.shared.clone(), self.p.clone());
        self.inflight_want -= want;
        // The cooldown counts from a claim's answer too: the slots its jobs free meanwhile go
        // into the next claim rather than one claim each.
        self.last_claim = Instant::now();
        let c = match r {
            Ok(c) => c,
            Err(e) => {
                sh.db.failed(&e);
                let refused = crate::db::outage::statement_failed(&e);
                if refused {
                    self.claim_cap = next_claim_cap(self.claim_cap, want, true, 0);
                }
                let delay = self.backoff.next_delay();
                match self.claim_cap.filter(|_| refused) {
                    Some(cap) => tracing::warn!(queue = %p.queue, error = %e,
                        "claim failed; retrying in {delay:?}, for at most {cap} jobs"),
                    None => tracing::warn!(queue = %p.queue, error = %e, "claim failed; retrying in {delay:?}"),
                }
                self.retry_at = Some(tokio::time::Instant::now() + delay);
                return;
            }
        };
        let full = p.limit + claim_ahead(sh.settings.claim_ahead, p.limit, p.run_time());
        self.claim_cap = next_claim_cap(self.claim_cap, want, false, full);
        self.buffer_room = c.buffer_room;
        sh.report.metrics.claimed(c.jobs.len());
        self.backoff.reset();
        // A claim that stopped at the most lanes one claim reads left lanes unread: the next
        // one reads them at once (skiplock._claim_lanes), not at the next poll.
        self.backlog =
            look_again(c.jobs.len(), want, started_at, self.wakes) || c.lanes_after.is_some();
        if self.backlog {
            self.busy_since.get_or_insert_with(Instant::now);
        } else {
            self.busy_since = None;
        }
        if c.controlled && !self.controlled && let_go_of_buffer(&sh.jobs, &p) > 0 {
            // The plain claim took these before the queue got its control row: counted
            // against no limit. This answer's jobs, claimed within it, are held below and stay.
            self.put_back = true;
        }
        self.controlled = c.controlled;
        self.held_back = c.held && !self.backlog;
        p.set_idle(!self.backlog && !c.held);
        self.wait_until = c.wait_until;
        if !self.backlog && !self.waiting {
            self.register = true;
        }
        if !c.jobs.is_empty() {
            faults::hit(&sh.worker_id, Point::ProducerClaimed);
            self.last_work = Instant::now();
            self.careful_left = self.careful_left.saturating_sub(c.jobs.len());
        }
        let counted = c.counted_starts();
        // The pick went lane by lane (it has a clock): its jobs go into the buffer at their
        // place in claim order (`buffer_in_claim_order`).
        let lane_order = c.clock.is_some();
        let mut jobs = c.jobs;
        if !counted {
            // Each start is read off the database's clock when a slot takes the job.
            for j in &mut jobs {
                j.attempted_at = None;
            }
        }
        hold(&sh, &p, jobs, lane_order);
        if self.careful_left == 0 {
            p.one_at_a_time.store(false, Ordering::Relaxed);
        }
        if self.backlog
            && self.waiting
            && self
                .busy_since
                .is_some_and(|t| t.elapsed() >= UNREGISTER_AFTER)
        {
            // Busy: inserts here need not notify anyone on this worker's account. Failing is
            // harmless (a few needless NOTIFYs).
            match waiting_remove(&sh.db.pool, &sh.worker_id, &p.queue).await {
                Ok(()) => self.waiting = false,
                Err(e) => sh.db.failed(&e),
            }
        }
    }

    /// A NOTIFY for the queue (an insert, a freed slot of a limited queue, a resume).
    fn on_wake(&mut self) {
        faults::producer_woken(&self.shared.worker_id);
        self.wakes += 1;
        self.backlog = true;
        self.check_control = true;
    }

    /// One of our jobs finished.
    fn on_slot_freed(&mut self) {
        if self.held_back && !self.backlog && self.settle_at.is_none() {
            // Our job's ack is written a moment later; until then it still counts.
            self.settle_at = Some(tokio::time::Instant::now() + ACK_SETTLE);
        }
    }

    /// The ack of a job of a held-back queue has had time to be written: claim again.
    fn on_settled(&mut self) {
        self.settle_at = None;
        self.wakes += 1;
        self.backlog = true;
    }

    /// A failed claim's backoff is over.
    fn on_retry_due(&mut self) {
        self.retry_at = None;
        self.backlog = true;
    }

    /// The fallback poll (or a key rate's next allowed start).
    fn on_poll(&mut self) {
        self.wakes += 1;
        self.backlog = true;
        // Refresh the registration (it writes nothing when the row is there; it comes back
        // after the worker's row was forgotten, e.g. a long outage).
        self.register = self.waiting;
        self.check_control = true;
    }
}

/// How a finished job's ack takes to be written, about (the ack writer batches for a couple
/// of milliseconds): a producer held back by a limit waits this long after one of its jobs
/// finished before it claims again, so the job no longer counts as running.
const ACK_SETTLE: Duration = Duration::from_millis(20);

/// Starts one claim of up to `want` jobs; the future answers with `want` and what came back.
/// The producer's cursors say where it reads each lane, and learn from the answer.
fn start_claim(
    shared: &Arc<Shared>,
    p: &Arc<Producer>,
    want: usize,
    free: usize,
    wakes: u64,
) -> ClaimFuture {
    let (sh, p) = (shared.clone(), p.clone());
    async move {
        let params = ClaimParams {
            queue: &p.queue,
            kinds: &sh.kinds,
            limit: want,
            worker: &sh.worker_id,
        };
        let sent = Instant::now();
        let (lanes, after) = {
            let mut c = p.cursors();
            (c.next(sent), c.after())
        };
        let reads = LaneReads {
            starts: lanes.as_deref(),
            after,
        };
        let r = claim_any(&sh.db.pool, params, free, reads).await;
        match &r {
            Ok(c) => {
                if let Some(clock) = c.clock {
                    sh.db.clock.observe(clock, Instant::now());
                }
                let claimed: Vec<_> = c
                    .jobs
                    .iter()
                    .map(|j| (j.priority, j.scheduled_at))
                    .collect();
                p.cursors().answered(
                    lanes.is_none(),
                    sent,
                    sent.elapsed(),
                    Answer {
                        clock: c.clock,
                        exhausted: &c.exhausted,
                        claimed: &claimed,
                        lanes_after: c.lanes_after,
                    },
                );
            }
            Err(_) => p.cursors().failed(),
        }
        faults::claim_returned(&sh.worker_id).await;
        (want, wakes, r)
    }
    .boxed()
}
