//! The fault suite (docs/reliability.md), scaled for CI: worker processes SIGKILLed at random moments,
//! a Postgres restart mid-run (on a private cluster, never the shared one), a slow database
//! with an exhausted pool, and a check that the chaos verdict itself can fail. The large
//! run is `scripts/chaos`, with the same driver (`skiplock::chaos`).

mod support;
use skiplock_devtools::chaos;

use std::collections::BTreeMap;
use std::time::Duration;

use chaos::{ChaosConfig, Report, cluster::PrivateCluster};
use chrono::Utc;
use serde::Deserialize;
use serde_json::json;
use skiplock::worker::{Handler, HandlerResult, JobContext, Outcome};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use support::*;

/// Creates database `name` on the server of `admin_url` (a cluster the test started).
async fn create_database(admin_url: &str, name: &str) {
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(admin_url)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
}

#[tokio::test]
async fn sigkilled_worker_processes_lose_nothing() {
    let db = TestDb::new().await;
    let mut cfg = ChaosConfig::new(1500, bin());
    cfg.workers = 3;
    cfg.kills = 6;
    // Enough connections that a heartbeat never waits behind the handlers for one, and a
    // rescue window far longer than any stall of a loaded machine: only a killed process's
    // jobs are ever rescued, so every duplicate must be explained by a kill.
    cfg.concurrency = 4;
    cfg.max_connections = 8;
    cfg.rescue_after = Duration::from_secs(10);
    cfg.deadline = Duration::from_secs(180);
    let r = chaos::run(&cfg, &db.url, None).await.expect("chaos run");
    eprintln!("{}", r.summary_line());
    assert!(r.ok(), "{}", r.summary_line());
    assert_eq!((r.jobs, r.completed, r.lost), (1500, 1500, 0));
    assert_eq!(r.kills, 6);
    assert!(r.restarts >= 6);
    assert!(r.executions >= 1500);
}

