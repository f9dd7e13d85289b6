//! skiplock behind a real PgBouncer (docs/operations.md, "Behind PgBouncer"), started by the
//! test on a free port in front of the test server: in session mode, with no
//! `ignore_startup_parameters` at all, a worker connects and drains its jobs with its session
//! limits in place; a refusal that waiting cannot cure (a start-up parameter PgBouncer does not
//! accept, a database it does not know) ends the worker's start at once with PgBouncer's words,
//! instead of being waited out as an outage.
//!
//! Needs the `pgbouncer` binary (Debian's package); without it the tests say so and pass,
//! unless `SKIPLOCK_TEST_REQUIRE_PGBOUNCER` is set (CI sets it and installs the package).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use skiplock::config::{PoolMode, QueueSettings};
use skiplock::worker::Worker;
use skiplock_devtools::bench::pgbouncer::{self as bouncer, Bouncer};
use support::*;

/// The pgbouncer binary, or None (the test is skipped) when it is not installed and not
/// required.
fn pgbouncer_bin() -> Option<PathBuf> {
    let found = bouncer::find();
    if found.is_none() {
        assert!(
            std::env::var_os("SKIPLOCK_TEST_REQUIRE_PGBOUNCER").is_none(),
            "pgbouncer is not installed (apt-get install pgbouncer) and SKIPLOCK_TEST_REQUIRE_PGBOUNCER is set"
        );
        eprintln!("pgbouncer is not installed: skipping (apt-get install pgbouncer)");
    }
    found
}

/// A PgBouncer in `pool_mode` in front of the test server serving `databases` (a `[databases]`
/// section's lines) to the test logins, with `server_connections` per database and user.
async fn start(bin: &Path, pool_mode: &str, databases: &str, server_connections: u32) -> Bouncer {
    let config = bouncer::Config {
        pool_mode,
        databases,
        users: &["postgres", "root"],
        server_connections,
    };
    Bouncer::start(bin, &config).await.expect("start pgbouncer")
}

/// [`start`] with room for every test client.
async fn start_roomy(bin: &Path, pool_mode: &str, databases: &str) -> Bouncer {
    start(bin, pool_mode, databases, 40).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_behind_pgbouncer_in_session_mode_drains_its_jobs_with_its_session_limits() {
    let Some(bin) = pgbouncer_bin() else { return };
    let db = TestDb::new().await;
    let bouncer = start_roomy(&bin, "session", "* = host=127.0.0.1 port=5432").await;
    const N: usize = 2000;
    enqueue_noops(&db.pool, N).await;

    let settings = QueueSettings {
        statement_timeout: Duration::from_secs(45),
        lock_timeout: Duration::from_secs(7),
        ..fast_settings()
    };
    let url = bouncer.url(&db.url).unwrap();
    let pool = skiplock::db::handler_pool(&url, &settings).unwrap();
    // A session through PgBouncer carries the worker's limits.
    let (statement, lock): (String, String) = sqlx::query_as(
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')",
    )
    .fetch_one(&pool)
    .await
    .expect("a worker session through pgbouncer");
    assert_eq!((statement.as_str(), lock.as_str()), ("45s", "7s"));

    let worker = start_builtin(&pool, settings);
    wait_all_finished(&db.pool, Duration::from_secs(300)).await;
    worker.stop().await.unwrap();
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE state = 'completed' AND attempt = 1"
        )
        .await,
        N as i64
    );
}

