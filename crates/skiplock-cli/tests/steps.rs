//! Durable steps against a real Postgres (docs/steps.md): a step runs once per job and a later
//! attempt replays its recorded result, through failures, rescues and a worker process killed
//! at random points; the bounds; the record of a changed handler; the cursor; durable sleeps.

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use skiplock::queue::NewJob;
use skiplock::store::jobs::enqueue;
use skiplock::worker::handler::Handler;
use skiplock::worker::{HandlerResult, JobContext, JobError, Outcome};
use support::*;

type Run =
    dyn Fn(JobContext, Value) -> Pin<Box<dyn Future<Output = HandlerResult> + Send>> + Send + Sync;

/// A handler of kind `kind` written as a closure.
struct With(&'static str, Arc<Run>);

impl Handler for With {
    type Args = Value;
    fn kind(&self) -> &'static str {
        self.0
    }
    fn run(&self, ctx: JobContext, args: Value) -> impl Future<Output = HandlerResult> + Send {
        (self.1)(ctx, args)
    }
}

fn handler<F, Fut>(kind: &'static str, f: F) -> With
where
    F: Fn(JobContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    With(kind, Arc::new(move |c, a| Box::pin(f(c, a))))
}

async fn enqueue_job(db: &TestDb, job: NewJob) -> i64 {
    enqueue(&db.pool, &job).await.unwrap().id
}

async fn wait_state(db: &TestDb, id: i64, want: &str) {
    wait_for(
        &format!("job {id} to be {want}"),
        Duration::from_secs(120),
        || async { (state_of(db, id).await == want).then_some(()) },
    )
    .await
}

/// The runs of each step (name → how many times its closure got to its end), written by the
/// closures themselves in statements of their own.
async fn runs(db: &TestDb, job: i64) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT step, count(*) FROM step_runs WHERE job = $1 GROUP BY step ORDER BY step",
    )
    .bind(job)
    .fetch_all(&*db.pool)
    .await
    .unwrap()
}

async fn side_table(db: &TestDb) {
    sqlx::query("CREATE TABLE step_runs (job bigint, step text, attempt int, at timestamptz DEFAULT clock_timestamp())")
        .execute(&*db.pool)
        .await
        .unwrap();
}

async fn ran(pool: &skiplock::Pool, job: i64, step: &str, attempt: i32) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO step_runs (job, step, attempt) VALUES ($1, $2, $3)")
        .bind(job)
        .bind(step)
        .bind(attempt)
        .execute(&**pool)
        .await
        .map(|_| ())
}

/// Ten steps, each a short random wait then its run recorded in `step_runs`; the result is
/// the sum of the steps' results.
fn ten_steps() -> With {
    handler("ten-steps", |ctx: JobContext, _args: Value| async move {
        let mut sum = 0i64;
        for i in 0..10i64 {
            let c = ctx.clone();
            let v: i64 = ctx
                .step(format!("item-{i}"), || async move {
                    let ms = 100 + rand::random::<u64>() % 300;
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    ran(&c.pool, c.id, &format!("item-{i}"), c.attempt).await?;
                    Ok::<_, JobError>(i * i)
                })
                .await?;
            sum += v;
        }
        Ok(Outcome::CompleteWith(json!({ "sum": sum })))
    })
}

