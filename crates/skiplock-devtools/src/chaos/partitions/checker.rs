//! The history checker of the partition run: reads what happened from records kept outside
//! the worker's own bookkeeping (every execution as the handler wrote it, every state change
//! as a trigger wrote it in the same transaction, every enqueue with its result, every fault
//! the driver injected) and judges the whole history at the end. A pure function over the
//! rows ([`check`]), so its unit tests feed it each kind of bad history.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Duration as Span, Utc};

pub use crate::chaos::store::partitions::History;
use crate::chaos::store::partitions::{ExecutionRow, JobRow, TransitionRow};

/// States a job never leaves on its own.
pub const FINAL: [&str; 3] = ["completed", "discarded", "cancelled"];

/// How long before an execution started a fault on its worker may have ended and still
/// explain a second execution of its job: a statement written just before a link broke
/// reaches the server and runs a little later.
pub const SLACK: Span = Span::seconds(2);

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// Jobs in the table.
    pub jobs: usize,
    /// Executions recorded.
    pub executions: usize,
    /// Jobs executed more than once.
    pub duplicates: usize,
    /// Extra executions explained, by what explains them (a fault kind, or `handler error`).
    pub explained: BTreeMap<String, usize>,
    /// Extra executions nothing explains: (job, execution).
    pub unexplained: Vec<(i64, i64)>,
    /// Jobs enqueued and committed that are neither finished, waiting nor running (or gone).
    pub lost: Vec<i64>,
    /// Jobs that entered a final state more than once.
    pub finished_twice: Vec<i64>,
    /// Changes of a running attempt made by a worker that did not own it, or of an attempt
    /// already taken away: a stale ack applied.
    pub stale_acks: Vec<i64>,
    /// Completions of an attempt with no execution of that attempt by its owner.
    pub phantom_completions: Vec<i64>,
    /// Jobs running at the end with a heartbeat older than the rescue window.
    pub stuck: Vec<i64>,
    /// Jobs not finished at the end (waiting or running).
    pub unfinished: Vec<i64>,
    /// Fan-ins that started before one of their dependencies finished.
    pub fan_in_early: Vec<i64>,
    /// Unique keys whose job count differs from the enqueues that inserted one.
    pub replace_mismatch: Vec<String>,
    /// Enqueues that reported an error but whose jobs exist.
    pub failed_but_committed: Vec<i32>,
    /// Jobs discarded (out of attempts).
    pub discarded: usize,
    /// Rescues (a running job given back because its worker sent no heartbeat).
    pub rescues: usize,
    /// The longest time from a rescued job's last heartbeat to its rescue, in seconds.
    pub max_rescue_wait: f64,
    /// State changes (claims, acks) a worker committed while the server's answers to it were
    /// being dropped, by fault kind: commits whose answer that worker read late
    /// (`replies_lost`) or never (`lost_commit`, which resets the connection before it lets the
    /// answers through).
    pub answers_lost: BTreeMap<String, usize>,
}

impl Verdict {
    /// No anomaly of any kind.
    pub fn ok(&self) -> bool {
        self.unexplained.is_empty()
            && self.lost.is_empty()
            && self.finished_twice.is_empty()
            && self.stale_acks.is_empty()
            && self.phantom_completions.is_empty()
            && self.stuck.is_empty()
            && self.unfinished.is_empty()
            && self.fan_in_early.is_empty()
            && self.replace_mismatch.is_empty()
            && self.failed_but_committed.is_empty()
            && self.discarded == 0
    }

