//! Flows against a real Postgres (docs/flows.md): dependencies on enqueue, a DAG in one call,
//! fan-out and fan-in, the failure policy and its undoing by a retry, batches with a callback,
//! results flowing downstream, waiting for a job from SQL and Rust. Through the `skiplock`
//! command and its worker processes: crates/skiplock-cli/tests/flows.rs.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use skiplock::queue::flow::{BatchSummary, Flow};
use skiplock::queue::{NewJob, OnConflict, OnDependencyFailure};
use skiplock::store::jobs::{ManyJobs, enqueue, enqueue_many};
use skiplock::worker::handler::Handler;
use skiplock::worker::{HandlerResult, JobContext, JobError, Outcome};
use support::*;

async fn state(db: &TestDb, id: i64) -> String {
    state_of(db, id).await
}

async fn errors_of(db: &TestDb, id: i64) -> String {
    sqlx::query_scalar::<_, Value>("SELECT errors FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&*db.pool)
        .await
        .unwrap()
        .to_string()
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

/// Runs a worker with [`Step`] until job `id` has completed; the handler, for what it ran.
async fn run_until_completed(db: &TestDb, id: i64) -> Step {
    let h = Step::default();
    let w = start_with(&db.pool, |r| {
        r.register(h.clone());
    });
    wait_state(db, id, "completed").await;
    w.stop().await.unwrap();
    h
}

/// Job `id`'s result.
async fn result_of(db: &TestDb, id: i64) -> Value {
    sqlx::query_scalar("SELECT result FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&*db.pool)
        .await
        .unwrap()
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

/// How many of `ids` are available (released and not yet claimed).
async fn available_among(db: &TestDb, ids: &[i64]) -> usize {
    in_state(db, ids, "available").await.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_is_refused_whole_for_a_cycle_an_unknown_name_or_a_bad_field() {
    let db = TestDb::new().await;
    for (flow, want) in [
        (
            json!([{"name": "a", "kind": "k", "depends_on": ["b"]},
                   {"name": "b", "kind": "k", "depends_on": ["c"]},
                   {"name": "c", "kind": "k", "depends_on": ["a"]},
                   {"name": "free", "kind": "k"}]),
            "form a cycle",
        ),
        (
            json!([{"name": "a", "kind": "k", "depends_on": ["nope"]}]),
            "not a job of the flow",
        ),
        (
            json!([{"name": "a", "kind": "k"}, {"name": "a", "kind": "k"}]),
            "two jobs are named",
        ),
        (
            json!([{"name": "a", "kind": "k", "dependson": ["x"]}]),
            "unknown field",
        ),
        (json!([{"kind": "k"}]), "needs a \"name\""),
        (json!([]), "non-empty JSON array"),
        (
            json!([{"name": "a", "kind": "k", "depends_on": [999999]}]),
            "does not exist",
        ),
        (
            json!([{"name": "a", "kind": "k", "depends_on": ["a"]}]),
            "form a cycle",
        ),
    ] {
        let e = skiplock::store::flows::enqueue_flow(&db.pool, &flow)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{flow}: {e}");
    }
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.jobs").await,
        0
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.job_dependencies").await,
        0
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.flow_jobs").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependencies_given_in_a_rolled_back_transaction_leave_nothing_and_in_a_committed_one_wait()
{
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let a = enqueue(&mut *tx, &step(json!({}))).await.unwrap().id;
    let b = enqueue(&mut *tx, &step(json!({})).depends_on([a]))
        .await
        .unwrap()
        .id;
    tx.rollback().await.unwrap();
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.jobs").await,
        0
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.job_dependencies").await,
        0
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.job_waits").await,
        0
    );
    let _ = b;

    let mut tx = db.pool.begin().await.unwrap();
    let a = enqueue(&mut *tx, &step(json!({"n": 1}))).await.unwrap().id;
    let b = enqueue(&mut *tx, &step(json!({"n": 2})).depends_on([a]))
        .await
        .unwrap()
        .id;
    tx.commit().await.unwrap();
    assert_eq!(state(&db, b).await, "waiting");
    // A job that names a job that does not exist is refused, and nothing is written.
    let e = enqueue(&db.pool, &step(json!({})).depends_on([a, 424242]))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("job 424242, which does not exist"), "{e}");
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.jobs").await,
        2
    );

    let h = run_until_completed(&db, b).await;
    assert_eq!(*h.ran.lock().unwrap(), vec![a, b]);
    // b read a's result: 2 + 1.
    let r = result_of(&db, b).await;
    assert_eq!(r["n"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_to_a_thousand_then_fan_in_starts_the_last_job_once_after_every_child() {
    let db = TestDb::new().await;
    let root = enqueue(&db.pool, &step(json!({"n": 0}))).await.unwrap().id;
    let args: Vec<Value> = (0..1000).map(|_| json!({"n": 1})).collect();
    let children = fan_out(&db, root, &args).await;
    assert_eq!(children.len(), 1000);
    let fan_in = enqueue(
        &db.pool,
        &step(json!({"n": 0})).depends_on(children.clone()),
    )
    .await
    .unwrap()
    .id;
    assert_eq!(count_state(&db.pool, "waiting").await, 1001);

    let h = Step::default();
    let w = start_worker(&db.pool, fast_settings(), |mut b| {
        b.registry_mut().register(h.clone());
        b.queue("default", 20)
    });
    wait_state(&db, fan_in, "completed").await;
    w.stop().await.unwrap();

    let ran = h.ran.lock().unwrap().clone();
    assert_eq!(ran.iter().filter(|&&id| id == fan_in).count(), 1);
    assert_eq!(ran.len(), 1002, "every job ran once");
    assert_eq!(ran[0], root);
    assert_eq!(
        *ran.last().unwrap(),
        fan_in,
        "the fan-in ran after every child"
    );
    // Started after the last child finished, at its first attempt, and saw all 1,000 results.
    let late: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM skiplock.jobs c, skiplock.jobs f
         WHERE c.id = ANY($1) AND f.id = $2 AND c.finalized_at > f.attempted_at",
    )
    .bind(&children)
    .bind(fan_in)
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    assert_eq!(late, 0);
    let (attempt, result): (i32, Value) =
        sqlx::query_as("SELECT attempt, result FROM skiplock.jobs WHERE id = $1")
            .bind(fan_in)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
    assert_eq!(attempt, 1);
    assert_eq!(result["n"], 1000);
    assert_eq!(result["deps"]["completed"], 1000);
    let p = skiplock::admin::flow_progress(&db.pool, root)
        .await
        .unwrap();
    assert_eq!((p.total, p.completed), (1002, 1002));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarded_job_cancels_its_dependents_transitively_and_a_finaliser_runs_anyway() {
    let db = TestDb::new().await;
    let flow = Flow::new()
        .job("a", step(json!({"fail_once": true})))
        .job_after("b", step(json!({})), ["a"])
        .job_after("c", step(json!({})), ["b"])
        .job_after(
            "cleanup",
            step(json!({})).on_dependency_failure(OnDependencyFailure::Run),
            ["a"],
        );
    let ids = skiplock::enqueue_flow(&db.pool, &flow).await.unwrap();
    let id = |n: &str| ids.id(n).unwrap();
    assert_eq!(ids.flow, id("a"));

    let h = Step::default();
    let w = start_with(&db.pool, |r| {
        r.register(h.clone());
    });
    wait_state(&db, id("cleanup"), "completed").await;
    wait_state(&db, id("c"), "cancelled").await;
    assert_eq!(state(&db, id("a")).await, "discarded");
    assert_eq!(state(&db, id("b")).await, "cancelled");
    assert!(
        errors_of(&db, id("b"))
            .await
            .contains(&format!("dependency {} discarded", id("a")))
    );
    assert!(
        errors_of(&db, id("c"))
            .await
            .contains(&format!("dependency {} cancelled", id("b")))
    );
    let r = result_of(&db, id("cleanup")).await;
    assert_eq!(r["deps"]["discarded"], 1);
    let deps = skiplock::admin::dependency_results(&db.pool, id("cleanup"))
        .await
        .unwrap();
    assert_eq!(deps.len(), 1);
    assert_eq!(deps[0].name.as_deref(), Some("a"));

    // Retrying the failed job brings the flow back: b and c wait again, then run in order.
    skiplock::admin::retry(&db.pool, id("a")).await.unwrap();
    assert_eq!(state(&db, id("b")).await, "waiting");
    assert_eq!(state(&db, id("c")).await, "waiting");
    wait_state(&db, id("c"), "completed").await;
    w.stop().await.unwrap();
    let ran = h.ran.lock().unwrap().clone();
    let pos = |x: i64| ran.iter().position(|&r| r == x).unwrap();
    assert!(pos(id("a")) < pos(id("b")) && pos(id("b")) < pos(id("c")));
    // The finaliser ran once: a job that already completed is not started again by the retry.
    assert_eq!(ran.iter().filter(|&&r| r == id("cleanup")).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_a_cancelled_dependent_retries_the_failure_it_waits_for() {
    let db = TestDb::new().await;
    let a = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    let b = enqueue(&db.pool, &step(json!({})).depends_on([a]))
        .await
        .unwrap()
        .id;
    let c = enqueue(&db.pool, &step(json!({})).depends_on([b]))
        .await
        .unwrap()
        .id;
    skiplock::admin::cancel(&db.pool, a).await.unwrap();
    assert_eq!(state(&db, b).await, "cancelled");
    assert_eq!(state(&db, c).await, "cancelled");
    // An operator retries the last job of the chain: everything before it comes back too.
    skiplock::admin::retry(&db.pool, c).await.unwrap();
    assert_eq!(state(&db, a).await, "available");
    assert_eq!(state(&db, b).await, "waiting");
    assert_eq!(state(&db, c).await, "waiting");
    // A waiting job is not retried (it would run before its dependencies).
    let e = skiplock::admin::retry(&db.pool, c)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("waits for its dependencies"), "{e}");
    let h = run_until_completed(&db, c).await;
    assert_eq!(*h.ran.lock().unwrap(), vec![a, b, c]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_callback_runs_once_with_a_summary_of_its_children() {
    let db = TestDb::new().await;
    let children: Vec<NewJob> = (0..10)
        .map(|i| step(json!({"n": 1, "fail": i % 5 == 0})))
        .collect();
    let ids = skiplock::enqueue_flow(&db.pool, &Flow::batch(children, step(json!({}))))
        .await
        .unwrap();
    let cb = ids.id("callback").unwrap();
    run_until_completed(&db, cb).await;
    let r = result_of(&db, cb).await;
    assert_eq!(
        r["deps"],
        json!({"total": 10, "completed": 8, "discarded": 2, "cancelled": 0})
    );
    assert_eq!(r["n"], 8);
    let p = skiplock::admin::flow_progress(&db.pool, ids.flow)
        .await
        .unwrap();
    assert_eq!((p.total, p.completed, p.discarded), (11, 9, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_job_holds_its_key_while_it_waits_and_retention_keeps_what_it_needs() {
    let db = TestDb::new().await;
    let a = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    let keyed = step(json!({})).unique_key("report", OnConflict::Keep);
    let first = enqueue(&db.pool, &keyed.clone().depends_on([a]))
        .await
        .unwrap();
    let again = enqueue(&db.pool, &keyed).await.unwrap();
    assert_eq!(again.id, first.id, "the waiting job holds the key");
    assert_eq!(state(&db, first.id).await, "waiting");

    // a completes (by a plain UPDATE, as psql could: the sweep settles it) long ago; retention
    // must keep it while its dependent has not run, for one more retention period at most
    // (docs/flows.md): 30 days ago, against 20 days.
    sqlx::query(
        "UPDATE skiplock.jobs SET state = 'completed', finalized_at = now() - interval '30 days',
         result = '{\"n\": 5}' WHERE id = $1",
    )
    .bind(a)
    .execute(&*db.pool)
    .await
    .unwrap();
    assert_eq!(state(&db, first.id).await, "waiting");
    skiplock::maintenance::rescuer::rescue(&db.pool, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(state(&db, first.id).await, "available");
    let settings = skiplock::maintenance::retention::RetentionSettings {
        completed: Duration::from_secs(20 * 86_400),
        failed: Duration::from_secs(1),
        interval: Duration::from_secs(60),
    };
    skiplock::maintenance::retention::run_retention(&db.pool, &settings)
        .await
        .unwrap();
    assert_eq!(state(&db, a).await, "completed", "kept for its dependent");
    let deps = skiplock::admin::dependency_results(&db.pool, first.id)
        .await
        .unwrap();
    assert_eq!(deps[0].result.as_deref(), Some(&json!({"n": 5})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_from_sql_names_its_jobs_and_its_callback_waits_for_all_of_them() {
    let db = TestDb::new().await;
    let got: Value = sqlx::query_scalar(
        "SELECT skiplock.enqueue_batch('[{\"kind\": \"step\", \"args\": {\"n\": 1}},
                                         {\"kind\": \"step\", \"args\": {\"n\": 2}, \"name\": \"two\"}]',
                                       '{\"kind\": \"step\", \"max_attempts\": 1}')",
    )
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    let jobs = got["jobs"].as_object().unwrap();
    assert_eq!(
        jobs.keys().map(String::as_str).collect::<Vec<_>>(),
        ["0", "callback", "two"]
    );
    let cb = jobs["callback"].as_i64().unwrap();
    let policy: String = sqlx::query_scalar(
        "SELECT on_dependency_failure FROM skiplock.job_waits WHERE job_id = $1",
    )
    .bind(cb)
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    assert_eq!(policy, "run");
    let pending: i32 =
        sqlx::query_scalar("SELECT pending FROM skiplock.job_waits WHERE job_id = $1")
            .bind(cb)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
    assert_eq!(pending, 2);
    // The callback may not name dependencies of its own.
    let e = sqlx::query("SELECT skiplock.enqueue_batch('[{\"kind\": \"k\"}]', '{\"kind\": \"k\", \"depends_on\": [1]}')")
        .execute(&*db.pool)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("the callback waits for the batch"), "{e}");

    run_until_completed(&db, cb).await;
    let r = result_of(&db, cb).await;
    assert_eq!(r["n"], 3);
}

/// The next settle hint `l` hears (what an enqueue whose new edges named unfinished jobs
/// sends once it has committed), skipping wake-ups.
async fn next_hint(l: &mut skiplock::store::notify::WakeListener) -> Vec<i64> {
    use skiplock::store::notify::Heard;
    let hint = async {
        loop {
            match l.recv().await.unwrap() {
                Some(Heard::Settle(ids)) => return ids,
                Some(Heard::Queue(_)) => continue,
                None => panic!("the listener lost its connection"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), hint)
        .await
        .expect("a settle hint")
}

/// The settling of a hint locks none of the jobs it reads: any enqueuer sends hints naming
/// any jobs, to every listening worker, and a share lock held by the hint's statement on a
/// running job made its heartbeat and its ack wait. Here the hint's transaction stays open;
/// the heartbeat and the ack, with a lock timeout (a wait fails them instead of hanging the
/// test), go on, and the hint's job reads as not finished (`busy`, to be read again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_hint_locks_no_job_a_worker_writes() {
    use skiplock::store::ack::ack_many;
    use skiplock::store::flows::settle_added;
    use sqlx::Connection;

    let db = TestDb::new().await;
    let parent = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = $1")
        .bind(parent)
        .execute(&*db.pool)
        .await
        .unwrap();
    let mut hinting = db.pool.begin().await.unwrap();
    let h = settle_added(&mut *hinting, &[parent], 1000).await.unwrap();

    let mut worker = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("SET lock_timeout = '10s'")
        .execute(&mut worker)
        .await
        .unwrap();
    sqlx::query("UPDATE skiplock.jobs SET heartbeat_at = now() WHERE id = $1")
        .bind(parent)
        .execute(&mut worker)
        .await
        .expect("the heartbeat never waits for a hint's settling");
    let acked = ack_many(&mut worker, &[completed_ack(parent, 1)])
        .await
        .expect("the ack never waits for a hint's settling");
    assert_eq!(acked.ids, vec![parent]);
    // Read before the ack: not finished, to be read again.
    assert_eq!(h.busy, vec![parent]);
    hinting.commit().await.unwrap();
    worker.close().await.unwrap();
}

/// An enqueue naming a job, and that job's end, at once. The finishing statement (an
/// operator's cancel, an ack) waits for nobody, and cannot see the edge the enqueue has not
/// committed; the enqueue, once committed, has a settle hint sent, and the settling a worker
/// does for it (`settle_added`) releases the dependent. An ack not yet committed when the hint
/// is read leaves its job busy, neither waited for nor read half-way, and the next try
/// settles it. No worker runs here, so nothing else could settle the edges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_finishing_while_its_dependent_is_enqueued_is_settled_once_the_enqueue_commits()
 {
    use skiplock::store::ack::ack_many;
    use skiplock::store::flows::settle_added;

    let db = TestDb::new().await;
    let mut hints = skiplock::store::notify::WakeListener::connect(&db.pool)
        .await
        .unwrap();
    let resolved = |child: i64| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, Option<String>>(
                "SELECT resolved::text FROM skiplock.job_dependencies WHERE job_id = $1",
            )
            .bind(child)
            .fetch_one(&*pool)
            .await
            .unwrap()
        }
    };
    let limit = Duration::from_secs(60);

    // An operator's cancel.
    let parent = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    let mut tx = db.pool.begin().await.unwrap();
    let child = enqueue(
        &mut *tx,
        &step(json!({}))
            .depends_on([parent])
            .on_dependency_failure(OnDependencyFailure::Run),
    )
    .await
    .unwrap()
    .id;
    tokio::time::timeout(limit, skiplock::admin::cancel(&db.pool, parent))
        .await
        .expect("the cancel waits for the enqueue's transaction")
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(state(&db, child).await, "waiting");
    let heard = next_hint(&mut hints).await;
    assert_eq!(heard, vec![parent]);
    let left = settle_added(&db.pool, &heard, 1000).await.unwrap();
    assert_eq!(left, Default::default());
    assert_eq!(state(&db, child).await, "available");
    assert_eq!(resolved(child).await.as_deref(), Some("cancelled"));

    // An ack, committed after the hint is read.
    let parent = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = $1")
        .bind(parent)
        .execute(&*db.pool)
        .await
        .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let child = enqueue(&mut *tx, &step(json!({})).depends_on([parent]))
        .await
        .unwrap()
        .id;
    let mut acking = db.pool.begin().await.unwrap();
    let acked = tokio::time::timeout(limit, ack_many(&mut *acking, &[completed_ack(parent, 1)]))
        .await
        .expect("the ack waits for the enqueue's transaction")
        .unwrap();
    assert_eq!((acked.ids, acked.unsettled), (vec![parent], vec![]));
    tx.commit().await.unwrap();
    let heard = next_hint(&mut hints).await;
    assert_eq!(heard, vec![parent]);
    let left = tokio::time::timeout(limit, settle_added(&db.pool, &heard, 1000))
        .await
        .expect("the hint's settling waits for the ack")
        .unwrap();
    assert_eq!(left.busy, vec![parent]);
    assert_eq!(state(&db, child).await, "waiting");
    acking.commit().await.unwrap();
    let left = settle_added(&db.pool, &left.busy, 1000).await.unwrap();
    assert_eq!(left, Default::default());
    assert_eq!(state(&db, child).await, "available");
    assert_eq!(resolved(child).await.as_deref(), Some("completed"));
}

/// A transaction holding a waiting dependent's row (an enqueuer's replace of its unique key,
/// left uncommitted) never makes the ack of its dependency wait: the ack settles the edges of
/// free dependents only, leaves that one's edge unresolved, and the maintenance's sweep
/// releases it once the row is free. The ack runs with a lock timeout, so a wait fails it
/// instead of hanging the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_holding_a_waiting_dependent_never_blocks_its_dependencys_ack() {
    use skiplock::store::ack::ack_many;
    use skiplock::store::flows::settle_dependencies;
    use sqlx::Connection;

    let db = TestDb::new().await;
    let parent = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = $1")
        .bind(parent)
        .execute(&*db.pool)
        .await
        .unwrap();
    let held = enqueue(
        &db.pool,
        &step(json!({"n": 1}))
            .unique_key("debounced", OnConflict::Replace)
            .depends_on([parent]),
    )
    .await
    .unwrap()
    .id;
    let free = enqueue(&db.pool, &step(json!({})).depends_on([parent]))
        .await
        .unwrap()
        .id;
    let mut tx = db.pool.begin().await.unwrap();
    let replaced = enqueue(
        &mut *tx,
        &step(json!({"n": 2})).unique_key("debounced", OnConflict::Replace),
    )
    .await
    .unwrap();
    assert_eq!(replaced.id, held);

    let mut acking = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("SET lock_timeout = '10s'")
        .execute(&mut acking)
        .await
        .unwrap();
    let acked = ack_many(&mut acking, &[completed_ack(parent, 1)])
        .await
        .expect("the ack never waits for the replace's transaction");
    assert_eq!(acked.ids, vec![parent]);
    assert_eq!(state(&db, free).await, "available");
    assert_eq!(state(&db, held).await, "waiting");
    // The sweep skips it while the row is held, and releases it once it is free.
    sqlx::query("SET lock_timeout = '10s'")
        .execute(&mut acking)
        .await
        .unwrap();
    assert_eq!(settle_dependencies(&mut acking, 1000).await.unwrap(), 0);
    assert_eq!(state(&db, held).await, "waiting");
    tx.commit().await.unwrap();
    assert_eq!(settle_dependencies(&mut acking, 1000).await.unwrap(), 1);
    assert_eq!(state(&db, held).await, "available");
    let args: Value = sqlx::query_scalar("SELECT args FROM skiplock.jobs WHERE id = $1")
        .bind(held)
        .fetch_one(&*db.pool)
        .await
        .unwrap();
    assert_eq!(args, json!({"n": 2}));
    acking.close().await.unwrap();
}

/// One transaction hints at most 300 jobs, however many its calls name (each listening worker
/// runs a statement for each hint): a job waiting for 400 that all finish before its enqueue
/// commits has 300 of its edges settled by the hint and the rest by the maintenance's sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_hints_at_most_300_jobs_and_the_sweep_settles_the_rest() {
    use skiplock::store::flows::{settle_added, settle_dependencies};

    let db = TestDb::new().await;
    let mut hints = skiplock::store::notify::WakeListener::connect(&db.pool)
        .await
        .unwrap();
    let deps: Vec<i64> = enqueue_many(
        &db.pool,
        ManyJobs {
            kind: "step",
            args: &vec![json!({}); 400],
            queue: "default",
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let child = enqueue(&mut *tx, &step(json!({})).depends_on(deps.clone()))
        .await
        .unwrap()
        .id;
    // A second call in the same transaction hints nothing more.
    let other = enqueue(&mut *tx, &step(json!({})).depends_on([deps[399]]))
        .await
        .unwrap()
        .id;
    sqlx::query(
        "UPDATE skiplock.jobs SET state = 'completed', finalized_at = now() WHERE id = ANY ($1)",
    )
    .bind(&deps)
    .execute(&*db.pool)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let heard = next_hint(&mut hints).await;
    assert_eq!(heard, deps[..300]);
    let left = settle_added(&db.pool, &heard, 1000).await.unwrap();
    assert_eq!(left, Default::default());
    let pending: i32 =
        sqlx::query_scalar("SELECT pending FROM skiplock.job_waits WHERE job_id = $1")
            .bind(child)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
    assert_eq!(pending, 100);
    assert_eq!(settle_dependencies(&db.pool, 1000).await.unwrap(), 101);
    assert_eq!(state(&db, child).await, "available");
    assert_eq!(state(&db, other).await, "available");
}

/// The same, with a worker: the job an open enqueue names is claimed when due, runs and is
/// acked while the enqueue's transaction stays open; once it commits, the worker, which hears
/// the settle hint, releases and runs the dependent. This worker has no rescuer, so no
/// maintenance's sweep: only the hint could release it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_a_dependent_whose_enqueue_committed_after_its_dependency_finished() {
    let db = TestDb::new().await;
    let h = Step::default();
    let hh = h.clone();
    let w = start_worker(&db.pool, fast_settings(), move |mut b| {
        b.registry_mut().register(hh);
        b.without_rescuer()
    });
    let parent = enqueue(
        &db.pool,
        &step(json!({})).run_at(chrono::Utc::now() + chrono::Duration::seconds(1)),
    )
    .await
    .unwrap()
    .id;
    let mut tx = db.pool.begin().await.unwrap();
    let child = enqueue(&mut *tx, &step(json!({})).depends_on([parent]))
        .await
        .unwrap()
        .id;
    wait_state(&db, parent, "completed").await;
    let waits: String = sqlx::query_scalar("SELECT state::text FROM skiplock.jobs WHERE id = $1")
        .bind(child)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(waits, "waiting", "the ack could not see the edge");
    tx.commit().await.unwrap();
    wait_state(&db, child, "completed").await;
    w.stop().await.unwrap();
    assert_eq!(*h.ran.lock().unwrap(), vec![parent, child]);
}

/// The reaper judges abandoned available and running jobs; a waiting job, however long ago it
/// was due, waits for its dependencies and is never its to discard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_never_takes_a_waiting_job_however_old() {
    use skiplock::maintenance::reaper::{Reaper, ReaperSettings};
    let db = TestDb::new().await;
    let a = enqueue(&db.pool, &step(json!({})).queue("elsewhere"))
        .await
        .unwrap()
        .id;
    let old = chrono::Utc::now() - chrono::Duration::days(2);
    let b = enqueue(&db.pool, &step(json!({})).run_at(old).depends_on([a]))
        .await
        .unwrap()
        .id;
    let max_age = Duration::from_secs(1);
    let reaper = Reaper::new(
        db.pool.clone(),
        ReaperSettings {
            max_age,
            interval: Duration::from_secs(1),
        },
    );
    // Past its uptime guard (a reaper younger than max_age discards nothing).
    tokio::time::sleep(max_age + Duration::from_millis(200)).await;
    assert_eq!(reaper.reap_once().await.unwrap(), 0);
    assert_eq!(state(&db, b).await, "waiting");
    assert_eq!(errors_of(&db, b).await, "[]");
}

/// A fan-out bigger than the ack's slice: the ack that finishes the root releases the first
/// 501 children (500 more edges than it finished jobs, the lowest ids first) and names the
/// root as unsettled; the rest are released by the slices that follow
/// (`store::flows::settle_slice`, what the worker's ack writer runs), each resuming after the
/// last child the one before released, or, when no worker sends them (it stopped), by the
/// maintenance's sweep, which says how many edges it settled. Every child is released once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_bigger_than_an_ack_is_released_in_slices_by_the_worker_or_by_the_sweep() {
    use skiplock::store::ack::ack_many;
    use skiplock::store::flows::{FROM_THE_START, Left, settle_dependencies, settle_slice};

    let db = TestDb::new().await;
    let mut roots = Vec::new();
    for _ in 0..2 {
        let root = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
        let children = fan_out(&db, root, &vec![json!({}); 1200]).await;
        roots.push((root, children));
    }
    sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = ANY ($1)")
        .bind(roots.iter().map(|r| r.0).collect::<Vec<_>>())
        .execute(&*db.pool)
        .await
        .unwrap();
    // The worker's way: the ack, then slices until nothing is left.
    let (root, children) = roots[0].clone();
    let acked = ack_many(&db.pool, &[completed_ack(root, 1)]).await.unwrap();
    assert_eq!(acked.ids, vec![root]);
    assert_eq!(acked.unsettled, vec![root]);
    assert_eq!(in_state(&db, &children, "available").await, children[..501]);
    let left = settle_slice(&db.pool, &[root], &[FROM_THE_START], 600)
        .await
        .unwrap();
    assert_eq!(
        left,
        Left {
            jobs: vec![root],
            after: vec![children[1100]]
        }
    );
    assert_eq!(
        in_state(&db, &children, "available").await,
        children[..1101]
    );
    // An edge behind the cursor waiting again (as if its child were enqueued late): the next
    // slice resumes after the cursor and does not read it; the sweep finds it.
    for sql in [
        "UPDATE skiplock.job_dependencies SET resolved = NULL WHERE job_id = $1",
        "UPDATE skiplock.jobs SET state = 'waiting' WHERE id = $1",
    ] {
        sqlx::query(sql)
            .bind(children[0])
            .execute(&*db.pool)
            .await
            .unwrap();
    }
    let left = settle_slice(&db.pool, &left.jobs, &left.after, 600)
        .await
        .unwrap();
    assert_eq!(left, Left::default());
    assert_eq!(in_state(&db, &children, "available").await, children[1..]);
    assert_eq!(settle_dependencies(&db.pool, 1000).await.unwrap(), 1);
    assert_eq!(available_among(&db, &children).await, 1200);

    // A worker that stopped after the ack: the sweep settles the rest.
    let (root, children) = roots[1].clone();
    let acked = ack_many(&db.pool, &[completed_ack(root, 1)]).await.unwrap();
    assert_eq!(acked.unsettled, vec![root]);
    assert_eq!(available_among(&db, &children).await, 501);
    // The 699 edges left, in one sweep statement (it counts edges).
    assert_eq!(settle_dependencies(&db.pool, 1000).await.unwrap(), 699);
    assert_eq!(available_among(&db, &children).await, 1200);
    assert_eq!(settle_dependencies(&db.pool, 1000).await.unwrap(), 0);
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.job_dependencies WHERE resolved IS DISTINCT FROM 'completed'"
        )
        .await,
        0
    );
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

/// A failed root's slices cancel its children and, through them, every grandchild: a child's
/// own dependents past a full slice come back from the slice as jobs to settle from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_roots_slices_cancel_every_child_and_grandchild() {
    use skiplock::store::ack::ack_many;
    use skiplock::store::flows::{FROM_THE_START, settle_slice};

    let db = TestDb::new().await;
    let root = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    let children = fan_out(&db, root, &vec![json!({}); 800]).await;
    // Two grandchildren under each of the last 200 children, which the ack's first 501 edges
    // do not reach.
    let mut grandchildren = Vec::new();
    for &c in &children[600..] {
        grandchildren.extend(fan_out(&db, c, &[json!({}), json!({})]).await);
    }
    sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = $1")
        .bind(root)
        .execute(&*db.pool)
        .await
        .unwrap();
    let mut failed = completed_ack(root, 1);
    failed.state = skiplock::queue::JobState::Discarded;
    failed.error = Some("boom".into());
    let acked = ack_many(&db.pool, &[failed]).await.unwrap();
    assert_eq!(acked.unsettled, vec![root]);
    assert_eq!(in_state(&db, &children, "cancelled").await, children[..501]);
    // Slices of 100: each cancels 100 children, whose 200 edges to their grandchildren take
    // a full slice of the cascade, and the rest come back.
    let (mut jobs, mut after) = (vec![root], vec![FROM_THE_START]);
    let mut slices = 0;
    while !jobs.is_empty() {
        slices += 1;
        assert!(slices < 100, "slices do not end: {jobs:?} after {after:?}");
        let left = settle_slice(&db.pool, &jobs, &after, 100).await.unwrap();
        (jobs, after) = (left.jobs, left.after);
    }
    assert_eq!(in_state(&db, &children, "cancelled").await.len(), 800);
    assert_eq!(
        in_state(&db, &grandchildren, "cancelled").await.len(),
        grandchildren.len()
    );
    assert!(errors_of(&db, grandchildren[1]).await.contains("cancelled"));
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.job_dependencies WHERE resolved IS NULL"
        )
        .await,
        0
    );
}

/// Snoozes its job the first time when args say `"snooze_once"`, fails it (a retry) the first
/// time when they say `"retry_once"`, and completes it otherwise.
#[derive(Clone, Default)]
struct Flaky {
    seen: Arc<Mutex<std::collections::HashSet<i64>>>,
}

impl Handler for Flaky {
    type Args = Value;
    fn kind(&self) -> &'static str {
        "flaky"
    }
    async fn run(&self, ctx: JobContext, args: Value) -> HandlerResult {
        let first = self.seen.lock().unwrap().insert(ctx.id);
        if first && args["snooze_once"] == true {
            return Ok(Outcome::Snooze(Duration::from_millis(50)));
        }
        if first && args["retry_once"] == true {
            return Err(JobError::retry("not yet"));
        }
        Ok(Outcome::Complete)
    }
}

/// A dependency that completes after a snooze, and one that completes after a failed attempt,
/// each count once: the dependent of both and of a third job, not yet run, still waits for
/// that third one (were a snooze or a retry counted, or a completion twice, it would be
/// released early), and is released, and runs once, when the third completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_completing_after_a_snooze_or_a_retry_counts_once() {
    let db = TestDb::new().await;
    let snoozed = enqueue(
        &db.pool,
        &NewJob::new("flaky", json!({"snooze_once": true})),
    )
    .await
    .unwrap()
    .id;
    let retried = enqueue(&db.pool, &NewJob::new("flaky", json!({"retry_once": true})))
        .await
        .unwrap()
        .id;
    // Not due for a day: it runs when the test moves it.
    let later = enqueue(
        &db.pool,
        &NewJob::new("flaky", json!({})).run_at(chrono::Utc::now() + chrono::Duration::days(1)),
    )
    .await
    .unwrap()
    .id;
    let dependent = enqueue(
        &db.pool,
        &step(json!({})).depends_on(vec![snoozed, retried, later]),
    )
    .await
    .unwrap()
    .id;
    let flaky = Flaky::default();
    let steps = Step::default();
    let w = start_with(&db.pool, |r| {
        r.register(flaky.clone());
        r.register(steps.clone());
    });
    wait_state(&db, snoozed, "completed").await;
    wait_state(&db, retried, "completed").await;
    let attempts: Vec<(i32, i64)> = sqlx::query_as(
        "SELECT attempt, jsonb_array_length(errors)::bigint FROM skiplock.jobs WHERE id = ANY ($1) ORDER BY id",
    )
    .bind(vec![snoozed, retried])
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        attempts,
        [(1, 0), (2, 1)],
        "the snooze gave its attempt back; the retry spent one"
    );
    assert_eq!(state(&db, dependent).await, "waiting");
    let pending: i32 =
        sqlx::query_scalar("SELECT pending FROM skiplock.job_waits WHERE job_id = $1")
            .bind(dependent)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        pending, 1,
        "two of its three dependencies counted, each once"
    );

    sqlx::query("UPDATE skiplock.jobs SET scheduled_at = now() WHERE id = $1")
        .bind(later)
        .execute(&db.pool)
        .await
        .unwrap();
    wait_state(&db, dependent, "completed").await;
    w.stop().await.unwrap();
    assert_eq!(
        *steps.ran.lock().unwrap(),
        [dependent],
        "the dependent ran once"
    );
    assert_eq!(
        result_of(&db, dependent).await["deps"]["completed"],
        json!(3)
    );
}

/// Released jobs obey the rest of the queue: a dependent released into a paused queue waits
/// there (`available`, unclaimed) until the queue resumes, and children released together run
/// in priority order on a queue of concurrency 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_jobs_wait_for_a_paused_queue_and_run_in_priority_order() {
    let db = TestDb::new().await;
    let root = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    let mut children = Vec::new();
    for p in [3i16, -2, 1, 0] {
        let id = enqueue(
            &db.pool,
            &step(json!({"p": p}))
                .queue("held")
                .priority(p)
                .depends_on(vec![root]),
        )
        .await
        .unwrap()
        .id;
        children.push((p, id));
    }
    skiplock::admin::pause_queue(&db.pool, "held")
        .await
        .unwrap();
    let steps = Step::default();
    // Without claim-ahead the one slot of "held" is claimed for one job at a time, each the
    // first in claim order. With it, two claims may be in flight (one refilling the buffer,
    // one for the slot a finished job freed): the later one skips the job the earlier one
    // locked, and when it answers first its job starts before that one, a higher priority
    // (docs/internals.md, "Claim": claim-ahead trades strict priority order for fewer round
    // trips; SKIPLOCK_CLAIM_AHEAD=0 turns it off).
    let settings = skiplock::config::QueueSettings {
        queues: Some(std::collections::BTreeMap::from([
            ("default".to_string(), 4),
            ("held".to_string(), 1),
        ])),
        claim_ahead: 0,
        ..fast_settings()
    };
    let w = start_worker(&db.pool, settings, |b| b.register(steps.clone()));
    wait_state(&db, root, "completed").await;
    let ids: Vec<i64> = children.iter().map(|c| c.1).collect();
    wait_for("the children released", Duration::from_secs(60), || async {
        (available_among(&db, &ids).await == ids.len()).then_some(())
    })
    .await;
    // Paused: released, and left alone (a claim would have run them within this time).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(available_among(&db, &ids).await, ids.len());
    assert_eq!(*steps.ran.lock().unwrap(), [root]);

    skiplock::admin::resume_queue(&db.pool, "held")
        .await
        .unwrap();
    for id in &ids {
        wait_state(&db, *id, "completed").await;
    }
    w.stop().await.unwrap();
    let mut by_priority = children.clone();
    by_priority.sort();
    let want: Vec<i64> = std::iter::once(root)
        .chain(by_priority.iter().map(|c| c.1))
        .collect();
    assert_eq!(
        *steps.ran.lock().unwrap(),
        want,
        "lowest priority value first"
    );
}

/// `enqueue_flow` at scale, its jobs given in reverse dependency order (the fan-in first, the
/// root last): a root, 3,000 jobs waiting for it and one waiting for all of them, placed in
/// three passes, each name resolved once per edge.
#[tokio::test]
async fn a_big_flow_in_one_call_is_placed_whole_in_dependency_order() {
    let db = TestDb::new().await;
    let n = 3000;
    let children: Vec<String> = (1..=n).map(|i| format!("c{i}")).collect();
    let mut flow = vec![json!({"name": "fan-in", "kind": "step", "depends_on": children})];
    flow.extend(
        children
            .iter()
            .rev()
            .map(|c| json!({"name": c, "kind": "step", "depends_on": ["root"]})),
    );
    flow.push(json!({"name": "root", "kind": "step"}));
    let out: Value = sqlx::query_scalar("SELECT skiplock.enqueue_flow($1)")
        .bind(Value::Array(flow))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let jobs = out["jobs"].as_object().unwrap();
    assert_eq!(jobs.len(), n + 2);
    assert_eq!(
        out["flow"], jobs["root"],
        "the flow is named by its first job placed"
    );
    let root = jobs["root"].as_i64().unwrap();
    let fan_in = jobs["fan-in"].as_i64().unwrap();
    assert!(
        jobs.values().all(|id| id.as_i64().unwrap() >= root),
        "the root was placed first"
    );
    assert_eq!(
        fan_in,
        jobs.values().map(|id| id.as_i64().unwrap()).max().unwrap(),
        "the fan-in was placed last"
    );
    let counts: (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM skiplock.jobs WHERE state = 'available'), \
                (SELECT count(*) FROM skiplock.jobs WHERE state = 'waiting'), \
                (SELECT count(*) FROM skiplock.job_dependencies), \
                (SELECT count(*) FROM skiplock.flow_jobs)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let n = n as i64;
    assert_eq!(counts, (1, n + 1, 2 * n, n + 2));
    let fan_in_waits: i32 =
        sqlx::query_scalar("SELECT pending FROM skiplock.job_waits WHERE job_id = $1")
            .bind(fan_in)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(fan_in_waits, n as i32);
}

/// An ack looks for dependents of the jobs it finishes through the index of edges, whatever
/// the statistics say: a table of edges that flows have filled (and that autovacuum has not
/// analyzed yet) made the planner prefer a sequential scan of every edge, at every ack batch of
/// every queue, flows or not (sql/api/12_flows.sql, skiplock._settle).
#[tokio::test]
async fn an_ack_never_scans_every_edge_of_earlier_flows() {
    use skiplock::store::ack::ack_many;

    let db = TestDb::new().await;
    // Edges of finished flows, as retention keeps them until their jobs go.
    for _ in 0..3 {
        let root = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
        fan_out(&db, root, &vec![json!({}); 2000]).await;
        sqlx::query("SELECT skiplock.cancel($1)")
            .bind(root)
            .execute(&*db.pool)
            .await
            .unwrap();
    }
    // The cancel settles 1,000 edges of each; the maintenance's sweep the rest.
    while skiplock::store::flows::settle_dependencies(&db.pool, 1000)
        .await
        .unwrap()
        > 0
    {}
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.job_dependencies WHERE resolved = 'cancelled'"
        )
        .await,
        6000
    );
    // A batch of plain jobs, acked in a transaction that then reads its own scan counts.
    let ids: Vec<i64> = enqueue_many(
        &db.pool,
        ManyJobs {
            kind: "step",
            args: &vec![json!({}); 400],
            queue: "default",
            ..Default::default()
        },
    )
    .await
    .unwrap();
    sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = ANY ($1)")
        .bind(&ids)
        .execute(&*db.pool)
        .await
        .unwrap();
    // The counts this backend has not reported yet, before the ack and after it, in one
    // transaction (nothing is reported in the middle of one).
    let mut tx = db.pool.begin().await.unwrap();
    let scans = "SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables
                 WHERE schemaname = 'skiplock' AND relname = 'job_dependencies'";
    let before: (i64, i64) = sqlx::query_as(scans).fetch_one(&mut *tx).await.unwrap();
    let acks: Vec<_> = ids.iter().map(|&id| completed_ack(id, 1)).collect();
    assert_eq!(ack_many(&mut *tx, &acks).await.unwrap().ids.len(), 400);
    let after: (i64, i64) = sqlx::query_as(scans).fetch_one(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        after.0 - before.0,
        0,
        "sequential scans of skiplock.job_dependencies"
    );
    assert!(after.1 > before.1, "the ack never looked for dependents");
    assert_eq!(in_state(&db, &ids, "completed").await, ids);
}

