//! The queue's data model: a job's states, the job as a worker and as an operator sees it,
//! a job to enqueue (with its validation), typed jobs, flows, and the pure retry policy
//! ([`backoff`]). It runs no statement and sits below the store (docs/layout.md, "Layers"):
//! the statements that move jobs through their states are in `crate::store` (enqueue:
//! [`crate::store::jobs::enqueue`]), and what a service calls to enqueue or wait is
//! [`crate::client`].
//!
//! States: `available` → `running` → `completed` | `discarded` | `cancelled`, and back to
//! `available` on a retryable error, a snooze, a rescue or a shutdown.

pub mod args;
pub mod backoff;
pub mod enqueue;
pub mod flow;
pub mod stored;
pub mod typed;

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use args::RawArgs;
pub use enqueue::{NewJob, OnConflict, OnDependencyFailure, UniqueBy};
pub use stored::{StoredJson, Unreadable};
pub use typed::{JobArgs, JobOptions};

/// The queue of a job enqueued without one.
pub use crate::names::DEFAULT_QUEUE;

/// The six states of a job row (`skiplock.job_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for the jobs it depends on (docs/flows.md); becomes `Available` once they
    /// have finished, and no claim sees it before.
    Waiting,
    /// Claimable once `scheduled_at <= now()`.
    Available,
    /// Claimed by a worker.
    Running,
    /// Finished successfully.
    Completed,
    /// Failed for good (out of attempts, bad args, or discarded by its handler).
    Discarded,
    /// Cancelled by an operator or its handler.
    Cancelled,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 6] = [
        JobState::Waiting,
        JobState::Available,
        JobState::Running,
        JobState::Completed,
        JobState::Discarded,
        JobState::Cancelled,
    ];

    /// The name used in SQL and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
            JobState::Available => "available",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::Discarded => "discarded",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Whether the job is done with (retention judges these by `finalized_at`).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Discarded | JobState::Cancelled
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown job state {s:?} (expected one of: waiting, available, running, completed, discarded, cancelled)"
                )
            })
    }
}

/// What an enqueue did (`skiplock.enqueue_outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnqueueOutcome {
    /// A new job.
    Inserted,
    /// An available job of the same kind and queue held the unique key and was left as it was
    /// ([`OnConflict::Keep`]).
    Deduplicated,
    /// That job was updated with what the caller gave ([`OnConflict::Replace`]).
    Replaced,
}

impl FromStr for EnqueueOutcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "inserted" => Ok(EnqueueOutcome::Inserted),
            "deduplicated" => Ok(EnqueueOutcome::Deduplicated),
            "replaced" => Ok(EnqueueOutcome::Replaced),
            other => Err(format!("unknown enqueue outcome {other:?}")),
        }
    }
}

/// The job an enqueue made or found, and what it did: so a caller can tell a new job from one
/// deduplicated into an existing job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The job's id (the new job's, or the one holding the unique key).
    pub id: i64,
    /// What happened.
    pub outcome: EnqueueOutcome,
}

/// A job as a worker sees it after claiming it (read by `crate::store::claim::claim`).
#[derive(Debug, Clone)]
pub struct Job {
    /// Row id.
    pub id: i64,
    /// Which handler runs it.
    pub kind: String,
    /// The queue it was claimed from.
    pub queue: String,
    /// Handler arguments (a JSON object), as stored: each job's handler parses them, so a
    /// row serde_json cannot read fails alone ([`args`]).
    pub args: RawArgs,
    /// Smaller runs first.
    pub priority: i16,
    /// This attempt's number, starting at 1.
    pub attempt: i32,
    /// After this many attempts an error discards the job.
    pub max_attempts: i32,
    /// When the job became due.
    pub scheduled_at: DateTime<Utc>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When this attempt started.
    pub attempted_at: Option<DateTime<Utc>>,
    /// Labels to filter by (sorted, once each).
    pub tags: Vec<String>,
    /// What is about the job rather than its work (a JSON object; `{}` when none was given),
    /// read with its row but never failing the rows read with it: a meta serde_json cannot
    /// read discards this job alone, as unreadable args do ([`stored`]).
    pub meta: StoredJson,
}

/// A whole job row, for operators (`skiplock job`, `skiplock jobs`; read by
/// `crate::store::jobs::get_job` and `crate::store::jobs::list_jobs`).
#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    /// Row id.
    pub id: i64,
    /// Handler name.
    pub kind: String,
    /// Queue name.
    pub queue: String,
    /// Arguments, as stored (shown as text even when serde_json cannot read them: [`args`]).
    pub args: RawArgs,
    /// Its state.
    pub state: JobState,
    /// Priority (smaller first).
    pub priority: i16,
    /// Attempts made so far.
    pub attempt: i32,
    /// Attempt limit.
    pub max_attempts: i32,
    /// When due.
    pub scheduled_at: DateTime<Utc>,
    /// When enqueued.
    pub created_at: DateTime<Utc>,
    /// When the last attempt started.
    pub attempted_at: Option<DateTime<Utc>>,
    /// Which worker ran the last attempt.
    pub attempted_by: Option<String>,
    /// Last heartbeat of a running attempt.
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// When it reached a finished state.
    pub finalized_at: Option<DateTime<Utc>>,
    /// Dedup / debounce key.
    pub unique_key: Option<String>,
    /// `[{attempt, at, error}]` (shown as text when serde_json cannot read it: [`stored`]).
    pub errors: StoredJson,
    /// What the handler reported on completion (likewise).
    pub result: Option<StoredJson>,
    /// Labels to filter by.
    pub tags: Vec<String>,
    /// What is about the job rather than its work (likewise).
    pub meta: StoredJson,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_unknown_is_named() {
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>().unwrap(), s);
        }
        let e = "done".parse::<JobState>().unwrap_err();
        assert!(e.contains("\"done\""), "{e}");
        assert!(JobState::Completed.is_finished());
        assert!(!JobState::Running.is_finished());
    }
}
