//! Database outages (docs/reliability.md), each on a private Postgres cluster the test starts, stops
//! and starts again (never the shared server): a worker started while Postgres is down
//! waits for it; an outage three times longer than the rescue window reruns no live job; a
//! worker SIGKILLed during the outage has its jobs rescued one window after the return; a
//! read-only server is refused until it is writable again.

mod support;
use skiplock_devtools::chaos;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chaos::cluster::PrivateCluster;
use serde_json::json;
use skiplock::db::outage::Backoff;
use skiplock::db::session::CONNECT_BACKOFF;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use support::*;

/// A private cluster with a migrated database `outage`, and a small pool on it.
async fn cluster() -> (PrivateCluster, skiplock::Pool) {
    let cluster = tokio::task::spawn_blocking(PrivateCluster::start)
        .await
        .unwrap()
        .expect("start a private Postgres cluster (initdb + pg_ctl)");
    let admin = admin_pool(&cluster).await;
    sqlx::query("CREATE DATABASE outage")
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let pool: skiplock::Pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(60))
        .connect(&cluster.url("outage"))
        .await
        .unwrap()
        .into();
    skiplock::store::schema::migrate_parts(&pool, &skiplock_workflows::schemas())
        .await
        .expect("migrate");
    (cluster, pool)
}

async fn admin_pool(cluster: &PrivateCluster) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .connect(&cluster.url("postgres"))
        .await
        .unwrap()
}

// pg_ctl blocks the test's runtime for a moment; the workers are other processes.
fn stop(cluster: &PrivateCluster) {
    cluster.stop_server().expect("stop the private cluster");
}

fn start(cluster: &PrivateCluster) {
    cluster
        .start_server()
        .expect("start the private cluster again");
}

/// A `skiplock` process whose stderr lines are collected as they come.
struct Proc {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    name: String,
}

impl Proc {
    fn spawn(name: &str, url: &str, args: &[&str], envs: &[(&str, &str)]) -> Proc {
        let mut c = cmd(url);
        c.args(args)
            .env("RUST_LOG", "info,sqlx=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("spawn skiplock");
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
                l.lock().unwrap().push(line);
            }
        });
        Proc {
            child,
            log,
            name: name.to_string(),
        }
    }

    fn count(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    async fn wait_log(&self, what: &str, needle: &str, n: usize) {
        wait_for(what, Duration::from_secs(90), || async {
            (self.count(needle) >= n).then_some(())
        })
        .await
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGTERM, then the exit code.
    fn stop(mut self) -> Option<i32> {
        sigterm(&self.child);
        let code = self.child.wait().unwrap().code();
        std::mem::forget(self);
        code
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- {} log ---", self.name);
            for l in self.lines() {
                eprintln!("{l}");
            }
        }
    }
}

/// Warning lines skiplock itself logged (one per failed attempt of some task).
fn skiplock_warnings(p: &Proc) -> usize {
    p.lines()
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("skiplock::"))
        .count()
}

/// A server that cannot write (its disk full, SQLSTATE 53100) leaves the heartbeats of live
/// workers unwritten just as an outage does, so it must stop the rescuer's availability clock:
/// otherwise, once space returns, a rescuer can run before the live workers' heartbeats land
/// and their jobs run twice (`scripts/chaos --partitions` found it, docs/reliability.md).
/// The error is the one the server gives when a file cannot grow, raised by the statement.
#[tokio::test]
async fn a_full_disk_stops_the_rescuers_clock_like_an_outage() {
    use skiplock::db::outage::{Availability, may_rescue};
    let db = TestDb::new().await;
    let e = sqlx::query(
        "DO $$ BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' \
         USING ERRCODE = 'disk_full'; END $$",
    )
    .execute(&db.pool)
    .await
    .unwrap_err();
    let e = skiplock::error::Error::Database(e);
    let clock = Availability::new();
    clock.success();
    assert!(
        clock.observe(&e),
        "a full disk is not taken for an outage: {e}"
    );
    assert_eq!((clock.failures(), clock.up_for()), (1, Duration::ZERO));
    assert!(!may_rescue(clock.up_for(), Duration::from_millis(1)));
}