/// `n` waiting jobs of kind `step`, each waiting for the one before it and the first for
/// `first`: a chain written by SQL as `enqueue` writes one (a sole edge and a count of one
/// each), for the tests of depth; its ids in chain order.
async fn chain_after(db: &TestDb, first: i64, n: i64) -> Vec<i64> {
    let ids: Vec<i64> = sqlx::query_scalar(
        "WITH ins AS (INSERT INTO skiplock.jobs (kind, args, queue, state)
                      SELECT 'step', '{}', 'default', 'waiting' FROM generate_series(1, $1)
                      RETURNING id)
         SELECT id FROM ins ORDER BY id",
    )
    .bind(n)
    .fetch_all(&*db.pool)
    .await
    .unwrap();
    let before: Vec<i64> = std::iter::once(first)
        .chain(ids[..ids.len() - 1].iter().copied())
        .collect();
    sqlx::query(
        "INSERT INTO skiplock.job_dependencies (job_id, depends_on, sole)
         SELECT c, p, true FROM unnest($1::bigint[], $2::bigint[]) AS e(c, p)",
    )
    .bind(&ids)
    .bind(&before)
    .execute(&*db.pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO skiplock.job_waits (job_id, pending) SELECT unnest($1::bigint[]), 1")
        .bind(&ids)
        .execute(&*db.pool)
        .await
        .unwrap();
    ids
}

