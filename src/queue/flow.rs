//! Flows (docs/flows.md): jobs that wait for other jobs. A [`Flow`] is a DAG of jobs with
//! local names, enqueued atomically by [`enqueue_flow`] (`skiplock.enqueue_flow` in SQL); a
//! single job waits for existing ones with [`NewJob::depends_on`]. A handler reads how its
//! dependencies went with `ctx.dependency_results()`; anyone may wait for a job's end with
//! [`crate::wait_for`].

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::enqueue::{NewJob, OnDependencyFailure, check_key, check_nul, check_reserved_job};
use super::{JobState, StoredJson};
use crate::error::{Error, Result};

/// A DAG of jobs with local names, for [`enqueue_flow`]. Names are the flow's own; a job may
/// also wait for existing jobs by id ([`NewJob::depends_on`]).
#[derive(Debug, Clone, Default)]
pub struct Flow {
    jobs: Vec<(String, NewJob, Vec<String>)>,
}

impl Flow {
    /// An empty flow.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds job `job` named `name`, waiting for nothing in the flow.
    pub fn job(self, name: impl Into<String>, job: NewJob) -> Self {
        self.job_after(name, job, std::iter::empty::<String>())
    }

    /// Adds job `job` named `name`, waiting for the flow's jobs named `after`.
    pub fn job_after<S: Into<String>>(
        mut self,
        name: impl Into<String>,
        job: NewJob,
        after: impl IntoIterator<Item = S>,
    ) -> Self {
        self.jobs.push((
            name.into(),
            job,
            after.into_iter().map(Into::into).collect(),
        ));
        self
    }

    /// A batch: `children` (named `0`, `1`, …) and `callback` (named `callback`), which runs
    /// once every child has finished, however each did ([`OnDependencyFailure::Run`]); it
    /// reads the outcome with `ctx.dependency_results()` and [`BatchSummary::of`].
    pub fn batch(children: impl IntoIterator<Item = NewJob>, callback: NewJob) -> Self {
        let mut flow = Flow::new();
        let mut names = Vec::new();
        for (i, c) in children.into_iter().enumerate() {
            names.push(i.to_string());
            flow = flow.job(i.to_string(), c);
        }
        flow.job_after(
            "callback",
            callback.on_dependency_failure(OnDependencyFailure::Run),
            names,
        )
    }

    /// The JSON array `skiplock.enqueue_flow` takes. Refuses, before any round trip, what
    /// [`crate::enqueue_job`] refuses (NUL characters, reserved names and keys).
    pub fn to_spec(&self) -> Result<Value> {
        let mut out = Vec::with_capacity(self.jobs.len());
        for (name, j, after) in &self.jobs {
            check_nul(
                &j.kind,
                &j.queue,
                j.unique_key.as_deref(),
                j.limit_key.as_deref(),
                &[&j.args],
            )?;
            check_key(j.unique_key.as_deref())?;
            check_reserved_job(&j.kind, &j.queue)?;
            let mut o = Map::new();
            o.insert("name".into(), json!(name));
            o.insert("kind".into(), json!(j.kind));
            o.insert("args".into(), j.args.clone());
            o.insert("queue".into(), json!(j.queue));
            o.insert("priority".into(), json!(j.priority));
            o.insert("max_attempts".into(), json!(j.max_attempts));
            o.insert("on_conflict".into(), json!(j.on_conflict.as_str()));
            o.insert(
                "on_dependency_failure".into(),
                json!(j.on_dependency_failure.as_str()),
            );
            if let Some(t) = j.run_at {
                crate::time::check("run_at", t)?;
                o.insert("run_at".into(), json!(t.to_rfc3339()));
            }
            if let Some(k) = &j.unique_key {
                o.insert("unique_key".into(), json!(k));
            }
            if let Some(k) = &j.limit_key {
                o.insert("limit_key".into(), json!(k));
            }
            if !j.tags.is_empty() {
                o.insert("tags".into(), json!(j.tags));
            }
            if let Some(m) = &j.meta {
                o.insert("meta".into(), m.clone());
            }
            if let Some(u) = &j.unique_by {
                o.insert("unique_by".into(), json!(u.to_sql()));
            }
            if let Some(d) = j.unique_for {
                o.insert(
                    "unique_for".into(),
                    json!(format!("{} microseconds", d.as_micros())),
                );
            }
            let deps: Vec<Value> = after
                .iter()
                .map(|n| json!(n))
                .chain(j.depends_on.iter().map(|id| json!(id)))
                .collect();
            if !deps.is_empty() {
                o.insert("depends_on".into(), Value::Array(deps));
            }
            out.push(Value::Object(o));
        }
        Ok(Value::Array(out))
    }
}

