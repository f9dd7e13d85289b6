//! Admission control (docs/operations.md, "Admission control"): a queue limited by
//! `skiplock.set_queue_admission` refuses an enqueue past its limit with SQLSTATE SK429, whole
//! (enqueue_many enqueues all or nothing), under concurrent producers; accepts again once the
//! workers drain it; `OnFull::Wait` returns once room is made; a queue without a limit is not
//! touched; and only the owner sets a limit (sql/api/90_roles.sql).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use skiplock::client::admission::{OnFull, QUEUE_FULL, is_queue_full, with_room};
use skiplock::queue::NewJob;
use skiplock::store::jobs::{ManyJobs, enqueue, enqueue_many};
use skiplock::worker::handler::Handler;
use skiplock::worker::{HandlerResult, JobContext, Outcome};
use sqlx::postgres::PgPoolOptions;
use support::*;

async fn waiting(db: &TestDb, queue: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM skiplock.jobs WHERE queue = $1 AND state = 'available'",
    )
    .bind(queue)
    .fetch_one(&*db.pool)
    .await
    .unwrap()
}

fn job(queue: &str) -> NewJob {
    NewJob::new("drain", json!({})).queue(queue)
}

async fn many(pool: &skiplock::Pool, queue: &str, n: usize) -> skiplock::Result<()> {
    let args = vec![json!({}); n];
    enqueue_many(
        pool,
        ManyJobs {
            kind: "drain",
            args: &args,
            queue,
            ..Default::default()
        },
    )
    .await
    .map(|_| ())
}

struct Drain;

impl Handler for Drain {
    type Args = Value;
    fn kind(&self) -> &'static str {
        "drain"
    }
    async fn run(&self, _ctx: JobContext, _args: Value) -> HandlerResult {
        Ok(Outcome::Complete)
    }
}

