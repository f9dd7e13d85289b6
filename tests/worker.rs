//! The worker pool against a real Postgres: exactly-once under concurrency, retries with
//! backoff and discard, snooze, panics and timeouts, bad args, unknown kinds, rescue of
//! orphaned jobs, graceful shutdown, NOTIFY wake-ups and cancellation.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use skiplock::config::QueueSettings;
use skiplock::queue::NewJob;
use skiplock::store::jobs::{self, ManyJobs, enqueue, enqueue_many};
use skiplock::worker::handler::Handler;
use skiplock::worker::{HandlerResult, JobContext, JobError, Outcome, builtin};
use sqlx::postgres::PgPoolOptions;
use support::*;

/// Records each execution in a side table, then completes.
struct Record;
impl Handler for Record {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "record"
    }
    async fn run(&self, ctx: JobContext, _args: serde_json::Value) -> HandlerResult {
        sqlx::query("INSERT INTO executions (job_id, worker) VALUES ($1, $2)")
            .bind(ctx.id)
            .bind(&*ctx.worker_id)
            .execute(&ctx.pool)
            .await?;
        Ok(Outcome::Complete)
    }
}

async fn executions_table(db: &TestDb) {
    sqlx::query("CREATE TABLE executions (job_id bigint NOT NULL, worker text NOT NULL, at timestamptz DEFAULT clock_timestamp())")
        .execute(&db.pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_workers_complete_5000_jobs_exactly_once() {
    let db = TestDb::new().await;
    executions_table(&db).await;
    let args: Vec<_> = (0..5000).map(|i| json!({"i": i})).collect();
    enqueue_many(
        &db.pool,
        ManyJobs {
            limit_key: None,
            kind: "record",
            args: &args,
            queue: "default",
            run_at: None,
            priority: 0,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut workers = Vec::new();
    for _ in 0..8 {
        let pool: skiplock::Pool = PgPoolOptions::new()
            .max_connections(3)
            .connect(&db.url)
            .await
            .unwrap()
            .into();
        let settings = QueueSettings {
            rescue_after: Duration::from_secs(120),
            ..fast_settings()
        };
        workers.push(start_worker(&pool, settings, |b| b.register(Record)));
    }
    wait_all_finished(&db.pool, Duration::from_secs(240)).await;
    for w in workers {
        w.stop().await.unwrap();
    }
    let (total, distinct): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT job_id) FROM executions")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (total, distinct),
        (5000, 5000),
        "every job ran exactly once"
    );
    assert_eq!(count_state(&db.pool, "completed").await, 5000);
    let workers_used: i64 = sqlx::query_scalar("SELECT count(DISTINCT worker) FROM executions")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(workers_used > 1, "work was shared between workers");
}

#[tokio::test]
async fn errors_retry_with_backoff_then_discard() {
    let db = TestDb::new().await;
    let id = enqueue(
        &db.pool,
        &NewJob::new("fail", json!({"message": "nope"})).max_attempts(3),
    )
    .await
    .unwrap()
    .id;
    let w = start_with(&db.pool, builtin::register);
    let row = wait_job(&db.pool, id, "discarded", |r| {
        r.state.as_str() == "discarded"
    })
    .await;
    w.stop().await.unwrap();
    assert_eq!(row.attempt, 3);
    let errs = row.errors.as_array().unwrap();
    assert_eq!(errs.len(), 3);
    for (i, e) in errs.iter().enumerate() {
        assert_eq!(e["attempt"], (i + 1) as i64);
        assert_eq!(e["error"], "nope");
    }
    assert!(row.finalized_at.is_some());
}

#[tokio::test]
async fn a_retry_is_scheduled_by_the_backoff() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("fail", json!({})))
        .await
        .unwrap()
        .id;
    let settings = QueueSettings {
        backoff_unit: Duration::from_secs(3600),
        ..fast_settings()
    };
    let w = start_builtin(&db.pool, settings);
    let row = wait_job(&db.pool, id, "first failure", |r| {
        r.attempt == 1 && r.state.as_str() == "available"
    })
    .await;
    w.stop().await.unwrap();
    let wait = row.scheduled_at - row.attempted_at.unwrap();
    // attempt 1: 1^4 x 1h, +-10% jitter
    assert!(
        wait >= chrono::Duration::minutes(53) && wait <= chrono::Duration::minutes(67),
        "{wait}"
    );
}

/// Snoozes until it has been called `n` times, then completes.
struct SnoozeN(Arc<AtomicUsize>, usize);
impl Handler for SnoozeN {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "snoozer"
    }
    async fn run(&self, _ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        if self.0.fetch_add(1, Ordering::SeqCst) < self.1 {
            Ok(Outcome::Snooze(Duration::from_millis(10)))
        } else {
            Ok(Outcome::Complete)
        }
    }
}

#[tokio::test]
async fn snooze_does_not_use_up_attempts() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("snoozer", json!({})).max_attempts(1))
        .await
        .unwrap()
        .id;
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let w = start_with(&db.pool, move |r| {
        r.register(SnoozeN(c, 3));
    });
    let row = wait_job(&db.pool, id, "completed", |r| {
        r.state.as_str() == "completed"
    })
    .await;
    w.stop().await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(row.attempt, 1, "three snoozes, one attempt");
    assert_eq!(row.errors, json!([]));
}

