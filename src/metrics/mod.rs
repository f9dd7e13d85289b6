//! Prometheus metrics: what a worker counts as it runs (through the `metrics` facade, so a
//! process without a recorder pays nothing and an application embedding the worker can
//! install its own), and what a scrape reads from the database (queue depth, the parts' gauges).
//!
//! - The Prometheus exporter is the crate skiplock-console's (`skiplock_console::metrics`):
//!   `skiplock worker` with `SKIPLOCK_METRICS_LISTEN` installs its recorder and serves
//!   `/metrics`, the process's counters and histograms, then the database's view (the
//!   store's `metrics` statements read it); `skiplock web` serves the database's view only,
//!   behind the console's auth (the console runs no jobs).
//!
//! The hot path only touches pre-registered handles: a job's series are looked up once
//! when it is claimed ([`WorkerMetrics::series`], a read-locked map), and every update after
//! that is an atomic add (counters) or a lock-free push (histogram samples, drained by the
//! exporter's upkeep). docs/operations.md, "Metrics", lists every series.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use metrics::{Counter, Histogram, counter, histogram};

use crate::queue::JobState;

/// Jobs finished by kind, queue and [`Finish`] outcome.
pub const JOBS_FINISHED: &str = "skiplock_jobs_finished_total";
/// How long handlers ran, by kind.
pub const JOB_DURATION: &str = "skiplock_job_duration_seconds";
/// Jobs per claim statement (including claims that found none).
pub const CLAIM_BATCH: &str = "skiplock_claim_batch_size";
/// Acks per write of the ack writer.
pub const ACK_BATCH: &str = "skiplock_ack_batch_size";
/// Jobs the rescuer returned, by kind and new state.
pub const RESCUED: &str = "skiplock_rescued_jobs_total";

/// Enqueues through the Rust API refused because their queue was full (SK429), by queue.
pub const ENQUEUE_REFUSED: &str = "skiplock_enqueue_refused_total";

/// Buckets of the duration histograms (seconds): 1 ms to 10 min.
pub const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0,
];
/// Buckets of the batch-size histograms (jobs); the ack writer writes at most 2000 at once.
pub const BATCH_BUCKETS: &[f64] = &[
    0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0,
];

/// How a job's attempt ended, as written (the `outcome` label of [`JOBS_FINISHED`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Completed.
    Completed,
    /// Failed, back to `available` after a backoff.
    Retried,
    /// Failed for good.
    Discarded,
    /// Cancelled by its handler.
    Cancelled,
    /// Snoozed by its handler (attempt given back).
    Snoozed,
    /// Put back at shutdown after the grace period (attempt given back).
    Released,
    /// The ack was fenced off: the job had been rescued, cancelled or retried meanwhile.
    Lost,
}

impl Finish {
    /// Every outcome.
    pub const ALL: [Finish; 7] = [
        Finish::Completed,
        Finish::Retried,
        Finish::Discarded,
        Finish::Cancelled,
        Finish::Snoozed,
        Finish::Released,
        Finish::Lost,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Completed => "completed",
            Finish::Retried => "retried",
            Finish::Discarded => "discarded",
            Finish::Cancelled => "cancelled",
            Finish::Snoozed => "snoozed",
            Finish::Released => "released",
            Finish::Lost => "lost",
        }
    }

    /// Classifies an ack: its new `state`, whether it gives the attempt back, whether the
    /// worker released the job at shutdown (the handler never returned), and whether the
    /// database accepted it (`written`; otherwise the attempt had been taken away).
    pub fn of(state: JobState, give_back: bool, released: bool, written: bool) -> Finish {
        if !written {
            return Finish::Lost;
        }
        if released {
            return Finish::Released;
        }
        match state {
            JobState::Completed => Finish::Completed,
            JobState::Discarded => Finish::Discarded,
            JobState::Cancelled => Finish::Cancelled,
            JobState::Waiting | JobState::Available | JobState::Running if give_back => {
                Finish::Snoozed
            }
            JobState::Waiting | JobState::Available | JobState::Running => Finish::Retried,
        }
    }
}

/// The series of one (kind, queue): resolved once, then only atomic updates.
pub struct JobSeries {
    finished: [Counter; 7],
    duration: Histogram,
}