#[tokio::test]
async fn an_enqueue_past_the_limit_is_refused_naming_the_queue_the_limit_and_the_count() {
    let db = TestDb::new().await;
    set_queue_admission(&db, "mail", Some(3)).await;
    for _ in 0..3 {
        enqueue(&db.pool, &job("mail")).await.unwrap();
    }
    let e = enqueue(&db.pool, &job("mail")).await.unwrap_err();
    assert!(is_queue_full(&e), "{e:?}");
    match &e {
        skiplock::Error::Refused { sqlstate, message } => {
            assert_eq!(sqlstate, QUEUE_FULL);
            assert_eq!(
                message,
                "skiplock: queue 'mail' is full: 3 jobs wait and its limit is 3 (max_waiting); 1 more refused"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(waiting(&db, "mail").await, 3);
    // Other queues are not limited by it.
    many(&db.pool, "other", 10).await.unwrap();
    // Removing the limit lets it grow again.
    set_queue_admission(&db, "mail", None).await;
    enqueue(&db.pool, &job("mail")).await.unwrap();
    assert_eq!(waiting(&db, "mail").await, 4);
}

#[tokio::test]
async fn enqueue_many_enqueues_all_or_nothing() {
    let db = TestDb::new().await;
    set_queue_admission(&db, "batch", Some(5)).await;
    many(&db.pool, "batch", 4).await.unwrap();
    let e = many(&db.pool, "batch", 2).await.unwrap_err();
    assert!(is_queue_full(&e), "{e:?}");
    assert!(
        e.to_string().contains("4 jobs wait and its limit is 5"),
        "{e}"
    );
    assert_eq!(
        waiting(&db, "batch").await,
        4,
        "nothing of the refused batch was enqueued"
    );
    many(&db.pool, "batch", 1).await.unwrap();
    assert_eq!(waiting(&db, "batch").await, 5);
    // A limit of 0 closes the queue to new jobs.
    set_queue_admission(&db, "closed", Some(0)).await;
    assert!(is_queue_full(
        &many(&db.pool, "closed", 1).await.unwrap_err()
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_producers_never_pass_the_limit() {
    let db = TestDb::new().await;
    let max = 200;
    set_queue_admission(&db, "busy", Some(max)).await;
    let refused = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let pool = db.pool.clone();
        let refused = refused.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..60 {
                // Singles and small batches, interleaved.
                let r = if i % 3 == 0 {
                    many(&pool, "busy", 3).await
                } else {
                    enqueue(&pool, &job("busy")).await.map(|_| ())
                };
                match r {
                    Ok(()) => {}
                    Err(e) if is_queue_full(&e) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    // Sampled while they run: never more than the limit (nothing drains the queue, so the
    // last sample is the largest).
    let sampler = {
        let pool = (*db.pool).clone();
        tokio::spawn(async move {
            let mut most = 0i64;
            for _ in 0..200 {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM skiplock.jobs WHERE queue = 'busy' AND state = 'available'",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                most = most.max(n);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            most
        })
    };
    for t in tasks {
        t.await.unwrap();
    }
    assert!(sampler.await.unwrap() <= i64::from(max));
    let n = waiting(&db, "busy").await;
    assert!(n <= i64::from(max), "{n} jobs wait, the limit is {max}");
    // 8 × 60 attempts of 1 or 3 jobs (1,120 jobs) against room for 200: the queue fills up
    // to within one batch of its limit, and the rest is refused.
    assert!(n > i64::from(max) - 3, "{n}");
    assert!(refused.load(Ordering::Relaxed) > 0);
    // Nothing left the queue: the bound the enqueues kept is the count itself.
    assert_eq!(admitted(&db, "busy").await, Some(n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_producers_never_pass_the_limit_while_jobs_leave() {
    let db = TestDb::new().await;
    let max = 50;
    set_queue_admission(&db, "busy", Some(max)).await;
    let refused = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let pool = db.pool.clone();
        let refused = refused.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..60 {
                let r = if i % 3 == 0 {
                    many(&pool, "busy", 3).await
                } else {
                    enqueue(&pool, &job("busy")).await.map(|_| ())
                };
                match r {
                    Ok(()) => {}
                    Err(e) if is_queue_full(&e) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    // Departures meanwhile (40 cancels): the bound is then too high, and the enqueues near
    // the limit count again; the limit holds at every sample all the same.
    let canceller = {
        let pool = (*db.pool).clone();
        tokio::spawn(async move {
            let mut cancelled = 0;
            while cancelled < 40 {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(skiplock.cancel(id)) FROM (SELECT id FROM skiplock.jobs
                     WHERE queue = 'busy' AND state = 'available' ORDER BY id LIMIT 1) j",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                cancelled += n;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let sampler = {
        let pool = (*db.pool).clone();
        tokio::spawn(async move {
            let mut most = 0i64;
            for _ in 0..200 {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM skiplock.jobs WHERE queue = 'busy' AND state = 'available'",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                most = most.max(n);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            most
        })
    };
    for t in tasks {
        t.await.unwrap();
    }
    canceller.await.unwrap();
    assert!(sampler.await.unwrap() <= i64::from(max));
    let n = waiting(&db, "busy").await;
    assert!(n <= i64::from(max), "{n} jobs wait, the limit is {max}");
    // 4 × 60 attempts (560 jobs) against room for 50 and 40 departures: refusals.
    assert!(refused.load(Ordering::Relaxed) > 0);
    // The bound is never below what waits.
    assert!(admitted(&db, "busy").await.unwrap() >= n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_accepts_again_once_drained_and_wait_returns_when_room_is_made() {
    let db = TestDb::new().await;
    set_queue_admission(&db, "default", Some(2)).await;
    many(&db.pool, "default", 2).await.unwrap();
    assert!(is_queue_full(
        &enqueue(&db.pool, &job("default")).await.unwrap_err()
    ));
    // Refuse: the refusal at once, however long the wait would be.
    let one = job("default");
    let e = with_room(OnFull::Refuse, || enqueue(&db.pool, &one))
        .await
        .unwrap_err();
    assert!(is_queue_full(&e));
    // Wait: a producer waits for room; a worker drains the queue and it gets in.
    let waiter = {
        let pool = db.pool.clone();
        tokio::spawn(async move {
            let one = job("default");
            with_room(OnFull::Wait(Duration::from_secs(120)), || {
                enqueue(&pool, &one)
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "it waits while the queue is full");
    let w = start_with(&db.pool, |r| {
        r.register(Drain);
    });
    let id = waiter
        .await
        .unwrap()
        .expect("enqueued once room was made")
        .id;
    wait_for(
        "the waiter's job to complete",
        Duration::from_secs(60),
        || async { (state_of(&db, id).await == "completed").then_some(()) },
    )
    .await;
    w.stop().await.unwrap();
    assert_eq!(waiting(&db, "default").await, 0);
    many(&db.pool, "default", 2).await.unwrap();
}

#[tokio::test]
async fn only_the_owner_sets_a_limit_and_every_enqueuer_is_held_to_it() {
    let db = TestDb::new().await;
    set_queue_admission(&db, "mail", Some(1)).await;
    for role in ["skiplock_enqueuer", "skiplock_worker", "skiplock_operator"] {
        let name = format!("adm_{:012x}", rand::random::<u64>() >> 16);
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE ROLE {name} LOGIN IN ROLE {role}"
        )))
        .execute(&*db.pool)
        .await
        .unwrap();
        let mut u = url::Url::parse(&db.url).unwrap();
        u.set_username(&name).unwrap();
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(u.as_str())
            .await
            .unwrap();
        let e = sqlx::query("SELECT skiplock.set_queue_admission('mail', 1000)")
            .execute(&pool)
            .await
            .unwrap_err();
        assert_eq!(
            e.as_database_error().and_then(|d| d.code()).as_deref(),
            Some("42501"),
            "{role}: {e}"
        );
        if role != "skiplock_operator" {
            let pool: skiplock::Pool = pool.clone().into();
            if waiting(&db, "mail").await == 0 {
                enqueue(&pool, &job("mail")).await.unwrap();
            }
            let e = enqueue(&pool, &job("mail")).await.unwrap_err();
            assert!(is_queue_full(&e), "{role}: {e:?}");
        }
        pool.close().await;
        admin_exec_blocking(format!("DROP ROLE IF EXISTS {name}"));
    }
}

/// The queue's row in `skiplock.queue_admission`: the bound of its available jobs the insert
/// trigger keeps (`admitted`, migrations/core/0017_admission_counter.sql).
async fn admitted(db: &TestDb, queue: &str) -> Option<i64> {
    sqlx::query_scalar("SELECT admitted FROM skiplock.queue_admission WHERE queue = $1")
        .bind(queue)
        .fetch_one(&*db.pool)
        .await
        .unwrap()
}

/// Pushes the queue's last exact count `secs` seconds away (negative: into the past), so the
/// once-a-second count (sql/api/10_jobs.sql) happens, or does not, whatever the machine's speed.
async fn count_taken_in(db: &TestDb, queue: &str, secs: i32) {
    sqlx::query(
        "UPDATE skiplock.queue_admission SET counted_at = clock_timestamp() + make_interval(secs => $2)
         WHERE queue = $1",
    )
    .bind(queue)
    .bind(secs)
    .execute(&*db.pool)
    .await
    .unwrap();
}

/// Index scans of skiplock.jobs this transaction made so far (pg_stat_xact_user_tables): the
/// enqueue's own reads, plus a count of the queue when admission control makes one.
async fn jobs_scans(tx: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(idx_scan, 0) + seq_scan FROM pg_stat_xact_user_tables
         WHERE schemaname = 'skiplock' AND relname = 'jobs'",
    )
    .fetch_one(tx)
    .await
    .unwrap()
}

/// 50 single enqueues in one transaction into `queue`; the scans of skiplock.jobs they made.
async fn scans_of_enqueues(db: &TestDb, queue: &str) -> i64 {
    let mut tx = db.pool.begin().await.unwrap();
    let before = jobs_scans(&mut tx).await;
    for _ in 0..50 {
        sqlx::query("SELECT skiplock.enqueue('drain', '{}'::jsonb, $1)")
            .bind(queue)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    let after = jobs_scans(&mut tx).await;
    tx.commit().await.unwrap();
    after - before
}

#[tokio::test]
async fn an_enqueue_far_below_the_limit_does_not_count_the_queue() {
    let db = TestDb::new().await;
    set_queue_admission(&db, "roomy", Some(1_000_000)).await;
    // A limit just set (or a row an earlier migration left) has no bound yet: the first
    // enqueue counts exactly.
    assert_eq!(admitted(&db, "roomy").await, None);
    many(&db.pool, "roomy", 300).await.unwrap();
    many(&db.pool, "free", 300).await.unwrap();
    assert_eq!(admitted(&db, "roomy").await, Some(300));
    // Departures leave the bound high; far below the limit that costs nothing.
    sqlx::query(
        "SELECT skiplock.cancel(id) FROM (SELECT id FROM skiplock.jobs WHERE queue = 'roomy'
         ORDER BY id LIMIT 100) j",
    )
    .execute(&*db.pool)
    .await
    .unwrap();
    count_taken_in(&db, "roomy", 3600).await;
    // The same enqueues scan skiplock.jobs as often with the limit as without one: no count.
    let limited = scans_of_enqueues(&db, "roomy").await;
    let unlimited = scans_of_enqueues(&db, "free").await;
    assert_eq!(limited, unlimited, "a limited queue's enqueues counted it");
    assert_eq!(admitted(&db, "roomy").await, Some(350));
    assert_eq!(waiting(&db, "roomy").await, 250);
    // A second-old count is taken again, and is exact.
    count_taken_in(&db, "roomy", -2).await;
    enqueue(&db.pool, &job("roomy")).await.unwrap();
    assert_eq!(admitted(&db, "roomy").await, Some(251));
}

#[tokio::test]
async fn a_bound_past_the_limit_counts_again_and_jobs_made_available_again_are_counted_within_a_second()
 {
    let db = TestDb::new().await;
    set_queue_admission(&db, "mail", Some(5)).await;
    many(&db.pool, "mail", 5).await.unwrap();
    let ids: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM skiplock.jobs WHERE queue = 'mail' ORDER BY id LIMIT 2")
            .fetch_all(&*db.pool)
            .await
            .unwrap();
    for id in &ids {
        sqlx::query("SELECT skiplock.cancel($1)")
            .bind(id)
            .execute(&*db.pool)
            .await
            .unwrap();
    }
    // The bound (5) leaves no room: the enqueue counts (3 wait) and is admitted.
    assert_eq!(admitted(&db, "mail").await, Some(5));
    enqueue(&db.pool, &job("mail")).await.unwrap();
    assert_eq!(admitted(&db, "mail").await, Some(4));
    // Two jobs made available again without an insert: not in the bound until the next
    // count, which a count older than a second makes.
    for id in &ids {
        sqlx::query("SELECT skiplock.retry($1)")
            .bind(id)
            .execute(&*db.pool)
            .await
            .unwrap();
    }
    assert_eq!(waiting(&db, "mail").await, 6);
    count_taken_in(&db, "mail", -2).await;
    let e = enqueue(&db.pool, &job("mail")).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("6 jobs wait and its limit is 5 (max_waiting); 1 more refused"),
        "{e}"
    );
    assert_eq!(waiting(&db, "mail").await, 6);
    // A limit set again forgets the bound.
    set_queue_admission(&db, "mail", Some(10)).await;
    assert_eq!(admitted(&db, "mail").await, None);
    enqueue(&db.pool, &job("mail")).await.unwrap();
    assert_eq!(admitted(&db, "mail").await, Some(7));
}
