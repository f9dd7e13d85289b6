//! Reaper, retention and periodic jobs against a real Postgres. The reaper and retention
//! run as the periodic jobs `reap` and `retain`: their runs are rows with results.

mod support;

use std::time::Duration;

use serde_json::json;
use skiplock::maintenance::periodic::{PeriodicJob, PeriodicJobs, Scheduler};
use skiplock::maintenance::reaper::{Reaper, ReaperSettings};
use skiplock::maintenance::retention::{Retention, RetentionSettings, run_retention};
use skiplock::queue::NewJob;
use skiplock::worker::{Handler, HandlerResult, JobContext, JobError, Outcome, WorkerBuilder};
use sqlx::PgPool;
use support::*;

const MAX_AGE: Duration = Duration::from_secs(3);
/// The shortest period a periodic job may have.
const EVERY: Duration = Duration::from_secs(1);

fn reaper(pool: &skiplock::Pool, max_age: Duration) -> Reaper {
    Reaper::new(
        pool.clone(),
        ReaperSettings {
            max_age,
            interval: EVERY,
        },
    )
}

fn three_second_reaper(pool: &skiplock::Pool) -> Reaper {
    reaper(pool, MAX_AGE)
}

/// A worker's maintenance: the `reap` job run by `reaper` (a clone: the test watches its
/// counters) and the `retain` job, both every second.
fn with_maintenance(b: WorkerBuilder, reaper: &Reaper) -> WorkerBuilder {
    let retention = Retention {
        settings: RetentionSettings {
            interval: EVERY,
            ..RetentionSettings::default()
        },
    };
    b.maintenance_parts(reaper.clone(), retention, PeriodicJobs::new())
}

/// The results of the completed `reap` jobs, oldest first.
async fn reap_results(pool: &PgPool) -> Vec<serde_json::Value> {
    sqlx::query_scalar(
        "SELECT result FROM skiplock.jobs WHERE kind = 'reap' AND state = 'completed' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Every reap result says the guard held exactly while the process was younger than the
/// maximum age (whole seconds in both), and a guarded run discarded nothing.
fn assert_guard_consistent(results: &[serde_json::Value]) {
    for r in results {
        let (up, max) = (
            r["uptime_s"].as_u64().unwrap(),
            r["max_age_s"].as_u64().unwrap(),
        );
        assert_eq!(r["guarded"], json!(up < max), "{r}");
        if up < max {
            assert_eq!(r["discarded"], 0, "{r}");
        }
    }
}

async fn insert(pool: &PgPool, sql_values: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO skiplock.jobs (kind, args, state, scheduled_at, created_at, attempted_at, finalized_at) \
         VALUES {sql_values} RETURNING id"
    )))
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Whether job `id` is still waiting (its row there, `available`).
async fn waiting(pool: &PgPool, id: i64) -> bool {
    state_or_gone(pool, id).await.as_deref() == Some("available")
}

/// Whether job `id` was discarded (its row kept) by the reaper, with the reason in its errors.
async fn reaped(pool: &PgPool, id: i64) -> bool {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM skiplock.jobs WHERE id = $1 AND state = 'discarded' \
         AND finalized_at IS NOT NULL AND errors -> -1 ->> 'error' LIKE 'reaped: %')",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn exists(pool: &PgPool, id: i64) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM skiplock.jobs WHERE id = $1)")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Records, for every deleted job row, when it went, its state then, and how old its attempt
