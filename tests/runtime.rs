//! The worker runtime under attack or failure: supervised tasks
//! that panic are restarted and never strand a claimed job; handlers holding every one of
//! their connections cannot starve the runtime's claims, acks and heartbeats; NOTIFY
//! payloads create no producers, queues come from the jobs table, under a cap.
//!
//! Tests that read the worker's log run it on the test's own (current-thread) runtime with
//! a thread-local log collector.

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use skiplock::config::QueueSettings;
use skiplock::queue::NewJob;
use skiplock::store::jobs::enqueue;
use skiplock::worker::faults::{self, Point};
use skiplock::worker::{Handler, HandlerResult, JobContext, Outcome, Worker, builtin};
use sqlx::postgres::PgPoolOptions;
use support::*;
use tokio_util::sync::CancellationToken;

/// Log lines written on this thread while the guard lives.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn collect() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let l = logs.clone();
        let sub = tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_ansi(false)
            .with_writer(move || l.clone())
            .finish();
        let guard = tracing::subscriber::set_default(sub);
        (logs, guard)
    }
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_string)
            .collect()
    }
    fn count(&self, needles: &[&str]) -> usize {
        self.lines()
            .iter()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .count()
    }
}

/// Starts `worker` on this runtime; stop with the token.
fn run(
    worker: Worker,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<skiplock::Result<()>>,
) {
    let w = run_worker(worker);
    (w.stop, w.handle)
}

fn queues(spec: &[(&str, usize)]) -> Option<BTreeMap<String, usize>> {
    Some(spec.iter().map(|(q, n)| (q.to_string(), *n)).collect())
}

#[tokio::test]
async fn a_job_that_keeps_crashing_its_producer_is_discarded_and_its_batch_mates_lose_nothing() {
    let (logs, _guard) = Logs::collect();
    let db = TestDb::new().await;
    let poison = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({"poison": true}))
            .priority(-1)
            .max_attempts(2),
    )
    .await
    .unwrap()
    .id;
    let mut mates = Vec::new();
    for _ in 0..5 {
        mates.push(
            enqueue(&db.pool, &NewJob::new("noop", json!({})))
                .await
                .unwrap()
                .id,
        );
    }
    let settings = QueueSettings {
        queues: queues(&[("default", 10)]),
        ..fast_settings()
    };
    let mut b = Worker::builder(db.pool.clone())
        .settings(settings)
        .without_maintenance();
    builtin::register(b.registry_mut());
    let worker = b.build();
    // Three claims in a row fail: the first takes the whole batch (all six jobs, given
    // back), the next two claim one job at a time and take the poison (first by priority),
    // which uses up its two attempts.
    faults::arm(worker.id(), Point::ProducerClaimed, 3);
    let (stop, h) = run(worker);
    wait_all_finished(&db.pool, Duration::from_secs(60)).await;
    stop.cancel();
    h.await.unwrap().unwrap();

    let p = skiplock::store::jobs::get_job(&db.pool, poison)
        .await
        .unwrap();
    assert_eq!((p.state.as_str(), p.attempt), ("discarded", 2));
    let errors = p.errors.as_array().unwrap();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors.iter().all(|e| {
        e["error"]
            .as_str()
            .unwrap()
            .contains("the producer of queue default failed")
    }));
    for id in mates {
        let r = skiplock::store::jobs::get_job(&db.pool, id).await.unwrap();
        assert_eq!((r.state.as_str(), r.attempt), ("completed", 1), "job {id}");
    }
    assert_eq!(
        logs.count(&[
            "ERROR",
            "producer of queue default",
            "panicked",
            "restarting"
        ]),
        3,
        "{:#?}",
        logs.lines()
    );
}

