//! One producer per queue: claims due jobs for its free slots plus a bounded buffer
//! (`SKIPLOCK_CLAIM_AHEAD`), spawns an executor task for each job as a slot frees, and
//! claims the next batch while the current one runs, so slots do not sit empty for a claim's
//! round trip. A full batch means more may be waiting, so the producer claims again as the
//! buffer runs low; otherwise it waits for a reason to claim (a NOTIFY, or the fallback poll).
//! Buffered jobs are `running` in the database and held by this process like started ones:
//! heartbeated, returned at shutdown (the worker releases every claimed-but-unstarted job),
//! and rescued after a crash. A failed claim (database down) is retried with a capped
//! backoff while buffered jobs keep being started; the producer itself runs under
//! supervision (`super::supervisor`), and a producer of a queue discovered at run time
//! retires once the queue stays empty.
//!
//! Inserts notify only queues a producer waits on (`skiplock.waiting`): a producer whose
//! claim came back short registers, then claims once more (a job inserted before the
//! registration was visible is found by that claim), and refreshes its registration at each
//! poll; while its claims come back full it is not waiting, and unregisters.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::cursor::{Answer, Cursors};
use super::faults::{self, Point};
use super::handler::JobContext;
use super::hooks::JobInfo;
use super::outcome::{Attempt, RetryPolicy, decide};
use super::{Running, Shared, executor, release};
use crate::db::outage::Backoff;
use crate::error::Result;
use crate::queue::Job;
use crate::queue::backoff::random_jitter;
use crate::store::claim::{ClaimParams, LaneReads};
use crate::store::claim::Claimed;
use crate::store::control::{BufferControl, buffer_control, claim_any};
use crate::store::notify::{waiting_add, waiting_remove};

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

/// What outlives one run of a producer: its slots (running jobs hold permits), its buffer of
/// jobs claimed ahead, its wake-up signals, and whether it is claiming one job at a time.
pub(crate) struct Producer {
    pub queue: String,
    pub limit: usize,
    pub wake: Arc<Notify>,
    pub slots: Arc<Semaphore>,
    pub slot_freed: Arc<Notify>,
    /// Jobs claimed ahead, waiting for a free slot (each also in `Shared::running`).
    buffer: Mutex<VecDeque<Job>>,
    /// Claiming one job per statement (after a failure), so a failure can be blamed on it.
    pub one_at_a_time: AtomicBool,
    /// Retire after this long without work (queues discovered at run time only).
    pub retire_after: Option<Duration>,
    /// Since when its claims have found its queue drained (None: its last claim came back
    /// full, was held back by a limit or a pause, or none has answered yet). A worker at its
    /// `SKIPLOCK_MAX_QUEUES` asks the producer idle the longest to make room for a queue with
    /// due jobs (`super::queues`).
    idle_since: Mutex<Option<Instant>>,
    /// Asked to make room for another queue: it claims no more and retires as soon as no
    /// claim is in flight and its buffer is empty (its started jobs run on).
    pub give_way: AtomicBool,
    /// Where its next claim reads each lane of the queue from (`super::cursor`).
    cursors: Mutex<Cursors>,
    /// How long its jobs' handlers take, µs, a moving average (0: none finished yet); it
    /// sizes the buffer ([`claim_ahead`]).
    run_us: AtomicU64,
}

impl Producer {
    pub fn new(
        queue: &str,
        limit: usize,
        wake: Arc<Notify>,
        retire_after: Option<Duration>,
        cursors: Cursors,
    ) -> Self {
        Producer {
            queue: queue.to_string(),
            limit,
            wake,
            slots: Arc::new(Semaphore::new(limit)),
            slot_freed: Arc::new(Notify::new()),
            buffer: Mutex::new(VecDeque::new()),
            one_at_a_time: AtomicBool::new(false),
            retire_after,
            idle_since: Mutex::new(None),
            give_way: AtomicBool::new(false),
            cursors: Mutex::new(cursors),
            run_us: AtomicU64::new(0),
        }
    }

    /// Records how long one of its jobs' handlers ran (a moving average over about 16 jobs).
    fn ran(&self, took: Duration) {
        let us = took.as_micros().clamp(1, u64::MAX as u128) as u64;
        let old = self.run_us.load(Ordering::Relaxed);
        let new = if old == 0 {
            us
        } else {
            old - old / 16 + us / 16
        };
        self.run_us.store(new.max(1), Ordering::Relaxed);
    }