/// and heartbeat were at that moment (the reaper deletes none: it discards).
async fn log_deletions(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE deleted_log (id bigint, at timestamptz, state text,
                                   attempt_age interval, heartbeat_age interval);
         CREATE FUNCTION log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO deleted_log VALUES (OLD.id, clock_timestamp(), OLD.state::text,
                                             clock_timestamp() - OLD.attempted_at,
                                             clock_timestamp() - OLD.heartbeat_at);
             RETURN OLD;
         END $$;
         CREATE TRIGGER log_delete BEFORE DELETE ON skiplock.jobs FOR EACH ROW EXECUTE FUNCTION log_delete();",
    )
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn stale_row_survives_the_young_reaper_and_goes_after_its_uptime() {
    let db = TestDb::new().await;
    log_deletions(&db.pool).await;
    // A kind a live worker elsewhere handles: nothing holds these jobs back.
    live_worker(&db.pool, "elsewhere", &["abandoned"]).await;
    let stale = insert(
        &db.pool,
        "('abandoned', '{}', 'available', now() - interval '2 days', now() - interval '2 days', NULL, NULL)",
    )
    .await;
    let future = insert(
        &db.pool,
        "('abandoned', '{}', 'available', now() + interval '1 day', now() - interval '5 days', NULL, NULL)",
    )
    .await;

    // A reaper whose maximum age (an hour) is far beyond this test's length is young for the
    // whole test: only its uptime guard stands between it and the two-day-old row.
    let young = reaper(&db.pool, Duration::from_secs(3600));
    assert_eq!(young.reap_once().await.unwrap(), 0);
    assert!(
        waiting(&db.pool, stale).await,
        "a young reaper must not discard"
    );
    let worker = start_worker(&db.pool, fast_settings(), |b| with_maintenance(b, &young));
    wait_for(
        "two reap jobs run by the worker",
        Duration::from_secs(60),
        || async {
            live_worker(&db.pool, "elsewhere", &["abandoned"]).await;
            (young.runs() >= 3).then_some(())
        },
    )
    .await;
    worker.stop().await.unwrap();
    assert!(
        waiting(&db.pool, stale).await,
        "discarded by a young reaper"
    );
    assert_eq!(young.discarded(), 0);
    // Each run is a completed `reap` job whose result says the guard held.
    let results = reap_results(&db.pool).await;
    assert!(results.len() >= 2, "{results:?}");
    for r in &results {
        assert_eq!(
            (&r["guarded"], &r["discarded"], &r["max_age_s"]),
            (&json!(true), &json!(0), &json!(3600)),
            "{r}"
        );
    }

    // A reaper with a 3 s maximum age discards the row once it has been up that long, and not
    // before: its discard comes at least 3 s after it was built (database clock).
    let built_at: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let reaper = three_second_reaper(&db.pool);
    let worker = start_worker(&db.pool, fast_settings(), |b| with_maintenance(b, &reaper));
    wait_for(
        "the stale row to be reaped",
        Duration::from_secs(60),
        || async {
            live_worker(&db.pool, "elsewhere", &["abandoned"]).await;
            reaped(&db.pool, stale).await.then_some(())
        },
    )
    .await;
    let discarded_at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT finalized_at FROM skiplock.jobs WHERE id = $1")
            .bind(stale)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        discarded_at - built_at >= chrono::Duration::from_std(MAX_AGE).unwrap(),
        "discarded {} after the reaper was built, before its uptime reached {MAX_AGE:?}",
        discarded_at - built_at
    );
    // The run counts its discards once its statement has committed: wait for the count.
    wait_for(
        "the reaper to count its discard",
        Duration::from_secs(60),
        || async { (reaper.discarded() >= 1).then_some(()) },
    )
    .await;
    assert_eq!(reaper.discarded(), 1);

    // The future-scheduled row created days ago is judged again and again and stays.
    let runs = reaper.runs();
    wait_for("two more reaper runs", Duration::from_secs(60), || async {
        live_worker(&db.pool, "elsewhere", &["abandoned"]).await;
        (reaper.runs() >= runs + 2).then_some(())
    })
    .await;
    assert!(
        waiting(&db.pool, future).await,
        "a future-scheduled job is never too old"
    );
    assert_eq!(reaper.discarded(), 1);
    worker.stop().await.unwrap();
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM deleted_log").await,
        0,
        "the reaper deleted a row"
    );

    // The run that discarded the row is on record, with the uptime that allowed it.
    let results = reap_results(&db.pool).await;
    let deleting: Vec<_> = results.iter().filter(|r| r["discarded"] == 1).collect();
    assert_eq!(deleting.len(), 1, "{results:?}");
    assert_eq!(deleting[0]["guarded"], false);
    assert!(deleting[0]["uptime_s"].as_u64().unwrap() >= MAX_AGE.as_secs());
    assert_guard_consistent(&results);
}

/// Runs until the job is taken away (or the worker stops).
struct Block;