struct Panics;
impl Handler for Panics {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "panics"
    }
    async fn run(&self, _ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        panic!("handler exploded")
    }
}

struct Slow;
impl Handler for Slow {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "slow"
    }
    fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(200))
    }
    async fn run(&self, _ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(Outcome::Complete)
    }
}

struct Cancels;
impl Handler for Cancels {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "cancels"
    }
    async fn run(&self, _ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        Ok(Outcome::Cancel("not needed any more".into()))
    }
}

#[tokio::test]
async fn panics_timeouts_bad_args_and_handler_cancels() {
    let db = TestDb::new().await;
    let p = enqueue(&db.pool, &NewJob::new("panics", json!({})).max_attempts(1))
        .await
        .unwrap()
        .id;
    let s = enqueue(&db.pool, &NewJob::new("slow", json!({})).max_attempts(1))
        .await
        .unwrap()
        .id;
    let bad = enqueue(&db.pool, &NewJob::new("sleep", json!({"ms": "soon"})))
        .await
        .unwrap()
        .id;
    let c = enqueue(&db.pool, &NewJob::new("cancels", json!({})))
        .await
        .unwrap()
        .id;
    let after = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    let w = start_with(&db.pool, |r| {
        builtin::register(r);
        r.register(Panics);
        r.register(Slow);
        r.register(Cancels);
    });
    wait_all_finished(&db.pool, Duration::from_secs(60)).await;
    w.stop().await.unwrap();
    let rp = jobs::get_job(&db.pool, p).await.unwrap();
    assert_eq!(rp.state.as_str(), "discarded");
    assert_error(rp.errors.clone(), 0, "handler exploded");
    let rs = jobs::get_job(&db.pool, s).await.unwrap();
    assert_eq!(rs.state.as_str(), "discarded");
    assert_error(rs.errors.clone(), 0, "timed out");
    let rb = jobs::get_job(&db.pool, bad).await.unwrap();
    assert_eq!(
        (rb.state.as_str(), rb.attempt),
        ("discarded", 1),
        "bad args are not retried"
    );
    assert!(
        rb.errors[0]["error"]
            .as_str()
            .unwrap()
            .contains("invalid args"),
        "{}",
        rb.errors
    );
    let rc = jobs::get_job(&db.pool, c).await.unwrap();
    assert_eq!(rc.state.as_str(), "cancelled");
    assert_eq!(
        jobs::get_job(&db.pool, after).await.unwrap().state.as_str(),
        "completed",
        "the worker survived"
    );
}

#[tokio::test]
async fn unknown_kinds_stay_available_and_idle_workers_exit() {
    let db = TestDb::new().await;
    let mystery = enqueue(&db.pool, &NewJob::new("mystery", json!({})))
        .await
        .unwrap()
        .id;
    let known = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    let w = start_worker(&db.pool, fast_settings(), |mut b| {
        builtin::register(b.registry_mut());
        b.exit_when_idle(true)
    });
    tokio::time::timeout(Duration::from_secs(60), w.handle)
        .await
        .expect("idle worker exits")
        .unwrap()
        .unwrap();
    assert_eq!(
        jobs::get_job(&db.pool, known).await.unwrap().state.as_str(),
        "completed"
    );
    let m = jobs::get_job(&db.pool, mystery).await.unwrap();
    assert_eq!((m.state.as_str(), m.attempt), ("available", 0));
    let unhandled = jobs::unhandled_kinds(&db.pool, 120.0, None).await.unwrap();
    assert_eq!(unhandled.len(), 1);
    assert_eq!(unhandled[0].kind, "mystery");
}

#[tokio::test]
async fn orphaned_running_jobs_are_rescued() {
    let db = TestDb::new().await;
    // A job claimed by a worker that died an hour ago, one out of attempts, and one whose
    // worker sent a heartbeat just now.
    let orphan: i64 = sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, state, attempt, attempted_at, attempted_by, heartbeat_at) \
         VALUES ('noop', 'running', 1, now() - interval '1 hour', 'ghost', now() - interval '1 hour') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let spent: i64 = sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, state, attempt, max_attempts, attempted_at, attempted_by, heartbeat_at) \
         VALUES ('noop', 'running', 2, 2, now() - interval '1 hour', 'ghost', now() - interval '1 hour') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let live: i64 = sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, state, attempt, attempted_at, attempted_by, heartbeat_at) \
         VALUES ('elsewhere', 'running', 1, now() - interval '1 hour', 'alive', now()) RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // The rescuer, run at a moment the test controls with a one-minute window.
    let rescued = skiplock::maintenance::rescuer::rescue(&db.pool, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(rescued, 2, "the orphan and the spent job, not the live one");
    let o = jobs::get_job(&db.pool, orphan).await.unwrap();
    assert_eq!((o.state.as_str(), o.attempt), ("available", 1));
    assert_error(
        o.errors.clone(),
        0,
        "rescued: worker ghost sent no heartbeat",
    );
    let s = jobs::get_job(&db.pool, spent).await.unwrap();
    assert_eq!(s.state.as_str(), "discarded");
    assert!(s.finalized_at.is_some());
    assert_error(s.errors.clone(), 0, "rescued");
    let l = jobs::get_job(&db.pool, live).await.unwrap();
    assert_eq!((l.state.as_str(), &*l.errors), ("running", &json!([])));
    assert_eq!(
        skiplock::maintenance::rescuer::rescue(&db.pool, Duration::from_secs(60))
            .await
            .unwrap(),
        0,
        "a second run finds nothing"
    );

    // A worker runs the rescued job again (its own rescuer's window is far away).
    let w = start_builtin(&db.pool, fast_settings());
    let o = wait_job(&db.pool, orphan, "completed", |r| {
        r.state.as_str() == "completed"
    })
    .await;
    w.stop().await.unwrap();
    assert_eq!(o.attempt, 2);
    assert_eq!(o.errors.as_array().unwrap().len(), 1, "{}", o.errors);
}

