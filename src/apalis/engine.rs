//! What runs behind a [`super::SkiplockStorage`] once its apalis worker starts: the same
//! pieces as a native worker, on the same store statements. A producer claims due jobs of
//! the storage's kind in batches (`store::claim`, `FOR UPDATE SKIP LOCKED`) as slots free
//! up, woken by NOTIFY (`worker::listener`) or the fallback poll; an ack writer writes acks
//! in fenced batches (`store::ack::ack_many`); a heartbeat keeps every held job and the
//! worker's row fresh; the rescuer returns other processes' abandoned jobs; a watcher turns
//! apalis's "shutting down" into the grace deadline for running jobs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use apalis_core::worker::context::WorkerContext;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{MAX_QUEUE_CONCURRENCY, QueueSettings};
use crate::db::outage::{Availability, Backoff, is_unavailable};
use crate::error::{Error, Result};
use crate::queue::Job;
use crate::store::Pool;
use crate::store::ack::{Ack, ack_many};
use crate::store::claim::ClaimParams;
use crate::store::control::claim_any;
use crate::store::heartbeat::{HeldJob, WorkerInfo, heartbeat_many, worker_remove, worker_upsert};
use crate::store::schema::moved_after_beat;
use crate::worker::cursor::{Answer, Cursors};
use crate::worker::heartbeat::{interval_for, retry_backoff};
use crate::worker::listener::{Wake, listen};
use crate::worker::outcome::{Attempt, RetryPolicy, decide};
use crate::worker::producer::{ClaimNow, next_claim};
use crate::worker::rescuer::Rescuer;

/// The most acks written in one statement.
const MAX_ACK_BATCH: usize = 2000;
/// How long closing waits for pending acks to be written before it gives up (the jobs stay
/// `running` and the rescuer returns them).
const ACK_DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// How often the watcher looks at apalis's worker state.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// The storage's settings (see the builder methods of [`super::SkiplockStorage`]).
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub kind: String,
    pub queue: String,
    pub concurrency: usize,
    pub settings: QueueSettings,
    pub rescuer: bool,
}

impl Options {
    /// Checks what a builder call cannot refuse: empty names, a concurrency out of range,
    /// the queue settings' own ranges.
    pub fn validate(&self) -> Result<()> {
        if self.kind.trim().is_empty() {
            return Err(Error::Invalid(
                "apalis storage: the job kind is empty".into(),
            ));
        }
        if self.queue.trim().is_empty() {
            return Err(Error::Invalid(
                "apalis storage: the queue name is empty".into(),
            ));
        }
        if self.concurrency == 0 || self.concurrency > MAX_QUEUE_CONCURRENCY {
            return Err(Error::Invalid(format!(
                "apalis storage: concurrency must be between 1 and {MAX_QUEUE_CONCURRENCY}, got {}",
                self.concurrency
            )));
        }
        self.settings.validate()
    }
}

/// A job this process holds (claimed and not yet acknowledged).
struct Held {
    attempt: i32,
    /// Its outcome is queued (the slot is free again; the row is still heartbeated until
    /// the ack is written).
    done: bool,
    /// Cancelled when the heartbeat finds the job no longer ours (rescued, cancelled).
    lost: CancellationToken,
}

/// Handles to the background tasks.
#[derive(Default)]
struct Tasks {
    producer: Option<JoinHandle<()>>,
    ack_writer: Option<JoinHandle<()>>,
    others: Vec<JoinHandle<()>>,
}

/// State shared by the storage, its layer's services and the background tasks.
pub(crate) struct Engine {
    pub opts: Options,
    /// The pool the storage was given (claims, acks, heartbeats: the runtime's statements).
    pub pool: Pool,
    pub worker_id: String,
    host: String,
    held: Mutex<HashMap<i64, Held>>,
    /// Wakes the producer (a NOTIFY, a freed slot).
    wake: Notify,
    /// Stops claiming.
    claiming: CancellationToken,
    /// apalis is shutting down: running jobs have `shutdown_grace` left.
    pub shutdown: CancellationToken,
    /// Tells the ack writer to write what is left and return.
    closing: CancellationToken,
    /// Stops heartbeat, listener, rescuer and watcher.
    stop: CancellationToken,
    ack_tx: mpsc::UnboundedSender<Ack>,
    ack_rx: Mutex<Option<mpsc::UnboundedReceiver<Ack>>>,
    availability: Arc<Availability>,
    tasks: Mutex<Tasks>,
    started: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks cannot leave the maps inconsistent (every
    // critical section is a single insert/remove), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Engine {
    pub fn new(pool: Pool, opts: Options) -> Arc<Self> {
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let worker_id = format!(
            "{host}:{}:apalis:{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        Arc::new(Engine {
            opts,
            pool,
            worker_id,
            host,
            held: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            claiming: CancellationToken::new(),
            shutdown: CancellationToken::new(),
            closing: CancellationToken::new(),
            stop: CancellationToken::new(),
            ack_tx,
            ack_rx: Mutex::new(Some(ack_rx)),
            availability: Arc::new(Availability::new()),
            tasks: Mutex::new(Tasks::default()),
            started: AtomicBool::new(false),
        })
    }