    /// The average run time of its jobs so far (None: none finished yet).
    fn run_time(&self) -> Option<Duration> {
        match self.run_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    fn cursors(&self) -> MutexGuard<'_, Cursors> {
        self.cursors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Since when its claims have found the queue drained (see the field).
    pub fn idle_since(&self) -> Option<Instant> {
        *self.idle_since.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_idle(&self, idle: bool) {
        let mut since = self.idle_since.lock().unwrap_or_else(|p| p.into_inner());
        match (idle, *since) {
            (true, None) => *since = Some(Instant::now()),
            (false, _) => *since = None,
            (true, Some(_)) => {}
        }
    }

    fn buffer(&self) -> MutexGuard<'_, VecDeque<Job>> {
        self.buffer.lock().unwrap_or_else(|p| p.into_inner())
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

/// What the producer does about claiming, given its state (see [`next_claim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimNow {
    /// Claim this many jobs now.
    Now(usize),
    /// Claim once the cooldown since the last claim has passed.
    AfterCooldown,
    /// Nothing to claim for: wait for a slot to free (or a wake-up).
    Wait,
}

/// Whether and how much to claim. `free`: free slots (after starting buffered jobs, so
/// `free > 0` means the buffer is empty); `buffered`: jobs claimed ahead; `asked`: jobs the
/// claims in flight asked for; `ahead`: the buffer's bound ([`claim_ahead`]); `one_at_a_time`: after a failure; `cooled_down`: the fetch
/// cooldown since the last claim was sent or came back has passed.
///
/// Without a buffer (`ahead == 0`: claim-ahead off, a key's limits, a binding queue limit; or
/// claiming one at a time) a claim asks for free slots no claim in flight asked for. A busy
/// queue waits for the cooldown so a claim takes every slot freed meanwhile, unless half the
/// slots are free already: then it claims at once, also beside a claim in flight, so that
/// with short jobs one claim runs while the jobs of the other do (a limited queue's claims
/// wait for each other on its row, so the database always has the next one). With a buffer,
/// it is refilled while the slots are busy once at least half of it has been used, so every
/// claim takes a batch of at least `ahead / 2` and one is in flight before the buffer runs
/// dry.
pub fn next_claim(
    free: usize,
    buffered: usize,
    asked: usize,
    limit: usize,
    ahead: usize,
    one_at_a_time: bool,
    cooled_down: bool,
) -> ClaimNow {
    if one_at_a_time || ahead == 0 {
        let unasked = free.saturating_sub(asked);
        let want = if one_at_a_time {
            unasked.min(1)
        } else {
            unasked
        };
        if want == 0 || buffered > 0 {
            return ClaimNow::Wait;
        }
        let half_free = !one_at_a_time && want * 2 >= limit;
        return if half_free || (asked == 0 && (free >= limit || cooled_down)) {
            ClaimNow::Now(want)
        } else if asked == 0 {
            ClaimNow::AfterCooldown
        } else {
            ClaimNow::Wait
        };
    }
    let want = (free + ahead).saturating_sub(buffered + asked);
    if want > 0 && want >= ahead.div_ceil(2) {
        ClaimNow::Now(want)
    } else {
        ClaimNow::Wait
    }
}

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

/// The most jobs the next claim may ask for (None: no bound of this kind), after a claim that
/// asked for `asked` jobs: `refused`, the server refused the statement itself
/// ([`crate::db::outage::statement_failed`]: a row that fails it, a statement timeout), or
/// answered. A claim the server keeps refusing asks for half as many each time, down to one,
/// so a statement too expensive at its size gets through at a smaller one; each answer
/// doubles the bound back until it reaches `full` (the most a claim asks for) and goes.
pub fn next_claim_cap(cap: Option<usize>, asked: usize, refused: bool, full: usize) -> Option<usize> {
    if refused {
        Some((cap.unwrap_or(asked).min(asked.max(1)) / 2).max(1))
    } else {
        cap.map(|c| c.saturating_mul(2)).filter(|&c| c < full)
    }
}

/// Whether to claim again after a claim that asked for `want` jobs got `got`: when it came
/// back full (more may be waiting), or when a wake-up, a freed slot or a poll arrived while it
/// was in flight (`started_at` wake-ups counted when it started, `wakes` now). That claim's
/// snapshot may predate what the wake-up announced (the ack that freed a limited queue's slot,
/// a job's insert); without this, the wake-up is lost until the next poll.
pub fn look_again(got: usize, want: usize, started_at: u64, wakes: u64) -> bool {
    got == want || wakes > started_at
}

/// On every exit of a producer run (stopped, retired, or a panic unwinding it), the jobs
/// still in its buffer stop being held: removed from `Shared::running`, they are the
/// claimed-but-never-started jobs the worker's shutdown, or the producer's next run, puts
/// back at once (`super::release`).
struct BufferGuard {
    shared: Arc<Shared>,
    p: Arc<Producer>,
}

impl Drop for BufferGuard {
    fn drop(&mut self) {
        let_go_of_buffer(&self.shared, &self.p);
    }
}

/// Empties the buffer and stops holding its jobs (they are no longer in `Shared::running`);
/// returns how many there were. They are `running` in the database until
/// `super::release::unstarted` puts them back.
fn let_go_of_buffer(shared: &Shared, p: &Producer) -> usize {
    let jobs: Vec<Job> = p.buffer().drain(..).collect();
    if jobs.is_empty() {
        return 0;
    }
    let mut running = shared.running();
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

/// A claim in flight: answers with how many jobs it asked for, the [`run`] loop's count of
/// wake-ups when it started, and what came back.
type ClaimFuture = BoxFuture<'static, (usize, u64, Result<Claimed>)>;

/// How long a producer's claims must have come back full before it stops being registered
/// as waiting (`skiplock.waiting`). Every registration and removal is a row written and
/// deleted, and while Postgres cannot vacuum each one leaves a version that every insert's
/// wake-up check (`skiplock._notify_inserted`) steps over; a queue whose claims alternate
/// between full and short would write them several times a second.
const UNREGISTER_AFTER: Duration = Duration::from_secs(1);

/// Runs the producer until `shared.stop_claiming` (or retirement). `careful`: claim one job
/// per statement for the first `limit` jobs (set after a failed run, so that if a row makes
/// the producer fail again, it fails alone). Each turn of the loop settles what waits for no
/// claim in flight, starts buffered jobs, sends a claim if one is due, then waits for the next
/// event; [`ClaimLoop`] holds the state and has one method per event.
pub(crate) async fn run(shared: Arc<Shared>, p: Arc<Producer>, careful: bool) -> Exit {
    let _guard = BufferGuard {
        shared: shared.clone(),
        p: p.clone(),
    };
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
            _ = l.shared.availability.back(), if l.retry_at.is_some() => l.on_retry_due(),
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
        let stop = shared.stop_claiming.clone();
        let cooldown = shared.settings.fetch_cooldown;
        let listens = shared.pool.mode() == crate::store::PoolMode::Session
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
                match buffer_control(&sh.pool, &p.queue).await {
                    // No claim is in flight here, so they are put back below at once.
                    Ok(c) if !buffer_may_stay(c, self.controlled) => {
                        self.put_back |= let_go_of_buffer(sh, p) > 0;
                    }
                    Ok(_) => {}
                    Err(e) => sh.db_failed(&e),
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
                sh.db_failed(&e);
                tracing::warn!(queue = %p.queue, error = %e, "could not put back buffered jobs; the rescuer will");
            }
        }
        if self.register && self.inflight.is_empty() {
            self.register = false;
            match waiting_add(&sh.pool, &sh.worker_id, &p.queue).await {
                Ok(()) => {
                    // Claim once more: a job inserted before the registration was visible
                    // sent no NOTIFY.
                    self.waiting = true;
                    self.backlog = true;
                }
                Err(e) => {
                    sh.db_failed(&e);
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
            && let Err(e) = waiting_remove(&sh.pool, &sh.worker_id, &p.queue).await
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
                sh.db_failed(&e);
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
        sh.metrics.claimed(c.jobs.len());
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
        if c.controlled && !self.controlled && let_go_of_buffer(&sh, &p) > 0 {
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
            match waiting_remove(&sh.pool, &sh.worker_id, &p.queue).await {
                Ok(()) => self.waiting = false,
                Err(e) => sh.db_failed(&e),
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

/// The longest a producer held back by a key's rate sleeps before it claims again (unless a
/// wake-up comes first): every change that could let a job start sooner wakes it (an insert,
/// a slot freed, a limit changed, the listener reconnecting), and its claim's `wait_until`
/// names the earliest start a key's rate allows or the next job due, whichever is first; this
/// is only the fallback should one be missed.
pub const HELD_NAP: Duration = Duration::from_secs(60);

/// How long an idle producer waits at most before claiming again: the poll interval, or
/// less when a job held back by a key's rate may start sooner (a few ms after it may).
/// `held`: every due job of the queue waits for a key's rate (its last claim took none and
/// named `wait_until`) and wake-ups are heard: then it waits until `wait_until`, at most the
/// longer of the poll interval and [`HELD_NAP`], rather than re-reading every key at each poll.
pub(crate) fn limit_nap(
    poll: Duration,
    wait_until: Option<chrono::DateTime<chrono::Utc>>,
    held: bool,
    now: chrono::DateTime<chrono::Utc>,
) -> Duration {
    let most = if held { poll.max(HELD_NAP) } else { poll };
    match wait_until {
        Some(at) => {
            ((at - now).to_std().unwrap_or(Duration::ZERO) + Duration::from_millis(2)).min(most)
        }
        None => poll,
    }
}

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
        let r = claim_any(&sh.pool, params, free, reads).await;
        match &r {
            Ok(c) => {
                if let Some(clock) = c.clock {
                    sh.db_clock.observe(clock, Instant::now());
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

/// Holds freshly claimed jobs: each goes into `Shared::running` as buffered (so the heartbeat
/// covers it from now on) and into the producer's buffer, then as many as there are free
/// slots are started. `lane_order`: the claim picked in claim order (priority, scheduled_at,
/// id), and its jobs take their place in that order among those already buffered; otherwise
/// (a fair queue's round-robin pick) they go after them, so a later batch never overtakes an
/// earlier one (docs/concepts.md, "Fair queues").
fn hold(shared: &Arc<Shared>, p: &Arc<Producer>, jobs: Vec<Job>, lane_order: bool) {
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
                    let s = shared.metrics.series(&j.kind, &j.queue);
                    by_kind.push((&j.kind, s.clone()));
                    s
                }
            })
            .collect()
    };
    {
        let mut running = shared.running();
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
fn buffer_in_claim_order(buffer: &mut VecDeque<Job>, job: Job) {
    let key = |j: &Job| (j.priority, j.scheduled_at, j.id);
    let at = buffer.partition_point(|b| key(b) <= key(&job));
    buffer.insert(at, job);
}

/// Starts buffered jobs, in claim order, while there are free slots. A job taken away while
/// it waited (cancelled, or rescued: the heartbeat found it gone) is dropped, not started.
fn start_buffered(shared: &Arc<Shared>, p: &Arc<Producer>) {
    loop {
        let Ok(permit) = p.slots.clone().try_acquire_owned() else {
            return;
        };
        let Some(job) = p.buffer().pop_front() else {
            return;
        };
        let lost = {
            // Starts in place: the entry `hold` made becomes the executing one.
            let mut running = shared.running();
            match running
                .get_mut(&job.id)
                .filter(|r| r.buffered && r.attempt == job.attempt)
            {
                Some(r) if !r.lost.is_cancelled() => {
                    r.buffered = false;
                    r.executing = true;
                    // The start the limited claim counted, else now (db_clock.rs).
                    let started = job.attempted_at.unwrap_or_else(|| shared.db_clock.now());
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

/// The level of a job's span: see `spawn_job`.
const JOB_SPAN_LEVEL: tracing::Level = if cfg!(feature = "otel") {
    tracing::Level::INFO
} else {
    tracing::Level::DEBUG
};

fn spawn_job(
    shared: &Arc<Shared>,
    p: &Arc<Producer>,
    mut job: Job,
    permit: OwnedSemaphorePermit,
    (lost, series, started): (
        CancellationToken,
        Arc<crate::metrics::JobSeries>,
        chrono::DateTime<chrono::Utc>,
    ),
) {
    let (producer, slot_freed, wake) = (p.clone(), p.slot_freed.clone(), p.wake.clone());
    // A meta serde_json could not read (a row written past enqueue's check) discards this job
    // alone, as unreadable args do: its handler does not run (src/queue/stored.rs).
    let (meta, unreadable_meta) = match std::mem::take(&mut job.meta).into_readable() {
        Ok(v) => (v, None),
        Err(u) => (serde_json::Value::Object(Default::default()), Some(u)),
    };
    let ctx = JobContext {
        id: job.id,
        kind: job.kind.clone(),
        queue: job.queue.clone(),
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        created_at: job.created_at,
        scheduled_at: job.scheduled_at,
        tags: job.tags.clone(),
        meta,
        pool: shared.handler_pool.clone(),
        worker_id: shared.worker_id.clone(),
        shutdown: shared.shutdown.clone(),
        lost,
        steps: Default::default(),
    };
    let sh = shared.clone();
    let id = job.id;
    let steps = ctx.steps.clone();
    let handle = tokio::spawn(async move {
        let _permit = permit;
        let handler = sh.registry.get(&job.kind).cloned();
        // Built only for the application's hooks (src/worker/hooks.rs): none, no cost.
        let info = (!sh.hooks.is_empty()).then(|| JobInfo {
            id: job.id,
            kind: job.kind.clone(),
            queue: job.queue.clone(),
            attempt: job.attempt,
            max_attempts: job.max_attempts,
        });
        if let Some(info) = &info {
            sh.hooks.before(info);
        }
        // A debug-level span: at the default level it costs nothing per job; warnings below
        // carry the job's fields themselves. With the `otel` feature it is an info span (what
        // an OpenTelemetry layer usually records), named for the job's kind, the child or a
        // link of the enqueuer's trace (src/otel.rs).
        let span = tracing::span!(JOB_SPAN_LEVEL, "job", otel.name = %format_args!("job {}", job.kind),
            otel.kind = "consumer", job.id = job.id, job.kind = %job.kind,
            job.queue = %job.queue, job.attempt = job.attempt);
        #[cfg(feature = "otel")]
        crate::otel::follow_enqueuer(&span, &ctx.meta, job.attempt);
        let began = Instant::now();
        let attempt = match unreadable_meta {
            None => {
                use tracing::Instrument;
                executor::execute(handler, ctx, job.args, sh.settings.job_timeout)
                    .instrument(span)
                    .await
            }
            Some(u) => Attempt::Returned(Err(super::JobError::discard(format!(
                "invalid meta for kind {}: {}",
                job.kind, u.error
            )))),
        };
        series.ran(began.elapsed());
        producer.ran(began.elapsed());
        match &attempt {
            Attempt::Returned(Ok(_)) => {}
            Attempt::Suspended(until) => tracing::debug!(job.id = job.id, job.kind = %job.kind,
                job.attempt = job.attempt, %until, "job sleeps (docs/steps.md)"),
            Attempt::Returned(Err(e)) => {
                // The first failure of a kind in full, the rest summed (worker::failure_log).
                let say = sh
                    .failures
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .record(&job.kind, Instant::now(), &e.message);
                if let super::failure_log::Say::SummaryThenFull { more, last_error } = &say {
                    super::failure_log::summary(&job.kind, *more, last_error);
                }
                if say != super::failure_log::Say::Nothing {
                    tracing::warn!(job.id = job.id, job.kind = %job.kind,
                        job.attempt = job.attempt, error = %e.message,
                        "job failed (more failures of its kind within {}s are summed into one line)",
                        super::failure_log::WINDOW.as_secs());
                }
            }
            other => tracing::warn!(job.id = job.id, job.kind = %job.kind,
                job.attempt = job.attempt, outcome = ?other, "job did not finish normally"),
        }
        let policy = RetryPolicy {
            unit: sh.settings.backoff_unit,
            max: sh.settings.backoff_max,
        };
        let hold_key_for = match &attempt {
            Attempt::Returned(Ok(super::Outcome::SnoozeKey(d))) => Some(*d),
            _ => None,
        };
        let mut ack = decide(
            job.id,
            job.attempt,
            job.max_attempts,
            attempt,
            chrono::Utc::now(),
            policy,
            random_jitter(),
        );
        ack.started_at = Some(started);
        if let Some(info) = info {
            sh.hooks.after(info, &ack, began.elapsed());
        }
        if let Some(d) = hold_key_for {
            hold_key(&sh, job.id, d).await;
        }
        if let Some(r) = sh.running().get_mut(&job.id) {
            r.executing = false;
        }
        wake_when_due(&ack, sh.settings.poll_interval, wake);
        if sh.acks.send(ack).await.is_err() {
            tracing::error!(
                job.id = job.id,
                "ack writer gone; the rescuer will return this job"
            );
        }
        drop(_permit);
        slot_freed.notify_one();
        if let Some(name) = steps.waiting_for() {
            wake_if_signalled(&sh, job.id, job.attempt, name).await;
        }
    });
    if let Some(r) = shared.running().get_mut(&id) {
        r.abort = Some(handle.abort_handle());
    }
}

/// After the ack of an attempt that ended waiting for signal `name` (docs/steps.md,
/// "Signals"): a signal sent between the wait's statement and the ack found the job running and
/// could not make it due, so once the ack is written the job is made due if the signal is there.
/// Checked every 50 ms while the ack is still pending, for at most two minutes: past that (an
/// outage, a worker stopped) the job wakes at its wait's timeout and reads the signal then.
async fn wake_if_signalled(sh: &Shared, id: i64, attempt: i32, name: String) {
    for _ in 0..2400 {
        match crate::store::steps::wake_signalled(&sh.pool, id, attempt, &sh.worker_id, &name).await
        {
            Ok(s) if s == "running" => {}
            Ok(_) => return,
            Err(e) => tracing::debug!(job.id = id, error = %e, "could not check the job's signal yet"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Holds the limit key of job `id` for `d` (`Outcome::SnoozeKey`), before the job's own ack:
/// one statement, only for that outcome. A failure is logged: the job itself is snoozed
/// by its ack either way.
async fn hold_key(sh: &Shared, id: i64, d: Duration) {
    // As far as a snooze goes (src/worker/outcome.rs caps it at 100 years).
    let d = d.min(Duration::from_secs(36500 * 86_400));
    match crate::store::jobs::hold_job_key(&sh.pool, id, d).await {
        Ok(Some(moved)) => tracing::info!(job.id = id, hold = %humantime::format_duration(d),
            moved, "handler held its limit key"),
        Ok(None) => tracing::debug!(job.id = id, "SnoozeKey of a job without a limit key: snoozed alone"),
        Err(e) => tracing::warn!(job.id = id, error = %e, "could not hold the job's limit key; the job is snoozed alone"),
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
        let mut buffer = VecDeque::new();
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
    fn a_claim_the_server_keeps_refusing_asks_for_half_as_many_down_to_one() {
        let mut cap = None;
        let mut asked = Vec::new();
        for _ in 0..10 {
            let want = cap.map_or(300, |c: usize| c.min(300));
            asked.push(want);
            cap = next_claim_cap(cap, want, true, 300);
        }
        assert_eq!(asked, [300, 150, 75, 37, 18, 9, 4, 2, 1, 1]);
        // Each answer doubles it back, and at the full size the bound goes.
        let mut sizes = Vec::new();
        while let Some(c) = cap {
            sizes.push(c);
            cap = next_claim_cap(cap, c, false, 300);
        }
        assert_eq!(sizes, [1, 2, 4, 8, 16, 32, 64, 128, 256]);
        assert_eq!(next_claim_cap(None, 20, false, 300), None);
        // A refused claim that asked for fewer than the bound (few free slots) halves that.
        assert_eq!(next_claim_cap(Some(64), 6, true, 300), Some(3));
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

    #[test]
    fn a_wake_up_during_a_claim_makes_the_producer_claim_again() {
        // Full: more may be waiting.
        assert!(look_again(10, 10, 3, 3));
        // Short, nothing happened meanwhile: drained.
        assert!(!look_again(4, 10, 3, 3));
        assert!(!look_again(0, 10, 0, 0));
        // Short, but a wake-up came while the claim was in flight.
        assert!(look_again(0, 10, 3, 4));
    }

    #[test]
    fn a_rate_limited_producer_naps_until_the_next_allowed_start() {
        let poll = Duration::from_secs(1);
        let now = chrono::Utc::now();
        assert_eq!(limit_nap(poll, None, false, now), poll);
        let soon = now + chrono::TimeDelta::milliseconds(300);
        assert_eq!(
            limit_nap(poll, Some(soon), false, now),
            Duration::from_millis(302)
        );
        let late = now + chrono::TimeDelta::seconds(30);
        assert_eq!(limit_nap(poll, Some(late), false, now), poll);
        let past = now - chrono::TimeDelta::seconds(3);
        assert_eq!(
            limit_nap(poll, Some(past), false, now),
            Duration::from_millis(2)
        );
        // Every due job held by a rate: until the next start, at most HELD_NAP (or the poll
        // interval, when it is longer); nothing held, the poll interval.
        assert_eq!(
            limit_nap(poll, Some(late), true, now),
            Duration::from_millis(30_002)
        );
        let much_later = now + chrono::TimeDelta::hours(1);
        assert_eq!(limit_nap(poll, Some(much_later), true, now), HELD_NAP);
        let long_poll = Duration::from_secs(600);
        assert_eq!(
            limit_nap(long_poll, Some(much_later), true, now),
            long_poll
        );
        assert_eq!(limit_nap(poll, None, true, now), poll);
    }

    #[test]
    fn without_a_buffer_a_busy_queue_waits_for_the_cooldown_and_claims_its_free_slots() {
        // limit 10, no claim-ahead.
        assert_eq!(next_claim(10, 0, 0, 10, 0, false, false), ClaimNow::Now(10));
        assert_eq!(
            next_claim(3, 0, 0, 10, 0, false, false),
            ClaimNow::AfterCooldown
        );
        assert_eq!(next_claim(3, 0, 0, 10, 0, false, true), ClaimNow::Now(3));
        assert_eq!(next_claim(0, 0, 0, 10, 0, false, true), ClaimNow::Wait);
        // Half the slots free: at once, the cooldown would only make the claim later.
        assert_eq!(next_claim(5, 0, 0, 10, 0, false, false), ClaimNow::Now(5));
    }

    #[test]
    fn without_a_buffer_a_second_claim_goes_out_for_half_the_slots_nobody_asked_for() {
        // limit 10, a claim in flight asked for 3 of the 8 free slots: the other 5 now.
        assert_eq!(next_claim(8, 0, 3, 10, 0, false, false), ClaimNow::Now(5));
        // Fewer than half unasked: wait for the claim in flight, cooled down or not.
        assert_eq!(next_claim(8, 0, 4, 10, 0, false, true), ClaimNow::Wait);
        assert_eq!(next_claim(8, 0, 8, 10, 0, false, true), ClaimNow::Wait);
        // Never beside a claim in flight while claiming one at a time.
        assert_eq!(next_claim(10, 0, 1, 10, 0, true, true), ClaimNow::Wait);
        // Jobs still buffered (more than the free slots came back): none.
        assert_eq!(next_claim(0, 2, 0, 10, 0, false, true), ClaimNow::Wait);
    }

    #[test]
    fn one_at_a_time_claims_single_jobs_and_never_ahead() {
        assert_eq!(next_claim(10, 0, 0, 10, 5, true, false), ClaimNow::Now(1));
        assert_eq!(
            next_claim(4, 0, 0, 10, 5, true, false),
            ClaimNow::AfterCooldown
        );
        assert_eq!(next_claim(4, 0, 0, 10, 5, true, true), ClaimNow::Now(1));
        assert_eq!(next_claim(0, 0, 0, 10, 5, true, true), ClaimNow::Wait);
    }

    #[test]
    fn with_a_buffer_the_claim_fills_free_slots_and_the_buffer() {
        // Idle queue: every slot plus the buffer.
        assert_eq!(
            next_claim(10, 0, 0, 10, 10, false, false),
            ClaimNow::Now(20)
        );
        // All slots busy, buffer full: nothing to claim for.
        assert_eq!(next_claim(0, 10, 0, 10, 10, false, true), ClaimNow::Wait);
        // Less than half the buffer used: wait (a claim would be a small batch).
        assert_eq!(next_claim(0, 6, 0, 10, 10, false, true), ClaimNow::Wait);
        // Half of it used: refill while the slots are busy, before it runs dry.
        assert_eq!(next_claim(0, 5, 0, 10, 10, false, false), ClaimNow::Now(5));
        // Buffer empty with slots free: claim at once, no cooldown.
        assert_eq!(next_claim(4, 0, 0, 10, 10, false, false), ClaimNow::Now(14));
        // A queue of concurrency 1 buffers one job.
        assert_eq!(next_claim(0, 0, 0, 1, 1, false, false), ClaimNow::Now(1));
        assert_eq!(next_claim(0, 1, 0, 1, 1, false, false), ClaimNow::Wait);
        // What the claims in flight asked for counts as buffered.
        assert_eq!(next_claim(0, 3, 2, 10, 10, false, false), ClaimNow::Now(5));
        assert_eq!(next_claim(0, 3, 3, 10, 10, false, false), ClaimNow::Wait);
    }
}