/// The end of a run stops every worker with SIGTERM, and each must exit 0. A worker started
/// again just before (after a kill near the end of the run) may not have set up its SIGTERM
/// handler yet on a loaded machine, and would die of the signal: the driver waits until it is
/// registered. Here the SIGTERM follows the start at once.
#[tokio::test]
async fn a_worker_stopped_right_after_its_start_exits_cleanly() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("worker.log");
    let cfg = ChaosConfig::new(1, bin());
    let mut child = chaos::spawn_worker(&cfg, &db.url, &log).unwrap();
    let unexpected = chaos::stop_workers(&db.pool, [&mut child]).await;
    assert_eq!(
        unexpected,
        0,
        "the worker did not exit 0: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

#[tokio::test]
async fn a_postgres_restart_mid_run_loses_nothing_and_no_worker_exits() {
    let cluster = tokio::task::spawn_blocking(PrivateCluster::start)
        .await
        .unwrap()
        .expect("start a private Postgres cluster (initdb + pg_ctl)");
    create_database(&cluster.url("postgres"), "faults").await;
    let mut cfg = ChaosConfig::new(1000, bin());
    cfg.workers = 2;
    cfg.kills = 2;
    cfg.concurrency = 8;
    cfg.max_connections = 3;
    cfg.pg_restart = true;
    cfg.deadline = Duration::from_secs(180);
    let r = chaos::run(&cfg, &cluster.url("faults"), Some(&cluster))
        .await
        .expect("chaos run");
    eprintln!("{}", r.summary_line());
    assert!(r.ok(), "{}", r.summary_line());
    assert_eq!(r.pg_restarts, 1);
    assert_eq!(r.unexpected_exits, 0, "a worker exited on the outage");
    assert!(r.outage_warnings > 0, "the workers did not log the outage");
    assert!(r.listener_reconnects > 0, "no listener noticed the restart");
    assert_eq!((r.completed, r.lost), (1000, 0));
}

#[tokio::test]
async fn the_verdict_catches_lost_jobs_and_unexplained_duplicates() {
    let db = TestDb::new().await;
    chaos::install(&db.pool).await.unwrap();
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT unnest(skiplock.enqueue_many('chaos_record', ARRAY['{}'::jsonb, '{}', '{}', '{}']))",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    // Jobs 0-2 completed; job 3 never ran (lost).
    sqlx::query(
        "UPDATE skiplock.jobs SET state = 'completed', attempt = 2, finalized_at = now() WHERE id = ANY($1)",
    )
    .bind(&ids[..3])
    .execute(&db.pool)
    .await
    .unwrap();
    // Job 0 ran once. Job 1 ran twice, first by pid 4242. Job 2 ran twice, first by pid 4343
    // whose handler reported an error for that attempt.
    for (job, attempt, pid) in [
        (ids[0], 1, 1),
        (ids[1], 1, 4242),
        (ids[1], 2, 2),
        (ids[2], 1, 4343),
        (ids[2], 2, 2),
    ] {
        sqlx::query("INSERT INTO skiplock_chaos.executions (job_id, attempt, worker_id, pid) VALUES ($1, $2, 'w', $3)")
            .bind(job)
            .bind(attempt)
            .bind(pid)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    sqlx::query(
        "UPDATE skiplock.jobs SET errors = '[{\"attempt\": 1, \"error\": \"connection reset\"}]' WHERE id = $1",
    )
    .bind(ids[2])
    .execute(&db.pool)
    .await
    .unwrap();

    let mut r = Report::default();
    chaos::judge(&db.pool, &mut r).await.unwrap();
    assert_eq!((r.jobs, r.completed, r.lost), (4, 3, 1));
    assert_eq!((r.duplicates, r.retried_after_error), (2, 1));
    assert_eq!(r.unexplained, 1);
    assert_eq!(r.unexplained_jobs, vec![ids[1]]);
    assert!(!r.ok());

    // A kill of pid 4242 long after job 1 ran again explains nothing.
    chaos::record_kills(
        &db.pool,
        &[(4242, Utc::now() + chrono::Duration::minutes(10))],
    )
    .await
    .unwrap();
    let mut r = Report::default();
    chaos::judge(&db.pool, &mut r).await.unwrap();
    assert_eq!(r.unexplained_jobs, vec![ids[1]]);

    // A kill of pid 4242 after its execution and before the re-run explains job 1;
    // completing job 3 (with an execution) leaves nothing lost.
    let rerun_at: chrono::DateTime<Utc> = sqlx::query_scalar(
        "SELECT at FROM skiplock_chaos.executions WHERE job_id = $1 AND attempt = 2",
    )
    .bind(ids[1])
    .fetch_one(&db.pool)
    .await
    .unwrap();
    chaos::record_kills(
        &db.pool,
        &[(4242, rerun_at - chrono::Duration::microseconds(1))],
    )
    .await
    .unwrap();
    sqlx::query("UPDATE skiplock.jobs SET state = 'completed' WHERE id = $1")
        .bind(ids[3])
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO skiplock_chaos.executions (job_id, attempt, worker_id, pid) VALUES ($1, 1, 'w', 3)")
        .bind(ids[3])
        .execute(&db.pool)
        .await
        .unwrap();
    let mut r = Report::default();
    chaos::judge(&db.pool, &mut r).await.unwrap();
    assert_eq!((r.lost, r.unexplained), (0, 0));
    assert!(r.ok(), "{}", r.summary_line());

    // A rescue is not an explanation: job 2's error, reworded as a rescue, no longer is.
    sqlx::query(
        "UPDATE skiplock.jobs SET errors = '[{\"attempt\": 1, \"error\": \"rescued: worker w sent no heartbeat\"}]' WHERE id = $1",
    )
    .bind(ids[2])
    .execute(&db.pool)
    .await
    .unwrap();
    let mut r = Report::default();
    chaos::judge(&db.pool, &mut r).await.unwrap();
    assert_eq!(r.unexplained_jobs, vec![ids[2]]);

    // And the driver refuses a database that already holds jobs.
    let e = chaos::run(&ChaosConfig::new(10, bin()), &db.url, None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("without jobs"), "{e}");
}

/// Holds a pooled connection in `pg_sleep`: longer than the statement timeout on the first
/// attempt, briefly afterwards.
struct SlowQuery;

#[derive(Deserialize)]
struct SlowArgs {
    first_ms: u64,
    then_ms: u64,
}

impl Handler for SlowQuery {
    type Args = SlowArgs;
    fn kind(&self) -> &'static str {
        "slow_query"
    }
    async fn run(&self, ctx: JobContext, a: SlowArgs) -> HandlerResult {
        let ms = if ctx.attempt == 1 {
            a.first_ms
        } else {
            a.then_ms
        };
        sqlx::query("SELECT pg_sleep($1::float8 / 1000)")
            .bind(ms as f64)
            .execute(&ctx.pool)
            .await?;
        Ok(Outcome::Complete)
    }
}

#[tokio::test]
async fn a_slow_database_and_an_exhausted_pool_give_clear_errors_and_retries_not_a_deadlock() {
    let db = TestDb::new().await;
    for _ in 0..16 {
        skiplock::store::jobs::enqueue(
            &db.pool,
            &skiplock::queue::NewJob::new("slow_query", json!({"first_ms": 2000, "then_ms": 50})),
        )
        .await
        .unwrap();
    }
    // Two connections for eight concurrent handlers, the claims, acks and heartbeats; a
    // statement_timeout below the first attempts' sleep; a short acquire timeout.
    let opts: PgConnectOptions = db.url.parse().unwrap();
    let opts = opts.options([("statement_timeout", "300")]);
    let pool: skiplock::Pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_millis(500))
        .connect_with(opts)
        .await
        .unwrap()
        .into();
    let mut settings = fast_settings();
    settings.queues = Some(BTreeMap::from([("default".to_string(), 8)]));
    // Heartbeats wait for a connection too: keep a starved heartbeat from looking like a
    // dead worker, so every error below is the handler's own.
    settings.rescue_after = Duration::from_secs(60);
    let w = start_worker(&pool, settings, |b| b.register(SlowQuery));
    wait_all_finished(&db.pool, Duration::from_secs(60)).await;
    tokio::time::timeout(Duration::from_secs(30), w.stop())
        .await
        .expect("the worker stops: no deadlock")
        .expect("clean stop");
    assert_eq!(count_state(&db.pool, "completed").await, 16);

    let errors: Vec<String> =
        sqlx::query_scalar("SELECT e->>'error' FROM skiplock.jobs, jsonb_array_elements(errors) e")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    // Every first attempt failed, with the cause named: the timeout, or no free connection.
    assert!(errors.len() >= 16, "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("statement timeout")),
        "{errors:?}"
    );
    for e in &errors {
        assert!(
            e.contains("statement timeout") || e.contains("pool timed out"),
            "unclear error: {e}"
        );
    }
    pool.close().await;
}

