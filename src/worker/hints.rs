//! Settle hints ([`super::listener::Wake::Settle`]): an enqueue gave jobs dependency edges
//! while they may have been finishing, and an ack that finished one before the edges committed
//! could not see them (`skiplock._add_dependencies`, sql/api/12_flows.sql). One task per worker
//! process settles them ([`run`]): the listener hands it the hinted ids ([`Hints::hint`], never
//! waiting), and each pass reads at most [`PER_PASS`] of them in one statement
//! (`skiplock._settle_added`), behind the worker's `settling` permit, as the slices after an
//! ack are. A job not finished yet (running, or its ack not yet committed) is read again a
//! moment later, [`TRIES`] times, then left to the maintenance's sweep
//! (`skiplock.settle_dependencies`), as a failure is. Any enqueuer sends hints (300 ids a
//! transaction, to every listening worker): a task per hint, each with its statement, let a
//! stream of them take the runtime pool's connections from the claims and acks; here at most
//! [`HELD`] ids wait, the rest are the sweep's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::acks::{SETTLE_SLICE, settle_rest};
use crate::store::Pool;
use crate::store::flows::settle_added;

/// How many times a hinted job that has not finished is read, and the first wait between two
/// reads (doubling: about 13 s in all, then the sweep's).
pub const TRIES: u32 = 8;
pub const RETRY: Duration = Duration::from_millis(50);
/// The most hinted jobs read in one pass (one statement).
pub const PER_PASS: usize = 1000;
/// The most hinted jobs waiting to be read; the ids of hints past it are dropped (the sweep
/// settles their edges).
pub const HELD: usize = 10_000;
/// The most hints waiting for the task (the listener never waits for it).
const CHANNEL: usize = 256;

/// The listener's side: hands hinted ids to the task.
#[derive(Clone)]
pub struct Hints(mpsc::Sender<Vec<i64>>);

impl Hints {
    /// Hands `ids` to the task; when it is behind by [`CHANNEL`] hints, they are dropped.
    pub fn hint(&self, ids: Vec<i64>) {
        if let Err(e) = self.0.try_send(ids) {
            tracing::debug!(error = %e, "settle hints are behind; the maintenance's sweep settles these");
        }
    }
}

/// The hinted jobs waiting to be read: per job, how many reads it has had and when it is
/// read next. Bounded by [`HELD`].
#[derive(Debug, Default)]
pub struct Held {
    jobs: BTreeMap<i64, (u32, Instant)>,
}

impl Held {
    /// Adds `ids`, due now; a job already held keeps its place. Returns how many were dropped
    /// (past [`HELD`]).
    pub fn add(&mut self, ids: impl IntoIterator<Item = i64>, now: Instant) -> usize {
        let mut dropped = 0;
        for id in ids {
            if self.jobs.len() >= HELD && !self.jobs.contains_key(&id) {
                dropped += 1;
                continue;
            }
            self.jobs.entry(id).or_insert((0, now));
        }
        dropped
    }

    /// The jobs due at `now`, at most [`PER_PASS`].
    pub fn due(&self, now: Instant) -> Vec<i64> {
        self.jobs
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(id, _)| *id)
            .take(PER_PASS)
            .collect()
    }

    /// When the next job is due (None: none held).
    pub fn next(&self) -> Option<Instant> {
        self.jobs.values().map(|(_, at)| *at).min()
    }

    /// The jobs `read` were read at `now`; `busy` of them had not finished: each is read
    /// again after its wait, the rest are done. Returns the jobs given up (read [`TRIES`]
    /// times).
    pub fn read(&mut self, read: &[i64], busy: &[i64], now: Instant) -> Vec<i64> {
        let mut given_up = Vec::new();
        for id in read {
            if !busy.contains(id) {
                self.jobs.remove(id);
                continue;
            }
            let Some((tries, at)) = self.jobs.get_mut(id) else {
                continue;
            };
            *tries += 1;
            if *tries >= TRIES {
                given_up.push(*id);
                self.jobs.remove(id);
            } else {
                *at = now + RETRY * 2u32.pow(*tries - 1);
            }
        }
        given_up
    }

    /// Forgets `ids` (a failed read: the sweep's).
    pub fn forget(&mut self, ids: &[i64]) {
        for id in ids {
            self.jobs.remove(id);
        }
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

/// Starts the task; it ends with `stop`, or once every [`Hints`] is dropped and nothing is
/// held.
pub fn spawn(
    pool: Pool,
    permits: Arc<Semaphore>,
    stop: CancellationToken,
) -> (Hints, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(CHANNEL);
    (Hints(tx), tokio::spawn(run(pool, permits, rx, stop)))
}

async fn run(
    pool: Pool,
    permits: Arc<Semaphore>,
    mut rx: mpsc::Receiver<Vec<i64>>,
    stop: CancellationToken,
) {
    let mut held = Held::default();
    let mut open = true;
    loop {
        if !open && held.is_empty() {
            return;
        }
        let next = held.next();
        tokio::select! {
            _ = stop.cancelled() => return,
            got = rx.recv(), if open => match got {
                Some(ids) => take(&mut held, ids),
                None => open = false,
            },
            _ = sleep_until(next), if next.is_some() => {}
        }
        while let Ok(ids) = rx.try_recv() {
            take(&mut held, ids);
        }
        let due = held.due(Instant::now());
        if due.is_empty() {
            continue;
        }
        let permit = tokio::select! {
            _ = stop.cancelled() => return,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let answer = settle_added(&pool, &due, SETTLE_SLICE).await;
        drop(permit);
        match answer {
            Ok(h) => {
                let given_up = held.read(&due, &h.busy, Instant::now());
                if !given_up.is_empty() {
                    tracing::debug!(jobs = ?given_up,
                        "hinted jobs not finished yet; the maintenance's sweep settles their new dependents");
                }
                if !h.left.is_empty() {
                    settle_rest(pool.clone(), permits.clone(), h.left, None).await;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, jobs = ?due,
                    "settling the new dependents of jobs failed; the maintenance's sweep settles them");
                held.forget(&due);
            }
        }
    }
}

fn take(held: &mut Held, ids: Vec<i64>) {
    let dropped = held.add(ids, Instant::now());
    if dropped > 0 {
        tracing::debug!(
            dropped,
            held = held.len(),
            "too many hinted jobs held; the maintenance's sweep settles the rest"
        );
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hinted_jobs_are_read_in_bounded_passes_and_given_up_after_their_tries() {
        let now = Instant::now();
        let mut held = Held::default();
        assert_eq!(held.add(0..(HELD as i64 + 5), now), 5);
        assert_eq!(held.len(), HELD);
        // A job already held keeps its place past the bound.
        assert_eq!(held.add([0], now), 0);
        let due = held.due(now);
        assert_eq!(due.len(), PER_PASS);
        // The first half finished, the rest are read again after RETRY.
        let busy: Vec<i64> = due[PER_PASS / 2..].to_vec();
        assert!(held.read(&due, &busy, now).is_empty());
        assert_eq!(held.len(), HELD - PER_PASS / 2);
        assert!(!held.due(now).contains(&busy[0]));
        assert!(held.due(now + RETRY).contains(&busy[0]));
        held.forget(&due);
        // One job not finished at any read: given up at its last.
        let mut held = Held::default();
        held.add([7], now);
        let mut at = now;
        for i in 1..TRIES {
            assert!(held.read(&[7], &[7], at).is_empty(), "read {i}");
            at = held.next().unwrap();
        }
        assert_eq!(held.read(&[7], &[7], at), vec![7]);
        assert!(held.is_empty());
    }
}