/// Ignores shutdown: only the grace period's end stops it.
struct Stubborn;
impl Handler for Stubborn {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "stubborn"
    }
    async fn run(&self, _ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok(Outcome::Complete)
    }
}

#[tokio::test]
async fn graceful_shutdown_returns_unfinished_jobs_without_using_an_attempt() {
    let db = TestDb::new().await;
    let stubborn = enqueue(&db.pool, &NewJob::new("stubborn", json!({})))
        .await
        .unwrap()
        .id;
    let sleeper = enqueue(&db.pool, &NewJob::new("sleep", json!({"ms": 600000})))
        .await
        .unwrap()
        .id;
    let quick = enqueue(&db.pool, &NewJob::new("sleep", json!({"ms": 1})))
        .await
        .unwrap()
        .id;
    let settings = QueueSettings {
        shutdown_grace: Duration::from_millis(500),
        ..fast_settings()
    };
    let w = start_worker(&db.pool, settings, |mut b| {
        builtin::register(b.registry_mut());
        b.register(Stubborn)
    });
    wait_for(
        "both long jobs running",
        Duration::from_secs(60),
        || async { (count_state(&db.pool, "running").await == 2).then_some(()) },
    )
    .await;
    w.stop().await.unwrap();
    for id in [stubborn, sleeper] {
        let r = jobs::get_job(&db.pool, id).await.unwrap();
        assert_eq!((r.state.as_str(), r.attempt), ("available", 0), "job {id}");
        assert_eq!(r.errors, json!([]));
    }
    assert_eq!(
        jobs::get_job(&db.pool, quick).await.unwrap().state.as_str(),
        "completed"
    );
    let workers: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.workers")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(workers, 0, "a clean exit removes the worker row");
}

#[tokio::test]
async fn notify_starts_a_job_long_before_the_poll_would() {
    let db = TestDb::new().await;
    // The fallback poll (and the queue discovery that shares its interval) is an hour away:
    // a job started within the wait below was started by the NOTIFY.
    let settings = QueueSettings {
        poll_interval: Duration::from_secs(3600),
        ..fast_settings()
    };
    let w = start_builtin(&db.pool, settings);
    // Wait until the worker is listening and registered as waiting (on every queue: it
    // discovers its queues).
    wait_for("LISTEN", Duration::from_secs(60), || async {
        let n = sessions_where(&db, "query ILIKE 'LISTEN%'").await;
        let waiting = count(
            &db.pool,
            "SELECT count(*) FROM skiplock.waiting WHERE queue = ''",
        )
        .await;
        (n > 0 && waiting > 0).then_some(())
    })
    .await;
    let id = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    let row = wait_job(&db.pool, id, "completed", |r| {
        r.state.as_str() == "completed"
    })
    .await;
    w.stop().await.unwrap();
    assert_eq!(row.attempt, 1);
}

/// How many sessions on the test database match `filter` (a condition on pg_stat_activity).
async fn sessions_where(db: &TestDb, filter: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND {filter}"
    )))
    .bind(&db.name)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// A starting worker opens its runtime pool's connections with its LISTEN, before its first
/// claim (src/worker/lifecycle.rs, `warm_up`), not when the claims, the acks and a flow's
/// settling first want them at once. An idle worker needs no more than two of them, so all
/// six open means they were opened ahead.
#[tokio::test]
async fn a_starting_worker_opens_its_runtime_connections_ahead() {
    let db = TestDb::new().await;
    // The worker's own pools, told apart from the test's by their application name.
    let opts = db
        .url
        .parse::<sqlx::postgres::PgConnectOptions>()
        .unwrap()
        .application_name("warm_up_test");
    let handlers: skiplock::Pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_lazy_with(opts)
        .into();
    let settings = QueueSettings {
        runtime_connections: 6,
        ..fast_settings()
    };
    let w = start_builtin(&handlers, settings);
    wait_for(
        "six runtime connections",
        Duration::from_secs(60),
        || async {
            let n = sessions_where(&db, "application_name = 'warm_up_test'").await;
            // Six of the runtime's, and at most two of the handlers' pool.
            (n >= 6).then_some(())
        },
    )
    .await;
    w.stop().await.unwrap();
}

