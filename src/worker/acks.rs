//! Batches acknowledgements: collects outcomes for the ack delay (a few milliseconds, at most
//! [`MAX_BATCH`] per batch) and writes them in one fenced statement. Only a batch's first
//! outcome wakes the ack writer; the rest wait in the channel until the batch is due. Up to [`MAX_WRITES`] batches are written
//! at once (on their own connections), so the next batch does not wait for the previous
//! one's commit: one ack statement at a time left the database idle between them (docs/internals.md).
//! A failed write is retried with backoff; the channel's capacity gives back-pressure
//! meanwhile, and the acks stay pending through a database outage of any length (the
//! heartbeat keeps their jobs alive). A batch the server keeps refusing (a row that fails its
//! statement, a job whose settling passes the statement timeout) is written in halves, down
//! to single acks: its innocent acks land, and an ack that fails alone is retried alone,
//! with backoff, without holding a write slot ([`after_failed_write`]; docs/reliability.md,
//! "A batch that keeps failing"). Drains on shutdown.
//!
//! What a job's outcome asks of the database besides its ack travels with it ([`Done`]) and is
//! written here, so that no job's own task issues a statement (src/worker/executor.rs): a key
//! hold (`Outcome::SnoozeKey`) just before its batch, a signal check (durable steps) once the
//! batch has landed.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::faults::{self, Point};
use crate::db::outage::{Backoff, statement_failed};
use crate::metrics::Finish;
use crate::error::Result;
use crate::store::ack::{Ack, Acked, ack_many};
use crate::store::PoolMode;
use crate::store::flows::{FROM_THE_START, settle_slice};

/// The most acks written in one statement.
pub const MAX_BATCH: usize = 2000;
/// The most batches being written at once. Rows of different batches never overlap (a job
/// has one outcome per attempt, and its next attempt needs the previous outcome written),
/// and every statement locks its rows in id order, so concurrent writes cannot deadlock.
pub const MAX_WRITES: usize = 2;
/// The most edges of finished jobs settled in one transaction after their ack (see
/// [`settle_rest`]): a thousand dependents released at a time.
pub const SETTLE_SLICE: i32 = 1000;
/// Capacity of the ack channel (back-pressure on executors beyond it).
pub const CHANNEL_CAPACITY: usize = 20_000;
/// First and longest wait between two failed writes (pending acks are kept meanwhile).
pub const ACK_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(5));
/// How long a draining ack writer keeps retrying a failed write before it gives up (the
/// jobs stay `running` and the rescuer returns them).
pub const DRAIN_RETRY_LIMIT: Duration = Duration::from_secs(30);
/// How many times in a row the server may refuse a part of a batch before it is split (the
/// first refusal may be passing: a lock timeout, a statement cancelled by an operator).
pub const SPLIT_AFTER: u32 = 2;
/// How many times in a row one ack may fail alone before the worker lets its job go (about
/// 20 s of backoff): the job leaves `running`, so its heartbeat stops and the rescuer returns
/// it, and nothing is deleted. Retried for good, an ack whose statement always fails (a
/// settling past the statement timeout, a trigger) kept its job heartbeated, never rescued.
pub const GIVE_UP_ALONE_AFTER: u32 = 10;

/// What to do with a part of an ack batch of `len` acks whose write has just failed for the
/// `failures`-th time in a row; `statement_failed`: the server refused the statement itself
/// ([`statement_failed`]), rather than being unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// The database is unavailable: the part waits, whole, for it to come back (splitting
    /// would only multiply the statements that fail the same way).
    WaitForDatabase,
    /// Try the same part again after its backoff.
    Retry,
    /// Write it as two halves, each at once.
    Split,
    /// One ack the server keeps refusing: retried alone with backoff, its job's own problem
    /// (the rescuer returns the job if the worker stops before the ack lands).
    Alone,
}

/// See [`AfterFailure`].
pub fn after_failed_write(len: usize, failures: u32, statement_failed: bool) -> AfterFailure {
    if !statement_failed {
        AfterFailure::WaitForDatabase
    } else if failures < SPLIT_AFTER {
        AfterFailure::Retry
    } else if len > 1 {
        AfterFailure::Split
    } else {
        AfterFailure::Alone
    }
}

