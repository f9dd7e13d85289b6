//! Flows through the `skiplock` command (the rest of flows is the core's tests/flows.rs):
//! `skiplock wait`, `skiplock flow`, and chains across worker processes.

#![allow(unused_imports)]

mod support;
use serde_json::{Value, json};
use skiplock::queue::flow::{BatchSummary, Flow};
use skiplock::queue::{NewJob, OnConflict, OnDependencyFailure};
use skiplock::store::jobs::{ManyJobs, enqueue, enqueue_many};
use skiplock::worker::handler::Handler;
use skiplock::worker::{HandlerResult, JobContext, JobError, Outcome};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

async fn state(db: &TestDb, id: i64) -> String {
    state_of(db, id).await
}

async fn wait_state(db: &TestDb, id: i64, want: &str) {
    wait_for(
        &format!("job {id} to be {want}"),
        Duration::from_secs(60),
        || async { (state(db, id).await == want).then_some(()) },
    )
    .await
}

/// Records each job it runs (id, and how many completed jobs it could see as dependencies);
/// args `{"fail": true}` discard the job, `{"fail_once": true}` the first time only.
#[derive(Clone, Default)]
struct Step {
    ran: Arc<Mutex<Vec<i64>>>,
    failed_once: Arc<AtomicUsize>,
}

impl Handler for Step {
    type Args = Value;
    fn kind(&self) -> &'static str {
        "step"
    }
    async fn run(&self, ctx: JobContext, args: Value) -> HandlerResult {
        if args["fail"] == true
            || (args["fail_once"] == true && self.failed_once.fetch_add(1, Ordering::SeqCst) == 0)
        {
            return Err(JobError::discard("failed on purpose"));
        }
        self.ran.lock().unwrap().push(ctx.id);
        let deps = ctx.dependency_results().await?;
        let summary = BatchSummary::of(&deps);
        let sum: i64 = deps
            .iter()
            .filter_map(|d| d.result_as::<Value>().ok().flatten())
            .filter_map(|r| r["n"].as_i64())
            .sum();
        Ok(Outcome::CompleteWith(json!({
            "n": args["n"].as_i64().unwrap_or(0) + sum,
            "deps": summary,
        })))
    }
}

fn step(args: Value) -> NewJob {
    NewJob::new("step", args).max_attempts(1)
}