#[tokio::test]
async fn a_panicking_completer_heartbeat_or_listener_is_restarted_and_loses_nothing() {
    let (logs, _guard) = Logs::collect();
    let db = TestDb::new().await;
    let settings = QueueSettings {
        queues: queues(&[("default", 10)]),
        rescue_after: Duration::from_secs(2),
        ..fast_settings()
    };
    let mut b = Worker::builder(db.pool.clone())
        .settings(settings)
        .without_maintenance();
    builtin::register(b.registry_mut());
    let worker = b.build();
    let id = worker.id().to_string();
    faults::arm(&id, Point::AckWriterFlush, 1);
    faults::arm(&id, Point::Heartbeat, 1);
    faults::arm(&id, Point::Listener, 1);
    let (stop, h) = run(worker);
    // The listener must be up, and the producer registered as waiting, before the jobs go
    // in, or no NOTIFY reaches it (the fallback poll runs them all the same, and the
    // listener never gets to panic).
    wait_for("the worker to LISTEN", Duration::from_secs(60), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND query LIKE 'LISTEN %skiplock_wake%'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        let waiting: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.waiting")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        (n > 0 && waiting > 0).then_some(())
    })
    .await;
    // A long job keeps the heartbeat busy; short ones go through the ack writer and NOTIFY.
    let long = enqueue(&db.pool, &NewJob::new("sleep", json!({"ms": 600000})))
        .await
        .unwrap()
        .id;
    for _ in 0..10 {
        enqueue(&db.pool, &NewJob::new("noop", json!({})))
            .await
            .unwrap();
    }
    wait_for("the short jobs", Duration::from_secs(60), || async {
        (count_state(&db.pool, "completed").await == 10).then_some(())
    })
    .await;
    for task in ["ack writer", "heartbeat", "listener"] {
        wait_for(task, Duration::from_secs(60), || async {
            (logs.count(&["ERROR", &format!("task=\"{task}\""), "panicked"]) == 1).then_some(())
        })
        .await;
    }
    // Heartbeats keep landing after the heartbeat task's restart.
    let hb = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>(
            "SELECT heartbeat_at FROM skiplock.jobs WHERE id = $1",
        )
        .bind(long)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let before = hb(db.pool.pg().clone()).await;
    wait_for("a later heartbeat", Duration::from_secs(60), || async {
        (hb(db.pool.pg().clone()).await > before).then_some(())
    })
    .await;
    // Graceful shutdown still returns everything.
    stop.cancel();
    h.await.unwrap().unwrap();
    let r = skiplock::store::jobs::get_job(&db.pool, long)
        .await
        .unwrap();
    assert_eq!((r.state.as_str(), r.attempt), ("available", 0));
    assert_eq!(count_state(&db.pool, "running").await, 0);
    assert_eq!(count_state(&db.pool, "completed").await, 10);
}

/// Waits on a lock the test holds, on the handlers' pool.
struct Blocked;

impl Handler for Blocked {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "blocked"
    }
    async fn run(&self, ctx: JobContext, _a: serde_json::Value) -> HandlerResult {
        sqlx::query("SELECT pg_advisory_lock_shared(4242)")
            .execute(&ctx.pool)
            .await?;
        sqlx::query("SELECT pg_advisory_unlock_shared(4242)")
            .execute(&ctx.pool)
            .await?;
        Ok(Outcome::Complete)
    }
}