/// How many of `ids` are in `state`.
async fn how_many(db: &TestDb, ids: &[i64], state: &str) -> usize {
    in_state(db, ids, state).await.len()
}

/// A root that fails under a chain of 2,000 jobs, acked in one batch with 19 other jobs: the
/// ack's statement settles at most its bound of edges (500 more than the jobs it finished),
/// however deep the cancel cascade, names where it stopped as unsettled, and writes every
/// ack of the batch; the slices that follow (what the worker runs) cancel the rest of the
/// chain, each within the same bound. A cascade followed level by level in the ack's one
/// statement passed the statement timeout for a chain long enough, and the whole batch,
/// innocent jobs too, failed on every retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_settles_a_cancel_cascade_only_as_far_as_its_bound_and_its_whole_batch_lands() {
    use skiplock::store::ack::ack_many;
    use skiplock::store::flows::{FROM_THE_START, settle_slice};

    let db = TestDb::new().await;
    let root = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    let chain = chain_after(&db, root, 2000).await;
    let innocent: Vec<i64> = enqueue_many(
        &db.pool,
        ManyJobs {
            kind: "step",
            args: &vec![json!({}); 19],
            queue: "default",
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let batch: Vec<i64> = std::iter::once(root).chain(innocent.clone()).collect();
    sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = ANY ($1)")
        .bind(&batch)
        .execute(&*db.pool)
        .await
        .unwrap();
    let mut failed = completed_ack(root, 1);
    failed.state = skiplock::queue::JobState::Discarded;
    failed.error = Some("boom".into());
    let acks: Vec<_> = std::iter::once(failed)
        .chain(innocent.iter().map(|&id| completed_ack(id, 1)))
        .collect();
    let acked = ack_many(&db.pool, &acks).await.unwrap();
    assert_eq!(acked.ids.len(), 20);
    assert_eq!(in_state(&db, &innocent, "completed").await, innocent);
    // 520 edges at most: one per level of the chain.
    let cancelled = how_many(&db, &chain, "cancelled").await;
    assert!(
        cancelled <= 520,
        "{cancelled} levels in the ack's statement"
    );
    assert_eq!(in_state(&db, &chain, "cancelled").await, chain[..cancelled]);
    assert!(
        acked.unsettled.contains(&chain[cancelled - 1]),
        "where the cascade stopped: {:?}",
        acked.unsettled
    );
    let after = vec![FROM_THE_START; acked.unsettled.len()];
    let (mut jobs, mut after) = (acked.unsettled, after);
    let mut slices = 0;
    while !jobs.is_empty() {
        slices += 1;
        assert!(slices <= 20, "slices do not end: {jobs:?}");
        let before = how_many(&db, &chain, "cancelled").await;
        let left = settle_slice(&db.pool, &jobs, &after, 100).await.unwrap();
        assert!(how_many(&db, &chain, "cancelled").await - before <= 100);
        (jobs, after) = (left.jobs, left.after);
    }
    assert_eq!(how_many(&db, &chain, "cancelled").await, 2000);
    assert!(errors_of(&db, chain[1999]).await.contains("cancelled"));
}

/// The maintenance's sweep goes through a cancel cascade 20,000 jobs deep (a root finished by
/// a plain UPDATE, which settles nothing) in bounded statements: each call settles at most its
/// bound of edges and says so, and the next goes on. One statement following the whole
/// cascade passed the statement timeout, and failed on every pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_goes_through_a_cancel_cascade_20000_deep_in_bounded_statements() {
    use sqlx::Connection;

    let db = TestDb::new().await;
    let root = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    let chain = chain_after(&db, root, 20_000).await;
    sqlx::query("UPDATE skiplock.jobs SET state = 'discarded', finalized_at = now() WHERE id = $1")
        .bind(root)
        .execute(&*db.pool)
        .await
        .unwrap();
    let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let first = skiplock::store::flows::settle_dependencies(&mut c, 1000)
        .await
        .unwrap();
    assert_eq!(first, 1000);
    assert_eq!(how_many(&db, &chain, "cancelled").await, 1000);
    let mut calls = 1;
    while skiplock::store::flows::settle_dependencies(&mut c, 1000)
        .await
        .unwrap()
        > 0
    {
        calls += 1;
        assert!(calls <= 25, "the sweep does not end");
    }
    assert_eq!(calls, 20);
    assert_eq!(how_many(&db, &chain, "cancelled").await, 20_000);
    c.close().await.unwrap();
}

