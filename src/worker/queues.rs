//! The queues a worker serves: one supervised producer per queue.
//!
//! With explicit queues (`SKIPLOCK_QUEUES`, `--queues`) the set is fixed. A worker serving
//! every queue discovers them **from the jobs table**: every poll interval, and soon after a
//! NOTIFY names a queue it does not serve yet (debounced: a burst of such hints costs one
//! discovery). It runs at most `SKIPLOCK_MAX_QUEUES` producers, and a producer whose queue
//! stayed empty for [`RETIRE_AFTER_POLLS`] poll intervals retires. A NOTIFY payload never
//! creates a producer: any login may send one.
//!
//! At the cap, no queue waits for good behind others: discovery goes round the queues in
//! name order from where the last one stopped (so queues named to sort first cannot keep
//! the others from being found), and a queue with due jobs that finds no room takes the place
//! of the producer whose claims have found its queue drained the longest (at least one poll
//! interval): that producer claims no more and retires, its started jobs run on
//! (`crates/skiplock-cli/tests/worker.rs`, `a_capped_worker_serves_a_queue_behind_busy_ones_named_first`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::Shared;
use super::cursor::Cursors;
use super::listener::Wake;
use super::producer::{self, CLAIM_BACKOFF, Exit, Producer, RETIRE_AFTER_POLLS};
use super::release::{self, count_attempt_after};
use super::supervisor::supervise;
use crate::config::DEFAULT_QUEUE_CONCURRENCY;
use crate::db::outage::Backoff;
use crate::error::Result;
use crate::store::claim::discover_queues;
use crate::store::notify::waiting_add;

/// Shortest time between two discoveries triggered by NOTIFY hints.
pub const DISCOVERY_DEBOUNCE: Duration = Duration::from_millis(250);
/// Longest wait between two failed discoveries.
pub const DISCOVERY_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// At most one "queues wait for a producer" warning per this long.
const CAP_WARNING_EVERY: Duration = Duration::from_secs(60);

/// The producers of a worker, by queue.
pub(crate) struct Queues {
    shared: Arc<Shared>,
    map: Mutex<HashMap<String, Arc<Producer>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Serving every queue: discover, cap and retire.
    discover: bool,
    /// A hint that a discovery may find something (an unknown queue was named).
    hint: Notify,
}

/// Where the next discovery starts, given how many queues this one asked for (`asked`) and
/// found: after the last queue found when it found as many as it asked for (more may
/// follow), else from the first again.
pub(crate) fn next_discovery_start(found: &[String], asked: usize) -> Option<String> {
    if asked > 0 && found.len() >= asked {
        found.last().cloned()
    } else {
        None
    }
}