/// Whether the HA cluster's parts are installed (`scripts/ha`); without them the failover
/// test says so and passes, unless `SKIPLOCK_TEST_REQUIRE_HA` is set (CI sets it and installs
/// them).
fn ha_installed() -> bool {
    let found = ["/usr/bin/patroni", "/usr/bin/etcd", "/usr/sbin/haproxy"]
        .iter()
        .all(|p| std::path::Path::new(p).exists());
    if !found {
        assert!(
            std::env::var_os("SKIPLOCK_TEST_REQUIRE_HA").is_none(),
            "patroni, etcd or haproxy is missing and SKIPLOCK_TEST_REQUIRE_HA is set"
        );
        eprintln!("patroni, etcd or haproxy is not installed: skipping (see scripts/ha)");
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patroni_switchover_mid_run_loses_nothing_and_reruns_no_job() {
    use chaos::ha::{Failover, HaCluster};
    if !ha_installed() {
        return;
    }
    let ha = tokio::task::spawn_blocking(HaCluster::start)
        .await
        .unwrap()
        .expect("start the HA cluster (scripts/ha up)");
    create_database(&ha.url("postgres").unwrap(), "failover").await;
    // Two workers, one through HAProxy and one through a URL naming both nodes, and a
    // producer enqueueing while Patroni switches the primary over.
    let url = ha.url("failover").unwrap();
    let mut cfg = ChaosConfig::new(1500, bin());
    cfg.workers = 2;
    cfg.kills = 0;
    cfg.concurrency = 4;
    cfg.max_connections = 8;
    cfg.failovers = vec![Failover::Switchover];
    cfg.failover_every = Duration::from_secs(3);
    cfg.worker_urls = vec![url.clone(), ha.hosts_url("failover").unwrap()];
    cfg.deadline = Duration::from_secs(300);
    let r = chaos::run(&cfg, &url, Some(&ha)).await;
    tokio::task::spawn_blocking(move || drop(ha)).await.unwrap();
    let r = r.expect("chaos run");
    eprintln!("{}", r.summary_line());
    // No kill: every second execution would be unexplained (ok() fails), unless the
    // handler itself failed in the switchover and was retried.
    assert!(r.ok(), "{}", r.summary_line());
    assert_eq!(
        (r.jobs, r.completed, r.lost, r.failovers),
        (1500, 1500, 0, 1)
    );
    assert_eq!(r.unexpected_exits, 0);
}