/// One pass of the rescuer runs at most its bound of sweep statements (20 of 1,000 edges):
/// a cancel cascade 21,000 jobs deep is settled over two passes, the first stopping at 20,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescuer_pass_sweeps_a_bounded_number_of_edges() {
    use skiplock::worker::rescuer::{SETTLE_STATEMENTS, rescue};

    let db = TestDb::new().await;
    let root = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    let chain = chain_after(&db, root, 21_000).await;
    sqlx::query("UPDATE skiplock.jobs SET state = 'discarded', finalized_at = now() WHERE id = $1")
        .bind(root)
        .execute(&*db.pool)
        .await
        .unwrap();
    rescue(&db.pool, Duration::from_secs(60)).await.unwrap();
    assert_eq!(
        how_many(&db, &chain, "cancelled").await,
        SETTLE_STATEMENTS * 1000
    );
    rescue(&db.pool, Duration::from_secs(60)).await.unwrap();
    assert_eq!(how_many(&db, &chain, "cancelled").await, 21_000);
}

/// A chain of 20,000 jobs listed dependents first (each names the next) is placed in one
/// `enqueue_flow`, in dependency order: each pass over the jobs left placed one of them, and
/// 4,000 took 34 s (20,000 would take most of an hour, past any test's patience).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_listed_dependents_first_is_placed_in_one_pass() {
    use sqlx::Connection;

    let db = TestDb::new().await;
    let n = 20_000;
    let flow: Vec<Value> = (0..n)
        .map(|i| {
            if i + 1 < n {
                json!({"name": format!("j{i}"), "kind": "step", "depends_on": [format!("j{}", i + 1)]})
            } else {
                json!({"name": format!("j{i}"), "kind": "step"})
            }
        })
        .collect();
    let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let out: Value = sqlx::query_scalar("SELECT skiplock.enqueue_flow($1)")
        .bind(Value::Array(flow))
        .fetch_one(&mut c)
        .await
        .unwrap();
    c.close().await.unwrap();
    let id = |i: usize| out["jobs"][format!("j{i}")].as_i64().unwrap();
    assert_eq!(
        out["flow"].as_i64(),
        Some(id(n - 1)),
        "the job placed first"
    );
    assert!(
        (0..n - 1).all(|i| id(i) > id(i + 1)),
        "each after the job it waits for"
    );
    let counts: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM skiplock.jobs WHERE state = 'waiting'),
                (SELECT count(*) FROM skiplock.job_dependencies)",
    )
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    assert_eq!(counts, (n as i64 - 1, n as i64 - 1));
}