/// What [`enqueue_flow`] created: the flow's id (its first job's) and each job's id by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowIds {
    /// The flow's id, for `skiplock.flow_progress` and the console's flow page.
    pub flow: i64,
    /// Each job's id by its local name.
    pub jobs: BTreeMap<String, i64>,
}

impl FlowIds {
    /// The id of the job named `name`.
    pub fn id(&self, name: &str) -> Option<i64> {
        self.jobs.get(name).copied()
    }
}

/// One dependency of a job, as it finished (`skiplock.dependency_results`).
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct DependencyResult {
    /// Its id.
    pub id: i64,
    /// Its local name in its flow (`None` outside one).
    pub name: Option<String>,
    /// Its kind (`None` if the row is gone).
    pub kind: Option<String>,
    /// Its state (`None` if the row is gone).
    pub state: Option<JobState>,
    /// What its handler returned on completion (read per dependency: one that serde_json
    /// cannot read fails only [`DependencyResult::result_as`] of that one, not the reading of
    /// the others; src/queue/stored.rs).
    pub result: Option<StoredJson>,
}

impl DependencyResult {
    /// The result as `T` (`None` when there is none).
    pub fn result_as<T: DeserializeOwned>(&self) -> Result<Option<T>> {
        let unreadable = |e: &dyn std::fmt::Display| {
            Error::Invalid(format!(
                "result of dependency {} is not readable: {e}",
                self.id
            ))
        };
        match &self.result {
            None => Ok(None),
            Some(r) => {
                let v = r.readable().map_err(|u| unreadable(&u.error))?;
                T::deserialize(v).map(Some).map_err(|e| unreadable(&e))
            }
        }
    }
}

/// How a batch's children (a job's dependencies) went: what a callback reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BatchSummary {
    /// Every dependency.
    pub total: usize,
    /// Completed.
    pub completed: usize,
    /// Discarded.
    pub discarded: usize,
    /// Cancelled.
    pub cancelled: usize,
}

impl BatchSummary {
    /// Counts `results` by state.
    pub fn of(results: &[DependencyResult]) -> BatchSummary {
        let mut s = BatchSummary {
            total: results.len(),
            ..BatchSummary::default()
        };
        for r in results {
            match r.state {
                Some(JobState::Completed) => s.completed += 1,
                Some(JobState::Discarded) => s.discarded += 1,
                Some(JobState::Cancelled) => s.cancelled += 1,
                _ => {}
            }
        }
        s
    }
}

/// How many of a job's dependencies, and of its dependents, the console's job page and
/// `skiplock job` list: any enqueuer may give a job 100,000 dependents a call.
pub const LISTED_DEPENDENCIES: i64 = 100;
/// Up to how many of each they count, to say how many are not listed.
pub const COUNTED_DEPENDENCIES: i64 = 100_000;

/// What a page says of the dependencies (or dependents) it does not list: `listed` of
/// `counted` (as `skiplock.dependency_counts` counts them, up to [`COUNTED_DEPENDENCIES`]);
/// `None` when it lists them all. A count at its bound may be exact or cut: "at least".
pub fn not_listed(listed: usize, counted: i64) -> Option<String> {
    let rest = counted - listed as i64;
    if rest <= 0 {
        None
    } else if counted >= COUNTED_DEPENDENCIES {
        Some(format!("and at least {rest} more"))
    } else {
        Some(format!("and {rest} more"))
    }
}