    fn info(&self) -> WorkerInfo {
        WorkerInfo {
            id: self.worker_id.clone(),
            host: self.host.clone(),
            pid: std::process::id() as i32,
            queues: vec![self.opts.queue.clone()],
            kinds: vec![self.opts.kind.clone()],
        }
    }

    /// Whether [`Engine::start`] ran (so closing has something to stop).
    pub fn is_started(&self) -> bool {
        self.started.load(Ordering::SeqCst)
    }

    /// Checks the options and the schema, registers the worker and starts the background
    /// tasks; returns the channel claimed jobs arrive on. Waits out a database that is down
    /// (one log line per try); anything else (bad options, an unmigrated database) fails.
    pub async fn start(
        self: Arc<Self>,
        worker: WorkerContext,
    ) -> Result<mpsc::UnboundedReceiver<Job>> {
        self.opts.validate()?;
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            let ready = async {
                crate::store::schema::ensure_ready(&self.pool).await?;
                worker_upsert(&self.pool, &self.info()).await.map(|_| ())
            };
            match ready.await {
                Ok(()) => break,
                Err(e) if is_unavailable(&e) => {
                    self.availability.observe(&e);
                    let d = backoff.next_delay();
                    tracing::warn!(error = %e, "apalis storage: database unavailable; retrying in {d:?}");
                    tokio::time::sleep(d).await;
                }
                Err(e) => return Err(e),
            }
        }
        self.availability.success();
        let (job_tx, job_rx) = mpsc::unbounded_channel();
        let ack_rx = lock(&self.ack_rx)
            .take()
            .ok_or_else(|| Error::Invalid("apalis storage: started twice".into()))?;
        let mut tasks = lock(&self.tasks);
        tasks.producer = Some(tokio::spawn(produce(self.clone(), job_tx)));
        tasks.ack_writer = Some(tokio::spawn(complete(self.clone(), ack_rx)));
        tasks.others.push(tokio::spawn(heartbeat(self.clone())));
        let e = self.clone();
        tasks.others.push(tokio::spawn(async move {
            let queue = e.opts.queue.clone();
            let stop = e.stop.clone();
            let pool = e.pool.clone();
            listen(pool, stop, move |w| match w {
                Wake::Queue(q) if q == queue => e.wake.notify_one(),
                Wake::All => e.wake.notify_one(),
                _ => {}
            })
            .await
        }));
        tasks.others.push(tokio::spawn(watch(self.clone(), worker)));
        if self.opts.rescuer {
            let rescuer = Rescuer::new(self.opts.settings.rescue_after, self.availability.clone());
            tasks
                .others
                .push(tokio::spawn(crate::maintenance::supervise(
                    Arc::new(rescuer),
                    self.pool.clone(),
                    self.stop.clone(),
                )));
        }
        self.started.store(true, Ordering::SeqCst);
        tracing::info!(worker = %self.worker_id, kind = %self.opts.kind, queue = %self.opts.queue,
            concurrency = self.opts.concurrency, "apalis storage started");
        Ok(job_rx)
    }

    /// Jobs that occupy a slot: claimed and not yet finished (a finished job whose ack is
    /// still being written frees its slot, so the next claim overlaps the ack write).
    fn busy(&self) -> usize {
        lock(&self.held).values().filter(|h| !h.done).count()
    }

    /// The token that fires when job `id` was taken away from this process; `None` when it
    /// is not held (already forgotten).
    pub fn lost_token(&self, id: i64) -> Option<CancellationToken> {
        lock(&self.held).get(&id).map(|h| h.lost.clone())
    }

    /// Drops job `id` from the held set without an ack (it was taken away: its row is
    /// someone else's now) and frees its slot.
    pub fn forget(&self, id: i64) {
        lock(&self.held).remove(&id);
        self.wake.notify_one();
    }

    /// Queues an ack for the ack writer (the job stays held, and heartbeated, until written).
    pub fn ack(&self, ack: Ack) {
        if let Some(h) = lock(&self.held).get_mut(&ack.id) {
            h.done = true;
        }
        self.wake.notify_one();
        if self.ack_tx.send(ack).is_err() {
            tracing::warn!(
                "apalis storage: an ack arrived after the storage closed; the job stays running until the rescuer returns it"
            );
        }
    }

    /// The ack for attempt `attempt` of `max_attempts` of job `id` ending as `result`.
    pub fn decide(&self, id: i64, attempt: i32, max_attempts: i32, result: Attempt) -> Ack {
        let policy = RetryPolicy {
            unit: self.opts.settings.backoff_unit,
            max: self.opts.settings.backoff_max,
        };
        decide(
            id,
            attempt,
            max_attempts,
            result,
            chrono::Utc::now(),
            policy,
            crate::queue::backoff::random_jitter(),
        )
    }

    /// Stops every background task at once, without writing anything (no runtime to close
    /// on): held jobs are no longer heartbeated and the rescuer returns them.
    pub fn abandon(&self) {
        self.claiming.cancel();
        self.shutdown.cancel();
        self.closing.cancel();
        self.stop.cancel();
    }

    /// Stops claiming, puts back the jobs claimed but never handed to apalis (attempt given
    /// back), writes every pending ack, stops the other tasks and removes the worker row.
    /// Called once apalis has no task in flight.
    pub async fn close(
        self: Arc<Self>,
        mut jobs: Option<mpsc::UnboundedReceiver<Job>>,
    ) -> Result<()> {
        self.claiming.cancel();
        self.shutdown.cancel();
        let (producer, ack_writer, others) = {
            let mut t = lock(&self.tasks);
            (
                t.producer.take(),
                t.ack_writer.take(),
                std::mem::take(&mut t.others),
            )
        };
        if let Some(p) = producer {
            // The producer never stops in the middle of a claim: every claimed job is in
            // the channel once it returns.
            let _ = p.await;
        }
        if let Some(rx) = jobs.as_mut() {
            while let Ok(job) = rx.try_recv() {
                let ack = self.decide(job.id, job.attempt, job.max_attempts, Attempt::Released);
                self.ack(ack);
            }
        }
        self.closing.cancel();
        if let Some(c) = ack_writer
            && tokio::time::timeout(ACK_DRAIN_LIMIT + Duration::from_secs(5), c)
                .await
                .is_err()
        {
            tracing::warn!(
                "apalis storage: pending acks could not be written; their jobs stay running until the rescuer returns them"
            );
        }
        self.stop.cancel();
        for t in others {
            let _ = t.await;
        }
        if self.is_started()
            && let Err(e) = worker_remove(&self.pool, &self.worker_id).await
        {
            tracing::warn!(error = %e, "apalis storage: could not remove the worker row");
        }
        tracing::info!(worker = %self.worker_id, "apalis storage closed");
        Ok(())
    }
}