/// `flow_progress` and `flow_members` of a job that is not a recorded flow walk its
/// dependents up to `flow_members.max_jobs` (10,000), and say when they stopped there: the
/// second job of a chain of 20,000 is counted over the first 10,000 jobs reached (its
/// unbounded walk took 18.7 s, the console's page 44 s), and a smaller
/// bound the owner sets lists the first jobs of the chain. A recorded flow is read whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flows_walk_stops_at_its_bound_and_says_so() {
    use skiplock::store::flows::{flow_members, flow_progress};
    use sqlx::Connection;

    let db = TestDb::new().await;
    let root = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    let chain = chain_after(&db, root, 20_000).await;
    let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let p = flow_progress(&mut c, chain[0]).await.unwrap();
    assert_eq!((p.total, p.waiting, p.truncated), (10_000, 10_000, true));
    let members = flow_members(&mut c, chain[0], 100_000).await.unwrap();
    assert_eq!(
        members.iter().map(|m| m.id).collect::<Vec<_>>(),
        chain[..10_000]
    );
    sqlx::query("UPDATE skiplock.settings SET value = 50 WHERE name = 'flow_members.max_jobs'")
        .execute(&*db.pool)
        .await
        .unwrap();
    let p = flow_progress(&mut c, chain[19_900]).await.unwrap();
    assert_eq!((p.total, p.truncated), (50, true));
    let p = flow_progress(&mut c, chain[19_950]).await.unwrap();
    assert_eq!(
        (p.total, p.truncated),
        (50, false),
        "the last 50 jobs: all of them"
    );
    c.close().await.unwrap();
    // A recorded flow of 60 jobs, more than the bound: its members, all of them.
    let flow: Vec<Value> = (0..60)
        .map(|i| json!({"name": format!("f{i}"), "kind": "step"}))
        .collect();
    let ids = skiplock::store::flows::enqueue_flow(&db.pool, &Value::Array(flow))
        .await
        .unwrap();
    let p = flow_progress(&db.pool, ids.flow).await.unwrap();
    assert_eq!((p.total, p.available, p.truncated), (60, 60, false));
}