#[tokio::test]
async fn handlers_holding_every_connection_cannot_starve_claims_acks_or_heartbeats() {
    let db = TestDb::new().await;
    // The test holds the lock the handlers wait for.
    let mut holder = db.pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(4242)")
        .execute(&mut *holder)
        .await
        .unwrap();
    // Two handler connections, both about to be stuck in a lock wait.
    let handlers = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(600))
        .connect(&db.url)
        .await
        .unwrap();
    let settings = QueueSettings {
        queues: queues(&[("blocked", 2), ("default", 10)]),
        rescue_after: Duration::from_secs(2),
        ..fast_settings()
    };
    let w = start_worker(&handlers, settings, |mut b| {
        builtin::register(b.registry_mut());
        b.register(Blocked)
    });
    let mut blocked = Vec::new();
    for _ in 0..2 {
        blocked.push(
            enqueue(
                &db.pool,
                &NewJob::new("blocked", json!({})).queue("blocked"),
            )
            .await
            .unwrap()
            .id,
        );
    }
    wait_for(
        "both handler connections waiting for the lock",
        Duration::from_secs(60),
        || async {
            let n = count(
                &db.pool,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND query LIKE '%pg_advisory_lock_shared%'",
            )
            .await;
            (n == 2).then_some(())
        },
    )
    .await;
    let beats = |pool: sqlx::PgPool, ids: Vec<i64>| async move {
        sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>(
            "SELECT min(heartbeat_at) FROM skiplock.jobs WHERE id = ANY($1)",
        )
        .bind(ids)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let before = beats(db.pool.pg().clone(), blocked.clone()).await;
    // Jobs of another queue are claimed and acknowledged meanwhile...
    for _ in 0..20 {
        enqueue(&db.pool, &NewJob::new("noop", json!({})))
            .await
            .unwrap();
    }
    wait_for(
        "20 noop jobs completed",
        Duration::from_secs(60),
        || async { (count_state(&db.pool, "completed").await == 20).then_some(()) },
    )
    .await;
    // ... and the blocked jobs' heartbeats keep landing.
    wait_for(
        "a heartbeat of both blocked jobs",
        Duration::from_secs(60),
        || async { (beats(db.pool.pg().clone(), blocked.clone()).await > before).then_some(()) },
    )
    .await;
    sqlx::query("SELECT pg_advisory_unlock(4242)")
        .execute(&mut *holder)
        .await
        .unwrap();
    drop(holder);
    wait_all_finished(&db.pool, Duration::from_secs(60)).await;
    w.stop().await.unwrap();
    for id in blocked {
        let r = skiplock::store::jobs::get_job(&db.pool, id).await.unwrap();
        assert_eq!((r.state.as_str(), r.attempt), ("completed", 1));
    }
    handlers.close().await;
}

#[tokio::test]
async fn notify_payloads_create_no_producers() {
    let (logs, _guard) = Logs::collect();
    let db = TestDb::new().await;
    // Serving every queue; the poll is far away, so the job below can only be found through
    // the hint its NOTIFY gives, which arrives after the 500 forged ones.
    let settings = QueueSettings {
        queues: None,
        poll_interval: Duration::from_secs(120),
        ..fast_settings()
    };
    let w = start_builtin(&db.pool, settings);
    wait_for("the listener", Duration::from_secs(60), || async {
        let n = count(
            &db.pool,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND query LIKE 'LISTEN%'",
        )
        .await;
        (n == 1).then_some(())
    })
    .await;
    sqlx::query(
        "SELECT pg_notify(skiplock._wake_channel(), 'x' || g) FROM generate_series(1, 500) g",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let id = enqueue(&db.pool, &NewJob::new("noop", json!({})).queue("real"))
        .await
        .unwrap()
        .id;
    wait_job(&db.pool, id, "the real queue's job", |r| {
        r.state.as_str() == "completed"
    })
    .await;
    w.stop().await.unwrap();
    let serving: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.contains("serving queue"))
        .collect();
    assert_eq!(serving.len(), 1, "{serving:#?}");
    assert!(serving[0].contains("queue=\"real\""), "{serving:#?}");
}

#[tokio::test]
async fn a_capped_worker_serves_every_queue_in_turn_and_retires_idle_producers() {
    let (logs, _guard) = Logs::collect();
    let db = TestDb::new().await;
    for q in ["q1", "q2", "q3", "q4", "q5"] {
        for _ in 0..2 {
            enqueue(&db.pool, &NewJob::new("noop", json!({})).queue(q))
                .await
                .unwrap();
        }
    }
    let settings = QueueSettings {
        queues: None,
        max_queues: 2,
        ..fast_settings()
    };
    let w = start_builtin(&db.pool, settings);
    wait_all_finished(&db.pool, Duration::from_secs(120)).await;
    w.stop().await.unwrap();
    // Never more than two producers at once, and each queue was served.
    let mut live = 0i32;
    let mut most = 0;
    for l in logs.lines() {
        if l.contains("serving queue") {
            live += 1;
        } else if l.contains("its producer retired") {
            live -= 1;
        }
        most = most.max(live);
    }
    assert!(most <= 2, "{most} producers at once: {:#?}", logs.lines());
    assert!(logs.count(&["serving queue"]) >= 5);
    assert!(logs.count(&["SKIPLOCK_MAX_QUEUES"]) >= 1);
}