/// Jobs of kind `step`, one per `args`, each waiting for `root` (a fan-out in one call).
async fn fan_out(db: &TestDb, root: i64, args: &[Value]) -> Vec<i64> {
    enqueue_many(
        &db.pool,
        ManyJobs {
            kind: "step",
            args,
            queue: "default",
            depends_on: &[root],
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

/// The ids of `ids` in `state`, in id order.
async fn in_state(db: &TestDb, ids: &[i64], state: &str) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT id FROM skiplock.jobs WHERE state::text = $2 AND id = ANY ($1) ORDER BY id",
    )
    .bind(ids)
    .bind(state)
    .fetch_all(&*db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_job_from_sql_rust_and_the_cli_returns_at_its_end_or_times_out() {
    let db = TestDb::new().await;
    let a = enqueue(&db.pool, &step(json!({"n": 7}))).await.unwrap().id;
    let b = enqueue(&db.pool, &step(json!({})).depends_on([a]))
        .await
        .unwrap()
        .id;

    // Nothing runs yet: each form times out cleanly, saying the state it saw.
    let (st, finished): (String, bool) =
        sqlx::query_as("SELECT state::text, finished FROM skiplock.wait($1, '200 milliseconds')")
            .bind(b)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
    assert_eq!((st.as_str(), finished), ("waiting", false));
    let w = skiplock::wait_for(&db.pool, a, Duration::from_millis(200))
        .await
        .unwrap();
    assert!(!w.finished);
    {
        let (code, out, _) = run_cmd(&db.url, &["wait", &a.to_string(), "--timeout", "200ms"]);
        assert_eq!(code, 5, "{out}");
        assert!(out.contains("timed out"), "{out}");
        let (code, _, err) = run_cmd(&db.url, &["wait", "99999", "--timeout", "1s"]);
        assert_eq!(code, 1);
        assert!(err.contains("job 99999 does not exist"), "{err}");
    }
    let e = skiplock::wait_for(&db.pool, 99999, Duration::from_secs(1))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("job 99999 does not exist"), "{e}");

    // Waiters started before the work: each returns once the job has finished.
    let pool = db.pool.clone();
    let sql_wait = tokio::spawn(async move {
        sqlx::query_as::<_, (String, Option<Value>, bool)>(
            "SELECT state::text, result, finished FROM skiplock.wait($1, '60 seconds')",
        )
        .bind(b)
        .fetch_one(&*pool)
        .await
        .unwrap()
    });
    let pool = db.pool.clone();
    let rust_wait =
        tokio::spawn(async move { skiplock::wait_for(&pool, b, Duration::from_secs(60)).await });
    let cli_wait = {
        let url = db.url.clone();
        tokio::task::spawn_blocking(move || {
            run_cmd(
                &url,
                &["wait", &b.to_string(), "--timeout", "60s", "--json"],
            )
        })
    };
    let h = Step::default();
    let worker = start_with(&db.pool, |r| {
        r.register(h.clone());
    });
    let (st, result, finished) = sql_wait.await.unwrap();
    assert_eq!((st.as_str(), finished), ("completed", true));
    assert_eq!(result.unwrap()["n"], 7);
    let w = rust_wait.await.unwrap().unwrap();
    assert!(w.finished);
    assert_eq!(w.result.unwrap()["n"], 7);
    {
        let (code, out, err) = cli_wait.await.unwrap();
        assert_eq!(code, 0, "{out}{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["state"], "completed");
    }

    // A discarded job (exit status 3); the watch rows are gone once the jobs finished.
    let bad = enqueue(&db.pool, &step(json!({"fail": true})))
        .await
        .unwrap()
        .id;
    let w = skiplock::wait_for(&db.pool, bad, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(w.state, skiplock::queue::JobState::Discarded);
    {
        let (code, out, _) = run_cmd(&db.url, &["wait", &bad.to_string(), "--timeout", "60s"]);
        assert_eq!(code, 3, "{out}");
        assert!(out.starts_with("discarded"), "{out}");
    }
    worker.stop().await.unwrap();
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.job_watches").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_runs_in_order_across_three_worker_processes() {
    let db = TestDb::new().await;
    let sleep = |ms: u64| NewJob::new("sleep", json!({"ms": ms, "record": true}));
    let flow = Flow::new()
        .job("a", sleep(200))
        .job_after("b", sleep(200), ["a"])
        .job_after("c", sleep(200), ["b"]);
    let ids = skiplock::enqueue_flow(&db.pool, &flow).await.unwrap();
    let mut workers: Vec<KillOnDrop> = (0..3)
        .map(|_| {
            KillOnDrop(spawn_worker_process(
                &db.url,
                &["--queues", "default=2"],
                &[],
            ))
        })
        .collect();
    wait_state(&db, ids.id("c").unwrap(), "completed").await;
    for w in &workers {
        sigterm(&w.0);
    }
    for w in &mut workers {
        wait_exit_within(&mut w.0, Duration::from_secs(60)).await;
    }
    let span = |r: Value| {
        (
            r["started_us"].as_i64().unwrap(),
            r["finished_us"].as_i64().unwrap(),
        )
    };
    let mut spans = Vec::new();
    for n in ["a", "b", "c"] {
        let r: Value = sqlx::query_scalar("SELECT result FROM skiplock.jobs WHERE id = $1")
            .bind(ids.id(n).unwrap())
            .fetch_one(&*db.pool)
            .await
            .unwrap();
        spans.push(span(r));
    }
    assert!(
        spans[0].1 <= spans[1].0,
        "b started after a ended: {spans:?}"
    );
    assert!(
        spans[1].1 <= spans[2].0,
        "c started after b ended: {spans:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_running_a_dependency_loses_nothing_and_runs_no_dependent_early() {
    let db = TestDb::new().await;
    let flow = Flow::new()
        .job(
            "a",
            NewJob::new("sleep", json!({"ms": 1500, "record": true})),
        )
        .job_after(
            "b",
            NewJob::new("sleep", json!({"ms": 1, "record": true})),
            ["a"],
        );
    let ids = skiplock::enqueue_flow(&db.pool, &flow).await.unwrap();
    let (a, b) = (ids.id("a").unwrap(), ids.id("b").unwrap());
    let mut victim = KillOnDrop(spawn_worker_process(&db.url, &[], &[]));
    wait_state(&db, a, "running").await;
    sigkill(&victim.0);
    wait_exit_within(&mut victim.0, Duration::from_secs(30)).await;
    assert_eq!(state(&db, b).await, "waiting");
    rescue_now(&db.pool, a).await;
    assert_eq!(state(&db, b).await, "waiting", "a rescue releases nothing");
    let mut survivor = KillOnDrop(spawn_worker_process(&db.url, &[], &[]));
    wait_state(&db, b, "completed").await;
    sigterm(&survivor.0);
    wait_exit_within(&mut survivor.0, Duration::from_secs(60)).await;
    let (a_attempt, a_end): (i32, Value) =
        sqlx::query_as("SELECT attempt, result FROM skiplock.jobs WHERE id = $1")
            .bind(a)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
    let (b_attempt, b_res): (i32, Value) =
        sqlx::query_as("SELECT attempt, result FROM skiplock.jobs WHERE id = $1")
            .bind(b)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
    assert_eq!(a_attempt, 2);
    assert_eq!(b_attempt, 1);
    assert!(a_end["finished_us"].as_i64() <= b_res["started_us"].as_i64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_enqueues_with_dependencies_and_shows_them_on_the_job_and_the_flow() {
    let db = TestDb::new().await;
    let (code, a, err) = run_cmd(&db.url, &["enqueue", "step", "{}"]);
    assert_eq!(code, 0, "{err}");
    let a = a.trim().to_string();
    let (code, b, err) = run_cmd(
        &db.url,
        &[
            "enqueue",
            "step",
            "{}",
            "--depends-on",
            &a,
            "--on-dependency-failure",
            "run",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let b = b.trim().to_string();
    let (_, out, _) = run_cmd(&db.url, &["job", &b]);
    assert!(out.contains("state:         waiting"), "{out}");
    assert!(
        out.contains(&format!("depends on:\n  {a} step available")),
        "{out}"
    );
    let (_, out, _) = run_cmd(&db.url, &["job", &a]);
    assert!(
        out.contains(&format!("dependents:\n  {b} step waiting")),
        "{out}"
    );
    let (code, out, err) = run_cmd(&db.url, &["flow", &a]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("2 jobs: 1 waiting, 1 available"), "{out}");
    // Bad input: one line, non-zero exit, nothing written.
    let (code, _, err) = run_cmd(
        &db.url,
        &["enqueue", "step", "{}", "--depends-on", "987654"],
    );
    assert_eq!(code, 1);
    assert!(err.contains("job 987654, which does not exist"), "{err}");
    let (code, _, err) = run_cmd(
        &db.url,
        &["enqueue", "step", "{}", "--on-dependency-failure", "run"],
    );
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run_cmd(&db.url, &["flow", "987654"]);
    assert_eq!(code, 1);
    assert!(err.contains("no flow or job 987654"), "{err}");
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.jobs").await,
        2
    );
}

/// A worker started with `--exit-when-idle` after another stopped in the middle of a fan-out
/// (the root finished without settling its children, as a plain UPDATE or a dead worker leaves
/// it) runs the maintenance's sweep before it calls itself idle, so it releases and runs the
/// children instead of exiting with them waiting.
#[tokio::test]
async fn a_worker_that_exits_when_idle_first_releases_what_a_stopped_worker_left_waiting() {
    let db = TestDb::new().await;
    let root = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    let children = enqueue_many(
        &db.pool,
        ManyJobs {
            kind: "noop",
            args: &vec![json!({}); 50],
            queue: "default",
            depends_on: &[root],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    sqlx::query("UPDATE skiplock.jobs SET state = 'completed', finalized_at = now() WHERE id = $1")
        .bind(root)
        .execute(&*db.pool)
        .await
        .unwrap();
    assert_eq!(in_state(&db, &children, "waiting").await, children);
    let (code, _, err) = run_cmd(&db.url, &["worker", "--exit-when-idle"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(in_state(&db, &children, "completed").await, children);
}

/// `skiplock job` lists the first 100 dependents of a job and says how many more there are,
/// rather than every one an enqueuer gave it (100,000 made 100,015 lines).
#[tokio::test]
async fn skiplock_job_lists_the_first_hundred_dependents_and_counts_the_rest() {
    let db = TestDb::new().await;
    let root = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    let children = fan_out(&db, root, &vec![json!({}); 150]).await;
    let (code, out, err) = run_cmd(&db.url, &["job", &root.to_string()]);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<i64> = out
        .split("dependents:")
        .nth(1)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(listed, children[..100]);
    assert!(out.contains("  … and 50 more"), "{out}");
    let (code, out, err) = run_cmd(&db.url, &["job", &children[0].to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("more"), "{out}");
}
