//! The apalis backend (docs/apalis.md): apalis 1.x workers on `skiplock_apalis::SkiplockStorage`,
//! against a real database, next to native workers.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use apalis::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;
use skiplock::config::QueueSettings;
use skiplock::queue::{NewJob, OnConflict};
use skiplock::store::jobs::{enqueue, get_job};
use skiplock_apalis::{JobOptions, SkiplockJob, SkiplockStorage};
use sqlx::PgPool;
use support::*;
use tokio::task::JoinHandle;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Work {
    n: u32,
    #[serde(default)]
    mode: String,
}

/// Settings for in-process apalis storages: fast poll, tiny backoff, a long rescue window
/// (a loaded machine never has a live job rescued), short grace.
fn settings() -> QueueSettings {
    QueueSettings {
        rescue_after: Duration::from_secs(60),
        shutdown_grace: Duration::from_millis(300),
        ..fast_settings()
    }
}

/// Runs `worker` in a task; returns the task (ended by `ctx.stop()`).
fn spawn<F>(fut: F) -> JoinHandle<Result<(), WorkerError>>
where
    F: std::future::Future<Output = Result<(), WorkerError>> + Send + 'static,
{
    tokio::spawn(fut)
}

async fn stop(ctx: &WorkerContext, handle: JoinHandle<Result<(), WorkerError>>) {
    // The worker may not have started yet on a slow machine: stop() refuses a pending one.
    wait_for(
        "the apalis worker to start",
        Duration::from_secs(60),
        || async { (!ctx.is_pending()).then_some(()) },
    )
    .await;
    ctx.stop().unwrap();
    tokio::time::timeout(Duration::from_secs(120), handle)
        .await
        .expect("the apalis worker stops")
        .expect("the apalis worker task does not panic")
        .expect("the apalis worker ends without error");
}

/// A tower middleware that counts the tasks it sees (proof that a user's layers run).
#[derive(Clone)]
struct CountLayer(Arc<Mutex<usize>>);

impl<S> tower_layer::Layer<S> for CountLayer {
    type Service = CountService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        CountService(inner, self.0.clone())
    }
}

#[derive(Clone)]
struct CountService<S>(S, Arc<Mutex<usize>>);

impl<S: tower_service::Service<Req>, Req> tower_service::Service<Req> for CountService<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }
    fn call(&mut self, req: Req) -> S::Future {
        *self.1.lock().unwrap() += 1;
        self.0.call(req)
    }
}

/// Pushes `Work { n }` for every n of `ns` through apalis's TaskSink (on a clone of the
/// storage: a clone never claims).
async fn push_works(storage: &SkiplockStorage<Work>, ns: std::ops::Range<u32>) {
    let mut pusher = storage.clone();
    pusher
        .push_bulk(
            ns.map(|n| Work {
                n,
                mode: String::new(),
            })
            .collect(),
        )
        .await
        .unwrap();
}

type Seen = Arc<Mutex<HashMap<u32, u32>>>;

async fn record(work: Work, seen: Data<Seen>) -> Result<(), BoxDynError> {
    *seen.lock().unwrap().entry(work.n).or_default() += 1;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_apalis_worker_drains_its_kind_exactly_once_next_to_a_native_worker() {
    let db = TestDb::new().await;
    const N: u32 = 2000;
    // Pushed through apalis's TaskSink (a clone of the storage never claims).
    let storage = SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-work")
        .settings(settings())
        .concurrency(10);
    push_works(&storage, 0..N).await;
    // Another kind for the native worker.
    enqueue_noops(&db.pool, N as usize).await;

    let native = start_builtin(&db.pool, fast_settings());
    let seen: Seen = Default::default();
    let counted = Arc::new(Mutex::new(0usize));
    let ctx = WorkerContext::new("apalis-work");
    let worker = WorkerBuilder::new(&ctx)
        .backend(storage)
        .layer(CountLayer(counted.clone()))
        .concurrency(10)
        .data(seen.clone())
        .build(record);
    let handle = spawn(worker.run());

    wait_all_finished(&db.pool, Duration::from_secs(300)).await;
    stop(&ctx, handle).await;
    native.stop().await.unwrap();

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), N as usize, "every apalis job ran");
    assert!(seen.values().all(|&c| c == 1), "no apalis job ran twice");
    assert_eq!(
        *counted.lock().unwrap(),
        N as usize,
        "the middleware saw every task"
    );
    let by: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT kind, state::text, count(*) FROM skiplock.jobs
         WHERE attempt = 1 AND errors = '[]'::jsonb GROUP BY 1, 2 ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        by,
        vec![
            ("apalis-work".into(), "completed".into(), N as i64),
            ("noop".into(), "completed".into(), N as i64)
        ]
    );
    // The apalis jobs were claimed by the apalis storage's worker, the noops by the native one.
    let apalis_by: i64 = count(
        &db.pool,
        "SELECT count(*) FROM skiplock.jobs WHERE kind = 'apalis-work' AND attempted_by LIKE '%:apalis:%'",
    )
    .await;
    assert_eq!(apalis_by, N as i64);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.workers").await,
        0,
        "both workers removed their rows on stop"
    );
}