#[tokio::test]
async fn worker_sessions_carry_the_statement_and_lock_timeouts() {
    let db = TestDb::new().await;
    let settings = QueueSettings {
        statement_timeout: Duration::from_secs(45),
        lock_timeout: Duration::from_millis(1500),
        ..QueueSettings::default()
    };
    // The handlers' pool of `skiplock worker` (the runtime's pool is built the same way
    // from the handlers' connect options).
    let pool = skiplock::db::session::handler_pool(&db.url, &settings).unwrap();
    let (statement, lock): (String, String) = sqlx::query_as(
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((statement.as_str(), lock.as_str()), ("45s", "1500ms"));
    // A lock wait longer than that ends with a clear error instead of waiting forever.
    let mut holder = db.pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(77)")
        .execute(&mut *holder)
        .await
        .unwrap();
    let e = sqlx::query("SELECT pg_advisory_lock(77)")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("lock timeout"), "{e}");
    pool.close().await;
}

/// Whether Nagle is off on this process's TCP socket of the connection `c` holds, found by
/// the ports the server reports; None over a Unix socket or behind a proxy (no socket of ours
/// has those ports).
async fn nodelay_of(c: &mut sqlx::PgConnection) -> Option<bool> {
    let (client, server) = skiplock::store::session::client_port(c).await.unwrap();
    let (client, server) = (u16::try_from(client?).ok()?, u16::try_from(server?).ok()?);
    skiplock::db::nodelay::is_set(client, server)
}

/// One pool of each kind skiplock builds, one connection each: a worker's (lazy, session
/// limits), a one-shot command's, and a dev tool's.
async fn skiplocks_pools(db: &TestDb) -> [(&'static str, skiplock::Pool); 3] {
    let opts = skiplock::db::session::worker_options(&skiplock::db::parse_url(&db.url).unwrap());
    [
        (
            "worker",
            skiplock::db::session::worker_pool(
                opts,
                QueueSettings::default().session_limits(),
                skiplock::store::PoolMode::Session,
                1,
                Duration::from_secs(10),
            ),
        ),
        ("command", skiplock::db::connect(&db.url, 1).await.unwrap()),
        (
            "tool",
            skiplock::db::pool(&db.url, 1, Duration::from_secs(10))
                .await
                .unwrap(),
        ),
    ]
}

/// Every pool skiplock opens turns Nagle's algorithm off on its TCP sockets, as libpq does
/// (sqlx 0.9.0 leaves it on: a statement sent in more than one write, a TLS record each,
/// waited 40 ms for the server's delayed ACK; docs/performance.md).
#[tokio::test]
async fn the_pools_skiplock_opens_turn_nagle_off_on_their_tcp_sockets() {
    let db = TestDb::new().await;
    let pools = skiplocks_pools(&db).await;
    let mut plain = db.pool.acquire().await.unwrap();
    let Some(sqlx_default) = nodelay_of(&mut plain).await else {
        eprintln!("the test server is reached over a Unix socket or a proxy: no socket to check");
        return;
    };
    // The test's own pool is plain sqlx: Nagle on, so the check below can fail. (When a
    // sqlx release sets TCP_NODELAY itself, this fails: src/db/nodelay.rs can then go.)
    assert!(!sqlx_default, "sqlx sets TCP_NODELAY itself now");
    for (name, pool) in &pools {
        let mut c = pool.acquire().await.unwrap();
        assert_eq!(nodelay_of(&mut c).await, Some(true), "{name} pool");
    }
}

/// Every pool skiplock builds pings a connection that sat idle for more than a second before
/// handing it out (`src/db/checkout.rs`): one the server closed meanwhile is replaced, and
/// the statement succeeds on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_the_server_closed_while_it_sat_idle_is_replaced_without_an_error() {
    let db = TestDb::new().await;
    let pools = skiplocks_pools(&db).await;
    for (name, pool) in &pools {
        let before: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(pool)
            .await
            .unwrap();
        let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(before)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert!(ended, "{name} pool: its backend was terminated");
        tokio::time::sleep(skiplock::db::checkout::PING_IF_IDLE_FOR + Duration::from_millis(300))
            .await;
        let after: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(pool)
            .await
            .unwrap_or_else(|e| panic!("{name} pool: the idle connection was not replaced: {e}"));
        assert_ne!(before, after, "{name} pool: a new connection");
    }
}