/// The child process of the SIGKILL test (run by it with `--ignored`): a worker of the
/// ten-step job that runs until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of a_ten_step_job_killed_at_random_points_runs_each_step_once"]
async fn steps_child_process() {
    let url = std::env::var("SKIPLOCK_STEPS_CHILD_URL")
        .expect("run only by the SIGKILL test, which sets SKIPLOCK_STEPS_CHILD_URL");
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let w = start_worker(&pool, fast_settings(), |b| b.register(ten_steps()));
    w.handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_step_job_killed_at_random_points_runs_each_step_once() {
    let db = TestDb::new().await;
    side_table(&db).await;
    let id = enqueue_job(&db, NewJob::new("ten-steps", json!({})).max_attempts(1000)).await;
    let spawn = || {
        KillOnDrop(
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--ignored", "--exact", "steps_child_process", "--nocapture"])
                .env(
                    "SKIPLOCK_STEPS_CHILD_URL",
                    format!("{}?application_name={CHILD}", db.url),
                )
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let mut kills = 0;
    while kills < 12 {
        let child = spawn();
        // A random point of the job's run: it starts once the child has claimed it.
        wait_for(
            "the child to claim the job",
            Duration::from_secs(120),
            || async { (state_of(&db, id).await != "available").then_some(()) },
        )
        .await;
        if state_of(&db, id).await == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 700)).await;
        // Killed outside the one window in which a step may run twice (docs/steps.md,
        // "Exactly once?"): after its closure's last write, before its record commits. The
        // lock holds the next closure's write back; the steps whose writes landed are
        // recorded before the kill.
        let mut tx = db.pool.begin().await.unwrap();
        sqlx::query("LOCK TABLE step_runs IN EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await
            .unwrap();
        wait_for("the written steps to be recorded", Duration::from_secs(60), || async {
            let (w, r): (i64, i64) = sqlx::query_as(
                "SELECT (SELECT count(DISTINCT step) FROM step_runs WHERE job = $1),
                        (SELECT count(*) FROM skiplock.job_steps WHERE job_id = $1 AND kind = 'step')",
            )
            .bind(id)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
            (w == r).then_some(())
        })
        .await;
        sigkill(&child.0);
        drop(child);
        // A statement of the killed process waiting for the lock would still run (and commit)
        // once the lock goes: its connections are ended first, as a server ends those of a
        // client it finds gone.
        wait_for("the killed child's connections to end", Duration::from_secs(60), || async {
            let left: i64 = sqlx::query_scalar(
                "SELECT count(pg_terminate_backend(pid))
                 FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1",
            )
            .bind(CHILD)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
            (left == 0).then_some(())
        })
        .await;
        tx.commit().await.unwrap();
        kills += 1;
        if state_of(&db, id).await == "completed" {
            break;
        }
        rescue_now(&db.pool, id).await;
    }
    let _last = spawn();
    wait_state(&db, id, "completed").await;
    let attempts: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT attempt) FROM skiplock.job_steps WHERE job_id = $1",
    )
    .bind(id)
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    eprintln!("{kills} kills; steps recorded by {attempts} attempts");
    // Ten steps take at least a second; a kill comes within 0.7 s of a claim.
    assert!(kills >= 2, "{kills} kills, {attempts} attempts");
    let want: Vec<(String, i64)> = (0..10).map(|i| (format!("item-{i}"), 1)).collect();
    assert_eq!(runs(&db, id).await, want, "after {kills} kills");
    let result: Value = sqlx::query_scalar("SELECT result FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&*db.pool)
        .await
        .unwrap();
    assert_eq!(result, json!({ "sum": 285 }));
    let recorded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM skiplock.job_steps WHERE job_id = $1")
            .bind(id)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
    assert_eq!(recorded, 10);
}

/// The application name of the child process's connections.
const CHILD: &str = "skiplock_steps_child";

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_fails_twice_reruns_alone_and_the_others_replay() {
    let db = TestDb::new().await;
    side_table(&db).await;
    let w = start_with(&db.pool, |r| {
        r.register(handler("flaky-step", |ctx: JobContext, _| async move {
            let mut out = Vec::new();
            for name in ["a", "b", "c"] {
                let c = ctx.clone();
                let v: String = ctx
                    .step(name, || async move {
                        ran(&c.pool, c.id, name, c.attempt).await?;
                        if name == "b" && c.attempt < 3 {
                            return Err(JobError::retry(format!(
                                "b fails on attempt {}",
                                c.attempt
                            )));
                        }
                        Ok(format!("{name}@{}", c.attempt))
                    })
                    .await?;
                out.push(v);
            }
            Ok(Outcome::CompleteWith(json!(out)))
        }));
    });
    let id = enqueue_job(&db, NewJob::new("flaky-step", json!({}))).await;
    wait_state(&db, id, "completed").await;
    w.stop().await.unwrap();
    assert_eq!(
        runs(&db, id).await,
        vec![("a".into(), 1), ("b".into(), 3), ("c".into(), 1)]
    );
    let (result, attempt): (Value, i32) =
        sqlx::query_as("SELECT result, attempt FROM skiplock.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
    assert_eq!(result, json!(["a@1", "b@3", "c@3"]));
    assert_eq!(attempt, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_of_a_taken_away_attempt_is_not_recorded() {
    let db = TestDb::new().await;
    side_table(&db).await;
    let go = Arc::new(tokio::sync::Notify::new());
    let answer = Arc::new(tokio::sync::Mutex::new(None::<String>));
    let (g, a) = (go.clone(), answer.clone());
    let w = start_with(&db.pool, move |r| {
        r.register(handler("taken", move |ctx: JobContext, _| {
            let (g, a) = (g.clone(), a.clone());
            async move {
                if ctx.attempt == 1 {
                    g.notified().await;
                    let r = ctx.step("late", || async { Ok::<_, JobError>(1) }).await;
                    *a.lock().await = Some(format!("{r:?}"));
                    return Ok(Outcome::Complete);
                }
                Ok(Outcome::Complete)
            }
        }));
    });
    let id = enqueue_job(&db, NewJob::new("taken", json!({}))).await;
    wait_state(&db, id, "running").await;
    rescue_now(&db.pool, id).await;
    go.notify_one();
    let said = wait_for(
        "the late step to answer",
        Duration::from_secs(60),
        || async { answer.lock().await.clone() },
    )
    .await;
    assert!(said.contains("was taken away"), "{said}");
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM skiplock.job_steps WHERE job_id = $1 AND attempt = 1",
    )
    .bind(id)
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    assert_eq!(n, 0);
    wait_state(&db, id, "completed").await;
    w.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_past_the_bounds_discard_the_job_with_the_reason() {
    let db = TestDb::new().await;
    let w = start_with(&db.pool, |r| {
        r.register(handler("big-step", |ctx: JobContext, _| async move {
            ctx.step("big", || async { Ok::<_, JobError>("x".repeat(70_000)) })
                .await?;
            Ok(Outcome::Complete)
        }));
        r.register(handler("many-steps", |ctx: JobContext, _| async move {
            for i in 0..=skiplock::worker::MAX_STEPS {
                ctx.step(format!("s{i}"), || async { Ok::<_, JobError>(()) })
                    .await?;
            }
            Ok(Outcome::Complete)
        }));
        r.register(handler("twice", |ctx: JobContext, _| async move {
            ctx.step("same", || async { Ok::<_, JobError>(1) }).await?;
            ctx.step("same", || async { Ok::<_, JobError>(2) }).await?;
            Ok(Outcome::Complete)
        }));
    });
    let big = enqueue_job(&db, NewJob::new("big-step", json!({}))).await;
    let many = enqueue_job(&db, NewJob::new("many-steps", json!({}))).await;
    let twice = enqueue_job(&db, NewJob::new("twice", json!({}))).await;
    for (id, want) in [
        (big, "bytes (at most 65536)"),
        (many, "steps (at most 1000)"),
        (twice, "ran twice in one attempt"),
    ] {
        wait_state(&db, id, "discarded").await;
        let errors: Value = sqlx::query_scalar("SELECT errors FROM skiplock.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
        assert_eq!(errors.as_array().unwrap().len(), 1, "{errors}");
        assert!(errors.to_string().contains(want), "{errors}");
    }
    w.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_new_to_a_later_attempt_runs_and_its_record_says_the_steps_changed() {
    let db = TestDb::new().await;
    let changed = Arc::new(AtomicBool::new(false));
    let c = changed.clone();
    let w = start_with(&db.pool, move |r| {
        let c = c.clone();
        r.register(handler("changed", move |ctx: JobContext, _| {
            let c = c.clone();
            async move {
                // Attempt 1 records `a` and `b`, then fails; the code of attempt 2 has a new
                // step `x` before them.
                let names: &[&str] = if c.load(Ordering::SeqCst) {
                    &["x", "a", "b", "y"]
                } else {
                    &["a", "b"]
                };
                for n in names {
                    ctx.step(*n, || async { Ok::<_, JobError>(()) }).await?;
                }
                if !c.swap(true, Ordering::SeqCst) {
                    return Err(JobError::retry("changed after this"));
                }
                Ok(Outcome::Complete)
            }
        }));
    });
    let id = enqueue_job(&db, NewJob::new("changed", json!({}))).await;
    wait_state(&db, id, "completed").await;
    w.stop().await.unwrap();
    let rows: Vec<(i32, String, i32, bool)> = sqlx::query_as(
        "SELECT seq, name, attempt, note IS NOT NULL FROM skiplock.job_steps WHERE job_id = $1 ORDER BY seq",
    )
    .bind(id)
    .fetch_all(&*db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            (1, "a".into(), 1, false),
            (2, "b".into(), 1, false),
            (3, "x".into(), 2, true),
            (4, "y".into(), 2, false),
        ]
    );
    // `skiplock job ID` lists them, the note too.
    let (code, out, err) = run_cmd(&db.url, &["job", &id.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("steps:\n  1 step a attempt 1: null\n"),
        "{out}"
    );
    assert!(
        out.contains("  3 step x attempt 2: null (recorded by attempt 2 before steps 1..=2"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_job_resumes_after_its_last_checkpoint() {
    let db = TestDb::new().await;
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(i32, u32)>::new()));
    let s = seen.clone();
    let w = start_with(&db.pool, move |r| {
        let s = s.clone();
        r.register(handler("walk", move |ctx: JobContext, _| {
            let s = s.clone();
            async move {
                let from: u32 = ctx.cursor().await?.unwrap_or(0);
                for i in from..100 {
                    s.lock().unwrap().push((ctx.attempt, i));
                    if i == 57 && ctx.attempt == 1 {
                        return Err(JobError::retry("fails at 57"));
                    }
                    if (i + 1) % 10 == 0 {
                        ctx.checkpoint(&(i + 1)).await?;
                    }
                }
                Ok(Outcome::Complete)
            }
        }));
    });
    let id = enqueue_job(&db, NewJob::new("walk", json!({}))).await;
    wait_state(&db, id, "completed").await;
    w.stop().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    let first_of_2 = seen.iter().find(|(a, _)| *a == 2).unwrap().1;
    assert_eq!(first_of_2, 50);
    assert_eq!(seen.len(), 58 + 50);
    let cursor: Value = sqlx::query_scalar(
        "SELECT result FROM skiplock.job_steps WHERE job_id = $1 AND kind = 'cursor'",
    )
    .bind(id)
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    assert_eq!(cursor, json!(100));
}

/// What a durable sleep does: the attempt ends without being used up, the job holds no slot
/// while it sleeps, and a worker started afterwards resumes it after the step before the sleep,
/// once it is due (three days later: the test moves the job's clock, its due time and its
/// recorded wake time); a sleep of two seconds wakes by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_sleep_holds_nothing_and_resumes_after_a_worker_restart() {
    let db = TestDb::new().await;
    side_table(&db).await;
    let sleeper = || {
        handler("sleeper", |ctx: JobContext, args: Value| async move {
            let c = ctx.clone();
            ctx.step("before", || async move {
                ran(&c.pool, c.id, "before", c.attempt).await?;
                Ok::<_, JobError>(())
            })
            .await?;
            let secs = args["secs"].as_i64().unwrap();
            ctx.sleep_until(chrono::Utc::now() + chrono::Duration::seconds(secs))
                .await?;
            let c = ctx.clone();
            ctx.step("after", || async move {
                ran(&c.pool, c.id, "after", c.attempt).await?;
                Ok::<_, JobError>(())
            })
            .await?;
            Ok(Outcome::Complete)
        })
    };
    let long = enqueue_job(&db, NewJob::new("sleeper", json!({ "secs": 3 * 86400 }))).await;
    let w = start_worker(&db.pool, fast_settings(), |b| b.register(sleeper()));
    wait_for("the job to sleep", Duration::from_secs(60), || async {
        let (state, attempt, ahead): (String, i32, f64) = sqlx::query_as(
            "SELECT state::text, attempt, extract(epoch FROM scheduled_at - now())::float8
             FROM skiplock.jobs WHERE id = $1",
        )
        .bind(long)
        .fetch_one(&*db.pool)
        .await
        .unwrap();
        (state == "available" && attempt == 0 && ahead > 2.0 * 86400.0).then_some(())
    })
    .await;
    w.stop().await.unwrap();
    assert_eq!(runs(&db, long).await, vec![("before".into(), 1)]);
    // Three days pass.
    sqlx::query(
        "UPDATE skiplock.job_steps SET result = jsonb_build_object('until', now() - interval '1 second')
         WHERE job_id = $1 AND kind = 'sleep'",
    )
    .bind(long)
    .execute(&*db.pool)
    .await
    .unwrap();
    sqlx::query("SELECT skiplock.reschedule(ids => ARRAY[$1::bigint], run_at => now())")
        .bind(long)
        .execute(&*db.pool)
        .await
        .unwrap();
    let w = start_worker(&db.pool, fast_settings(), |b| b.register(sleeper()));
    let short = enqueue_job(&db, NewJob::new("sleeper", json!({ "secs": 2 }))).await;
    wait_state(&db, long, "completed").await;
    wait_state(&db, short, "completed").await;
    w.stop().await.unwrap();
    for id in [long, short] {
        assert_eq!(
            runs(&db, id).await,
            vec![("after".into(), 1), ("before".into(), 1)]
        );
        let attempt: i32 = sqlx::query_scalar("SELECT attempt FROM skiplock.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
        assert_eq!(attempt, 1, "the sleep used up no attempt");
    }
}

/// A job that waits for approval: one step before, the wait, one step after that records
/// what the wait got (a signal's payload and sender, or `timed out`).
fn approval() -> With {
    handler("approval", |ctx: JobContext, args: Value| async move {
        let c = ctx.clone();
        ctx.step("before", || async move {
            ran(&c.pool, c.id, "before", c.attempt).await?;
            Ok::<_, JobError>(())
        })
        .await?;
        let timeout = Duration::from_secs(args["timeout"].as_u64().unwrap_or(3600));
        let from: Option<Vec<String>> = args["from"].as_str().map(|s| vec![s.to_string()]);
        let got = ctx
            .wait_for_from::<Value>("approved", from.as_deref(), timeout)
            .await?;
        let got = match got {
            Some(s) => json!({ "payload": s.payload, "scope": s.scope }),
            None => json!("timed out"),
        };
        let c = ctx.clone();
        ctx.step("after", || async move {
            ran(&c.pool, c.id, "after", c.attempt).await?;
            Ok::<_, JobError>(())
        })
        .await?;
        Ok(Outcome::CompleteWith(got))
    })
}

async fn wait_waiting(db: &TestDb, id: i64) {
    wait_for(
        "the job to wait for its signal",
        Duration::from_secs(60),
        || async {
            let (state, attempt, pending): (String, i32, bool) = sqlx::query_as(
                "SELECT state::text, attempt, EXISTS (SELECT 1 FROM skiplock.job_steps s
                                                  WHERE s.job_id = j.id AND s.kind = 'wait'
                                                    AND NOT s.result ? 'outcome')
             FROM skiplock.jobs j WHERE id = $1",
            )
            .bind(id)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
            (state == "available" && attempt == 0 && pending).then_some(())
        },
    )
    .await;
}

async fn result_of(db: &TestDb, id: i64) -> Value {
    sqlx::query_scalar("SELECT result FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&*db.pool)
        .await
        .unwrap()
}

fn psql(db: &TestDb, sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .args([db.url.as_str(), "-XAtqc", sql])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_is_answered_by_a_signal_from_psql_after_a_worker_restart() {
    let db = TestDb::new().await;
    side_table(&db).await;
    let id = enqueue_job(&db, NewJob::new("approval", json!({}))).await;
    let w = start_worker(&db.pool, fast_settings(), |b| b.register(approval()));
    wait_waiting(&db, id).await;
    w.stop().await.unwrap();
    let w = start_worker(&db.pool, fast_settings(), |b| b.register(approval()));
    // A second signal of the name from the same scope is refused, and changes nothing (one
    // statement: the job cannot finish between the two).
    assert_eq!(
        psql(
            &db,
            &format!(
                "SELECT skiplock.signal({id}, 'approved', '{{\"by\": \"ops\"}}'),
                        skiplock.signal({id}, 'approved', '{{\"by\": \"late\"}}')"
            )
        ),
        "t|f"
    );
    wait_state(&db, id, "completed").await;
    w.stop().await.unwrap();
    let got = result_of(&db, id).await;
    assert_eq!(got["payload"], json!({ "by": "ops" }), "{got}");
    assert_eq!(
        runs(&db, id).await,
        vec![("after".into(), 1), ("before".into(), 1)]
    );
    let attempt: i32 = sqlx::query_scalar("SELECT attempt FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&*db.pool)
        .await
        .unwrap();
    assert_eq!(attempt, 1, "the wait used up no attempt");
    let notes: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM skiplock.job_steps WHERE job_id = $1 AND note IS NOT NULL",
    )
    .bind(id)
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    assert_eq!(
        notes, 0,
        "a step after a wait it replayed is no change of the handler"
    );
    // A finished job is refused a signal, and so is a job that does not exist.
    for (job, want) in [(id, "has finished"), (id + 1000, "no job")] {
        let e = skiplock::signal(&db.pool, job, "approved", &json!(1))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    }
    // Retention deletes the job's steps and signals with it.
    sqlx::query("UPDATE skiplock.jobs SET finalized_at = now() - interval '2 days' WHERE id = $1")
        .bind(id)
        .execute(&*db.pool)
        .await
        .unwrap();
    let deleted = skiplock::store::maintenance::retention(
        &db.pool,
        skiplock::queue::JobState::Completed,
        Duration::from_secs(86400),
        100,
    )
    .await
    .unwrap();
    assert_eq!(deleted, 1);
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM skiplock.job_steps WHERE job_id = $1)
              + (SELECT count(*) FROM skiplock.job_signals WHERE job_id = $1)",
    )
    .bind(id)
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    assert_eq!(left, 0);
}

/// `skiplock signal` (docs/cli.md): a job waiting in `wait_for` resumes with the command's
/// payload; a second signal of the name, an unknown or finished job and a payload that is not
/// JSON exit non-zero with a line naming the problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_is_answered_by_the_signal_command_and_its_refusals_name_the_problem() {
    let db = TestDb::new().await;
    side_table(&db).await;
    let id = enqueue_job(&db, NewJob::new("approval", json!({}))).await;
    let w = start_worker(&db.pool, fast_settings(), |b| b.register(approval()));
    wait_waiting(&db, id).await;
    let job = id.to_string();
    let (code, out, err) = run_cmd(
        &db.url,
        &[
            "signal",
            &job,
            "approved",
            "--payload",
            r#"{"by": "cli", "n": [1, 2]}"#,
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("signal \"approved\" sent to job {id}"));
    wait_state(&db, id, "completed").await;
    w.stop().await.unwrap();
    let got = result_of(&db, id).await;
    assert_eq!(got["payload"], json!({ "by": "cli", "n": [1, 2] }), "{got}");
    assert_eq!(
        runs(&db, id).await,
        vec![("after".into(), 1), ("before".into(), 1)]
    );

    // Refusals: each exits non-zero and names the problem; nothing is sent.
    let other = enqueue_job(&db, NewJob::new("approval", json!({}))).await;
    let other_s = other.to_string();
    let missing = (other + 1000).to_string();
    let cases: [(&[&str], &str); 6] = [
        (
            &["signal", &other_s, "approved", "--payload", "{by: ops}"],
            "invalid --payload",
        ),
        (
            &["signal", &other_s, "approved", "--payload", r#""a\u0000b""#],
            "NUL character",
        ),
        (
            &["signal", &missing, "approved"],
            &format!("no job {missing}"),
        ),
        (
            &["signal", &job, "approved", "--payload", "1"],
            "has finished",
        ),
        (&["signal", &other_s, ""], "a signal needs a name"),
        (
            &[
                "signal",
                &other_s,
                "approved",
                "--payload",
                "[]",
                "--payload",
                "1",
            ],
            "--payload",
        ),
    ];
    for (args, want) in cases {
        let (code, out, err) = run_cmd(&db.url, args);
        assert_ne!(code, 0, "{args:?}: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let signals: i64 =
        sqlx::query_scalar("SELECT count(*) FROM skiplock.job_signals WHERE job_id = $1")
            .bind(other)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
    assert_eq!(signals, 0, "a refused signal is not kept");
    // Without --payload the signal carries null; a second of the name is refused, not sent.
    let (code, _, err) = run_cmd(&db.url, &["signal", &other_s, "approved"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_cmd(&db.url, &["signal", &other_s, "approved", "--payload", "2"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("not sent") && err.contains("the first is kept"),
        "{err}"
    );
    let payload: Option<Value> =
        sqlx::query_scalar("SELECT payload FROM skiplock.job_signals WHERE job_id = $1")
            .bind(other)
            .fetch_one(&*db.pool)
            .await
            .unwrap();
    assert_eq!(payload, Some(Value::Null));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_sent_before_the_wait_is_kept_and_a_wait_without_one_times_out() {
    let db = TestDb::new().await;
    side_table(&db).await;
    let early = enqueue_job(&db, NewJob::new("approval", json!({}))).await;
    assert!(
        skiplock::signal(&db.pool, early, "approved", &json!("yes"))
            .await
            .unwrap()
    );
    let late = enqueue_job(&db, NewJob::new("approval", json!({ "timeout": 1 }))).await;
    let w = start_worker(&db.pool, fast_settings(), |b| b.register(approval()));
    wait_state(&db, early, "completed").await;
    wait_state(&db, late, "completed").await;
    w.stop().await.unwrap();
    assert_eq!(result_of(&db, early).await["payload"], json!("yes"));
    assert_eq!(result_of(&db, late).await, json!("timed out"));
    for id in [early, late] {
        assert_eq!(
            runs(&db, id).await,
            vec![("after".into(), 1), ("before".into(), 1)]
        );
    }
}

/// Signals between tenants (docs/security.md): a wait that takes one key scope's signals
/// ignores another's, which neither replaces nor blocks the one it waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_one_scopes_signal_ignores_another_tenants() {
    let db = TestDb::new().await;
    side_table(&db).await;
    let tenant = |scope: &str| {
        let name = format!("skiplock_t_{:012x}", rand::random::<u64>() >> 16);
        admin_exec_blocking(format!(
            "CREATE ROLE {name} LOGIN IN ROLE skiplock_enqueuer"
        ));
        let mut u = url::Url::parse(&db.url).unwrap();
        u.set_username(&name).unwrap();
        (name, u.to_string(), scope.to_string())
    };
    let (owner_login, owner_url, _) = tenant("");
    let (other_login, other_url, _) = tenant("");
    let id = enqueue_job(&db, NewJob::new("approval", json!({ "from": owner_login }))).await;
    let w = start_worker(&db.pool, fast_settings(), |b| b.register(approval()));
    wait_waiting(&db, id).await;
    let other = sqlx::PgPool::connect(&other_url).await.unwrap();
    let kept: bool = sqlx::query_scalar("SELECT skiplock.signal($1, 'approved', '\"forged\"')")
        .bind(id)
        .fetch_one(&other)
        .await
        .unwrap();
    assert!(kept, "another scope's signal is kept, as its own");
    let due_later: bool = sqlx::query_scalar(
        "SELECT scheduled_at > now() + interval '10 minutes' FROM skiplock.jobs WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    assert!(due_later, "the forged signal did not wake the job");
    let owner = sqlx::PgPool::connect(&owner_url).await.unwrap();
    sqlx::query("SELECT skiplock.signal($1, 'approved', '\"real\"')")
        .bind(id)
        .execute(&owner)
        .await
        .unwrap();
    wait_state(&db, id, "completed").await;
    w.stop().await.unwrap();
    let got = result_of(&db, id).await;
    assert_eq!(got, json!({ "payload": "real", "scope": owner_login }));
    other.close().await;
    owner.close().await;
    for login in [owner_login, other_login] {
        admin_exec_blocking(format!("DROP ROLE IF EXISTS {login}"));
    }
}

/// What a checkpoint and a recorded step cost (docs/steps.md, "Cost"): run by hand with
/// `cargo test --test steps -- --ignored --exact measure_checkpoint_and_step_cost --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn measure_checkpoint_and_step_cost() {
    let db = TestDb::new().await;
    let said = Arc::new(std::sync::Mutex::new(String::new()));
    let s = said.clone();
    let w = start_with(&db.pool, move |r| {
        let s = s.clone();
        r.register(handler("measure", move |ctx: JobContext, _| {
            let s = s.clone();
            async move {
                let n = 2000u32;
                let t = std::time::Instant::now();
                for i in 0..n {
                    ctx.checkpoint(&i).await?;
                }
                let cp = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
                let t = std::time::Instant::now();
                for i in 0..900 {
                    ctx.step(format!("s{i}"), || async move { Ok::<_, JobError>(i) })
                        .await?;
                }
                let st = t.elapsed().as_secs_f64() * 1e6 / 900.0;
                *s.lock().unwrap() = format!("checkpoint: {cp:.0} µs, recorded step: {st:.0} µs");
                Ok(Outcome::Complete)
            }
        }));
    });
    let id = enqueue_job(&db, NewJob::new("measure", json!({}))).await;
    wait_state(&db, id, "completed").await;
    w.stop().await.unwrap();
    eprintln!("{}", said.lock().unwrap());
}

/// A tenant that leaves its transaction open after a signal holds no lock on a running job's
/// row, which every heartbeat of its worker updates (docs/security.md, "Signals between
/// tenants").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_in_an_open_transaction_holds_no_lock_a_running_jobs_worker_needs() {
    let db = TestDb::new().await;
    let id = enqueue_job(&db, NewJob::new("approval", json!({}))).await;
    sqlx::query(
        "UPDATE skiplock.jobs SET state = 'running', attempt = 1, attempted_by = 'w', heartbeat_at = now()
         WHERE id = $1",
    )
    .bind(id)
    .execute(&*db.pool)
    .await
    .unwrap();
    let mut open = db.pool.begin().await.unwrap();
    let kept: bool = sqlx::query_scalar("SELECT skiplock.signal($1, 'approved', '1')")
        .bind(id)
        .fetch_one(&mut *open)
        .await
        .unwrap();
    assert!(kept);
    // What the heartbeat takes, without waiting: refused at once if the row were locked.
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT 1 FROM skiplock.jobs WHERE id = $1 FOR NO KEY UPDATE NOWAIT) x",
    )
    .bind(id)
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    assert_eq!(n, 1);
    open.commit().await.unwrap();
}