impl Handler for Block {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "block"
    }
    async fn run(&self, ctx: JobContext, _args: serde_json::Value) -> HandlerResult {
        tokio::select! {
            _ = ctx.lost() => Err(JobError::retry("taken away")),
            _ = ctx.shutdown_requested() => Ok(Outcome::Snooze(Duration::ZERO)),
            _ = tokio::time::sleep(Duration::from_secs(120)) => Ok(Outcome::Complete),
        }
    }
}

#[tokio::test]
async fn running_job_with_live_worker_is_kept_until_its_attempt_is_max_age_old() {
    let db = TestDb::new().await;
    log_deletions(&db.pool).await;
    let reaper = three_second_reaper(&db.pool);
    let worker = start_worker(&db.pool, fast_settings(), |b| {
        with_maintenance(b.register(Block), &reaper)
    });
    // Past the uptime guard first, so only the job's own age protects it.
    wait_for(
        "the reaper to be past its uptime guard",
        Duration::from_secs(30),
        || async { (reaper.uptime() >= MAX_AGE).then_some(()) },
    )
    .await;
    let id = skiplock::store::jobs::enqueue(&db.pool, &NewJob::new("block", json!({})))
        .await
        .unwrap()
        .id;
    wait_for("the job to run", Duration::from_secs(30), || async {
        (count_state(&db.pool, "running").await == 1).then_some(())
    })
    .await;

    wait_for(
        "the running job to be reaped",
        Duration::from_secs(60),
        || async { reaped(&db.pool, id).await.then_some(()) },
    )
    .await;
    // Discarded, not deleted; judged while it ran (its error names the running attempt).
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM deleted_log").await,
        0,
        "the reaper deleted a row"
    );
    let (error, attempt_age, heartbeat_age): (String, f64, f64) = sqlx::query_as(
        "SELECT errors -> -1 ->> 'error', extract(epoch FROM finalized_at - attempted_at)::float8, \
                extract(epoch FROM finalized_at - heartbeat_at)::float8 \
         FROM skiplock.jobs WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        error.starts_with("reaped: attempt 1 running since"),
        "{error}"
    );
    assert!(
        attempt_age > 3.0,
        "reaped when its attempt was only {attempt_age} s old"
    );
    // Its worker was alive: its heartbeat was younger than the rescue window, so no rescuer
    // would have touched it (the worker's own window is a minute, far beyond any stall).
    let window = fast_settings().rescue_after.as_secs_f64();
    assert!(
        heartbeat_age < window,
        "heartbeat was {heartbeat_age} s old (rescue window {window} s)"
    );
    assert_eq!(reaper.discarded(), 1);
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn retention_deletes_only_what_is_past_its_window() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let row = |state: &str, finalized_ago: &str| {
        format!(
            "('k', '{{}}', '{state}', now() - interval '30 days', now() - interval '30 days', now() - interval '30 days', now() - interval '{finalized_ago}')"
        )
    };
    let completed_old = insert(p, &row("completed", "25 hours")).await;
    let completed_new = insert(p, &row("completed", "23 hours")).await;
    let cancelled_old = insert(p, &row("cancelled", "8 days")).await;
    let cancelled_new = insert(p, &row("cancelled", "6 days")).await;
    let discarded_old = insert(p, &row("discarded", "8 days")).await;
    let discarded_new = insert(p, &row("discarded", "6 days")).await;
    // Unfinished rows are the reaper's business, however old.
    let available = insert(
        p,
        "('k', '{}', 'available', now() - interval '30 days', now() - interval '30 days', NULL, NULL)",
    )
    .await;
    // More than one batch of old completed rows, plus new ones that must stay.
    sqlx::query(
        "INSERT INTO skiplock.jobs (kind, state, finalized_at) \
         SELECT 'bulk', 'completed', now() - interval '2 days' FROM generate_series(1, 1234)",
    )
    .execute(p)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO skiplock.jobs (kind, state, finalized_at) \
         SELECT 'bulk-new', 'completed', now() - interval '1 hour' FROM generate_series(1, 10)",
    )
    .execute(p)
    .await
    .unwrap();
    // Period records: each name keeps its latest; older ones past the window go.
    sqlx::query(
        "INSERT INTO skiplock.periodic_runs (name, period_start) VALUES \
         ('x', now() - interval '3 days'), ('x', now() - interval '2 days'), ('x', now() - interval '1 hour'), \
         ('y', now() - interval '3 days')",
    )
    .execute(p)
    .await
    .unwrap();

    // Per-key rate records: more than a batch whose time has passed (they decide nothing)
    // and two still in the future (they hold their keys back, so they stay).
    sqlx::query(
        "INSERT INTO skiplock.key_rates (queue, limit_key, tat) \
         SELECT 'fetch', 'passed-' || i, now() - interval '1 second' * i FROM generate_series(1, 777) i \
         UNION ALL VALUES ('fetch', 'soon', now() + interval '1 hour'), ('other', 'soon', now() + interval '1 day')",
    )
    .execute(p)
    .await
    .unwrap();

    let deleted = run_retention(p, &RetentionSettings::default())
        .await
        .unwrap();
    assert_eq!(deleted, 3 + 1234);
    let rates: Vec<(String, String)> =
        sqlx::query_as("SELECT queue, limit_key FROM skiplock.key_rates ORDER BY queue, limit_key")
            .fetch_all(p)
            .await
            .unwrap();
    assert_eq!(
        rates,
        vec![
            ("fetch".to_string(), "soon".to_string()),
            ("other".to_string(), "soon".to_string())
        ]
    );
    for id in [completed_old, cancelled_old, discarded_old] {
        assert!(!exists(p, id).await, "job {id} is past its window");
    }
    for id in [completed_new, cancelled_new, discarded_new, available] {
        assert!(
            exists(p, id).await,
            "job {id} is within its window (or unfinished)"
        );
    }
    let left: Vec<(String, i64)> = sqlx::query_as(
        "SELECT kind, count(*) FROM skiplock.jobs WHERE kind LIKE 'bulk%' GROUP BY kind",
    )
    .fetch_all(p)
    .await
    .unwrap();
    assert_eq!(left, vec![("bulk-new".to_string(), 10)]);
    let runs: Vec<(String, i64)> = sqlx::query_as(
        "SELECT name, count(*) FROM skiplock.periodic_runs GROUP BY name ORDER BY name",
    )
    .fetch_all(p)
    .await
    .unwrap();
    assert_eq!(runs, vec![("x".to_string(), 1), ("y".to_string(), 1)]);

    // A second pass finds nothing more.
    assert_eq!(
        run_retention(p, &RetentionSettings::default())
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn periodic_scheduler_in_code_skips_the_first_partial_period_and_never_repeats() {
    let db = TestDb::new().await;
    let jobs = PeriodicJobs::new().add(
        PeriodicJob::every(
            "code",
            Duration::from_secs(1),
            NewJob::new("nobody-handles", json!({"n": 1})),
        )
        .unwrap(),
    );
    let s1 = Scheduler::new(jobs.clone(), "one").unwrap();
    let s2 = Scheduler::new(jobs, "two").unwrap();
    // Ticking both, many times, over a few periods.
    let mut enqueued = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        enqueued += s1.tick_once(&db.pool).await.unwrap();
        enqueued += s2.tick_once(&db.pool).await.unwrap();
        let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.periodic_runs")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        if runs >= 3 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no periods after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (runs, jobs, first): (i64, i64, bool) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM skiplock.periodic_runs), \
                (SELECT count(*) FROM skiplock.jobs WHERE kind = 'nobody-handles'), \
                (SELECT min(period_start) FROM skiplock.periodic_runs) >= (SELECT min(declared_at) FROM skiplock.periodic_jobs) - interval '1 second'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(jobs, runs);
    assert_eq!(enqueued as i64, runs);
    assert!(first, "the period in progress at start-up must not run");
    // Replaying an old period (a lagging clock) enqueues nothing.
    let replay: Option<i64> = sqlx::query_scalar(
        "SELECT skiplock.enqueue_periodic('code', (SELECT min(period_start) FROM skiplock.periodic_runs) - interval '1 second', \
                '-infinity', 'nobody-handles')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(replay, None);
}

#[tokio::test]
async fn the_reap_job_never_deletes_its_own_row() {
    let db = TestDb::new().await;
    // A `reap` job that has been running for two days (say its worker hung), and an ordinary
    // stale row: a reaper with a one-second maximum age condemns both.
    let own = insert(
        &db.pool,
        "('reap', '{}', 'running', now() - interval '2 days', now() - interval '2 days', now() - interval '2 days', NULL)",
    )
    .await;
    let stale = insert(
        &db.pool,
        "('abandoned', '{}', 'available', now() - interval '2 days', now() - interval '2 days', NULL, NULL)",
    )
    .await;
    let r = reaper(&db.pool, Duration::from_secs(1));
    wait_for(
        "the reaper to be up a second",
        Duration::from_secs(30),
        || async { (r.uptime() >= Duration::from_secs(1)).then_some(()) },
    )
    .await;
    // Run as job `own`, it discards the other row and spares its own.
    live_worker(&db.pool, "elsewhere", &["abandoned"]).await;
    let outcome = r
        .run(
            JobContext::detached(db.pool.clone(), own, "reap"),
            serde::de::IgnoredAny,
        )
        .await
        .unwrap();
    let Outcome::CompleteWith(result) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        (&result["discarded"], &result["guarded"]),
        (&json!(1), &json!(false))
    );
    assert!(reaped(&db.pool, stale).await);
    assert_eq!(
        state_or_gone(&db.pool, own).await.as_deref(),
        Some("running"),
        "the reap job discarded its own row"
    );
    // Any other run discards it (so the test above can fail).
    assert_eq!(r.reap_once().await.unwrap(), 1);
    assert!(reaped(&db.pool, own).await);
}

/// A worker built as examples/quickstart.rs shows (no maintenance call) runs the rescuer, the reaper,
/// retention and the periodic scheduler; `without_maintenance` leaves the last three out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_installs_maintenance_by_default_and_can_leave_it_out() {
    let db = TestDb::new().await;
    let w = skiplock::worker::Worker::builder(db.pool.clone())
        .settings(fast_settings())
        .build();
    let stop = tokio_util::sync::CancellationToken::new();
    let s = stop.clone();
    let h = tokio::spawn(async move { w.run(async move { s.cancelled().await }).await });
    wait_for("the default reap and retain jobs to complete", Duration::from_secs(60), || async {
        let n = count(
            &db.pool,
            "SELECT count(DISTINCT kind) FROM skiplock.jobs WHERE kind IN ('reap', 'retain') AND state = 'completed'",
        )
        .await;
        (n == 2).then_some(())
    })
    .await;
    stop.cancel();
    h.await.unwrap().unwrap();

    let db = TestDb::new().await;
    let w = skiplock::worker::Worker::builder(db.pool.clone())
        .settings(fast_settings())
        .without_maintenance()
        .register(skiplock::worker::builtin::Noop)
        .build();
    let stop = tokio_util::sync::CancellationToken::new();
    let s = stop.clone();
    let h = tokio::spawn(async move { w.run(async move { s.cancelled().await }).await });
    wait_for(
        "the worker to register",
        Duration::from_secs(60),
        || async {
            let kinds: Option<Vec<String>> =
                sqlx::query_scalar("SELECT kinds FROM skiplock.workers LIMIT 1")
                    .fetch_optional(&db.pool)
                    .await
                    .unwrap();
            kinds.map(|k| assert_eq!(k, vec!["noop".to_string()]))
        },
    )
    .await;
    stop.cancel();
    h.await.unwrap().unwrap();
}