/// `wait` refuses a timeout longer than an hour however its interval is written: months and
/// days of opposite signs (`'1000 years -360000 days'` passed as less than an hour and waited
/// until 2041), counted in seconds as they would be waited.
#[tokio::test]
async fn wait_refuses_a_timeout_over_an_hour_however_its_interval_is_written() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &step(json!({}))).await.unwrap().id;
    sqlx::query("UPDATE skiplock.jobs SET state = 'completed', finalized_at = now() WHERE id = $1")
        .bind(id)
        .execute(&*db.pool)
        .await
        .unwrap();
    for t in [
        "1000 years -360000 days",
        "1 mon -29 days",
        "-1 mon 31 days",
        "2 hours",
        "-1 second",
    ] {
        let e = sqlx::query("SELECT * FROM skiplock.wait($1, $2::interval)")
            .bind(id)
            .bind(t)
            .execute(&*db.pool)
            .await
            .expect_err(t);
        assert!(
            e.to_string()
                .contains("wait timeout must be between 0 and 1 hour"),
            "{t}: {e}"
        );
    }
    for t in ["1 hour", "1 mon -29 days -23 hours", "0", "2 seconds"] {
        let finished: bool =
            sqlx::query_scalar("SELECT finished FROM skiplock.wait($1, $2::interval)")
                .bind(id)
                .bind(t)
                .fetch_one(&*db.pool)
                .await
                .unwrap_or_else(|e| panic!("{t}: {e}"));
        assert!(finished, "{t}");
    }
}