#[tokio::test]
async fn a_worker_started_while_postgres_is_down_waits_then_runs_a_job_enqueued_later() {
    let (cluster, pool) = cluster().await;
    pool.close().await;
    let url = cluster.url("outage");
    stop(&cluster);

    // One-shot commands keep their prompt, clear error.
    let (code, _, err) = run_cmd(&url, &["jobs"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot connect to the database at"), "{err}");
    // A bounded wait gives up with one clear line naming the setting.
    let mut bounded = Proc::spawn(
        "bounded",
        &url,
        &["worker"],
        &[("SKIPLOCK_CONNECT_TIMEOUT", "1s")],
    );
    let status = bounded.child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    // The reader thread may trail the exit by a moment.
    wait_for("the error line", Duration::from_secs(30), || async {
        bounded
            .lines()
            .iter()
            .any(|l| l.starts_with("error:"))
            .then_some(())
    })
    .await;
    let last = bounded.lines().last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("error: database unavailable: cannot connect to the database at postgres://postgres@127.0.0.1:")
            && last.contains("SKIPLOCK_CONNECT_TIMEOUT=1s"),
        "{last}"
    );
    drop(bounded);

    // By default the worker waits as long as it takes, one line per attempt.
    let spawned = Instant::now();
    let mut w = Proc::spawn(
        "worker",
        &url,
        &["worker", "--queues", "default=2"],
        &[("SKIPLOCK_POLL_INTERVAL", "100ms")],
    );
    w.wait_log("three connection attempts", "waiting for the database", 3)
        .await;
    assert!(w.alive(), "the worker must wait, not exit");
    start(&cluster);
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    let id =
        skiplock::store::jobs::enqueue(&pool, &skiplock::queue::NewJob::new("noop", json!({})))
            .await
            .unwrap()
            .id;
    let row = wait_job(&pool, id, "the job enqueued after the start", |r| {
        r.state.as_str() == "completed"
    })
    .await;
    assert_eq!(row.attempt, 1);
    // No spinning: never more attempts than the capped backoff allows in the time spent.
    let attempts = w.count("waiting for the database") as u64;
    let bound =
        Backoff::new(CONNECT_BACKOFF.0, CONNECT_BACKOFF.1).max_attempts_within(spawned.elapsed());
    assert!(attempts <= bound, "{attempts} attempts, at most {bound}");
    assert_eq!(w.count("database reachable; starting"), 1);
    assert_eq!(w.stop(), Some(0));
    pool.close().await;
}

/// Enqueues `n` `chaos_record` jobs that each record their execution, then work `ms`.
async fn long_jobs(pool: &skiplock::Pool, n: i64, ms: u64) -> Vec<i64> {
    chaos::install(pool).await.unwrap();
    let args: Vec<serde_json::Value> = (0..n).map(|i| json!({"n": i, "ms": ms})).collect();
    sqlx::query_scalar("SELECT unnest(skiplock.enqueue_many('chaos_record', $1::jsonb[]))")
        .bind(args)
        .fetch_all(pool)
        .await
        .unwrap()
}

async fn executions(pool: &PgPool) -> i64 {
    count(pool, "SELECT count(*) FROM skiplock_chaos.executions").await
}

/// A job's id, state, attempt, the pids that ran it, and whether it was rescued late enough.
type JobRun = (i64, String, i32, Vec<i32>, Option<bool>);

const RESCUE_AFTER: Duration = Duration::from_secs(6);

fn chaos_worker(name: &str, url: &str, concurrency: usize) -> Proc {
    Proc::spawn(
        name,
        url,
        &["chaos-worker"],
        &[
            ("SKIPLOCK_QUEUES", &format!("default={concurrency}")),
            ("SKIPLOCK_RESCUE_AFTER", "6s"),
            ("SKIPLOCK_POLL_INTERVAL", "200ms"),
            ("SKIPLOCK_SHUTDOWN_GRACE", "60s"),
            // Each worker holds exactly its concurrency's worth of jobs, so two workers of 10
            // split 20 jobs evenly (claim-ahead would let the first take them all); the
            // buffered jobs' own outage and kill guarantees are crates/skiplock-cli/tests/worker.rs's.
            ("SKIPLOCK_CLAIM_AHEAD", "0"),
        ],
    )
}

#[tokio::test]
async fn an_outage_three_rescue_windows_long_reruns_no_live_job() {
    let (cluster, pool) = cluster().await;
    let url = cluster.url("outage");
    let ids = long_jobs(&pool, 20, 25_000).await;
    let w = chaos_worker("worker", &url, 20);
    wait_for("all 20 jobs running", Duration::from_secs(90), || async {
        (executions(&pool).await == 20).then_some(())
    })
    .await;

    stop(&cluster);
    let down = Instant::now();
    tokio::time::sleep(RESCUE_AFTER * 3).await; // the outage itself
    start(&cluster);
    let outage = down.elapsed();

    wait_all_finished(&pool, Duration::from_secs(120)).await;
    let rows: Vec<(i64, String, i32, serde_json::Value)> = sqlx::query_as(
        "SELECT id, state::text, attempt, errors FROM skiplock.jobs WHERE id = ANY($1) ORDER BY id",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await
    .unwrap();
    for (id, state, attempt, errors) in &rows {
        assert_eq!(
            (state.as_str(), *attempt, errors),
            ("completed", 1, &json!([])),
            "job {id}"
        );
    }
    assert_eq!(rows.len(), 20);
    assert_eq!(executions(&pool).await, 20, "a live job ran twice");
    // The outage was seen, the rescuer held back, and no task spun: each task's attempts
    // stay within its capped backoff (the fastest: 50 ms doubling up to 1.5 s), five tasks.
    let warnings = skiplock_warnings(&w) as u64;
    assert!(warnings > 0, "the worker did not notice the outage");
    assert!(w.count("rescuing nothing until") >= 1);
    let per_task = Backoff::new(Duration::from_millis(50), Duration::from_millis(1500))
        .max_attempts_within(outage + Duration::from_secs(10));
    assert!(
        warnings <= 5 * per_task,
        "{warnings} warnings in a {outage:?} outage (at most {})",
        5 * per_task
    );
    assert_eq!(w.stop(), Some(0));
    pool.close().await;
}

#[tokio::test]
async fn a_worker_killed_during_an_outage_has_its_jobs_rescued_one_window_after_the_return() {
    let (cluster, pool) = cluster().await;
    let url = cluster.url("outage");
    long_jobs(&pool, 20, 25_000).await;
    let a = chaos_worker("a", &url, 10);
    let b = chaos_worker("b", &url, 10);
    wait_for(
        "10 jobs running in each worker",
        Duration::from_secs(90),
        || async {
            let per_pid: Vec<i64> =
                sqlx::query_scalar("SELECT count(*) FROM skiplock_chaos.executions GROUP BY pid")
                    .fetch_all(&pool)
                    .await
                    .unwrap();
            (per_pid == vec![10, 10]).then_some(())
        },
    )
    .await;
    let (a_pid, b_pid) = (a.pid(), b.pid());

    stop(&cluster);
    sigkill(&a.child);
    drop(a);
    tokio::time::sleep(RESCUE_AFTER * 3).await; // the outage itself
    start(&cluster);

    wait_all_finished(&pool, Duration::from_secs(240)).await;
    // Per job: its state, attempts, the pids that ran it, and whether it was rescued no
    // sooner than one window after the server came back (on the database's clock).
    let rows: Vec<JobRun> = sqlx::query_as(
        "SELECT j.id, j.state::text, j.attempt,
                (SELECT array_agg(e.pid ORDER BY e.attempt) FROM skiplock_chaos.executions e
                  WHERE e.job_id = j.id),
                (SELECT (x->>'at')::timestamptz >= pg_postmaster_start_time() + interval '6 seconds'
                   FROM jsonb_array_elements(j.errors) x WHERE x->>'error' LIKE 'rescued:%' LIMIT 1)
         FROM skiplock.jobs j ORDER BY j.id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 20);
    let (mut of_a, mut of_b) = (0, 0);
    for (id, state, attempt, pids, rescued_late) in rows {
        assert_eq!(state, "completed", "job {id}");
        if pids[0] == a_pid {
            of_a += 1;
            assert_eq!((attempt, pids), (2, vec![a_pid, b_pid]), "job {id}");
            assert_eq!(
                rescued_late,
                Some(true),
                "job {id} rescued within the window"
            );
        } else {
            of_b += 1;
            assert_eq!((attempt, pids), (1, vec![b_pid]), "job {id} ran twice");
            assert_eq!(rescued_late, None, "job {id}");
        }
    }
    assert_eq!((of_a, of_b), (10, 10));
    assert_eq!(b.stop(), Some(0));
    pool.close().await;
}

#[tokio::test]
async fn a_read_only_server_is_refused_until_it_is_writable() {
    let (cluster, pool) = cluster().await;
    let url = cluster.url("outage");
    let admin = admin_pool(&cluster).await;
    let first =
        skiplock::store::jobs::enqueue(&pool, &skiplock::queue::NewJob::new("noop", json!({})))
            .await
            .unwrap()
            .id;
    sqlx::query("ALTER DATABASE outage SET default_transaction_read_only = on")
        .execute(&admin)
        .await
        .unwrap();

    // Start-up: every attempt lands on a read-only session and is refused.
    let w = Proc::spawn(
        "worker",
        &url,
        &["worker", "--queues", "default=2"],
        &[("SKIPLOCK_POLL_INTERVAL", "100ms")],
    );
    w.wait_log(
        "two refused attempts",
        "default_transaction_read_only is on",
        2,
    )
    .await;
    assert_eq!(w.count("worker started"), 0);
    sqlx::query("ALTER DATABASE outage RESET default_transaction_read_only")
        .execute(&admin)
        .await
        .unwrap();
    wait_job(&pool, first, "completed once writable", |r| {
        r.state.as_str() == "completed"
    })
    .await;

    // Running: the server turns read-only and the worker's sessions are cut; the new ones
    // are refused (never used) until it is writable again.
    sqlx::query("ALTER DATABASE outage SET default_transaction_read_only = on")
        .execute(&admin)
        .await
        .unwrap();
    let refused = w.count("refusing a read-only connection");
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = 'outage' AND application_name = 'skiplock'",
    )
    .execute(&admin)
    .await
    .unwrap();
    w.wait_log(
        "a refused reconnection",
        "refusing a read-only connection",
        refused + 1,
    )
    .await;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION READ WRITE")
        .execute(&mut *tx)
        .await
        .unwrap();
    let second: i64 = sqlx::query_scalar("SELECT skiplock.enqueue('noop')")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // The worker keeps trying (each new session refused) and cannot claim the job.
    let refused = w.count("refusing a read-only connection");
    w.wait_log(
        "two more refused connections",
        "refusing a read-only connection",
        refused + 2,
    )
    .await;
    let r = skiplock::store::jobs::get_job(&pool, second).await.unwrap();
    assert_eq!(r.state.as_str(), "available");
    sqlx::query("ALTER DATABASE outage RESET default_transaction_read_only")
        .execute(&admin)
        .await
        .unwrap();
    wait_job(&pool, second, "completed once writable again", |r| {
        r.state.as_str() == "completed"
    })
    .await;
    assert_eq!(w.stop(), Some(0));
    admin.close().await;
    pool.close().await;
}