/// Claims as many due jobs as there are free slots, again at once after a full batch,
/// otherwise after a wake-up or the poll interval. Stops only between claims.
async fn produce(e: Arc<Engine>, tx: mpsc::UnboundedSender<Job>) {
    let kinds = vec![e.opts.kind.clone()];
    let mut failing = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let cooldown = e.opts.settings.fetch_cooldown;
    let mut last_claim = tokio::time::Instant::now() - cooldown;
    // Where each claim reads the queue's lanes from, as the native producer's
    // (`worker::cursor`).
    let mut cursors = Cursors::new(
        e.opts.settings.claim_lookback,
        e.opts.settings.poll_interval,
    );
    loop {
        if e.claiming.is_cancelled() {
            return;
        }
        // The native producer's rule without a buffer, one claim at a time: a claim for only
        // some of the slots (fewer than half) waits out the fetch cooldown, so it takes every
        // slot freed meanwhile instead of one per finished job.
        let mut free = e.opts.concurrency.saturating_sub(e.busy());
        let cooled_down = last_claim.elapsed() >= cooldown;
        if next_claim(free, 0, 0, e.opts.concurrency, 0, false, cooled_down)
            == ClaimNow::AfterCooldown
        {
            tokio::select! {
                _ = e.claiming.cancelled() => return,
                _ = tokio::time::sleep(cooldown.saturating_sub(last_claim.elapsed())) => {}
            }
            free = e.opts.concurrency.saturating_sub(e.busy());
        }
        let mut full = false;
        if free > 0 {
            let params = ClaimParams {
                queue: &e.opts.queue,
                kinds: &kinds,
                limit: free,
                worker: &e.worker_id,
            };
            let sent = std::time::Instant::now();
            let lanes = cursors.next(sent);
            let answer = claim_any(&e.pool, params, free, lanes.as_deref()).await;
            // One claim at a time: the cooldown counts from its answer (the native producer
            // counts from the later of a claim's start and answer).
            last_claim = tokio::time::Instant::now();
            match answer {
                Ok(got) => {
                    let claimed: Vec<_> = got
                        .jobs
                        .iter()
                        .map(|j| (j.priority, j.scheduled_at))
                        .collect();
                    cursors.answered(
                        lanes.is_none(),
                        sent,
                        sent.elapsed(),
                        Answer {
                            clock: got.clock,
                            exhausted: &got.exhausted,
                            claimed: &claimed,
                        },
                    );
                    let jobs = got.jobs;
                    e.availability.success();
                    failing.reset();
                    full = jobs.len() == free;
                    {
                        let mut held = lock(&e.held);
                        for j in &jobs {
                            held.insert(
                                j.id,
                                Held {
                                    attempt: j.attempt,
                                    done: false,
                                    lost: CancellationToken::new(),
                                },
                            );
                        }
                    }
                    let mut gone = false;
                    for j in jobs {
                        if gone || tx.is_closed() {
                            // The storage is gone without closing: put back what this claim
                            // took and stop claiming.
                            gone = true;
                            e.ack(e.decide(j.id, j.attempt, j.max_attempts, Attempt::Released));
                        } else if let Err(unsent) = tx.send(j) {
                            gone = true;
                            let j = unsent.0;
                            e.ack(e.decide(j.id, j.attempt, j.max_attempts, Attempt::Released));
                        }
                    }
                    if gone {
                        return;
                    }
                }
                Err(err) => {
                    cursors.failed();
                    e.availability.observe(&err);
                    let d = failing.next_delay();
                    tracing::warn!(error = %err, "apalis storage: claim failed; retrying in {d:?}");
                    tokio::select! {
                        _ = e.claiming.cancelled() => return,
                        _ = tokio::time::sleep(d) => {}
                    }
                    continue;
                }
            }
        }
        if full {
            continue;
        }
        tokio::select! {
            _ = e.claiming.cancelled() => return,
            _ = e.wake.notified() => {}
            _ = tokio::time::sleep(e.opts.settings.poll_interval) => {}
        }
    }
}