/// A flow whose first job is deduplicated into another's job (the same kind, queue and key)
/// takes its id from the first job it inserted: the other flow keeps its own members, and
/// this one records its jobs under its own id. A flow all of whose jobs are deduplicated
/// answers with its first job's id and records nothing.
#[tokio::test]
async fn a_flows_id_is_never_a_job_it_was_deduplicated_into() {
    use skiplock::store::flows::{enqueue_flow, flow_progress};

    let db = TestDb::new().await;
    let theirs = enqueue_flow(
        &db.pool,
        &json!([
            {"name": "a", "kind": "report", "queue": "billing", "unique_key": "month:2026-12"},
            {"name": "b", "kind": "step", "depends_on": ["a"]},
        ]),
    )
    .await
    .unwrap();
    let ours = enqueue_flow(
        &db.pool,
        &json!([
            {"name": "z0", "kind": "report", "queue": "billing", "unique_key": "month:2026-12"},
            {"name": "evil", "kind": "step", "run_at": "9999-01-01T00:00:00Z"},
            {"name": "evil2", "kind": "step", "depends_on": ["z0"]},
        ]),
    )
    .await
    .unwrap();
    assert_eq!(ours.id("z0"), theirs.id("a"), "deduplicated");
    assert_ne!(ours.flow, theirs.flow);
    assert_eq!(Some(ours.flow), ours.id("evil"));
    let p = flow_progress(&db.pool, theirs.flow).await.unwrap();
    assert_eq!(p.total, 2, "their flow keeps its own members");
    let p = flow_progress(&db.pool, ours.flow).await.unwrap();
    assert_eq!(p.total, 3);
    let again = enqueue_flow(
        &db.pool,
        &json!([{"name": "only", "kind": "report", "queue": "billing", "unique_key": "month:2026-12"}]),
    )
    .await
    .unwrap();
    assert_eq!(Some(again.flow), theirs.id("a"));
    assert_eq!(flow_progress(&db.pool, theirs.flow).await.unwrap().total, 2);
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.flow_jobs WHERE name = 'only'"
        )
        .await,
        0
    );
}