/// A worker row with a fresh heartbeat that handles `kinds` in every queue: for the reaper,
/// a job such a worker could claim is not held back for want of a worker. Calling it again
/// refreshes the heartbeat (a real worker sends one every few seconds).
async fn live_worker(pool: &PgPool, id: &str, kinds: &[&str]) {
    let kinds: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
    sqlx::query(
        "INSERT INTO skiplock.workers (id, host, pid, kinds) VALUES ($1, 'elsewhere', 1, $2) \
         ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), kinds = EXCLUDED.kinds",
    )
    .bind(id)
    .bind(kinds)
    .execute(pool)
    .await
    .unwrap();
}

/// A job of `kind` in `queue` (with `limit_key`) in `state`, due (and, when running, started)
/// `ago` ago.
async fn old_job(
    pool: &PgPool,
    kind: &str,
    queue: &str,
    key: Option<&str>,
    state: &str,
    ago: &str,
) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, queue, limit_key, args, state, attempt, scheduled_at, created_at, attempted_at) \
         VALUES ($1, $2, $3, '{\"important\": \"invoice 42\"}', $4::text::skiplock.job_state, \
                 CASE WHEN $4 = 'running' THEN 1 ELSE 0 END, now() - $5::interval, now() - $5::interval, \
                 CASE WHEN $4 = 'running' THEN now() - $5::interval END) RETURNING id",
    )
    .bind(kind)
    .bind(queue)
    .bind(key)
    .bind(state)
    .bind(ago)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A job's state, or `None` when its row is gone.