/// How many dependencies a job has and how many jobs wait for it, each counted up to the
/// bound asked (`skiplock.dependency_counts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct DependencyCounts {
    /// The jobs it waits for.
    pub dependencies: i64,
    /// The jobs that wait for it.
    pub dependents: i64,
}

/// A job that waits for another (the job page's "dependents").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Dependent {
    /// Its id.
    pub id: i64,
    /// Its kind.
    pub kind: String,
    /// Its state.
    pub state: JobState,
}

/// One job of a flow (`skiplock.flow_members`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct FlowMember {
    /// Its local name (`None` for a job outside a recorded flow).
    pub name: Option<String>,
    /// Its id.
    pub id: i64,
    /// Its kind.
    pub kind: String,
    /// Its state.
    pub state: JobState,
    /// How many dependencies it still waits for.
    pub pending: i32,
}

/// How many jobs of a flow are in each state (`skiplock.flow_progress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct FlowProgress {
    /// Every job of the flow.
    pub total: i64,
    /// Waiting for dependencies.
    pub waiting: i64,
    /// Claimable (or due later).
    pub available: i64,
    /// Running.
    pub running: i64,
    /// Completed.
    pub completed: i64,
    /// Discarded.
    pub discarded: i64,
    /// Cancelled.
    pub cancelled: i64,
    /// The counts are of the first jobs a walk from a job that is not a recorded flow
    /// reached: its dependents go on past the bound (`flow_members.max_jobs`, 10,000).
    pub truncated: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep(id: i64, state: JobState) -> DependencyResult {
        DependencyResult {
            id,
            name: None,
            kind: Some("k".into()),
            state: Some(state),
            result: None,
        }
    }

    #[test]
    fn a_page_says_how_many_dependencies_it_does_not_list() {
        assert_eq!(not_listed(3, 3), None);
        assert_eq!(not_listed(0, 0), None);
        assert_eq!(not_listed(100, 250).as_deref(), Some("and 150 more"));
        assert_eq!(
            not_listed(100, COUNTED_DEPENDENCIES).as_deref(),
            Some("and at least 99900 more")
        );
    }

    #[test]
    fn a_batch_summary_counts_each_final_state() {
        let s = BatchSummary::of(&[
            dep(1, JobState::Completed),
            dep(2, JobState::Completed),
            dep(3, JobState::Discarded),
            dep(4, JobState::Cancelled),
            dep(5, JobState::Running),
        ]);
        assert_eq!(
            s,
            BatchSummary {
                total: 5,
                completed: 2,
                discarded: 1,
                cancelled: 1
            }
        );
    }

    #[test]
    fn a_batch_is_children_and_a_callback_that_runs_whatever_they_did() {
        let spec = Flow::batch(
            [
                NewJob::new("child", json!({"n": 1})),
                NewJob::new("child", json!({"n": 2})),
            ],
            NewJob::new("done", json!({})),
        )
        .to_spec()
        .unwrap();
        let jobs = spec.as_array().unwrap();
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[2]["name"], "callback");
        assert_eq!(jobs[2]["depends_on"], json!(["0", "1"]));
        assert_eq!(jobs[2]["on_dependency_failure"], "run");
        assert!(jobs[0].get("depends_on").is_none());
    }

    #[test]
    fn a_spec_names_flow_jobs_by_name_and_existing_jobs_by_id() {
        let spec = Flow::new()
            .job("a", NewJob::new("k", json!({})))
            .job_after("b", NewJob::new("k", json!({})).depends_on([41]), ["a"])
            .to_spec()
            .unwrap();
        assert_eq!(spec[1]["depends_on"], json!(["a", 41]));
    }

    #[test]
    fn a_spec_refuses_nul_before_the_round_trip() {
        let e = Flow::new()
            .job("a", NewJob::new("k", json!({"s": "a\u{0}b"})))
            .to_spec()
            .unwrap_err();
        assert!(e.to_string().contains("NUL"), "{e}");
    }
}