/// `skiplock worker --exit-when-idle` on `url` with `env`: its exit status and its log.
fn cli_worker(url: &str, env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let out = Command::new(bin())
        .args(["worker", "--exit-when-idle", "--queues", "default=50"])
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run skiplock worker");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Behind PgBouncer in transaction mode (`SKIPLOCK_POOL_MODE=transaction`; docs/operations.md,
/// "Behind PgBouncer") with fewer server connections than a worker has clients, so that one
/// client's transactions land on different server connections and each server connection
/// serves several clients in turn: 10,000 jobs enqueued through it and drained through it by a
/// `skiplock worker` process, each completed at its first attempt, with not one warning or
/// error in the worker's log; the limits are set in every transaction; `migrate` refuses the
/// mode; without SKIPLOCK_LISTEN_URL the worker says once that it polls; one-shot commands and
/// the console's pool work through it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_behind_pgbouncer_in_transaction_mode_drains_10000_jobs() {
    let Some(bin) = pgbouncer_bin() else { return };
    let db = TestDb::new().await;
    let bouncer = start(&bin, "transaction", "* = host=127.0.0.1 port=5432", 3).await;
    let url = bouncer.url(&db.url).unwrap();
    let settings = QueueSettings {
        pool_mode: PoolMode::Transaction,
        statement_timeout: Duration::from_secs(45),
        lock_timeout: Duration::from_secs(7),
        ..fast_settings()
    };
    let pool = skiplock::db::handler_pool(&url, &settings).unwrap();
    assert_eq!(pool.mode(), PoolMode::Transaction);
    // No session setting survives a transaction there: each carries the worker's limits.
    let (statement, lock): (String, String) = sqlx::query_as(
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')",
    )
    .fetch_one(&pool)
    .await
    .expect("a statement through pgbouncer in transaction mode");
    assert_eq!((statement.as_str(), lock.as_str()), ("45s", "7s"));
    // Migrations take a session's advisory lock: refused by name, nothing done.
    let e = skiplock::migrate(&pool).await.unwrap_err().to_string();
    assert!(e.contains("migrate needs a session"), "{e}");

    const N: usize = 10_000;
    for _ in 0..10 {
        enqueue_noops(&pool, N / 10).await;
    }
    let (status, log) = cli_worker(
        &url,
        &[
            ("SKIPLOCK_POOL_MODE", "transaction"),
            ("SKIPLOCK_LISTEN_URL", &db.url),
        ],
    );
    assert!(status.success(), "{status}\n{log}");
    let complaints: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .filter(|l| !l.contains("packet root"))
        .collect();
    assert!(complaints.is_empty(), "{complaints:#?}");
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE kind = 'noop' AND state = 'completed' \
             AND attempt = 1 AND errors = '[]'"
        )
        .await,
        N as i64
    );

    // No LISTEN URL: one line says the worker polls.
    enqueue_noops(&pool, 10).await;
    let (status, log) = cli_worker(&url, &[("SKIPLOCK_POOL_MODE", "transaction")]);
    assert!(status.success(), "{status}\n{log}");
    assert_eq!(
        log.matches("no SKIPLOCK_LISTEN_URL: no LISTEN").count(),
        1,
        "{log}"
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE kind = 'noop' AND state = 'completed'"
        )
        .await,
        N as i64 + 10
    );
    // One-shot commands through it, and the console's pool.
    let through = |args: &[&str]| {
        let out = cmd(&url)
            .env("SKIPLOCK_POOL_MODE", "transaction")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run skiplock");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (
            out.status.code().unwrap_or(-1),
            text(&out.stdout),
            text(&out.stderr),
        )
    };
    let (code, out, err) = through(&["enqueue", "noop", "--in", "1h", "--unique-key", "pgb"]);
    assert_eq!(code, 0, "{err}");
    let id = out.trim().to_string();
    let (code, out, err) = through(&["jobs", "--state", "available", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("\"id\": {id}")), "{out}");
    let (code, _, err) = through(&["reschedule", &id, "--priority", "2"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = through(&["cancel", "--key", "pgb"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = through(&["migrate"]);
    assert_eq!(code, 1);
    assert!(err.contains("migrate needs a session"), "{err}");
    let console = skiplock_console::db::console::connect(
        &url,
        2,
        Duration::from_secs(30),
        PoolMode::Transaction,
    )
    .await
    .unwrap();
    assert!(
        !skiplock_console::store::web::queue_counts(&console, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let job = skiplock_console::store::web::job(&console, id.parse().unwrap())
        .await
        .unwrap()
        .expect("the job, read through the console's pool");
    assert_eq!(job.state, skiplock::queue::JobState::Cancelled);

    // PgBouncer saw no statement go astray (a prepared statement missing or taken).
    let log = bouncer.log();
    assert!(!log.contains("prepared statement"), "{log}");
}

/// Starts a worker on `url` (no connect timeout: an outage would be waited out forever) and
/// returns its start's error, which must come at once.
async fn start_error(url: &str) -> String {
    let pool = skiplock::db::handler_pool(url, &fast_settings()).unwrap();
    let worker = Worker::builder(pool)
        .settings(fast_settings())
        .without_maintenance()
        .build();
    match tokio::time::timeout(Duration::from_secs(60), worker.start()).await {
        Err(_) => panic!("the worker's start was still waiting after 60 s: retried as an outage"),
        Ok(Ok(_)) => panic!("the worker started"),
        Ok(Err(e)) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_that_waiting_cannot_cure_end_a_workers_start_with_pgbouncers_words() {
    let Some(bin) = pgbouncer_bin() else { return };
    let db = TestDb::new().await;
    // A start-up parameter of the user's own URL that PgBouncer does not accept.
    let bouncer = start_roomy(&bin, "session", "* = host=127.0.0.1 port=5432").await;
    let with_options = format!(
        "{}?options=-c%20search_path%3Dskiplock",
        bouncer.url(&db.url).unwrap()
    );
    let e = start_error(&with_options).await;
    assert!(e.contains("unsupported startup parameter"), "{e}");
    assert!(e.contains("cannot connect to the database at"), "{e}");

    // A database PgBouncer does not serve.
    let narrow = start_roomy(&bin, "session", "elsewhere = host=127.0.0.1 port=5432").await;
    let e = start_error(&narrow.url(&db.url).unwrap()).await;
    assert!(e.contains("no such database"), "{e}");
}

/// `db_url` with `first` (host:port) put before its own host in a multi-host URL
/// (docs/operations.md, "Several hosts in one URL").
fn hosts_url(first: &str, db_url: &str) -> String {
    let u = url::Url::parse(db_url).unwrap();
    format!(
        "postgres://{}@{first},{}:{}{}",
        u.username(),
        u.host_str().unwrap(),
        u.port().unwrap_or(5432),
        u.path()
    )
}

/// Whether a session of `pool` can write (the host it landed on is the test server's).
async fn writable(pool: &sqlx::PgPool) -> bool {
    let (ro,): (String,) = sqlx::query_as("SELECT current_setting('transaction_read_only')")
        .fetch_one(pool)
        .await
        .unwrap();
    ro == "off"
}

/// Waits until every job on `db` finished, and checks that `total` completed at their first
/// attempt (none lost, none rerun).
async fn drained(db: &TestDb, total: usize) {
    wait_all_finished(&db.pool, Duration::from_secs(300)).await;
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE state = 'completed' AND attempt = 1"
        )
        .await,
        total as i64
    );
}

/// A one-shot connection to `url` (whose first host is unusable) can write, and a worker on
/// it runs 100 more jobs, `total` so far, each once.
async fn lands_on_the_second_host(db: &TestDb, url: &str, total: usize) {
    let pool = skiplock::db::connect(url, 2).await.expect("connect");
    assert!(writable(&pool).await);
    enqueue_noops(&db.pool, 100).await;
    let worker = start_builtin(
        &skiplock::db::handler_pool(url, &fast_settings()).unwrap(),
        fast_settings(),
    );
    drained(db, total).await;
    worker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_host_url_skips_a_host_that_is_down_or_read_only() {
    let Some(bin) = pgbouncer_bin() else { return };
    let db = TestDb::new().await;

    // The first host refuses connections: one-shot commands and workers take the second.
    let down = hosts_url(&format!("127.0.0.1:{}", free_port()), &db.url);
    lands_on_the_second_host(&db, &down, 100).await;

    // The first host answers, but its sessions are read-only (as a standby's would be):
    // skipped for the second, by one-shot commands and workers alike.
    let read_only = start_roomy(
        &bin,
        "session",
        "* = host=127.0.0.1 port=5432 connect_query='SET default_transaction_read_only = on'",
    )
    .await;
    let ro_url = hosts_url(&format!("127.0.0.1:{}", read_only.port), &db.url);
    let single = skiplock::db::connect(&read_only.url(&db.url).unwrap(), 1)
        .await
        .expect("the read-only host alone");
    assert!(!writable(&single).await, "the first host is read-only");
    lands_on_the_second_host(&db, &ro_url, 200).await;

    // A target that cannot write is refused by name, never silently ignored.
    let standby = format!("{ro_url}?target_session_attrs=standby");
    let e = skiplock::db::connect(&standby, 1)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("target_session_attrs=standby"), "{e}");
}

/// A writable PgBouncer in front of the test server, and a URL naming it first and the test
/// server second.
async fn first_of_two_hosts(bin: &Path, db: &TestDb) -> (Bouncer, String) {
    let first = start_roomy(bin, "session", "* = host=127.0.0.1 port=5432").await;
    let url = hosts_url(&format!("127.0.0.1:{}", first.port), &db.url);
    (first, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_follows_a_multi_host_url_to_the_next_host_when_its_host_goes_away() {
    let Some(bin) = pgbouncer_bin() else { return };
    let db = TestDb::new().await;
    let (first, url) = first_of_two_hosts(&bin, &db).await;
    enqueue_noops(&db.pool, 300).await;
    let worker = start_builtin(
        &skiplock::db::handler_pool(&url, &fast_settings()).unwrap(),
        fast_settings(),
    );
    drained(&db, 300).await;
    assert!(
        first.log().contains("login attempt"),
        "the worker began on the first host:\n{}",
        first.log()
    );

    // The first host dies under the running worker (its connections break, new ones are
    // refused): the worker carries on against the second, losing and rerunning nothing.
    drop(first);
    enqueue_noops(&db.pool, 300).await;
    drained(&db, 600).await;
    worker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consoles_pool_follows_a_multi_host_url_after_a_page_met_the_outage() {
    let Some(bin) = pgbouncer_bin() else { return };
    let db = TestDb::new().await;
    let (first, url) = first_of_two_hosts(&bin, &db).await;
    let pool =
        skiplock_console::db::console::connect(&url, 2, Duration::from_secs(30), PoolMode::Session)
            .await
            .expect("the console's pool");
    assert!(writable(&pool).await);
    assert!(
        first.log().contains("login attempt"),
        "began on the first host"
    );

    // The first host dies; a page's statement fails and says so (as PageError does for
    // every page); the pool then finds the second host.
    drop(first);
    let failed = sqlx::query("SELECT 1").execute(&pool).await;
    assert!(failed.is_err(), "the first host is gone");
    skiplock::db::hosts::console_failed();
    wait_for(
        "the console's pool on the second host",
        Duration::from_secs(60),
        || async {
            sqlx::query("SELECT 1")
                .execute(&pool)
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
}

/// A worker left in session mode (no `SKIPLOCK_POOL_MODE`) behind PgBouncer in transaction
/// mode: its connections' named statements meet on the one server connection, the server
/// answers `prepared statement "sqlx_s_N" already exists` (or `does not exist`), and the worker
/// exits 1 with one line naming the setting to change (docs/operations.md, "Behind PgBouncer").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_mode_worker_behind_a_transaction_pooler_exits_naming_skiplock_pool_mode() {
    let Some(bin) = pgbouncer_bin() else { return };
    let db = TestDb::new().await;
    enqueue_noops(&db.pool, 20).await;
    let bouncer = start(&bin, "transaction", "* = host=127.0.0.1 port=5432", 1).await;
    let url = bouncer.url(&db.url).unwrap();
    let (status, log) = cli_worker(&url, &[]);
    assert_eq!(status.code(), Some(1), "{log}");
    let named: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("SKIPLOCK_POOL_MODE=transaction"))
        .collect();
    assert_eq!(named.len(), 1, "{log}");
    assert!(
        named[0].contains("invalid setting SKIPLOCK_POOL_MODE"),
        "{log}"
    );
    let raw = log.lines().filter(|l| l.contains("sqlx_s_")).count();
    assert_eq!(
        raw, 1,
        "only the one line quotes the server's answer:\n{log}"
    );
}

/// `skiplock doctor` through PgBouncer in transaction mode, left in session mode (no
/// `SKIPLOCK_POOL_MODE`): one finding, `pool_mode`, naming the setting, exit 2; with
/// `SKIPLOCK_POOL_MODE=transaction`, or through PgBouncer in session mode, none
/// (docs/operations.md, "Keeping the database healthy").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_skiplock_pool_mode_behind_a_transaction_pooler() {
    let Some(bin) = pgbouncer_bin() else { return };
    let db = TestDb::new().await;
    let doctor = |url: &str, env: &[(&str, &str)]| -> (Option<i32>, serde_json::Value) {
        let out = Command::new(self::bin())
            .args(["doctor", "--json"])
            .env("DATABASE_URL", url)
            .env_remove("SKIPLOCK_POOL_MODE")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("run skiplock doctor");
        let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "no JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code(), report)
    };
    let pool_mode = |report: &serde_json::Value| -> Vec<serde_json::Value> {
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "pool_mode")
            .cloned()
            .collect()
    };

    let bouncer = start(&bin, "transaction", "* = host=127.0.0.1 port=5432", 1).await;
    let url = bouncer.url(&db.url).unwrap();
    let (code, report) = doctor(&url, &[]);
    let found = pool_mode(&report);
    assert_eq!(found.len(), 1, "{report:#}");
    assert_eq!(found[0]["severity"], "action");
    assert!(
        found[0]["summary"]
            .as_str()
            .unwrap()
            .contains("SKIPLOCK_POOL_MODE"),
        "{report:#}"
    );
    assert!(
        found[0]["fix"]
            .as_str()
            .unwrap()
            .contains("SKIPLOCK_POOL_MODE=transaction")
    );
    assert_eq!(code, Some(2));
    let (_, report) = doctor(&url, &[("SKIPLOCK_POOL_MODE", "transaction")]);
    assert!(pool_mode(&report).is_empty(), "{report:#}");
    drop(bouncer);

    let bouncer = start(&bin, "session", "* = host=127.0.0.1 port=5432", 4).await;
    let (_, report) = doctor(&bouncer.url(&db.url).unwrap(), &[]);
    assert!(pool_mode(&report).is_empty(), "{report:#}");
}