impl JobSeries {
    fn new(kind: &str, queue: &str) -> JobSeries {
        let finished = Finish::ALL.map(|f| {
            counter!(JOBS_FINISHED, "kind" => kind.to_string(), "queue" => queue.to_string(),
                     "outcome" => f.as_str())
        });
        JobSeries {
            finished,
            duration: histogram!(JOB_DURATION, "kind" => kind.to_string()),
        }
    }

    /// Counts one finished attempt.
    pub fn finished(&self, f: Finish) {
        // `ALL` lists the variants in declaration order.
        self.finished[f as usize].increment(1);
    }

    /// Records how long a handler ran.
    pub fn ran(&self, d: Duration) {
        self.duration.record(d.as_secs_f64());
    }
}

/// A worker's handles: series per (kind, queue), created on first use, and the batch
/// histograms. Built when the worker starts, so a recorder must be installed before.
pub struct WorkerMetrics {
    series: RwLock<HashMap<String, HashMap<String, Arc<JobSeries>>>>,
    claim_batch: Histogram,
    ack_batch: Histogram,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        WorkerMetrics {
            series: RwLock::new(HashMap::new()),
            claim_batch: histogram!(CLAIM_BATCH),
            ack_batch: histogram!(ACK_BATCH),
        }
    }
}

impl WorkerMetrics {
    /// The series of `kind` in `queue` (a read lock and two lookups when they exist).
    pub fn series(&self, kind: &str, queue: &str) -> Arc<JobSeries> {
        {
            let map = self.series.read().unwrap_or_else(|p| p.into_inner());
            if let Some(s) = map.get(kind).and_then(|m| m.get(queue)) {
                return s.clone();
            }
        }
        let mut map = self.series.write().unwrap_or_else(|p| p.into_inner());
        map.entry(kind.to_string())
            .or_default()
            .entry(queue.to_string())
            .or_insert_with(|| Arc::new(JobSeries::new(kind, queue)))
            .clone()
    }

    /// Records the size of one claim.
    pub fn claimed(&self, jobs: usize) {
        self.claim_batch.record(jobs as f64);
    }

    /// Records the size of one ack write.
    pub fn acked(&self, acks: usize) {
        self.ack_batch.record(acks as f64);
    }
}

/// Counts a job the rescuer returned (rare: the label values are built per call).
pub fn rescued(kind: &str, state: JobState) {
    counter!(RESCUED, "kind" => kind.to_string(), "state" => state.as_str()).increment(1);
}

/// Counts one enqueue statement into `queue` refused because the queue was at its admission
/// limit (SK429; src/queue/admission.rs): one per refused statement, however many jobs it
/// carried, and one per attempt of an `OnFull::Wait` enqueue that was refused.
pub fn enqueue_refused(queue: &str) {
    counter!(ENQUEUE_REFUSED, "queue" => queue.to_string()).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_are_classified_by_state_give_back_release_and_fence() {
        use JobState::*;
        assert_eq!(Finish::of(Completed, false, false, true), Finish::Completed);
        assert_eq!(Finish::of(Available, false, false, true), Finish::Retried);
        assert_eq!(Finish::of(Available, true, false, true), Finish::Snoozed);
        assert_eq!(Finish::of(Discarded, false, false, true), Finish::Discarded);
        assert_eq!(Finish::of(Cancelled, false, false, true), Finish::Cancelled);
        assert_eq!(Finish::of(Available, true, true, true), Finish::Released);
        // A fenced-off ack is lost whatever it said.
        for s in JobState::ALL {
            assert_eq!(Finish::of(s, false, false, false), Finish::Lost);
            assert_eq!(Finish::of(s, true, true, false), Finish::Lost);
        }
        let labels: std::collections::HashSet<_> = Finish::ALL.iter().map(|f| f.as_str()).collect();
        assert_eq!(labels.len(), Finish::ALL.len());
    }

    #[test]
    fn series_are_created_once_per_kind_and_queue() {
        // No recorder in unit tests: the handles are no-ops, but the cache still works.
        let m = WorkerMetrics::default();
        let a = m.series("noop", "default");
        let b = m.series("noop", "default");
        let c = m.series("noop", "other");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        a.finished(Finish::Lost);
        a.ran(Duration::from_millis(3));
        m.claimed(0);
        m.acked(5);
    }
}