/// What a job's run hands the ack writer (src/worker/executor.rs): its ack, and what its
/// outcome asks of the database beside it.
#[derive(Debug)]
pub(crate) struct Done {
    pub ack: Ack,
    /// `Outcome::SnoozeKey`: hold the job's limit key ([`hold_keys`]), written before the ack.
    pub hold_key: Option<KeyHold>,
    /// The signal the attempt ended waiting for (docs/steps.md, "Signals"): once the ack is
    /// written the job is made due if the signal came meanwhile ([`wake_signalled`]).
    pub wake_on_signal: Option<String>,
}

/// A key hold travelling with an ack (`Outcome::SnoozeKey`).
#[derive(Debug)]
pub(crate) struct KeyHold {
    /// How long the job's limit key is held.
    pub hold_for: Duration,
    /// Told once the hold is written (or has failed; dropped unsent when the write never
    /// comes): the job keeps its slot until then, so its producer claims no job of the key
    /// before the hold has moved the key's waiting jobs.
    pub written: tokio::sync::oneshot::Sender<()>,
}

impl From<Ack> for Done {
    fn from(ack: Ack) -> Self {
        Done {
            ack,
            hold_key: None,
            wake_on_signal: None,
        }
    }
}

/// What is written beside a batch's acks (see [`Done`]).
#[derive(Debug, Default)]
struct Extras {
    /// Job ids whose limit key is held, and how.
    holds: Vec<(i64, KeyHold)>,
    /// Job id, attempt and the signal its attempt waits for.
    signals: Vec<(i64, i32, String)>,
}

impl Extras {
    /// Adds `d` to the batch in `buf`.
    fn push(&mut self, buf: &mut Vec<Ack>, d: Done) {
        if let Some(hold) = d.hold_key {
            self.holds.push((d.ack.id, hold));
        }
        if let Some(name) = d.wake_on_signal {
            self.signals.push((d.ack.id, d.ack.attempt, name));
        }
        buf.push(d.ack);
    }
}

/// A batch handed to a write: its acks (what has not landed yet), and what is written beside
/// them.
struct Batch {
    acks: Arc<Vec<Ack>>,
    extras: Extras,
}

/// Batches handed to a write that has not finished, by number.
type Writing = Arc<Mutex<BTreeMap<u64, Batch>>>;

/// What outlives one run of the ack writer: the channel, the acks not yet in a batch, and
/// the batches being written (a run that fails leaves them here; the next one writes them).
pub(crate) struct AckWriter {
    rx: mpsc::Receiver<Done>,
    buf: Vec<Ack>,
    /// What is written beside the acks in `buf`.
    extras: Extras,
    writing: Writing,
    next_batch: u64,
}

impl AckWriter {
    pub fn new(rx: mpsc::Receiver<Done>) -> Self {
        AckWriter {
            rx,
            buf: Vec::new(),
            extras: Extras::default(),
            writing: Arc::new(Mutex::new(BTreeMap::new())),
            next_batch: 0,
        }
    }
}

fn lock(w: &Writing) -> std::sync::MutexGuard<'_, BTreeMap<u64, Batch>> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes whose batches are down to acks the server refuses one by one: they retry those
/// alone and take no write slot ([`MAX_WRITES`] counts the others).
#[derive(Clone, Default)]
struct Lingering(Arc<AtomicUsize>);