    /// One line of the anomalies (empty when none).
    pub fn anomalies(&self) -> String {
        let mut out = Vec::new();
        let mut add = |name: &str, n: usize, sample: String| {
            if n > 0 {
                out.push(format!("{name}={n} {sample}"));
            }
        };
        add(
            "unexplained",
            self.unexplained.len(),
            format!("{:?}", first(&self.unexplained)),
        );
        add("lost", self.lost.len(), format!("{:?}", first(&self.lost)));
        add(
            "finished_twice",
            self.finished_twice.len(),
            format!("{:?}", first(&self.finished_twice)),
        );
        add(
            "stale_acks",
            self.stale_acks.len(),
            format!("{:?}", first(&self.stale_acks)),
        );
        add(
            "phantom_completions",
            self.phantom_completions.len(),
            format!("{:?}", first(&self.phantom_completions)),
        );
        add(
            "stuck",
            self.stuck.len(),
            format!("{:?}", first(&self.stuck)),
        );
        add(
            "unfinished",
            self.unfinished.len(),
            format!("{:?}", first(&self.unfinished)),
        );
        add(
            "fan_in_early",
            self.fan_in_early.len(),
            format!("{:?}", first(&self.fan_in_early)),
        );
        add(
            "replace_mismatch",
            self.replace_mismatch.len(),
            format!("{:?}", first(&self.replace_mismatch)),
        );
        add(
            "failed_but_committed",
            self.failed_but_committed.len(),
            format!("{:?}", first(&self.failed_but_committed)),
        );
        add("discarded", self.discarded, String::new());
        out.join(" ")
    }
}

fn first<T: Clone>(v: &[T]) -> Vec<T> {
    v.iter().take(5).cloned().collect()
}

/// The process id in a worker id (`host:pid:…`, src/worker/builder.rs).
pub fn worker_pid(worker_id: &str) -> Option<i32> {
    let mut parts = worker_id.split(':');
    parts.next()?;
    parts.next()?.parse().ok()
}