/// Waits until its job is taken away, then returns an error (which must be ignored).
struct UntilLost;
impl Handler for UntilLost {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "until_lost"
    }
    async fn run(&self, ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        ctx.lost().await;
        sqlx::query("INSERT INTO executions (job_id, worker) VALUES ($1, 'lost')")
            .bind(ctx.id)
            .execute(&ctx.pool)
            .await?;
        Err(JobError::retry("lost"))
    }
}

#[tokio::test]
async fn cancelling_a_running_job_stops_its_handler_and_sticks() {
    let db = TestDb::new().await;
    executions_table(&db).await;
    let id = enqueue(&db.pool, &NewJob::new("until_lost", json!({})))
        .await
        .unwrap()
        .id;
    // A short window gives heartbeats every 500 ms, so the handler hears of the cancel soon.
    // A stall of this machine may let the worker's own rescuer take the job first (and the
    // worker claim it again): the assertions below hold either way.
    let settings = QueueSettings {
        rescue_after: Duration::from_secs(2),
        ..fast_settings()
    };
    let w = start_worker(&db.pool, settings, |b| b.register(UntilLost));
    wait_job(&db.pool, id, "running", |r| r.state.as_str() == "running").await;
    jobs::cancel_job(&db.pool, id).await.unwrap();
    // The heartbeat notices and the handler returns; its late error must not apply.
    wait_for(
        "the handler to see it lost its job",
        Duration::from_secs(60),
        || async {
            let n: i64 =
                sqlx::query_scalar("SELECT count(*) FROM executions WHERE worker = 'lost'")
                    .fetch_one(&db.pool)
                    .await
                    .unwrap();
            (n >= 1).then_some(())
        },
    )
    .await;
    w.stop().await.unwrap();
    let r = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!(r.state.as_str(), "cancelled");
    assert_eq!(r.heartbeat_at, None, "cancel clears the heartbeat");
    // The interrupted attempt is on the row (the last entry: the cancel ended the job); no
    // error of the handler's ("lost") was recorded; before it only rescues, if a stall caused
    // one (and the worker claimed the job again).
    let errors = r.errors.as_array().unwrap();
    let last = errors
        .last()
        .unwrap_or_else(|| panic!("no errors: {}", r.errors));
    assert_eq!(last["error"], "cancelled while running", "{}", r.errors);
    assert_eq!(last["attempt"], json!(r.attempt), "{}", r.errors);
    for i in 0..errors.len() - 1 {
        assert_error(r.errors.clone(), i, "rescued");
    }
}

/// Stays on its job until told it was lost, reports that, then waits for the test before
/// returning its (late) success.
struct SlowButAlive {
    saw_lost: tokio_util::sync::CancellationToken,
    release: tokio_util::sync::CancellationToken,
}
impl Handler for SlowButAlive {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "slow_but_alive"
    }
    async fn run(&self, ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        ctx.lost().await;
        self.saw_lost.cancel();
        self.release.cancelled().await;
        Ok(Outcome::CompleteWith(json!({"by": "the slow worker"})))
    }
}

#[tokio::test]
async fn a_slow_worker_whose_job_was_rescued_and_claimed_again_is_told_and_fenced_off() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("slow_but_alive", json!({})))
        .await
        .unwrap()
        .id;
    let saw_lost = tokio_util::sync::CancellationToken::new();
    let release = tokio_util::sync::CancellationToken::new();
    // One slot and no claim-ahead: while its handler runs, this worker cannot claim the job
    // again itself.
    let settings = QueueSettings {
        claim_ahead: 0,
        rescue_after: Duration::from_secs(2),
        queues: Some(std::collections::BTreeMap::from([(
            "default".to_string(),
            1,
        )])),
        ..fast_settings()
    };
    let (s, r) = (saw_lost.clone(), release.clone());
    let w = start_worker(&db.pool, settings, move |b| {
        b.register(SlowButAlive {
            saw_lost: s,
            release: r,
        })
    });
    let first = wait_job(&db.pool, id, "running", |r| r.state.as_str() == "running").await;
    assert_eq!(first.attempt, 1);

    // The worker is alive but (as if) too slow to beat in time: a rescuer takes the job
    // back, and another worker claims it. That claim's heartbeat is put far in the future in
    // the same transaction, so no rescuer of this test can take attempt 2 away.
    rescue_now(&db.pool, id).await;
    let mut tx = db.pool.begin().await.unwrap();
    let claimed = skiplock::store::claim::claim(
        &mut *tx,
        skiplock::store::claim::ClaimParams {
            queue: "default",
            kinds: &["slow_but_alive".to_string()],
            limit: 1,
            worker: "the-other-worker",
        },
    )
    .await
    .unwrap();
    assert_eq!(
        claimed
            .iter()
            .map(|j| (j.id, j.attempt))
            .collect::<Vec<_>>(),
        vec![(id, 2)]
    );
    sqlx::query("UPDATE skiplock.jobs SET heartbeat_at = now() + interval '1 hour' WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    // The slow worker's heartbeat finds its attempt gone and tells the handler.
    tokio::time::timeout(Duration::from_secs(60), saw_lost.cancelled())
        .await
        .expect("the handler is told its job was lost");
    // Its late success is sent; stopping the worker writes every pending ack.
    release.cancel();
    w.stop().await.unwrap();
    let r = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!(
        (r.state.as_str(), r.attempt, r.attempted_by.as_deref()),
        ("running", 2, Some("the-other-worker")),
        "the late ack of attempt 1 changed the row"
    );
    assert_eq!(r.result, None);
    assert_eq!(r.errors.as_array().unwrap().len(), 1, "{}", r.errors);
    assert_error(r.errors.clone(), 0, "rescued");

    // The other worker's ack of attempt 2 applies.
    let ack = skiplock::store::ack::Ack {
        id,
        attempt: 2,
        state: skiplock::queue::JobState::Completed,
        scheduled_at: None,
        give_back: false,
        error: None,
        result: Some(json!({"by": "the other worker"})),
        started_at: None,
    };
    assert_eq!(
        skiplock::store::ack::ack_many(&db.pool, &[ack])
            .await
            .unwrap()
            .ids,
        vec![id]
    );
    let r = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!(r.state.as_str(), "completed");
    assert_eq!(
        r.result.as_deref(),
        Some(&json!({"by": "the other worker"}))
    );
}