/// Waits until the worker stops it (never returns on its own).
struct Endless;

/// How many `Endless` handlers have started: a claimed job's start is stamped in its row only
/// later (by the heartbeat or the ack), so the row cannot tell a started job from a buffered one.
static ENDLESS_STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Handler for Endless {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "endless"
    }
    async fn run(&self, _ctx: JobContext, _args: serde_json::Value) -> HandlerResult {
        ENDLESS_STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::pending::<()>().await;
        Ok(Outcome::Complete)
    }
}

/// Fails every job.
struct AlwaysFails;

impl Handler for AlwaysFails {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "always.fails"
    }
    async fn run(&self, _ctx: JobContext, args: serde_json::Value) -> HandlerResult {
        Err(skiplock::worker::JobError::discard(format!(
            "upstream down (job {})",
            args["n"]
        )))
    }
}

#[tokio::test]
async fn a_stop_returns_its_claimed_ahead_jobs_in_one_line() {
    let (logs, _guard) = Logs::collect();
    let db = TestDb::new().await;
    for _ in 0..30 {
        enqueue(&db.pool, &NewJob::new("endless", json!({})))
            .await
            .unwrap();
    }
    let settings = QueueSettings {
        // The buffer is at most the slots until a run time is known (producer::claim_ahead).
        queues: queues(&[("default", 12)]),
        claim_ahead: 12,
        shutdown_grace: Duration::from_millis(100),
        ..fast_settings()
    };
    let w = start_worker(&db.pool, settings, |b| b.register(Endless));
    // Every slot running a job and the buffer full: 24 claimed, 12 of them started.
    wait_for(
        "the slots busy and the buffer full",
        Duration::from_secs(60),
        || async {
            let claimed = count(
                &db.pool,
                "SELECT count(*) FROM skiplock.jobs WHERE state = 'running'",
            )
            .await;
            let started = ENDLESS_STARTED.load(std::sync::atomic::Ordering::SeqCst);
            (claimed >= 24 && started >= 12).then_some(())
        },
    )
    .await;
    w.stop().await.unwrap();
    let returned = count(
        &db.pool,
        "SELECT count(*) FROM skiplock.jobs WHERE errors::text LIKE '%claimed but never started%'",
    )
    .await;
    assert!(returned >= 12, "{returned}");
    let lines: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.contains("claimed but never started"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].contains(&format!("returned {returned} job(s)")),
        "{lines:#?}"
    );
    assert!(lines[0].contains(" INFO "), "{lines:#?}");
    // The twelve that ran past the grace period: one line too.
    assert_eq!(logs.count(&["grace period over"]), 1, "{:#?}", logs.lines());
    assert_eq!(
        logs.count(&["grace period over", "returning 12 running job(s)"]),
        1
    );
}

#[tokio::test]
async fn repeated_failures_of_one_kind_are_summed_into_one_line() {
    let (logs, _guard) = Logs::collect();
    let db = TestDb::new().await;
    const N: i64 = 40;
    for n in 0..N {
        enqueue(
            &db.pool,
            &NewJob::new("always.fails", json!({ "n": n })).max_attempts(1),
        )
        .await
        .unwrap();
    }
    let w = start_worker(&db.pool, fast_settings(), |b| b.register(AlwaysFails));
    wait_for("every job discarded", Duration::from_secs(120), || async {
        (count_state(&db.pool, "discarded").await == N).then_some(())
    })
    .await;
    w.stop().await.unwrap();
    let full = logs.count(&["job failed", "always.fails"]);
    let summed: i64 = logs
        .lines()
        .iter()
        .filter(|l| l.contains("more job(s) of kind always.fails failed"))
        .map(|l| {
            let at = l.find("failures=").expect(l) + "failures=".len();
            l[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse::<i64>()
                .unwrap()
        })
        .sum();
    assert!(summed > 0, "{:#?}", logs.lines());
    assert_eq!(full as i64 + summed, N, "{:#?}", logs.lines());
    assert!(
        logs.lines()
            .iter()
            .any(|l| l.contains("last_error=upstream down")),
        "{:#?}",
        logs.lines()
    );
}