/// Writes acks in batches (collected for `ack_delay`), fenced on the attempt; retries a
/// failed write with backoff, keeping the acks. Written jobs leave the held set (and the
/// heartbeat).
async fn complete(e: Arc<Engine>, mut rx: mpsc::UnboundedReceiver<Ack>) {
    let mut buf: Vec<Ack> = Vec::new();
    let mut failing = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
    let mut draining_since: Option<tokio::time::Instant> = None;
    loop {
        if buf.is_empty() {
            if draining_since.is_some() {
                match rx.try_recv() {
                    Ok(a) => buf.push(a),
                    Err(_) => return,
                }
            } else {
                tokio::select! {
                    a = rx.recv() => match a {
                        Some(a) => buf.push(a),
                        None => return,
                    },
                    _ = e.closing.cancelled() => {
                        draining_since = Some(tokio::time::Instant::now());
                        continue;
                    }
                }
                // Collect what else arrives within the ack delay.
                let until = tokio::time::Instant::now() + e.opts.settings.ack_delay;
                while buf.len() < MAX_ACK_BATCH {
                    match tokio::time::timeout_at(until, rx.recv()).await {
                        Ok(Some(a)) => buf.push(a),
                        _ => break,
                    }
                }
            }
        }
        while buf.len() < MAX_ACK_BATCH {
            match rx.try_recv() {
                Ok(a) => buf.push(a),
                Err(_) => break,
            }
        }
        match ack_many(&e.pool, &buf).await {
            Ok(written) => {
                e.availability.success();
                failing.reset();
                if written.len() != buf.len() {
                    tracing::info!(
                        fenced = buf.len() - written.len(),
                        "apalis storage: acks for jobs no longer running this attempt were fenced off"
                    );
                }
                {
                    let mut held = lock(&e.held);
                    for a in &buf {
                        if held.get(&a.id).is_some_and(|h| h.attempt == a.attempt) {
                            held.remove(&a.id);
                        }
                    }
                }
                buf.clear();
            }
            Err(err) => {
                e.availability.observe(&err);
                if draining_since.is_some_and(|t| t.elapsed() > ACK_DRAIN_LIMIT) {
                    tracing::warn!(error = %err, acks = buf.len(), "apalis storage: giving up writing acks at shutdown");
                    return;
                }
                let d = failing.next_delay();
                tracing::warn!(error = %err, acks = buf.len(), "apalis storage: ack write failed; retrying in {d:?}");
                tokio::time::sleep(d).await;
            }
        }
    }
}