/// Asserts that error `i` of a job's `errors` array contains `needle`.
fn assert_error(errors: impl std::ops::Deref<Target = serde_json::Value>, i: usize, needle: &str) {
    let e = errors[i]["error"].as_str().unwrap_or_default();
    assert!(
        e.contains(needle),
        "error {i} is {e:?}, expected it to contain {needle:?}"
    );
}

/// Claim-ahead (docs/internals.md): with every slot busy, the producer holds jobs claimed ahead in a
/// buffer. Those are `running` in the database, so they must be heartbeated like started ones,
/// and a graceful shutdown must put them back without using up their attempt.
#[tokio::test]
async fn jobs_claimed_ahead_are_heartbeated_and_returned_at_shutdown() {
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(
            enqueue(&db.pool, &NewJob::new("sleep", json!({"ms": 600000})))
                .await
                .unwrap()
                .id,
        );
    }
    // Two slots and two jobs of buffer: all four are claimed, two of them never start.
    // A rescue window of 8 s beats every 2 s.
    let settings = QueueSettings {
        queues: Some([("default".to_string(), 2)].into_iter().collect()),
        claim_ahead: 2,
        rescue_after: Duration::from_secs(8),
        shutdown_grace: Duration::from_millis(200),
        ..fast_settings()
    };
    let w = start_builtin(&db.pool, settings);
    wait_for("all four jobs claimed", Duration::from_secs(60), || async {
        (count_state(&db.pool, "running").await == 4).then_some(())
    })
    .await;
    // The two in the buffer show it: running, no attempted_at (not started).
    let buffered = count(
        &db.pool,
        "SELECT count(*) FROM skiplock.jobs WHERE state = 'running' AND attempted_at IS NULL",
    )
    .await;
    assert_eq!(buffered, 2);
    // Every claimed row, started or buffered, gets a heartbeat after its claim (the claim
    // wrote the first heartbeat_at).
    let claimed_by: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT max(heartbeat_at) FROM skiplock.jobs WHERE state = 'running'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    wait_for(
        "a heartbeat on every claimed job",
        Duration::from_secs(60),
        || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM skiplock.jobs WHERE state = 'running' AND heartbeat_at > $1",
            )
            .bind(claimed_by)
            .fetch_one(&db.pool)
            .await
            .unwrap();
            (n == 4).then_some(())
        },
    )
    .await;
    w.stop().await.unwrap();
    let mut unstarted = 0;
    for id in &ids {
        let r = jobs::get_job(&db.pool, *id).await.unwrap();
        assert_eq!((r.state.as_str(), r.attempt), ("available", 0), "job {id}");
        let errors = r.errors.as_array().unwrap();
        if !errors.is_empty() {
            assert_eq!(errors.len(), 1, "{}", r.errors);
            assert_error(r.errors.clone(), 0, "claimed but never started");
            unstarted += 1;
        }
    }
    assert_eq!(unstarted, 2, "two jobs waited in the buffer");
}