async fn fail_or_abort(work: Work) -> Result<(), BoxDynError> {
    match work.mode.as_str() {
        "abort" => Err(AbortError::new(format!("giving up on {}", work.n)).into()),
        _ => Err(format!("boom {}", work.n).into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_apalis_handler_is_retried_with_its_errors_recorded_then_discarded() {
    let db = TestDb::new().await;
    let storage = SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-fail").settings(settings());
    let failing = storage
        .enqueue(
            &Work {
                n: 1,
                mode: "fail".into(),
            },
            &JobOptions::new().max_attempts(3),
        )
        .await
        .unwrap();
    let aborted = storage
        .enqueue(
            &Work {
                n: 2,
                mode: "abort".into(),
            },
            &JobOptions::new(),
        )
        .await
        .unwrap();
    // Arguments this handler cannot read: discarded at once, never run.
    let bad = enqueue(&db.pool, &NewJob::new("apalis-fail", json!({"m": "x"})))
        .await
        .unwrap()
        .id;

    let ctx = WorkerContext::new("apalis-fail");
    let worker = WorkerBuilder::new(&ctx)
        .backend(storage)
        .build(fail_or_abort);
    let handle = spawn(worker.run());
    wait_all_finished(&db.pool, Duration::from_secs(120)).await;
    stop(&ctx, handle).await;

    let r = get_job(&db.pool, failing).await.unwrap();
    assert_eq!(
        (r.state.as_str(), r.attempt, r.max_attempts),
        ("discarded", 3, 3)
    );
    let errors = r.errors.as_array().unwrap();
    assert_eq!(errors.len(), 3, "{}", r.errors);
    for (i, e) in errors.iter().enumerate() {
        assert_eq!(e["attempt"], json!(i + 1), "{}", r.errors);
        assert_eq!(e["error"], json!("boom 1"), "{}", r.errors);
    }

    let r = get_job(&db.pool, aborted).await.unwrap();
    assert_eq!(
        (r.state.as_str(), r.attempt),
        ("discarded", 1),
        "an abort discards at once"
    );
    assert!(
        r.errors[0]["error"]
            .as_str()
            .unwrap()
            .contains("giving up on 2"),
        "{}",
        r.errors
    );

    let r = get_job(&db.pool, bad).await.unwrap();
    assert_eq!((r.state.as_str(), r.attempt), ("discarded", 1));
    assert!(
        r.errors[0]["error"]
            .as_str()
            .unwrap()
            .contains("undecodable args"),
        "{}",
        r.errors
    );
}

async fn sleep_until_cut(_work: Work) -> Result<(), BoxDynError> {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

/// Handlers of [`sleep_until_cut_counted`] that began (only
/// `a_dropped_apalis_worker_still_puts_back_everything_it_held` runs it).
static DROPPED_HANDLERS_BEGUN: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// [`sleep_until_cut`], counting the handlers that began: a job claimed is not yet one apalis
/// runs, and the test that drops apalis mid-run waits for both.
async fn sleep_until_cut_counted(work: Work) -> Result<(), BoxDynError> {
    DROPPED_HANDLERS_BEGUN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    sleep_until_cut(work).await
}

/// Handlers of [`sleep_until_cut_graceful`] that began (only
/// `a_graceful_stop_returns_running_and_waiting_jobs_without_spending_an_attempt` runs it).
static GRACEFUL_HANDLERS_BEGUN: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// [`sleep_until_cut`], counting the handlers that began: five jobs claimed are not yet five
/// jobs the worker started (a claimed job the worker never started goes back at shutdown
/// with a note in its errors), so the test stops apalis once two of them run in it.
async fn sleep_until_cut_graceful(work: Work) -> Result<(), BoxDynError> {
    GRACEFUL_HANDLERS_BEGUN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    sleep_until_cut(work).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_returns_running_and_waiting_jobs_without_spending_an_attempt() {
    let db = TestDb::new().await;
    // The storage claims 5; apalis runs 2 at a time: 2 running, 3 claimed and waiting.
    let storage = SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-slow")
        .settings(settings())
        .concurrency(5);
    push_works(&storage, 0..5).await;
    let ctx = WorkerContext::new("apalis-slow");
    let worker = WorkerBuilder::new(&ctx)
        .backend(storage)
        .concurrency(2)
        .build(sleep_until_cut_graceful);
    let handle = spawn(worker.run());
    wait_for(
        "five claimed jobs, two of them running in apalis",
        Duration::from_secs(60),
        || async {
            (count_state(&db.pool, "running").await == 5
                && GRACEFUL_HANDLERS_BEGUN.load(std::sync::atomic::Ordering::SeqCst) == 2)
                .then_some(())
        },
    )
    .await;
    stop(&ctx, handle).await;

    let rows: Vec<(String, i32, i64)> = sqlx::query_as(
        "SELECT state::text, attempt, jsonb_array_length(errors)::bigint FROM skiplock.jobs ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows, vec![("available".to_string(), 0, 0); 5], "{rows:?}");
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.workers").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushing_reaches_skiplocks_options() {
    let db = TestDb::new().await;
    let mut storage = SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-push").queue("mail");
    // A debounce: the second push replaces the first's args and run time.
    for n in [1, 2] {
        let task = TaskBuilder::new(Work {
            n,
            mode: String::new(),
        })
        .data(
            JobOptions::new()
                .unique_key("digest", OnConflict::Replace)
                .priority(-3)
                .run_at(chrono::Utc::now() + chrono::Duration::seconds(600 * n as i64)),
        )
        .build();
        storage.push_task(task).await.unwrap();
    }
    // apalis's own idempotency key is a keep-key; its priority is larger-first.
    for n in [3, 4] {
        let task = TaskBuilder::new(Work {
            n,
            mode: String::new(),
        })
        .idempotency_key("once")
        .priority(5)
        .build();
        storage.push_task(task).await.unwrap();
    }
    // Plain values are wrapped into an object.
    let mut ints = SkiplockStorage::<u32>::new(db.pool.clone(), "apalis-int");
    ints.push(42).await.unwrap();

    let rows: Vec<(String, String, serde_json::Value, i16, Option<String>, bool)> = sqlx::query_as(
        "SELECT kind, queue, args, priority, unique_key, scheduled_at > now() + interval '900 seconds'
         FROM skiplock.jobs ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            (
                "apalis-push".into(),
                "mail".into(),
                json!({"n": 2, "mode": ""}),
                -3,
                Some("digest".into()),
                true
            ),
            (
                "apalis-push".into(),
                "mail".into(),
                json!({"n": 3, "mode": ""}),
                -5,
                Some("once".into()),
                false
            ),
            (
                "apalis-int".into(),
                "default".into(),
                json!({"value": 42}),
                0,
                None,
                false
            ),
        ]
    );
    // A limit key alone (a plain job otherwise, written by enqueue_many) is kept.
    let mut keyed = SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-keyed");
    for n in [5, 6] {
        let task = TaskBuilder::new(Work {
            n,
            mode: String::new(),
        })
        .data(JobOptions::new().limit_key(format!("host-{n}")))
        .build();
        keyed.push_task(task).await.unwrap();
    }
    let keys: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT limit_key FROM skiplock.jobs WHERE kind = 'apalis-keyed' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(keys, vec![Some("host-5".into()), Some("host-6".into())]);
}

/// The child process of the SIGKILL test (run by it with `--ignored`): an apalis worker on
/// SkiplockStorage whose first attempts never finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of apalis_jobs_of_a_sigkilled_process_are_rescued_and_finished"]
async fn apalis_child_process() {
    let url = std::env::var("SKIPLOCK_APALIS_CHILD_URL")
        .expect("run only by the SIGKILL test, which sets SKIPLOCK_APALIS_CHILD_URL");
    let pool = PgPool::connect(&url).await.unwrap();
    let ctx = WorkerContext::new("apalis-child");
    // Heartbeats every second; no rescuer of its own.
    let storage = SkiplockStorage::<Work>::new(pool, "apalis-kill")
        .settings(QueueSettings {
            rescue_after: Duration::from_secs(4),
            ..settings()
        })
        .rescuer(false);
    WorkerBuilder::new(&ctx)
        .backend(storage)
        .concurrency(10)
        .build(first_attempt_hangs)
        .run()
        .await
        .unwrap();
}

async fn first_attempt_hangs(_work: Work, job: Data<SkiplockJob>) -> Result<(), BoxDynError> {
    if job.attempt == 1 {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apalis_jobs_of_a_sigkilled_process_are_rescued_and_finished() {
    let db = TestDb::new().await;
    push_works(
        &SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-kill"),
        0..5,
    )
    .await;
    // Killed on drop too: a failing assertion leaves no child holding the test's output.
    let mut child = KillOnDrop(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "apalis_child_process",
                "--nocapture",
            ])
            .env("SKIPLOCK_APALIS_CHILD_URL", &db.url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Every job held by the child, and heartbeated by it at least once.
    wait_for(
        "the child to run all five jobs",
        Duration::from_secs(120),
        || async {
            let n = count(
                &db.pool,
                "SELECT count(*) FROM skiplock.jobs WHERE state = 'running'
               AND attempted_by LIKE '%:apalis:%' AND heartbeat_at > attempted_at",
            )
            .await;
            (n == 5).then_some(())
        },
    )
    .await;
    sigkill(&child.0);
    let _ = child.0.wait();
    assert_eq!(
        count_state(&db.pool, "running").await,
        5,
        "the killed child's jobs stay running"
    );

    // An apalis worker whose rescue window the test sets short: its rescuer returns the dead
    // child's jobs (their heartbeats stopped), and it finishes them.
    let ctx = WorkerContext::new("apalis-rescuer");
    let storage =
        SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-kill").settings(QueueSettings {
            rescue_after: Duration::from_secs(2),
            ..settings()
        });
    let handle = spawn(
        WorkerBuilder::new(&ctx)
            .backend(storage)
            .concurrency(10)
            .build(first_attempt_hangs)
            .run(),
    );
    wait_all_finished(&db.pool, Duration::from_secs(120)).await;
    stop(&ctx, handle).await;
    let rows: Vec<(String, i32, String)> = sqlx::query_as(
        "SELECT state::text, attempt, errors->0->>'error' FROM skiplock.jobs ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 5);
    for (state, attempt, error) in rows {
        assert_eq!(state, "completed");
        // 2, or more if the loaded machine stalled this worker past its short window.
        assert!(attempt >= 2, "attempt {attempt}");
        assert!(error.contains("heartbeat"), "{error}");
    }
}

/// The repository's docs/apalis-migrate.sql (two folders above this crate's) with its psql
/// variables filled in.
fn migrate_script(job_type: &str, kind: &str, queue: &str) -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/apalis-migrate.sql"
    ))
    .unwrap()
    .replace(":'job_type'", &format!("'{job_type}'"))
    .replace(":'kind'", &format!("'{kind}'"))
    .replace(":'queue'", &format!("'{queue}'"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_script_moves_pending_apalis_jobs_and_an_apalis_worker_runs_them() {
    let db = TestDb::new().await;
    // The columns of apalis-postgres 1.0's apalis.jobs that the script reads.
    sqlx::raw_sql(
        "CREATE SCHEMA apalis;
         CREATE TABLE apalis.jobs (
             job bytea NOT NULL, id text PRIMARY KEY, job_type text NOT NULL,
             status text NOT NULL DEFAULT 'Pending', attempts integer NOT NULL DEFAULT 0,
             max_attempts integer NOT NULL DEFAULT 25, run_at timestamptz NOT NULL DEFAULT now(),
             last_result jsonb, lock_at timestamptz, lock_by text, done_at timestamptz,
             priority integer DEFAULT 0, idempotency_key text);
         INSERT INTO apalis.jobs (job, id, job_type, status, attempts, max_attempts, priority, idempotency_key) VALUES
             (convert_to('{\"n\": 1}', 'UTF8'), 'a', 'app::Work', 'Pending', 0, 25, 0, NULL),
             (convert_to('{\"n\": 2}', 'UTF8'), 'b', 'app::Work', 'Failed', 2, 5, 3, 'key-2'),
             (convert_to('{\"n\": 3}', 'UTF8'), 'c', 'app::Work', 'Running', 1, 25, 0, NULL),
             (convert_to('{\"n\": 4}', 'UTF8'), 'd', 'app::Work', 'Done', 1, 25, 0, NULL),
             (convert_to('{\"n\": 5}', 'UTF8'), 'e', 'app::Work', 'Failed', 25, 25, 0, NULL),
             (convert_to('{\"n\": 6}', 'UTF8'), 'f', 'app::Other', 'Pending', 0, 25, 0, NULL),
             (convert_to('7', 'UTF8'), 'g', 'app::Int', 'Pending', 0, 25, 0, NULL);",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let script = migrate_script("app::Work", "apalis-moved", "default");
    sqlx::raw_sql(sqlx::AssertSqlSafe(script))
        .execute(&db.pool)
        .await
        .unwrap();
    let script = migrate_script("app::Int", "apalis-int", "default");
    sqlx::raw_sql(sqlx::AssertSqlSafe(script))
        .execute(&db.pool)
        .await
        .unwrap();

    let rows: Vec<(String, serde_json::Value, i16, i32, Option<String>)> = sqlx::query_as(
        "SELECT kind, args, priority, max_attempts, unique_key FROM skiplock.jobs ORDER BY args->>'n'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            ("apalis-moved".into(), json!({"n": 1}), 0, 25, None),
            (
                "apalis-moved".into(),
                json!({"n": 2}),
                -3,
                3,
                Some("key-2".into())
            ),
            ("apalis-moved".into(), json!({"n": 3}), 0, 24, None),
            ("apalis-int".into(), json!({"value": 7}), 0, 25, None),
        ]
    );
    let left: Vec<String> = sqlx::query_scalar("SELECT id FROM apalis.jobs ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        left,
        vec!["d", "e", "f"],
        "finished rows and other types stay"
    );

    // An apalis worker on SkiplockStorage runs the moved jobs.
    let seen: Seen = Default::default();
    let ctx = WorkerContext::new("apalis-moved");
    let storage =
        SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-moved").settings(settings());
    let handle = spawn(
        WorkerBuilder::new(&ctx)
            .backend(storage)
            .data(seen.clone())
            .build(record)
            .run(),
    );
    wait_for(
        "the moved jobs to complete",
        Duration::from_secs(60),
        || async { (count_state(&db.pool, "completed").await == 3).then_some(()) },
    )
    .await;
    stop(&ctx, handle).await;
    let mut ns: Vec<u32> = seen.lock().unwrap().keys().copied().collect();
    ns.sort();
    assert_eq!(ns, vec![1, 2, 3]);
}

/// Counts handler futures dropped before they finished.
struct DropCount(Arc<Mutex<usize>>);

impl Drop for DropCount {
    fn drop(&mut self) {
        *self.0.lock().unwrap() += 1;
    }
}

async fn hang_and_count_drops(
    _work: Work,
    dropped: Data<Arc<Mutex<usize>>>,
) -> Result<(), BoxDynError> {
    let guard = DropCount(dropped.0.clone());
    tokio::time::sleep(Duration::from_secs(3600)).await;
    std::mem::forget(guard);
    Ok(())
}

/// Enqueues one job with `opts` on `storage` and runs an apalis worker named `name` on it
/// whose handler hangs and counts the drops of its future; returns the job's id, the count,
/// the worker's context and its task.
async fn run_one_hanging(
    storage: SkiplockStorage<Work>,
    opts: JobOptions,
    name: &str,
) -> (
    i64,
    Arc<Mutex<usize>>,
    WorkerContext,
    JoinHandle<Result<(), WorkerError>>,
) {
    let work = Work {
        n: 1,
        mode: String::new(),
    };
    let id = storage.enqueue(&work, &opts).await.unwrap();
    let dropped = Arc::new(Mutex::new(0usize));
    let ctx = WorkerContext::new(name);
    let handle = spawn(
        WorkerBuilder::new(&ctx)
            .backend(storage)
            .data(dropped.clone())
            .build(hang_and_count_drops)
            .run(),
    );
    (id, dropped, ctx, handle)
}

/// Waits until the hanging handler's future was dropped once.
async fn wait_dropped(dropped: &Arc<Mutex<usize>>) {
    wait_for(
        "the handler to be stopped",
        Duration::from_secs(60),
        || async { (*dropped.lock().unwrap() == 1).then_some(()) },
    )
    .await;
}

/// The worker's job timeout (`SKIPLOCK_JOB_TIMEOUT`) holds for apalis handlers as for native
/// ones: the handler's future is dropped and the attempt fails with the timeout recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apalis_handler_past_the_job_timeout_is_stopped_and_its_attempt_fails() {
    let db = TestDb::new().await;
    let storage =
        SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-timeout").settings(QueueSettings {
            job_timeout: Duration::from_millis(300),
            ..settings()
        });
    let (id, dropped, ctx, handle) =
        run_one_hanging(storage, JobOptions::new().max_attempts(1), "apalis-timeout").await;
    let r = wait_job(&db.pool, id, "the job to time out", |r| {
        r.state.as_str() == "discarded"
    })
    .await;
    assert!(
        r.errors[0]["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 300ms"),
        "{}",
        r.errors
    );
    wait_dropped(&dropped).await;
    stop(&ctx, handle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_running_apalis_job_stops_its_handler_and_the_worker_goes_on() {
    let db = TestDb::new().await;
    // Heartbeats every 500 ms; no rescuer in this process, so nothing but the cancel takes
    // the job away however loaded the machine is.
    let storage = SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-cancel")
        .settings(QueueSettings {
            rescue_after: Duration::from_secs(2),
            ..settings()
        })
        .rescuer(false);
    let (id, dropped, ctx, handle) =
        run_one_hanging(storage, JobOptions::new(), "apalis-cancel").await;
    wait_job(&db.pool, id, "the job to run", |r| {
        r.state.as_str() == "running"
    })
    .await;
    skiplock::store::jobs::cancel_job(&db.pool, id)
        .await
        .unwrap();
    wait_dropped(&dropped).await;
    // The worker goes on: a new job of the kind runs (and is cut again at stop).
    let r = get_job(&db.pool, id).await.unwrap();
    assert_eq!(r.state.as_str(), "cancelled");
    assert!(
        r.errors[0]["error"]
            .as_str()
            .unwrap()
            .contains("cancelled while running"),
        "{}",
        r.errors
    );
    let pusher = SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-cancel");
    let next = pusher
        .enqueue(
            &Work {
                n: 2,
                mode: String::new(),
            },
            &JobOptions::new(),
        )
        .await
        .unwrap();
    wait_job(&db.pool, next, "the next job to run", |r| {
        r.state.as_str() == "running"
    })
    .await;
    stop(&ctx, handle).await;
    let r = get_job(&db.pool, next).await.unwrap();
    assert_eq!(
        (r.state.as_str(), r.attempt),
        ("available", 0),
        "given back at stop"
    );
    assert_eq!(
        get_job(&db.pool, id).await.unwrap().state.as_str(),
        "cancelled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_options_and_an_unmigrated_database_stop_the_apalis_worker_with_a_clear_error() {
    let db = TestDb::new().await;
    for (storage, expected) in [
        (
            SkiplockStorage::<Work>::new(db.pool.clone(), "k").concurrency(0),
            "concurrency must be between 1 and",
        ),
        (
            SkiplockStorage::<Work>::new(db.pool.clone(), ""),
            "the job kind is empty",
        ),
        (
            SkiplockStorage::<Work>::new(db.pool.clone(), "k").queue(" "),
            "the queue name is empty",
        ),
    ] {
        let worker = WorkerBuilder::new("bad").backend(storage).build(record);
        let e = tokio::time::timeout(Duration::from_secs(60), worker.run())
            .await
            .expect("a bad storage fails at once")
            .expect_err("a bad storage is refused");
        assert!(e.to_string().contains(expected), "{e}");
    }
    let empty = TestDb::empty().await;
    let worker = WorkerBuilder::new("unmigrated")
        .backend(SkiplockStorage::<Work>::new(empty.pool.clone(), "k"))
        .build(record);
    let e = tokio::time::timeout(Duration::from_secs(60), worker.run())
        .await
        .expect("an unmigrated database fails at once")
        .expect_err("an unmigrated database is refused");
    assert!(e.to_string().contains("skiplock migrate"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_apalis_worker_still_puts_back_everything_it_held() {
    let db = TestDb::new().await;
    // A retry a minute away: the two jobs apalis drops mid-run go back for later, so the
    // runtime, still claiming until its shutdown begins, cannot take them again meanwhile.
    let storage = SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-drop")
        .settings(QueueSettings {
            backoff_unit: Duration::from_secs(60),
            ..settings()
        })
        .concurrency(5);
    push_works(&storage, 0..5).await;
    let ctx = WorkerContext::new("apalis-drop");
    let handle = spawn(
        WorkerBuilder::new(&ctx)
            .backend(storage)
            .concurrency(2)
            .build(sleep_until_cut_counted)
            .run(),
    );
    wait_for("five claimed jobs", Duration::from_secs(60), || async {
        (count_state(&db.pool, "running").await == 5).then_some(())
    })
    .await;
    // And two of them running in apalis' handler (claimed is not yet begun).
    wait_for("two handlers begun", Duration::from_secs(60), || async {
        (DROPPED_HANDLERS_BEGUN.load(std::sync::atomic::Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    // Dropped, not stopped: no poll_close. The storage's runtime shuts down all the same.
    handle.abort();
    let _ = handle.await;
    wait_for(
        "all five back and the worker's row gone",
        Duration::from_secs(60),
        || async {
            let back = count_state(&db.pool, "available").await == 5;
            let gone = count(&db.pool, "SELECT count(*) FROM skiplock.workers").await == 0;
            (back && gone).then_some(())
        },
    )
    .await;
    // The three apalis never started go back without using up their attempt (let go of from
    // the buffer, or released by the shutdown, which says so); the two it dropped mid-run
    // used up their attempt, with what happened in `errors` (retried after the backoff).
    let rows: Vec<(i32, Option<String>)> = sqlx::query_as(
        "SELECT attempt, errors->-1->>'error' FROM skiplock.jobs ORDER BY attempt, id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let dropped = Some("apalis dropped the handler's future before it finished".to_string());
    let released = Some("released at shutdown: claimed but never started".to_string());
    assert_eq!(rows.len(), 5, "{rows:?}");
    for (attempt, error) in &rows[..3] {
        assert!(
            *attempt == 0 && (error.is_none() || *error == released),
            "{rows:?}"
        );
    }
    assert_eq!(rows[3..], [(1, dropped.clone()), (1, dropped)], "{rows:?}");
}

/// An apalis worker on `SkiplockStorage` checks the schema at every heartbeat too: once
/// another release migrated it (its record, written here by hand), it claims nothing more
/// with this release's statements: its job stream ends and apalis closes the storage, which
/// puts back what it held and removes its row, and the worker ends with the schema error.
/// Until then it runs what comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apalis_worker_stops_once_another_release_migrated_the_schema() {
    let db = TestDb::new().await;
    let storage =
        SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-work").settings(QueueSettings {
            rescue_after: Duration::from_secs(2),
            ..settings()
        });
    let mut pusher = storage.clone();
    let ctx = WorkerContext::new("schema-moved");
    let seen: Seen = Default::default();
    let worker = WorkerBuilder::new(&ctx)
        .backend(storage)
        .data(seen.clone())
        .build(record);
    let handle = spawn(worker.run());
    let work = |n| Work {
        n,
        mode: String::new(),
    };
    pusher.push(work(1)).await.unwrap();
    wait_all_finished(&db.pool, Duration::from_secs(120)).await;

    sqlx::query("UPDATE skiplock.schema_info SET api_version = api_version + 1")
        .execute(&db.pool)
        .await
        .unwrap();
    // The storage closes (its row goes) at its next heartbeat.
    wait_for(
        "the apalis storage to close after the schema moved",
        Duration::from_secs(120),
        || async {
            (count(&db.pool, "SELECT count(*) FROM skiplock.workers").await == 0).then_some(())
        },
    )
    .await;
    pusher.push(work(2)).await.unwrap();
    let states: Vec<String> = sqlx::query_scalar(
        "SELECT state::text FROM skiplock.jobs WHERE kind = 'apalis-work' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(states, vec!["completed", "available"]);
    assert_eq!(seen.lock().unwrap().len(), 1);
    // The worker ends by itself, saying why, as a native worker's `run` does.
    let e = tokio::time::timeout(Duration::from_secs(120), handle)
        .await
        .expect("the apalis worker ends by itself")
        .expect("the apalis worker task does not panic")
        .expect_err("the apalis worker reports the schema change");
    assert!(
        e.to_string().contains("migrated by a newer skiplock"),
        "{e}"
    );
}

type InFlight = Arc<Mutex<(usize, usize)>>;

/// Counts the handlers running at once (now, most) and holds each for a moment.
async fn overlap(work: Work, seen: Data<Seen>, flight: Data<InFlight>) -> Result<(), BoxDynError> {
    {
        let mut f = flight.lock().unwrap();
        f.0 += 1;
        f.1 = f.1.max(f.0);
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    flight.lock().unwrap().0 -= 1;
    *seen.lock().unwrap().entry(work.n).or_default() += 1;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apalis_worker_keeps_a_queues_pause_and_its_concurrency_limit() {
    let db = TestDb::new().await;
    const N: u32 = 24;
    // Count calls of the SQL API's functions on the storage's connections (opened after
    // this), so the test can see the storage claiming from the paused queue.
    sqlx::query(
        "DO $$ BEGIN
             EXECUTE format('ALTER DATABASE %I SET track_functions = pl', current_database());
         END $$",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let pool = PgPool::connect(&db.url).await.unwrap();
    skiplock::store::control::pause(&db.pool, "default")
        .await
        .unwrap();
    let storage = SkiplockStorage::<Work>::new(pool.clone(), "apalis-held")
        .settings(settings())
        .concurrency(8);
    push_works(&storage, 0..N).await;
    let seen: Seen = Default::default();
    let flight: InFlight = Default::default();
    let ctx = WorkerContext::new("apalis-held");
    let worker = WorkerBuilder::new(&ctx)
        .backend(storage)
        .concurrency(8)
        .data(seen.clone())
        .data(flight.clone())
        .build(overlap);
    let handle = spawn(worker.run());

    // The paused queue is claimed through the limited claim, which finds it paused: wait
    // until the storage has done so a few times (a backend reports its function calls about
    // once a second). Were the pause not kept, the jobs would have run by then.
    wait_for(
        "the storage's claims of the paused queue",
        Duration::from_secs(60),
        || async {
            (count(
                &db.pool,
                "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_user_functions
                 WHERE schemaname = 'skiplock' AND funcname = '_claim_limited'",
            )
            .await
                >= 3)
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE state <> 'available' OR attempt > 0"
        )
        .await,
        0,
        "nothing is claimed from a paused queue"
    );
    assert!(seen.lock().unwrap().is_empty());

    // Resumed with a concurrency limit of 2: every job runs once, never more than 2 at once.
    skiplock::store::control::set_queue_limit(&db.pool, "default", Some(2))
        .await
        .unwrap();
    skiplock::store::control::resume(&db.pool, "default")
        .await
        .unwrap();
    wait_all_finished(&db.pool, Duration::from_secs(300)).await;
    stop(&ctx, handle).await;
    pool.close().await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), N as usize, "every job ran after the resume");
    assert!(seen.values().all(|&c| c == 1), "no job ran twice");
    let most = flight.lock().unwrap().1;
    assert!(
        (1..=2).contains(&most),
        "at most 2 handlers at once under the limit, saw {most}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apalis_row_serde_json_cannot_read_is_discarded_alone_and_its_batch_runs() {
    // Valid jsonb serde_json refuses (too deep; a number outside f64), written by a superuser
    // past enqueue's check: the storage decodes each claimed job's args on its own, so this
    // row is discarded with the decode error and the rest of its claim batch runs.
    let db = TestDb::new().await;
    let deep = format!("{}1{}", "{\"n\": ".repeat(300), "}".repeat(300));
    let mut bad = Vec::new();
    for (args, want) in [
        (deep.as_str(), "recursion limit exceeded"),
        (r#"{"n": 1e400}"#, "number out of range"),
    ] {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO skiplock.jobs (kind, args, priority, max_attempts) \
             VALUES ('apalis-work', $1::text::jsonb, -5, 3) RETURNING id",
        )
        .bind(args)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        bad.push((id, want));
    }
    let storage = SkiplockStorage::<Work>::new(db.pool.clone(), "apalis-work")
        .settings(settings())
        .concurrency(20);
    push_works(&storage, 0..19).await;
    let seen: Seen = Default::default();
    let ctx = WorkerContext::new("apalis-poison");
    let worker = WorkerBuilder::new(&ctx)
        .backend(storage)
        .concurrency(20)
        .data(seen.clone())
        .build(record);
    let handle = spawn(worker.run());
    wait_all_finished(&db.pool, Duration::from_secs(120)).await;
    stop(&ctx, handle).await;

    assert_eq!(seen.lock().unwrap().len(), 19, "every readable job ran");
    assert_eq!(count_state(&db.pool, "completed").await, 19);
    for (id, want) in bad {
        assert_discarded_at_first_attempt(&db.pool, id, want).await;
    }
}
