//! What outlives one run of a producer ([`Producer`]): the state its claim loop
//! (`super::run`), its buffer (`crate::worker::buffer`) and its jobs' runs
//! (`crate::worker::executor`) share. Below all three, so none of them needs another's module
//! for it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};

use crate::queue::Job;
use crate::worker::cursor::Cursors;

/// What outlives one run of a producer: its slots (running jobs hold permits), its buffer of
/// jobs claimed ahead, its wake-up signals, and whether it is claiming one job at a time.
pub(crate) struct Producer {
    pub queue: String,
    pub limit: usize,
    pub wake: Arc<Notify>,
    pub slots: Arc<Semaphore>,
    pub slot_freed: Arc<Notify>,
    /// Jobs claimed ahead, waiting for a free slot (each also in `Jobs::running`).
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
    pub(crate) fn ran(&self, took: Duration) {
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
    pub(crate) fn run_time(&self) -> Option<Duration> {
        match self.run_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    pub(crate) fn cursors(&self) -> MutexGuard<'_, Cursors> {
        self.cursors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Since when its claims have found the queue drained (see the field).
    pub fn idle_since(&self) -> Option<Instant> {
        *self.idle_since.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_idle(&self, idle: bool) {
        let mut since = self.idle_since.lock().unwrap_or_else(|p| p.into_inner());
        match (idle, *since) {
            (true, None) => *since = Some(Instant::now()),
            (false, _) => *since = None,
            (true, Some(_)) => {}
        }
    }

    pub(crate) fn buffer(&self) -> MutexGuard<'_, VecDeque<Job>> {
        self.buffer.lock().unwrap_or_else(|p| p.into_inner())
    }
}