impl Lingering {
    fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// One write's mark in [`Lingering`], taken back when the write ends.
struct LingerMark(Option<Lingering>);

impl LingerMark {
    fn set(&mut self, l: &Lingering) {
        if self.0.is_none() {
            l.0.fetch_add(1, Ordering::Relaxed);
            self.0 = Some(l.clone());
        }
    }
}

impl Drop for LingerMark {
    fn drop(&mut self) {
        if let Some(l) = self.0.take() {
            l.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Writes batch `n` (what `writing` holds under `n`), then forgets it: its key holds first
/// (once: a run started after a failure does not hold them again), then its acks, then its
/// signal checks.
async fn write(
    shared: Arc<Shared>,
    writing: Writing,
    n: u64,
    stop: CancellationToken,
    lingering: Lingering,
) {
    let Some((batch, holds)) = lock(&writing)
        .get_mut(&n)
        .map(|b| (b.acks.clone(), std::mem::take(&mut b.extras.holds)))
    else {
        return;
    };
    hold_keys(&shared.db.pool, holds).await;
    flush(&shared, &batch, &stop, &lingering, |left| {
        // What a run started after a failure would write again: only what has not landed.
        if let Some(b) = lock(&writing).get_mut(&n) {
            b.acks = Arc::new(left);
        }
    })
    .await;
    let signals = lock(&writing)
        .remove(&n)
        .map(|b| b.extras.signals)
        .unwrap_or_default();
    if !signals.is_empty() {
        tokio::spawn(wake_signalled(
            shared.db.pool.clone(),
            shared.worker_id.clone(),
            signals,
        ));
    }
}

/// Holds the limit key of each job of `holds` for its time (`Outcome::SnoozeKey`), before the
/// job's own ack: that ack then finds the hold and the job waits with the rest of its key
/// (`skiplock._ack`, sql/api/14_ack.sql), and jobs of the key enqueued meanwhile wait for it
/// (`skiplock.hold_key`, sql/api/17_admin.sql). One statement per hold, only for that outcome.
/// A failure is logged: the job itself is snoozed by its ack either way.
async fn hold_keys(pool: &crate::store::Pool, holds: Vec<(i64, KeyHold)>) {
    for (id, hold) in holds {
        // As far as a snooze goes (src/worker/outcome.rs caps it at 100 years).
        let d = hold.hold_for.min(Duration::from_secs(36500 * 86_400));
        match crate::store::jobs::hold_job_key(pool, id, d).await {
            Ok(Some(moved)) => tracing::info!(job.id = id, hold = %humantime::format_duration(d),
                moved, "handler held its limit key"),
            Ok(None) => tracing::debug!(job.id = id, "SnoozeKey of a job without a limit key: snoozed alone"),
            Err(e) => tracing::warn!(job.id = id, error = %e, "could not hold the job's limit key; the job is snoozed alone"),
        }
        let _ = hold.written.send(());
    }
}

/// After the acks of attempts that ended waiting for a signal (docs/steps.md, "Signals"): a
/// signal sent between the wait's statement and the ack found the job running and could not
/// make it due, so once the ack is written the job is made due if the signal is there. A
/// job still `running` here was not acked this attempt (fenced off, or its ack given up): it
/// is left alone. A check that fails is tried again every 50 ms, for at most two minutes:
/// past that (an outage, a worker stopped) the job wakes at its wait's timeout and reads the
/// signal then.
async fn wake_signalled(
    pool: crate::store::Pool,
    worker: Arc<str>,
    signals: Vec<(i64, i32, String)>,
) {
    for (id, attempt, name) in signals {
        for _ in 0..2400 {
            match crate::store::steps::wake_signalled(&pool, id, attempt, &worker, &name).await {
                Ok(_) => break,
                Err(e) => tracing::debug!(job.id = id, error = %e, "could not check the job's signal yet"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Runs until `stop`, then writes whatever is still queued and returns. The worker stops it
/// only after every executor has finished or been aborted, so nothing is sent afterwards.
/// If a run fails, the supervisor starts another on the same `state`: acks that were being
/// written are still there and are written again.
pub(crate) async fn run(
    shared: Arc<Shared>,
    state: Arc<tokio::sync::Mutex<AckWriter>>,
    stop: CancellationToken,
) -> crate::error::Result<()> {
    let mut guard = state.lock().await;
    let AckWriter {
        rx,
        buf,
        extras,
        writing,
        next_batch,
    } = &mut *guard;
    let mut writes = FuturesUnordered::new();
    let lingering = Lingering::default();
    // Batches a failed run left unwritten.
    let left: Vec<u64> = lock(writing).keys().copied().collect();
    for n in left {
        writes.push(write(
            shared.clone(),
            writing.clone(),
            n,
            stop.clone(),
            lingering.clone(),
        ));
    }
    let mut start = |buf: &mut Vec<Ack>, extras: &mut Extras, writes: &mut FuturesUnordered<_>| {
        let n = *next_batch;
        *next_batch += 1;
        let batch = Batch {
            acks: Arc::new(std::mem::take(buf)),
            extras: std::mem::take(extras),
        };
        lock(writing).insert(n, batch);
        writes.push(write(
            shared.clone(),
            writing.clone(),
            n,
            stop.clone(),
            lingering.clone(),
        ));
    };
    // Writes holding a slot (the lingering ones retry lone acks and hold none).
    let busy = |writes: &FuturesUnordered<_>| writes.len().saturating_sub(lingering.count());
    // When the batch in `buf` is due to be written (the ack delay after its first ack); a
    // batch a failed run left in `buf` is due at once.
    let mut due: Option<Instant> = (!buf.is_empty()).then(Instant::now);
    let mut open = true;
    while open && !stop.is_cancelled() {
        if due.is_some_and(|d| d <= Instant::now()) {
            // The acks that came while the batch waited, taken now rather than with a
            // wake-up each.
            take_ready(rx, buf, extras);
            if buf.is_empty() {
                due = None;
                continue;
            }
            if busy(&writes) < MAX_WRITES {
                let full = buf.len() >= MAX_BATCH;
                start(buf, extras, &mut writes);
                // Acks left in the channel are as old as this batch's: the next batch is due
                // at once rather than an ack delay after the first of them is taken.
                due = full.then(Instant::now);
                continue;
            }
        }
        let free = busy(&writes) < MAX_WRITES;
        tokio::select! {
            Some(()) = writes.next(), if !writes.is_empty() => {}
            // Only the batch's first ack wakes the ack writer; the rest wait in the channel
            // until the batch is due.
            a = rx.recv(), if due.is_none() => match a {
                Some(a) => {
                    due = Some(Instant::now() + shared.settings.ack_delay);
                    extras.push(buf, a);
                }
                None => open = false,
            },
            _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if free && due.is_some() => {}
            _ = stop.cancelled() => {}
        }
    }
    // Drain: everything still in the channel, in batches, then every write to its end.
    loop {
        take_ready(rx, buf, extras);
        if buf.is_empty() {
            break;
        }
        while busy(&writes) >= MAX_WRITES {
            writes.next().await;
        }
        start(buf, extras, &mut writes);
    }
    while writes.next().await.is_some() {}
    Ok(())
}

/// A connection of the pool, held across statements.
type Conn = sqlx::pool::PoolConnection<sqlx::Postgres>;

/// Writes `buf` in one statement ([`ack_many`]). In session mode on a connection taken for
/// it, handed back with the answer when the statement left dependents to settle: the slices
/// that follow ([`settle_rest`]) then run on the server session that has just planned the
/// settling functions for the ack.
async fn write_acks(pool: &crate::store::Pool, buf: &[Ack]) -> Result<(Acked, Option<Conn>)> {
    if pool.mode() != PoolMode::Session {
        return Ok((ack_many(pool, buf).await?, None));
    }
    let mut conn = pool.acquire().await?;
    let acked = ack_many(&mut *conn, buf).await?;
    let keep = (!acked.unsettled.is_empty()).then_some(conn);
    Ok((acked, keep))
}

/// Settles the dependents an ack batch left (a fan-out's root releases its children over
/// several statements: `skiplock._ack`, sql/api/14_ack.sql), [`SETTLE_SLICE`] edges per
/// transaction, beside the ack writer, so the worker runs the first children while the rest
/// are released; each slice resumes where the one before stopped. One at a time (`permits`:
/// [`super::Db::settling`]); a failure, or a worker stopping meanwhile, leaves the rest to the
/// maintenance's sweep (`skiplock.settle_dependencies`, run by the rescuer).
///
/// Every slice runs on one connection, the ack's (`conn`) unless another settling holds the
/// permit: the first statements a server session runs plan the settling functions, and the
/// pool hands out its connections in turn, so slices spread over it were planned again and
/// again (docs/performance.md, "Flows"). Behind PgBouncer in transaction mode a client
/// connection is no server session, and each slice goes through the pool, in a transaction
/// with its limits.
pub(crate) async fn settle_rest(
    pool: crate::store::Pool,
    permits: Arc<tokio::sync::Semaphore>,
    ids: Vec<i64>,
    mut conn: Option<Conn>,
) {
    let _permit = match permits.clone().try_acquire_owned() {
        Ok(p) => p,
        Err(_) => {
            // Not held while waiting: the pool may need it meanwhile.
            conn = None;
            let Ok(p) = permits.acquire_owned().await else {
                return;
            };
            p
        }
    };
    let failed = |e: &crate::error::Error, jobs: &[i64]| {
        tracing::warn!(error = %e, jobs = ?jobs,
            "settling the dependents of finished jobs failed; the maintenance's sweep settles them");
    };
    if conn.is_none() && pool.mode() == PoolMode::Session {
        match pool.acquire().await {
            Ok(c) => conn = Some(c),
            Err(e) => return failed(&e.into(), &ids),
        }
    }
    let mut after = vec![FROM_THE_START; ids.len()];
    let mut jobs = ids;
    while !jobs.is_empty() {
        let slice = match conn.as_mut() {
            Some(c) => settle_slice(&mut **c, &jobs, &after, SETTLE_SLICE).await,
            None => settle_slice(&pool, &jobs, &after, SETTLE_SLICE).await,
        };
        match slice {
            Ok(left) => (jobs, after) = (left.jobs, left.after),
            Err(e) => return failed(&e, &jobs),
        }
    }
}

/// Moves the acks waiting in the channel into `buf`, up to [`MAX_BATCH`], without waiting.
fn take_ready(rx: &mut mpsc::Receiver<Done>, buf: &mut Vec<Ack>, extras: &mut Extras) {
    while buf.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(a) => extras.push(buf, a),
            Err(_) => return,
        }
    }
}

/// A part of a batch being written: a range of its acks, with its own failures and backoff.
struct Part {
    range: Range<usize>,
    failures: u32,
    backoff: Backoff,
    /// Not written before then.
    at: Instant,
}

impl Part {
    fn new(range: Range<usize>) -> Self {
        Part {
            range,
            failures: 0,
            backoff: Backoff::new(ACK_BACKOFF.0, ACK_BACKOFF.1),
            at: Instant::now(),
        }
    }

    fn alone(&self) -> bool {
        self.range.len() == 1 && self.failures >= SPLIT_AFTER
    }
}

/// Writes `buf`, retrying until it succeeds; once `stop` is cancelled, for at most
/// [`DRAIN_RETRY_LIMIT`] (so a worker stopping during an outage still exits). A part the
/// server keeps refusing is split ([`after_failed_write`]); once only lone acks are left the
/// write is marked [`Lingering`]; `left` is told what has not landed after each part lands.
async fn flush(
    shared: &Shared,
    buf: &[Ack],
    stop: &CancellationToken,
    lingering: &Lingering,
    mut left: impl FnMut(Vec<Ack>),
) {
    if buf.is_empty() {
        return;
    }
    let mut drain_started: Option<Instant> = None;
    let mut outage = Backoff::new(ACK_BACKOFF.0, ACK_BACKOFF.1);
    let mut mark = LingerMark(None);
    let mut parts = vec![Part::new(0..buf.len())];
    while !parts.is_empty() {
        // The part due first (parts are few: a split makes two, a landing removes one).
        let i = (0..parts.len()).min_by_key(|&i| parts[i].at).unwrap_or(0);
        if parts[i].at > Instant::now() {
            tokio::select! {
                _ = tokio::time::sleep_until(parts[i].at) => {}
                _ = shared.db.availability.back() => {}
            }
        }
        let acks = &buf[parts[i].range.clone()];
        faults::hit(&shared.worker_id, Point::AckWriterFlush);
        let e = match write_acks(&shared.db.pool, acks).await {
            Ok((written, conn)) => {
                landed(shared, acks, written, conn);
                outage.reset();
                let p = parts.swap_remove(i);
                if p.failures >= SPLIT_AFTER && p.range.len() == 1 {
                    tracing::info!(job.id = acks[0].id, job.attempt = acks[0].attempt,
                        "the ack that failed alone is written");
                }
                if !parts.is_empty() {
                    left(
                        parts
                            .iter()
                            .flat_map(|p| buf[p.range.clone()].iter().cloned())
                            .collect(),
                    );
                }
                continue;
            }
            Err(e) => e,
        };
        // One ack the server refuses is its job's trouble, not the database's: it never feeds
        // the worker's availability (a statement timeout counts as an outage there), which
        // pauses the rescuer's clock while it fails.
        if !(parts[i].range.len() == 1 && statement_failed(&e)) {
            shared.db.failed(&e);
        }
        if stop.is_cancelled() {
            drain_started.get_or_insert_with(Instant::now);
        }
        if drain_started.is_some_and(|t| t.elapsed() > DRAIN_RETRY_LIMIT) {
            let ids: Vec<i64> = parts.iter().flat_map(|p| buf[p.range.clone()].iter().map(|a| a.id)).collect();
            tracing::error!(error = %e, jobs = ids.len(), job.ids = ?ids,
                "could not write acks before exit; the rescuer will return these jobs");
            return;
        }
        let p = &mut parts[i];
        p.failures += 1;
        match after_failed_write(p.range.len(), p.failures, statement_failed(&e)) {
            AfterFailure::WaitForDatabase => {
                p.failures = 0;
                let delay = outage.next_delay();
                tracing::warn!(error = %e, jobs = p.range.len(), "writing acks failed; retrying in {delay:?}");
                // Every part waits: they all need the database.
                let at = Instant::now() + delay;
                for p in &mut parts {
                    p.at = p.at.max(at);
                }
            }
            AfterFailure::Retry => {
                let delay = p.backoff.next_delay();
                tracing::warn!(error = %e, jobs = p.range.len(), "writing acks failed; retrying in {delay:?}");
                p.at = Instant::now() + delay;
            }
            AfterFailure::Split => {
                let r = p.range.clone();
                let mid = r.start + r.len() / 2;
                tracing::debug!(error = %e, jobs = r.len(), "writing acks keeps failing; writing them in halves");
                parts.swap_remove(i);
                parts.push(Part::new(r.start..mid));
                parts.push(Part::new(mid..r.end));
            }
            AfterFailure::Alone if p.failures >= GIVE_UP_ALONE_AFTER => {
                let a = &buf[p.range.start];
                tracing::error!(error = %e, job.id = a.id, job.attempt = a.attempt, failures = p.failures,
                    "the ack of this job failed alone too many times in a row; this worker lets the job go: it stays running in the table, its heartbeat stops, and the rescuer returns it");
                let_go(shared, a);
                parts.swap_remove(i);
                left(
                    parts
                        .iter()
                        .flat_map(|p| buf[p.range.clone()].iter().cloned())
                        .collect(),
                );
                continue;
            }
            AfterFailure::Alone => {
                let delay = p.backoff.next_delay();
                let a = &buf[p.range.start];
                if p.failures == SPLIT_AFTER {
                    tracing::warn!(error = %e, job.id = a.id, job.attempt = a.attempt,
                        "the ack of this job fails alone; the other acks of its batch are written, and this one is retried alone with backoff (if it never lands, the rescuer returns the job once this worker stops)");
                } else {
                    tracing::debug!(error = %e, job.id = a.id, "the ack that fails alone failed again; retrying in {delay:?}");
                }
                p.at = Instant::now() + delay;
            }
        }
        if parts.iter().all(Part::alone) {
            mark.set(lingering);
        }
    }
}

/// Drops the job of ack `a` from `running` (its attempt only), counted as lost: the heartbeat
/// no longer names it, so the rescuer returns it once its heartbeat is stale.
fn let_go(shared: &Shared, a: &Ack) {
    let mut running = shared.jobs.running();
    if let Some(r) = running.get(&a.id).filter(|r| r.attempt == a.attempt) {
        r.series
            .finished(Finish::of(a.state, a.give_back, r.executing, false));
        running.remove(&a.id);
    }
}

/// Records what a write landed: the metrics, the jobs' `running` entries, the settling of
/// their dependents left for after the statement, and a warning for each ack the database
/// ignored (its job no longer runs this attempt).
fn landed(shared: &Shared, buf: &[Ack], written: Acked, conn: Option<Conn>) {
    shared.report.metrics.acked(buf.len());
    if !written.unsettled.is_empty() {
        tokio::spawn(settle_rest(
            shared.db.pool.clone(),
            shared.db.settling.clone(),
            written.unsettled,
            conn,
        ));
    }
    let written = written.ids;
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
    let mut running = shared.jobs.running();
    for a in buf.iter() {
        if let Some(r) = running.get(&a.id).filter(|r| r.attempt == a.attempt) {
            let ok = partial.as_ref().is_none_or(|w| w.contains(&a.id));
            // Still executing: released at shutdown, its handler never returned.
            r.series
                .finished(Finish::of(a.state, a.give_back, r.executing, ok));
            running.remove(&a.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_part_is_retried_once_then_split_down_to_acks_that_fail_alone() {
        use AfterFailure::*;
        assert_eq!(after_failed_write(2000, 1, true), Retry);
        assert_eq!(after_failed_write(2000, SPLIT_AFTER, true), Split);
        assert_eq!(after_failed_write(2, SPLIT_AFTER, true), Split);
        assert_eq!(after_failed_write(1, 1, true), Retry);
        assert_eq!(after_failed_write(1, SPLIT_AFTER, true), Alone);
        assert_eq!(after_failed_write(1, 50, true), Alone);
        // An unreachable database is waited for, whole, however often it fails.
        for (len, n) in [(2000, 1), (2000, 9), (1, 9)] {
            assert_eq!(after_failed_write(len, n, false), WaitForDatabase);
        }
    }
}