impl Queues {
    pub fn new(shared: Arc<Shared>, discover: bool) -> Arc<Self> {
        Arc::new(Queues {
            shared,
            map: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
            discover,
            hint: Notify::new(),
        })
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Producer>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts serving `queue` with `limit` slots unless it is served already, the worker is
    /// stopping, or (when discovering) `SKIPLOCK_MAX_QUEUES` producers run. Whether it did.
    pub fn start(self: &Arc<Self>, queue: &str, limit: usize) -> bool {
        let mut map = self.map();
        if map.contains_key(queue) || self.shared.stop.claiming.is_cancelled() {
            return false;
        }
        if self.discover && map.len() >= self.shared.settings.max_queues {
            return false;
        }
        let retire_after = self
            .discover
            .then(|| self.shared.settings.poll_interval * RETIRE_AFTER_POLLS);
        let p = Arc::new(Producer::new(
            queue,
            limit,
            Arc::new(Notify::new()),
            retire_after,
            Cursors::new(
                self.shared.settings.claim_lookback,
                self.shared.settings.poll_interval,
            ),
        ));
        map.insert(queue.to_string(), p.clone());
        drop(map);
        tracing::info!(queue, concurrency = limit, "serving queue");
        let me = self.clone();
        let t = tokio::spawn(async move {
            let sh = me.shared.clone();
            let retired = Arc::new(AtomicBool::new(false));
            let task = format!("producer of queue {}", p.queue);
            supervise(&task, sh.stop.claiming.clone(), |restarts| {
                let (sh, p, retired) = (sh.clone(), p.clone(), retired.clone());
                async move {
                    if restarts > 0 {
                        release_unstarted(&sh, &p).await;
                    }
                    if producer::run(sh, p, restarts > 0).await == Exit::Retired {
                        retired.store(true, Ordering::Relaxed);
                    }
                    Ok(())
                }
            })
            .await;
            if retired.load(Ordering::Relaxed) {
                me.retire(&p);
            }
        });
        self.tasks.lock().unwrap_or_else(|p| p.into_inner()).push(t);
        true
    }

    /// Forgets an idle producer; a wake that reached it meanwhile becomes a discovery hint,
    /// and so does the room a producer made for a waiting queue.
    fn retire(&self, p: &Producer) {
        self.map().remove(&p.queue);
        if p.give_way.load(Ordering::Relaxed) {
            tracing::info!(queue = %p.queue, "queue idle; its producer retired to make room for a queue with due jobs");
            self.hint.notify_one();
        } else {
            tracing::info!(queue = %p.queue, "queue idle; its producer retired");
        }
        if p.wake.notified().now_or_never().is_some() {
            self.hint.notify_one();
        }
    }

    /// Asks up to `n` producers whose claims have found their queue drained for at least
    /// `min_idle` (the longest idle first) to make room for queues with due jobs.
    fn make_room(&self, n: usize, min_idle: Duration) {
        let mut idle: Vec<(Instant, Arc<Producer>)> = self
            .map()
            .values()
            .filter(|p| !p.give_way.load(Ordering::Relaxed))
            .filter_map(|p| {
                p.idle_since()
                    .filter(|t| t.elapsed() >= min_idle)
                    .map(|t| (t, p.clone()))
            })
            .collect();
        idle.sort_by_key(|(t, _)| *t);
        for (_, p) in idle.into_iter().take(n) {
            tracing::debug!(queue = %p.queue, "asking an idle producer to make room");
            p.give_way.store(true, Ordering::Relaxed);
            p.wake.notify_one();
        }
    }

    /// Routes a listener event: a known queue's producer is woken; a queue not served yet is
    /// only a hint for the next discovery (when discovering), never a new producer.
    pub fn wake(&self, w: Wake) {
        match w {
            Wake::Queue(q) => {
                let known = self.map().get(&q).map(|p| p.wake.clone());
                match known {
                    Some(n) => n.notify_one(),
                    None if self.discover => self.hint.notify_one(),
                    None => {}
                }
            }
            Wake::All => {
                for p in self.map().values() {
                    p.wake.notify_one();
                }
                if self.discover {
                    self.hint.notify_one();
                }
            }
            Wake::Lost | Wake::Settle(_) => {}
        }
    }

    /// The producer tasks started so far (taken: for the shutdown to await).
    pub fn take_tasks(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Discovers queues until the worker stops claiming: every poll interval, or after a
    /// hint (debounced); backs off while the database is unavailable.
    pub async fn discover_loop(self: Arc<Self>) -> Result<()> {
        let sh = self.shared.clone();
        let stop = sh.stop.claiming.clone();
        let mut backoff = Backoff::new(CLAIM_BACKOFF.0, DISCOVERY_BACKOFF_MAX);
        let debounce = DISCOVERY_DEBOUNCE.min(sh.settings.poll_interval);
        let mut warned: Option<Instant> = None;
        // Where this discovery starts (see `next_discovery_start`).
        let mut after: Option<String> = None;
        loop {
            let served: Vec<String> = self.map().keys().cloned().collect();
            let room = sh.settings.max_queues.saturating_sub(served.len());
            // Waiting on every queue (''): an insert into a queue no producer serves yet
            // must still wake this worker. Before the look, so a job inserted before the
            // registration was visible is found by it.
            if let Err(e) = waiting_add(&sh.db.pool, &sh.worker_id, "").await {
                tracing::debug!(error = %e, "could not register as waiting on every queue");
            }
            // One more than there is room for, to know whether queues are left waiting.
            match self.discover(&served, room + 1, &mut after).await {
                Ok(found) => {
                    backoff.reset();
                    let waiting = found
                        .iter()
                        .filter(|q| !self.start(q, DEFAULT_QUEUE_CONCURRENCY))
                        .count();
                    if waiting > 0 {
                        self.make_room(waiting, sh.settings.poll_interval);
                    }
                    if waiting > 0 && warned.is_none_or(|t| t.elapsed() >= CAP_WARNING_EVERY) {
                        warned = Some(Instant::now());
                        tracing::warn!(
                            max_queues = sh.settings.max_queues,
                            "more queues have due jobs than SKIPLOCK_MAX_QUEUES producers may serve; they take the places of producers whose queues are drained"
                        );
                    }
                }
                Err(e) => {
                    sh.db.failed(&e);
                    let delay = backoff.next_delay();
                    tracing::warn!(error = %e, "queue discovery failed; retrying in {delay:?}");
                    tokio::select! {
                        _ = stop.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(delay) => {}
                    }
                    continue;
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = tokio::time::sleep(sh.settings.poll_interval) => {}
                _ = self.hint.notified() => {
                    tokio::select! {
                        _ = stop.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(debounce) => {}
                    }
                }
            }
        }
    }
}

impl Queues {
    /// Up to `want` queues with due jobs not in `served`, in name order from `after` (and on
    /// from the first queue when the names run out), which it moves on for the next one.
    async fn discover(
        &self,
        served: &[String],
        want: usize,
        after: &mut Option<String>,
    ) -> Result<Vec<String>> {
        let sh = &self.shared;
        let mut found =
            discover_queues(&sh.db.pool, &sh.kinds, served, want, after.as_deref()).await?;
        if found.len() < want && after.is_some() {
            // The end of the names: the rest from the first.
            let mut skip = served.to_vec();
            skip.extend(found.iter().cloned());
            let rest = want - found.len();
            found.extend(discover_queues(&sh.db.pool, &sh.kinds, &skip, rest, None).await?);
        }
        *after = next_discovery_start(&found, want);
        Ok(found)
    }
}

/// After a producer failed: puts back the jobs it claimed but never started (retried with
/// backoff while the database is unavailable; given up once the worker stops, when the
/// shutdown sweep does it).
async fn release_unstarted(sh: &Shared, p: &Producer) {
    let count = count_attempt_after(p.one_at_a_time.load(Ordering::Relaxed));
    let reason = format!(
        "released: the producer of queue {} failed after claiming this job",
        p.queue
    );
    let mut backoff = Backoff::new(CLAIM_BACKOFF.0, CLAIM_BACKOFF.1);
    loop {
        match release::unstarted(sh, Some(&p.queue), count, &reason).await {
            Ok(_) => return,
            Err(e) => {
                sh.db.failed(&e);
                if sh.stop.claiming.is_cancelled() {
                    return;
                }
                let delay = backoff.next_delay();
                tracing::warn!(queue = %p.queue, error = %e, "returning claimed jobs failed; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_goes_round_the_queue_names() {
        let found = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // As many as asked for: more may follow, the next one starts after the last.
        assert_eq!(
            next_discovery_start(&found(&["a", "b"]), 2).as_deref(),
            Some("b")
        );
        // Fewer: every queue was seen, the next one starts at the first.
        assert_eq!(next_discovery_start(&found(&["a"]), 2), None);
        assert_eq!(next_discovery_start(&found(&[]), 1), None);
        assert_eq!(next_discovery_start(&found(&[]), 0), None);
    }
}