/// With two claims in flight per producer (docs/internals.md), the jobs asked for by a claim still out
/// count as buffered: a worker never holds more than its slots plus the buffer, however many
/// jobs wait and however often it polls.
#[tokio::test]
async fn claims_in_flight_never_hold_more_than_the_slots_and_the_buffer() {
    let db = TestDb::new().await;
    for _ in 0..30 {
        enqueue(&db.pool, &NewJob::new("sleep", json!({"ms": 600000})))
            .await
            .unwrap();
    }
    let settings = QueueSettings {
        queues: Some([("default".to_string(), 2)].into_iter().collect()),
        claim_ahead: 2,
        poll_interval: Duration::from_millis(50),
        shutdown_grace: Duration::from_millis(200),
        ..fast_settings()
    };
    let w = start_builtin(&db.pool, settings);
    wait_for(
        "slots and buffer filled",
        Duration::from_secs(60),
        || async { (count_state(&db.pool, "running").await == 4).then_some(()) },
    )
    .await;
    // Twenty polls later (each a reason to claim again), still the slots plus the buffer.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(count_state(&db.pool, "running").await, 4);
    }
    w.stop().await.unwrap();
    assert_eq!(count_state(&db.pool, "available").await, 30);
}

/// Inserts notify only queues a producer waits on (docs/internals.md: every notifying commit takes a
/// server-wide lock). Notifications arrive in commit order, so if the insert into the queue
/// nobody serves had notified, its notification would come first.
#[tokio::test]
async fn only_queues_a_producer_waits_on_are_notified() {
    let db = TestDb::new().await;
    let settings = QueueSettings {
        queues: Some([("served".to_string(), 2)].into_iter().collect()),
        poll_interval: Duration::from_secs(3600),
        ..fast_settings()
    };
    let w = start_builtin(&db.pool, settings);
    wait_for("the producer to wait", Duration::from_secs(60), || async {
        let n = count(
            &db.pool,
            "SELECT count(*) FROM skiplock.waiting WHERE queue = 'served'",
        )
        .await;
        (n > 0).then_some(())
    })
    .await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool)
        .await
        .unwrap();
    let channel = skiplock::store::notify::wake_channel(&db.pool)
        .await
        .unwrap();
    listener.listen(&channel).await.unwrap();
    enqueue(&db.pool, &NewJob::new("noop", json!({})).queue("unserved"))
        .await
        .unwrap();
    let id = enqueue(&db.pool, &NewJob::new("noop", json!({})).queue("served"))
        .await
        .unwrap()
        .id;
    let n = tokio::time::timeout(Duration::from_secs(60), listener.recv())
        .await
        .expect("a wake-up within 60 s")
        .unwrap();
    assert_eq!(n.payload(), "served");
    // The NOTIFY started it (the poll is an hour away).
    wait_job(&db.pool, id, "completed", |r| {
        r.state.as_str() == "completed"
    })
    .await;
    w.stop().await.unwrap();
    let rows = count(&db.pool, "SELECT count(*) FROM skiplock.waiting").await;
    assert_eq!(rows, 0, "a clean exit leaves no registration behind");
}

/// Args nested `depth` levels deep (`{"a": {"a": … 1}}`), as JSON text.
fn nested_args(depth: usize) -> String {
    format!("{}1{}", "{\"a\": ".repeat(depth), "}".repeat(depth))
}