/// Judges `h`; `now` is when the run ended, `rescue_after` the workers' rescue window.
pub fn check(h: &History, rescue_after: std::time::Duration, now: DateTime<Utc>) -> Verdict {
    let window = Span::from_std(rescue_after).unwrap_or(Span::MAX);
    let mut v = Verdict {
        jobs: h.jobs.len(),
        executions: h.executions.len(),
        ..Verdict::default()
    };
    let jobs: HashMap<i64, &JobRow> = h.jobs.iter().map(|j| (j.id, j)).collect();
    let mut execs: BTreeMap<i64, Vec<&ExecutionRow>> = BTreeMap::new();
    for e in &h.executions {
        execs.entry(e.job_id).or_default().push(e);
    }
    for list in execs.values_mut() {
        list.sort_by_key(|e| (e.started_at, e.id));
    }
    let mut moves: BTreeMap<i64, Vec<&TransitionRow>> = BTreeMap::new();
    for t in &h.transitions {
        moves.entry(t.job_id).or_default().push(t);
    }
    let errors: BTreeSet<(i64, i32)> = h.handler_errors.iter().copied().collect();
    let slot_of = |pid: i32| h.slots.get(&pid).cloned();
    let worker_addrs: BTreeSet<&str> = h.slots.values().map(|a| a.as_str()).collect();

    // Duplicates: every execution of a job but the one whose completion was recorded (its
    // last, when none was) is an extra one. It needs a fault on its own worker under way while
    // its attempt was that worker's: from the claim of the attempt (less the slack) until the
    // attempt was taken away or ended, or until the execution began if that was later (a worker
    // cut off may start a job it claimed ahead long after the job was rescued, once TCP gets
    // its packets through again, seconds after the fault was healed). Or an error its handler
    // reported for that attempt.
    let completing_exec: HashMap<i64, Option<i64>> =
        h.jobs.iter().map(|j| (j.id, j.result_exec)).collect();
    for (job, list) in &execs {
        if list.len() < 2 {
            continue;
        }
        v.duplicates += 1;
        let kept = completing_exec
            .get(job)
            .copied()
            .flatten()
            .filter(|x| list.iter().any(|e| e.id == *x))
            .unwrap_or(list[list.len() - 1].id);
        let moved = moves.get(job).map(|m| m.as_slice()).unwrap_or(&[]);
        for e in list.iter().filter(|e| e.id != kept) {
            let claimed = moved
                .iter()
                .filter(|t| {
                    t.old_state != "running"
                        && t.new_state == "running"
                        && t.new_attempt == e.attempt
                        && t.new_owner.as_deref() == Some(e.worker_id.as_str())
                        && t.at <= e.started_at
                })
                .map(|t| t.at)
                .max()
                .unwrap_or(e.started_at);
            let ended = moved
                .iter()
                .filter(|t| {
                    t.old_state == "running" && t.old_attempt == e.attempt && t.at >= claimed
                })
                .map(|t| t.at)
                .min()
                .unwrap_or(e.started_at)
                .max(e.started_at);
            let fault = h
                .faults
                .iter()
                .filter(|f| f.pid == Some(e.pid))
                .find(|f| f.started_at <= ended && f.ended_at + SLACK >= claimed);
            if let Some(f) = fault {
                *v.explained.entry(f.kind.clone()).or_default() += 1;
            } else if errors.contains(&(*job, e.attempt)) {
                *v.explained.entry("handler error".into()).or_default() += 1;
            } else {
                v.unexplained.push((*job, e.id));
            }
        }
    }

    // The state changes of each job.
    for (job, list) in &moves {
        let finals = list
            .iter()
            .filter(|t| {
                FINAL.contains(&t.new_state.as_str()) && !FINAL.contains(&t.old_state.as_str())
            })
            .count();
        if finals > 1 {
            v.finished_twice.push(*job);
        }
        let mut taken: BTreeSet<i32> = BTreeSet::new();
        let mut stale = false;
        for t in list {
            if t.old_state != "running" {
                continue;
            }
            if t.rescue {
                v.rescues += 1;
                if let Some(beat) = t.last_beat {
                    let waited = (t.at - beat).num_milliseconds() as f64 / 1000.0;
                    v.max_rescue_wait = v.max_rescue_wait.max(waited);
                }
                taken.insert(t.old_attempt);
                continue;
            }
            // An attempt already taken away can change only through a stale ack.
            if taken.contains(&t.old_attempt) {
                stale = true;
            }
            // A running attempt changed by another worker's session than its owner's.
            let owner_slot = t
                .old_owner
                .as_deref()
                .and_then(worker_pid)
                .and_then(slot_of);
            if let Some(owner) = owner_slot
                && worker_addrs.contains(t.changed_by.as_str())
                && t.changed_by != owner
            {
                stale = true;
            }
            if t.new_state == "completed" {
                let ran = execs.get(job).is_some_and(|l| {
                    l.iter().any(|e| {
                        e.attempt == t.old_attempt
                            && Some(e.worker_id.as_str()) == t.old_owner.as_deref()
                    })
                });
                if !ran {
                    v.phantom_completions.push(*job);
                }
            }
        }
        if stale {
            v.stale_acks.push(*job);
        }
    }

    // Commits made while their answers were dropped (the lost-answer faults' windows hit): on
    // the one connection a lost-commit fault hit, or on any of the worker's for replies_lost.
    for f in h
        .faults
        .iter()
        .filter(|f| f.kind == "lost_commit" || f.kind == "replies_lost")
    {
        let Some(addr) = f.pid.and_then(slot_of) else {
            continue;
        };
        let n = h
            .transitions
            .iter()
            .filter(|t| t.changed_by == addr && (f.port.is_none() || t.port == f.port))
            .filter(|t| t.at >= f.started_at && t.at <= f.ended_at)
            .count();
        *v.answers_lost.entry(f.kind.clone()).or_default() += n;
    }

    // The jobs at the end.
    for j in &h.jobs {
        match j.state.as_str() {
            "completed" => {
                let list = execs.get(&j.id);
                let by = j
                    .result_exec
                    .and_then(|x| list.and_then(|l| l.iter().find(|e| e.id == x)));
                if (list.is_none() || by.is_none_or(|e| e.attempt != j.attempt))
                    && !v.phantom_completions.contains(&j.id)
                {
                    v.phantom_completions.push(j.id);
                }
            }
            "discarded" => v.discarded += 1,
            "cancelled" => {}
            "running" => {
                v.unfinished.push(j.id);
                if j.heartbeat_at.is_none_or(|b| b + window < now) {
                    v.stuck.push(j.id);
                }
            }
            _ => v.unfinished.push(j.id),
        }
    }

    // Every enqueue: its jobs exist (lost otherwise); a failed one left none behind.
    let by_n: HashMap<i64, i64> = h.jobs.iter().filter_map(|j| Some((j.n?, j.id))).collect();
    let mut inserted_per_key: BTreeMap<String, usize> = BTreeMap::new();
    for op in &h.enqueues {
        let key = op.what.strip_prefix("replace:");
        if op.ok {
            for id in &op.ids {
                if !jobs.contains_key(id) {
                    v.lost.push(*id);
                }
            }
            if let Some(k) = key {
                let n = inserted_per_key.entry(k.to_string()).or_default();
                if op.outcome.as_deref() == Some("inserted") {
                    *n += 1;
                }
            }
            if op.what == "flow"
                && let Some((fan_in, deps)) = op.ids.split_last()
                && let Some(start) = execs
                    .get(fan_in)
                    .and_then(|l| l.first())
                    .map(|e| e.started_at)
            {
                let done = |d: &i64| {
                    moves
                        .get(d)
                        .and_then(|l| l.iter().find(|t| t.new_state == "completed").map(|t| t.at))
                };
                if deps.iter().any(|d| done(d).is_none_or(|at| at > start)) {
                    v.fan_in_early.push(*fan_in);
                }
            }
        } else if key.is_none() && op.ns.iter().any(|n| by_n.contains_key(n)) {
            v.failed_but_committed.push(op.op);
        }
    }
    let mut jobs_per_key: BTreeMap<String, usize> = BTreeMap::new();
    for j in &h.jobs {
        if let Some(k) = &j.unique_key {
            *jobs_per_key.entry(k.clone()).or_default() += 1;
        }
    }
    for (k, n) in &inserted_per_key {
        if jobs_per_key.get(k).copied().unwrap_or(0) != *n {
            v.replace_mismatch.push(k.clone());
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::store::partitions::{EnqueueRow, FaultRow};

    const A: &str = "10.231.1.2";
    const B: &str = "10.231.2.2";

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn job(id: i64, state: &str, attempt: i32, result_exec: Option<i64>) -> JobRow {
        JobRow {
            id,
            state: state.into(),
            attempt,
            n: Some(id),
            unique_key: None,
            result_exec,
            finalized_at: Some(t(100)),
            heartbeat_at: None,
            attempted_by: None,
        }
    }

    fn exec(id: i64, job_id: i64, attempt: i32, pid: i32, at: i64) -> ExecutionRow {
        ExecutionRow {
            id,
            job_id,
            attempt,
            worker_id: format!("host:{pid}:ab12"),
            pid,
            started_at: t(at),
            ended_at: Some(t(at + 1)),
            outcome: Some("done".into()),
        }
    }

    fn mv(
        job_id: i64,
        attempt: i32,
        from: &str,
        to: &str,
        pid: i32,
        by: &str,
        at: i64,
    ) -> TransitionRow {
        TransitionRow {
            job_id,
            old_attempt: attempt,
            new_attempt: if from == "running" {
                attempt
            } else {
                attempt + 1
            },
            old_state: from.into(),
            new_state: to.into(),
            old_owner: (from == "running").then(|| format!("host:{pid}:ab12")),
            new_owner: Some(format!("host:{pid}:ab12")),
            changed_by: by.into(),
            port: Some(5000),
            rescue: false,
            last_beat: Some(t(at - 1)),
            at: t(at),
        }
    }

    fn rescue(job_id: i64, attempt: i32, pid: i32, at: i64) -> TransitionRow {
        TransitionRow {
            rescue: true,
            last_beat: Some(t(at - 12)),
            ..mv(job_id, attempt, "running", "available", pid, B, at)
        }
    }

    fn op(op: i32, ids: &[i64]) -> EnqueueRow {
        EnqueueRow {
            op,
            what: "plain".into(),
            ns: ids.to_vec(),
            ok: true,
            ids: ids.to_vec(),
            outcome: None,
            error: None,
        }
    }

    fn partition(pid: i32, from: i64, to: i64) -> FaultRow {
        FaultRow {
            kind: "partition".into(),
            slot: Some(1),
            pid: Some(pid),
            port: None,
            started_at: t(from),
            ended_at: t(to),
        }
    }

    /// Job 1 ran once on A; job 2 ran on A, was rescued during a partition of A, and ran
    /// again on B; A's late ack of job 2 was fenced off (no transition).
    fn good() -> History {
        History {
            jobs: vec![
                job(1, "completed", 1, Some(1)),
                job(2, "completed", 2, Some(3)),
            ],
            executions: vec![
                exec(1, 1, 1, 100, 1),
                exec(2, 2, 1, 100, 2),
                exec(3, 2, 2, 200, 20),
            ],
            transitions: vec![
                mv(1, 0, "available", "running", 100, A, 1),
                mv(1, 1, "running", "completed", 100, A, 2),
                mv(2, 0, "available", "running", 100, A, 2),
                rescue(2, 1, 100, 15),
                mv(2, 1, "available", "running", 200, B, 19),
                mv(2, 2, "running", "completed", 200, B, 21),
            ],
            enqueues: vec![op(1, &[1, 2])],
            faults: vec![partition(100, 3, 25)],
            handler_errors: vec![],
            slots: BTreeMap::from([(100, A.to_string()), (200, B.to_string())]),
        }
    }

    fn verdict(h: &History) -> Verdict {
        check(h, std::time::Duration::from_secs(10), t(200))
    }

    #[test]
    fn a_good_history_passes_with_its_duplicate_explained() {
        let v = verdict(&good());
        assert!(v.ok(), "{}", v.anomalies());
        assert_eq!(v.duplicates, 1);
        assert_eq!(v.explained, BTreeMap::from([("partition".to_string(), 1)]));
        assert_eq!((v.rescues, v.max_rescue_wait), (1, 12.0));
        assert!(v.answers_lost.is_empty());
    }

    #[test]
    fn commits_made_while_answers_were_dropped_are_counted() {
        let mut h = good();
        h.faults = vec![FaultRow {
            kind: "lost_commit".into(),
            port: Some(5000),
            ..partition(100, 1, 2)
        }];
        // Job 1's claim (at 1) and completion (at 2) by worker A, and job 2's claim at 2, on
        // the connection at port 5000.
        assert_eq!(
            verdict(&h).answers_lost,
            BTreeMap::from([("lost_commit".to_string(), 3)])
        );
        // Another connection's commits are not that fault's.
        h.transitions[0].port = Some(5001);
        assert_eq!(
            verdict(&h).answers_lost,
            BTreeMap::from([("lost_commit".to_string(), 2)])
        );
    }

    #[test]
    fn a_duplicate_without_a_fault_on_its_worker_is_unexplained() {
        let mut h = good();
        h.faults.clear();
        assert_eq!(verdict(&h).unexplained, vec![(2, 2)]);
        // A fault on another worker explains nothing.
        h.faults = vec![partition(200, 3, 25)];
        assert_eq!(verdict(&h).unexplained, vec![(2, 2)]);
        // Nor does one that ended long before the execution began.
        h.faults = vec![FaultRow {
            ended_at: t(-5),
            started_at: t(-9),
            ..partition(100, 0, 0)
        }];
        assert!(!verdict(&h).ok());
        // The handler's own error for that attempt does.
        h.handler_errors = vec![(2, 1)];
        let v = verdict(&h);
        assert!(v.ok(), "{}", v.anomalies());
        assert_eq!(v.explained["handler error"], 1);
    }

    #[test]
    fn a_stale_execution_begun_after_its_fault_healed_is_explained_by_it() {
        // Worker A claimed job 2 ahead at 2 and was cut off from 3 to 10; the job was rescued
        // at 15 and completed by B at 21; A, its packets through again, started its stale
        // attempt only at 22 (and heard at once that it was lost).
        let mut h = good();
        h.executions[1].started_at = t(22);
        h.executions[1].outcome = Some("lost".into());
        h.faults = vec![partition(100, 3, 10)];
        let v = verdict(&h);
        assert!(v.ok(), "{}", v.anomalies());
        assert_eq!(v.explained, BTreeMap::from([("partition".to_string(), 1)]));
        // A fault on A before it claimed the attempt explains nothing.
        h.faults = vec![partition(100, -20, -5)];
        assert_eq!(verdict(&h).unexplained, vec![(2, 2)]);
        // Nor does B's own fault (B's execution is the one that counted).
        h.faults = vec![partition(200, 3, 25)];
        assert_eq!(verdict(&h).unexplained, vec![(2, 2)]);
    }

    #[test]
    fn a_lost_job_is_caught() {
        let mut h = good();
        // Enqueued (the enqueue returned its id) and gone from the table.
        h.enqueues.push(op(2, &[3]));
        assert_eq!(verdict(&h).lost, vec![3]);
        // Left running with no heartbeat for longer than the window: stuck.
        let mut h = good();
        h.jobs[0].state = "running".into();
        h.jobs[0].heartbeat_at = Some(t(150));
        let v = verdict(&h);
        assert_eq!((v.stuck.clone(), v.unfinished.clone()), (vec![1], vec![1]));
        assert!(!v.ok());
        // Still waiting at the end: not finished.
        h.jobs[0].state = "available".into();
        let v = verdict(&h);
        assert_eq!((v.stuck.len(), v.unfinished.clone()), (0, vec![1]));
    }

    #[test]
    fn a_job_finished_twice_is_caught() {
        let mut h = good();
        h.transitions
            .push(mv(1, 1, "available", "running", 200, B, 30));
        h.transitions
            .push(mv(1, 2, "running", "completed", 200, B, 31));
        h.executions.push(exec(4, 1, 2, 200, 30));
        h.faults.push(partition(100, 1, 40));
        let v = verdict(&h);
        assert_eq!(v.finished_twice, vec![1]);
        assert!(!v.ok());
    }

    #[test]
    fn a_stale_ack_applied_is_caught() {
        // A's ack of attempt 1, taken away by the rescue, lands on B's attempt 2.
        let mut h = good();
        h.transitions.pop();
        h.transitions.push(TransitionRow {
            changed_by: A.into(),
            ..mv(2, 2, "running", "completed", 200, A, 21)
        });
        assert_eq!(verdict(&h).stale_acks, vec![2]);
        // The fence failing on the attempt number: attempt 1 changed after its rescue.
        let mut h = good();
        h.transitions
            .push(mv(2, 1, "running", "completed", 100, A, 16));
        assert_eq!(verdict(&h).stale_acks, vec![2]);
    }

    #[test]
    fn a_completion_of_an_attempt_that_never_ran_is_caught() {
        let mut h = good();
        // Job 2's second execution never happened, yet attempt 2 completed.
        h.executions.pop();
        h.jobs[1].result_exec = None;
        let v = verdict(&h);
        assert_eq!(v.phantom_completions, vec![2]);
        // A completed job whose recorded result names another attempt's execution.
        let mut h = good();
        h.jobs[1].result_exec = Some(2);
        assert_eq!(verdict(&h).phantom_completions, vec![2]);
    }

    #[test]
    fn a_fan_in_started_before_its_dependency_finished_is_caught() {
        let mut h = good();
        h.jobs.push(job(3, "completed", 1, Some(4)));
        h.executions.push(exec(4, 3, 1, 200, 10));
        h.transitions
            .push(mv(3, 1, "running", "completed", 200, B, 11));
        h.enqueues.push(EnqueueRow {
            what: "flow".into(),
            ..op(2, &[1, 2, 3])
        });
        // Job 2 (a dependency) completed at 21, the fan-in started at 10.
        assert_eq!(verdict(&h).fan_in_early, vec![3]);
        h.executions[3].started_at = t(22);
        assert!(verdict(&h).fan_in_early.is_empty());
    }

    #[test]
    fn replaces_and_failed_enqueues_are_accounted() {
        let mut h = good();
        h.jobs[0].unique_key = Some("r1".into());
        let replace = |o: i32, outcome: &str| EnqueueRow {
            what: "replace:r1".into(),
            outcome: Some(outcome.into()),
            ..op(o, &[1])
        };
        h.enqueues.push(replace(2, "inserted"));
        h.enqueues.push(replace(3, "replaced"));
        assert!(verdict(&h).ok());
        h.enqueues.push(replace(4, "inserted"));
        assert_eq!(verdict(&h).replace_mismatch, vec!["r1".to_string()]);
        // An enqueue that reported an error but committed its job.
        let mut h = good();
        h.enqueues.push(EnqueueRow {
            ok: false,
            ids: vec![],
            ..op(5, &[1])
        });
        assert_eq!(verdict(&h).failed_but_committed, vec![5]);
    }

    #[test]
    fn a_worker_id_names_its_process() {
        assert_eq!(worker_pid("vm:4242:1a2b3c4d"), Some(4242));
        assert_eq!(worker_pid("vm:4242:apalis:1a2b3c4d"), Some(4242));
        assert_eq!(worker_pid("nonsense"), None);
    }
}