/// Refreshes the heartbeat of every held job and the worker row; tells the handlers of jobs
/// that were taken away (their `lost` token).
async fn heartbeat(e: Arc<Engine>) {
    let every = interval_for(e.opts.settings.rescue_after);
    let mut retry = retry_backoff(every);
    let mut wait = every;
    let info = e.info();
    loop {
        tokio::select! {
            _ = e.stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let pairs: Vec<HeldJob> = lock(&e.held)
            .iter()
            .map(|(id, h)| HeldJob {
                id: *id,
                attempt: h.attempt,
            })
            .collect();
        let mut ok = true;
        let mut outage = false;
        if !pairs.is_empty() {
            match heartbeat_many(&e.pool, &pairs).await {
                Ok(alive) => {
                    let alive: std::collections::HashSet<i64> = alive.into_iter().collect();
                    let held = lock(&e.held);
                    for p in pairs.iter().filter(|p| !alive.contains(&p.id)) {
                        if let Some(h) = held.get(&p.id).filter(|h| h.attempt == p.attempt) {
                            tracing::warn!(
                                job.id = p.id,
                                job.attempt = p.attempt,
                                "apalis storage: job was taken away from this worker (cancelled or rescued); stopping its handler"
                            );
                            h.lost.cancel();
                        }
                    }
                }
                Err(err) => {
                    ok = false;
                    outage = e.availability.observe(&err);
                    tracing::warn!(error = %err, "apalis storage: heartbeat failed; retrying soon");
                }
            }
        }
        // The schema's record comes back with the worker's row (no query of its own).
        let mut recorded = None;
        if ok {
            match worker_upsert(&e.pool, &info).await {
                Ok(r) => {
                    e.availability.success();
                    recorded = Some(r);
                }
                Err(err) => {
                    ok = false;
                    outage = e.availability.observe(&err);
                    tracing::warn!(error = %err, "apalis storage: worker heartbeat failed; retrying soon");
                }
            }
        }
        // A `skiplock migrate` of another release since this storage started: its statements
        // may not fit the new schema, so it claims nothing more; its job stream then ends and
        // apalis closes the storage as on a graceful stop (puts back what it held, writes its
        // acks, removes its row). apalis gives a backend no way to fail its worker with an
        // error: the ERROR line says why. Also checked after a beat that failed for another
        // reason than an outage (the new schema may be what failed it).
        if !e.claiming.is_cancelled() {
            let moved = moved_after_beat(&e.pool, recorded, outage)
                .await
                .unwrap_or_else(|err| {
                    e.availability.observe(&err);
                    None
                });
            if let Some(m) = moved {
                tracing::error!(
                    "apalis storage: the schema was migrated while this worker ran ({m}); stopping: start the release that migrated it"
                );
                e.claiming.cancel();
            }
        }
        if ok {
            retry.reset();
            wait = every;
        } else {
            wait = retry.next_delay();
        }
    }
}

/// Turns apalis's "shutting down" (a state it only lets us poll) into the engine's
/// `shutdown` token and stops claiming at once.
async fn watch(e: Arc<Engine>, worker: WorkerContext) {
    loop {
        if worker.is_shutting_down() {
            e.claiming.cancel();
            e.shutdown.cancel();
            return;
        }
        tokio::select! {
            _ = e.stop.cancelled() => return,
            _ = tokio::time::sleep(WATCH_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            kind: "k".into(),
            queue: "default".into(),
            concurrency: 10,
            settings: QueueSettings::default(),
            rescuer: true,
        }
    }

    #[test]
    fn options_refuse_empty_names_and_a_zero_or_huge_concurrency() {
        assert!(opts().validate().is_ok());
        let e = Options {
            kind: " ".into(),
            ..opts()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("kind is empty"), "{e}");
        let e = Options {
            queue: "".into(),
            ..opts()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("queue name is empty"), "{e}");
        let e = Options {
            concurrency: 0,
            ..opts()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("between 1 and"), "{e}");
        assert!(
            Options {
                concurrency: MAX_QUEUE_CONCURRENCY + 1,
                ..opts()
            }
            .validate()
            .is_err()
        );
    }
}