#[tokio::test]
async fn a_row_the_worker_cannot_decode_is_discarded_alone_and_its_batch_runs() {
    // Valid jsonb that serde_json refuses (too deep; a number outside f64), written by a
    // superuser past enqueue's check (docs/errors.md): each such
    // row fails alone, with the decode error recorded, and the 19 innocent jobs claimed in
    // the same batch run. With `exit_when_idle` the worker exits only when nothing is left.
    for (poison, want) in [
        (nested_args(300), "recursion limit exceeded"),
        (r#"{"x": 1e400}"#.to_string(), "number out of range"),
    ] {
        let db = TestDb::new().await;
        let bad: i64 = sqlx::query_scalar(
            "INSERT INTO skiplock.jobs (kind, args, priority, max_attempts) \
             VALUES ('noop', $1::text::jsonb, -5, 3) RETURNING id",
        )
        .bind(&poison)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        let innocent = enqueue_many(
            &db.pool,
            ManyJobs {
                kind: "noop",
                args: &vec![json!({"n": 1}); 19],
                queue: "default",
                run_at: None,
                priority: 0,
                limit_key: None,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let mut settings = fast_settings();
        settings.queues = Some([("default".to_string(), 20)].into());
        let w = start_worker(&db.pool, settings, |mut b| {
            builtin::register(b.registry_mut());
            b.exit_when_idle(true)
        });
        tokio::time::timeout(Duration::from_secs(120), w.handle)
            .await
            .expect("the idle worker exits")
            .unwrap()
            .unwrap();
        for id in &innocent {
            let r = jobs::get_job(&db.pool, *id).await.unwrap();
            assert_eq!((r.state.as_str(), r.attempt), ("completed", 1), "{want}");
        }
        // Read as SQL: this test is about the worker, not about `get_job`.
        assert_discarded_at_first_attempt(&db.pool, bad, want).await;
        assert_eq!(count_state(&db.pool, "running").await, 0);
        assert_eq!(count_state(&db.pool, "available").await, 0);
    }
}

#[tokio::test]
async fn a_meta_the_worker_cannot_decode_discards_its_job_alone_and_its_batch_runs() {
    // A meta serde_json cannot read, written past enqueue's check (docs/security.md, "One
    // row's JSON fails that row alone"): it was decoded with the claim's rows, so the whole
    // batch failed after its UPDATE committed. Now its job alone is discarded, as with
    // unreadable args, its 19 batch-mates run, and every reader of the row (one job, a list)
    // shows it with its meta as text.
    let deep = format!("{{\"m\": {}}}", nested_args(300));
    for (poison, want) in [
        (deep, "recursion limit exceeded"),
        (r#"{"m": 1e400}"#.to_string(), "number out of range"),
    ] {
        let db = TestDb::new().await;
        let bad: i64 = sqlx::query_scalar(
            "INSERT INTO skiplock.jobs (kind, args, meta, priority, max_attempts) \
             VALUES ('noop', '{}', $1::text::jsonb, -5, 3) RETURNING id",
        )
        .bind(&poison)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        enqueue_noops(&db.pool, 19).await;
        let mut settings = fast_settings();
        settings.queues = Some([("default".to_string(), 20)].into());
        let w = start_worker(&db.pool, settings, |mut b| {
            builtin::register(b.registry_mut());
            b.exit_when_idle(true)
        });
        tokio::time::timeout(Duration::from_secs(120), w.handle)
            .await
            .expect("the idle worker exits")
            .unwrap()
            .unwrap();
        assert_eq!(count_state(&db.pool, "completed").await, 19, "{want}");
        assert_discarded_at_first_attempt(&db.pool, bad, want).await;
        assert_discarded_at_first_attempt(&db.pool, bad, "invalid meta for kind noop").await;
        let rows = jobs::list_jobs(
            &db.pool,
            &jobs::JobFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(rows.len(), 20);
        let row = jobs::get_job(&db.pool, bad).await.unwrap();
        let u = row.meta.readable().unwrap_err();
        assert!(u.error.contains(want), "{}", u.error);
        assert!(u.text.starts_with("{\"m\": "), "{}", u.text);
    }
}

/// Makes the database refuse, with a trigger, what `body` (a PL/pgSQL condition on the
/// statement's rows) describes: a stand-in for a row or a statement the server fails.
async fn refuse_updates(db: &TestDb, name: &str, level: &str, condition: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF {condition} THEN RAISE EXCEPTION '{name}: refused for the test'; END IF; \
         RETURN NULL; END $$; \
         CREATE TRIGGER {name} AFTER UPDATE ON skiplock.jobs {level} EXECUTE FUNCTION {name}();"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
}

/// How many times each job ran (the `record` handler's side table), in id order.
async fn runs_per_job(db: &TestDb) -> Vec<(i64, i64)> {
    sqlx::query_as("SELECT job_id, count(*) FROM executions GROUP BY job_id ORDER BY job_id")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_ack_the_database_refuses_fails_alone_and_its_batch_mates_land_once() {
    // docs/reliability.md, "A batch that keeps failing": the ack of one job fails its
    // statement (a trigger here; a settling past the statement timeout, a row lock in the
    // field). The batch is retried, then written in halves down to that one ack: its 19
    // batch-mates are acked, each job having run once, and the refused ack is retried alone
    // until it lands.
    let db = TestDb::new().await;
    executions_table(&db).await;
    let ids = enqueue_many(
        &db.pool,
        ManyJobs {
            kind: "record",
            args: &vec![json!({}); 20],
            queue: "default",
            run_at: None,
            priority: 0,
            limit_key: None,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let bad = ids[7];
    refuse_updates(
        &db,
        "refuse_one_ack",
        "FOR EACH ROW",
        &format!("OLD.id = {bad} AND OLD.state = 'running' AND NEW.state <> 'running'"),
    )
    .await;
    let mut settings = fast_settings();
    settings.queues = Some([("default".to_string(), 20)].into());
    // The 20 acks wait for each other: one batch.
    settings.ack_delay = Duration::from_millis(500);
    let w = start_worker(&db.pool, settings, |mut b| {
        b.registry_mut().register(Record);
        b
    });
    wait_for(
        "the 19 other jobs acked",
        Duration::from_secs(120),
        || async { (count_state(&db.pool, "completed").await == 19).then_some(()) },
    )
    .await;
    let state: String = sqlx::query_scalar("SELECT state::text FROM skiplock.jobs WHERE id = $1")
        .bind(bad)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(state, "running");
    sqlx::query("DROP TRIGGER refuse_one_ack ON skiplock.jobs")
        .execute(&db.pool)
        .await
        .unwrap();
    wait_for(
        "the refused ack landed",
        Duration::from_secs(120),
        || async { (count_state(&db.pool, "completed").await == 20).then_some(()) },
    )
    .await;
    w.stop().await.unwrap();
    let runs = runs_per_job(&db).await;
    assert_eq!(runs, ids.iter().map(|id| (*id, 1)).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_that_keeps_failing_alone_lets_its_job_go_to_the_rescuer() {
    // docs/reliability.md, "A batch that keeps failing": the ack of one job's first attempt
    // always fails its statement, with a statement timeout's SQLSTATE (57014, which a heartbeat
    // or a claim failing with counts as an outage). After its tries alone the worker lets the
    // job go: out of `running`, no longer heartbeated, still in the table, so the rescuer
    // (this worker's own) returns it and its second attempt lands. Its batch-mates land once.
    // Retried alone for good, the ack kept the job heartbeated and never rescued.
    let db = TestDb::new().await;
    executions_table(&db).await;
    let ids = enqueue_many(
        &db.pool,
        ManyJobs {
            kind: "record",
            args: &vec![json!({}); 3],
            queue: "default",
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let bad = ids[1];
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION refuse_first_ack() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF OLD.id = {bad} AND OLD.attempt = 1 AND NEW.state = 'completed' THEN \
         RAISE EXCEPTION 'refused for the test' USING ERRCODE = '57014'; END IF; \
         RETURN NULL; END $$; \
         CREATE TRIGGER refuse_first_ack AFTER UPDATE ON skiplock.jobs FOR EACH ROW \
         EXECUTE FUNCTION refuse_first_ack();"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    let mut settings = fast_settings();
    settings.queues = Some([("default".to_string(), 3)].into());
    settings.ack_delay = Duration::from_millis(200);
    settings.rescue_after = Duration::from_secs(4);
    let w = start_worker(&db.pool, settings, |mut b| {
        b.registry_mut().register(Record);
        b
    });
    wait_for("every job completed", Duration::from_secs(240), || async {
        (count_state(&db.pool, "completed").await == 3).then_some(())
    })
    .await;
    w.stop().await.unwrap();
    let attempt: i32 = sqlx::query_scalar("SELECT attempt FROM skiplock.jobs WHERE id = $1")
        .bind(bad)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempt, 2);
    let runs = runs_per_job(&db).await;
    let want: Vec<(i64, i64)> = ids
        .iter()
        .map(|&id| (id, if id == bad { 2 } else { 1 }))
        .collect();
    assert_eq!(runs, want);
}

#[tokio::test]
async fn a_claim_the_database_keeps_refusing_asks_for_fewer_jobs() {
    // docs/reliability.md, "A batch that keeps failing": a statement-level trigger refuses
    // any statement that starts more than 3 jobs (a stand-in for a claim too expensive at
    // its size). Each refused claim asks for half as many jobs, so the claims get through
    // and every job runs, once.
    let db = TestDb::new().await;
    executions_table(&db).await;
    let ids = enqueue_many(
        &db.pool,
        ManyJobs {
            kind: "record",
            args: &vec![json!({}); 20],
            queue: "default",
            run_at: None,
            priority: 0,
            limit_key: None,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    refuse_updates(
        &db,
        "refuse_big_claims",
        "REFERENCING OLD TABLE AS before NEW TABLE AS after FOR EACH STATEMENT",
        "(SELECT count(*) FROM after a JOIN before b USING (id) \
          WHERE a.state = 'running' AND b.state <> 'running') > 3",
    )
    .await;
    let mut settings = fast_settings();
    settings.queues = Some([("default".to_string(), 20)].into());
    let w = start_worker(&db.pool, settings, |mut b| {
        b.registry_mut().register(Record);
        b
    });
    wait_for("every job completed", Duration::from_secs(120), || async {
        (count_state(&db.pool, "completed").await == 20).then_some(())
    })
    .await;
    w.stop().await.unwrap();
    let runs = runs_per_job(&db).await;
    assert_eq!(runs, ids.iter().map(|id| (*id, 1)).collect::<Vec<_>>());
}

/// Queue discovery cannot be starved by queues named to sort first: with `SKIPLOCK_MAX_QUEUES`
/// at 3 and three queues `!0001`… that each keep one long job running (their producers stay,
/// idle but for that job), a job in `default` is still claimed: it takes the place of the
/// producer whose queue has been drained the longest, whose job runs on.
#[tokio::test]
async fn a_capped_worker_serves_a_queue_behind_busy_ones_named_first() {
    let db = TestDb::new().await;
    let mut long = Vec::new();
    for q in ["!0001", "!0002", "!0003"] {
        long.push(
            enqueue(
                &db.pool,
                &NewJob::new("sleep", json!({"ms": 600_000})).queue(q),
            )
            .await
            .unwrap()
            .id,
        );
    }
    let settings = QueueSettings {
        queues: None,
        max_queues: 3,
        ..fast_settings()
    };
    let w = start_builtin(&db.pool, settings);
    wait_for(
        "the three long jobs running",
        Duration::from_secs(60),
        || async { (count_state(&db.pool, "running").await == 3).then_some(()) },
    )
    .await;
    let victim = enqueue(&db.pool, &NewJob::new("noop", json!({"victim": 1})))
        .await
        .unwrap()
        .id;
    wait_job(&db.pool, victim, "the job in default to complete", |r| {
        r.state.as_str() == "completed"
    })
    .await;
    // The producers that made room left their jobs running.
    let running: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM skiplock.jobs WHERE id = ANY($1) AND state = 'running'",
    )
    .bind(&long)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(running, 3);
    w.stop().await.unwrap();
}