async fn state_or_gone(pool: &PgPool, id: i64) -> Option<String> {
    sqlx::query_scalar("SELECT state::text FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
        .unwrap()
}

/// Held jobs (a paused queue's backlog, jobs a key rate, a key's or the queue's concurrency
/// holds back, a kind no live worker handles) are waiting, not abandoned: a reaper past its
/// uptime guard with a one-second maximum age leaves them alone. What it does take (a due job
/// nothing holds, a job running for days) is discarded with the reason in `errors`, its row
/// and args kept (docs/maintenance.md, "The reaper").
#[tokio::test]
async fn the_reaper_keeps_held_jobs_and_discards_abandoned_ones_with_the_reason() {
    let db = TestDb::new().await;
    let p = &db.pool;
    live_worker(p, "elsewhere", &["noop"]).await;
    sqlx::raw_sql(
        "SELECT skiplock.pause_queue('held');
         SELECT skiplock.set_key_limit('slow', NULL, 1, '30 days');
         SELECT skiplock.set_key_limit('per-key', 1);
         SELECT skiplock.set_queue_limit('capped', 1);
         INSERT INTO skiplock.key_rates (queue, limit_key, tat) VALUES ('slow', 'tenantA', now() + interval '29 days');",
    )
    .execute(p)
    .await
    .unwrap();
    let paused = old_job(p, "noop", "held", None, "available", "3 days").await;
    let rate_held = old_job(p, "noop", "slow", Some("tenantA"), "available", "3 days").await;
    let key_held = old_job(p, "noop", "per-key", Some("k"), "available", "3 days").await;
    let queue_held = old_job(p, "noop", "capped", None, "available", "3 days").await;
    let unhandled = old_job(p, "nobody-handles", "default", None, "available", "3 days").await;
    // A live worker serving only queue `mine` handles `picky` there, not elsewhere.
    let picky_worker = "INSERT INTO skiplock.workers (id, host, pid, kinds, queues) \
                        VALUES ('picky', 'h', 2, '{picky}', '{mine}') \
                        ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()";
    sqlx::query(picky_worker).execute(p).await.unwrap();
    let unserved = old_job(p, "picky", "default", None, "available", "3 days").await;
    let served = old_job(p, "picky", "mine", None, "available", "3 days").await;
    // Abandoned: due for days with nothing holding it back (a job without a limit_key is
    // never held by a key's limits), and an attempt running for days.
    let abandoned = old_job(p, "noop", "default", None, "available", "3 days").await;
    let unkeyed = old_job(p, "noop", "slow", None, "available", "3 days").await;
    let stuck = old_job(p, "noop", "default", None, "running", "3 days").await;

    let r = reaper(p, Duration::from_secs(1));
    wait_for(
        "the reaper to be up a second",
        Duration::from_secs(30),
        || async { (r.uptime() >= Duration::from_secs(1)).then_some(()) },
    )
    .await;
    live_worker(p, "elsewhere", &["noop"]).await;
    sqlx::query(picky_worker).execute(p).await.unwrap();
    let n = r.reap_once().await.unwrap();
    for (what, id) in [
        ("a paused queue's job", paused),
        ("a job held by its key's rate", rate_held),
        ("a job held by its key's concurrency", key_held),
        ("a job held by the queue's concurrency", queue_held),
        ("a job of a kind no live worker handles", unhandled),
        (
            "a job of a kind no live worker handles in its queue",
            unserved,
        ),
    ] {
        assert_eq!(
            state_or_gone(p, id).await.as_deref(),
            Some("available"),
            "the reaper took {what}"
        );
    }
    assert_eq!(n, 4);
    for id in [abandoned, unkeyed, served, stuck] {
        let (state, finalized, error, args): (String, bool, String, serde_json::Value) =
            sqlx::query_as(
                "SELECT state::text, finalized_at IS NOT NULL, errors -> -1 ->> 'error', args \
                 FROM skiplock.jobs WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(p)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("job {id} was deleted, not discarded"));
        assert_eq!((state.as_str(), finalized), ("discarded", true), "job {id}");
        assert!(
            error.starts_with("reaped: ") && error.contains("1s"),
            "job {id}: {error}"
        );
        assert_eq!(args, json!({"important": "invoice 42"}));
    }
    let running: String =
        sqlx::query_scalar("SELECT errors -> -1 ->> 'error' FROM skiplock.jobs WHERE id = $1")
            .bind(stuck)
            .fetch_one(p)
            .await
            .unwrap();
    assert!(running.contains("running"), "{running}");
    // Discarded rows are retention's now; the next run finds nothing.
    live_worker(p, "elsewhere", &["noop"]).await;
    assert_eq!(r.reap_once().await.unwrap(), 0);
}

/// A finished job that another enqueuer's job depends on is kept from retention for that
/// dependent one more retention period at most: a dependent due in 9999 with
/// on_dependency_failure 'run' (or waiting for a job that never ends, or in a queue nobody
/// serves) kept another tenant's job, and its args, for good. A dependency whose edge has not
/// been settled yet is kept whatever its age (deleting it would leave its dependent waiting);
/// a dependent within the extra period still keeps its dependency.
#[tokio::test]
async fn a_dependent_keeps_a_finished_job_from_retention_one_more_period_at_most() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let job = |args: serde_json::Value| {
        let p = p.clone();
        async move {
            skiplock::store::jobs::enqueue(&p, &NewJob::new("noop", args))
                .await
                .unwrap()
                .id
        }
    };
    let finish = |id: i64, ago: &'static str| {
        let p = p.clone();
        async move {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE skiplock.jobs SET state = 'completed', finalized_at = now() - interval '{ago}' WHERE id = $1"
            )))
            .bind(id)
            .execute(&p)
            .await
            .unwrap();
        }
    };
    let pinned = job(json!({"ssn": "078-05-1120"})).await;
    let recent = job(json!({})).await;
    let unsettled = job(json!({})).await;
    finish(pinned, "3 days").await;
    finish(recent, "36 hours").await;
    finish(unsettled, "3 days").await;
    // Another enqueuer's jobs, due in 9999, that run whatever their dependencies did.
    let mut dependents = Vec::new();
    for dep in [pinned, recent] {
        dependents.push(
            skiplock::store::jobs::enqueue(
                p,
                &NewJob::new("ghost", json!({}))
                    .queue("attq")
                    .run_at("9999-01-01T00:00:00Z".parse().unwrap())
                    .depends_on([dep])
                    .on_dependency_failure(skiplock::queue::OnDependencyFailure::Run),
            )
            .await
            .unwrap()
            .id,
        );
    }
    // An edge to a finished job not settled yet (its settling is to come).
    let waiting = job(json!({})).await;
    sqlx::query("UPDATE skiplock.jobs SET state = 'waiting' WHERE id = $1;")
        .bind(waiting)
        .execute(p)
        .await
        .unwrap();
    sqlx::query("INSERT INTO skiplock.job_dependencies (job_id, depends_on) VALUES ($1, $2)")
        .bind(waiting)
        .bind(unsettled)
        .execute(p)
        .await
        .unwrap();
    sqlx::query("INSERT INTO skiplock.job_waits (job_id, pending) VALUES ($1, 1)")
        .bind(waiting)
        .execute(p)
        .await
        .unwrap();

    let settings = RetentionSettings {
        completed: Duration::from_secs(24 * 3600),
        ..RetentionSettings::default()
    };
    assert_eq!(run_retention(p, &settings).await.unwrap(), 1);
    assert!(!exists(p, pinned).await, "held by a dependent for good");
    assert!(exists(p, recent).await, "within the extra period");
    assert!(exists(p, unsettled).await, "its edge is not settled yet");
    for d in dependents {
        assert!(exists(p, d).await, "the dependent itself stays");
    }
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM skiplock.job_dependencies WHERE depends_on NOT IN (SELECT id FROM skiplock.jobs)"
        )
        .await,
        0,
        "the deleted job's edges go with it"
    );
}
