//! Hostile input, the database side (docs/security.md), each class written as the attack: non-finite times, locks
//! another login can hold, squatted and steered workflow keys, a forged audit trail, an
//! unbounded `enqueue_many`, and who owns the schema.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::json;
use skiplock::queue::{JobState, NewJob, OnConflict};
use skiplock_workflows::pack::{self, PackSettings};
use skiplock_workflows::packets::processor::Processor;
use skiplock_workflows::packets::transitions::PacketState;
use skiplock_workflows::packets::{self, PacketSettings};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use support::*;

const LONG: Duration = Duration::from_secs(120);

/// A LOGIN role on the test cluster (cluster-wide: unique name, dropped at the end), member
/// of `grant` if given.
struct LoginRole {
    name: String,
}

impl LoginRole {
    async fn new(db: &TestDb, grant: Option<&str>) -> LoginRole {
        let name = format!("skiplock_h_{:012x}", rand::random::<u64>() >> 16);
        let in_role = grant.map(|g| format!(" IN ROLE {g}")).unwrap_or_default();
        exec(&db.pool, &format!("CREATE ROLE {name} LOGIN{in_role}")).await;
        LoginRole { name }
    }

    /// `db`'s URL, logging in as this role (trust auth on the test server).
    fn url(&self, db_url: &str) -> String {
        let mut u = url::Url::parse(db_url).unwrap();
        u.set_username(&self.name).unwrap();
        u.set_password(None).unwrap();
        u.to_string()
    }

    async fn pool(&self, db: &TestDb) -> skiplock::Pool {
        PgPoolOptions::new()
            .max_connections(2)
            .connect(&self.url(&db.url))
            .await
            .expect("log in as the test role")
            .into()
    }
}

impl Drop for LoginRole {
    fn drop(&mut self) {
        admin_exec_blocking(format!("DROP ROLE IF EXISTS {}", self.name));
    }
}

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Runs `sql` expecting an error that contains `needle`; returns the message.
async fn refused(pool: &PgPool, sql: &str, needle: &str) -> String {
    let e = sqlx::query(AssertSqlSafe(sql.to_string()))
        .execute(pool)
        .await
        .expect_err(sql);
    let msg = e.to_string();
    assert!(
        msg.contains(needle),
        "{sql}: expected {needle:?}, got {msg}"
    );
    msg
}

fn sqlstate(e: &sqlx::Error) -> String {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.to_string())
        .unwrap_or_default()
}

/// A folder with a few small files, for the packet processor.
fn frames(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    for i in 0..3 {
        std::fs::write(d.join(format!("frame{i}.tif")), format!("frame {i}")).unwrap();
    }
    d
}

fn packet_settings(concurrency: usize) -> PacketSettings {
    PacketSettings {
        concurrency,
        processor: Processor::Manifest,
        timeout: Duration::from_secs(30),
        recovery: true,
        roots: skiplock_workflows::packets::roots::PacketRoots::new(&[packet_root()]),
    }
}

fn pack_settings(store: &Path) -> PackSettings {
    PackSettings {
        quiet: Duration::from_secs(1),
        max_wait: Duration::from_secs(60),
        store: store.to_str().unwrap().to_string(),
    }
}

async fn job_state(pool: &PgPool, id: i64) -> String {
    sqlx::query_scalar("SELECT state::text FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn wait_packet(pool: &skiplock::Pool, id: i64, want: PacketState) {
    wait_for(&format!("packet {id} to be {want}"), LONG, || async {
        (packets::get(pool, id).await.unwrap().state == want).then_some(())
    })
    .await
}

// ---------------------------------------------------------------------------------------
// 1. Times
// ---------------------------------------------------------------------------------------

/// The exact attacks of the issue (`run_at => '-infinity'` on queue fetch, a pack timer at
/// 'infinity') and every other entry point that takes a time: refused with a clear
/// `skiplock:` error, SQLSTATE 22023, from SQL, Rust and the CLI.
#[tokio::test]
async fn non_finite_and_absurd_times_are_refused_at_every_entry_point() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let range = "must be a finite time from 1970-01-01 to 9999-12-31 (UTC)";
    for (sql, what) in [
        // (Jobs in the workflows' queues go through skiplock._enqueue, the workflows' path:
        // skiplock.enqueue refuses those queues before it looks at the time.)
        (
            "SELECT skiplock._enqueue('noop', '{}', 'fetch', '-infinity', 0::smallint, 25, NULL, 'keep')",
            "run_at",
        ),
        (
            "SELECT skiplock._enqueue('timer-reset', '{\"host\": \"h\"}', 'pack', 'infinity', 0::smallint, 25, NULL, 'keep')",
            "run_at",
        ),
        (
            "SELECT skiplock.enqueue('noop', run_at => '10000-01-01 00:00:00+00')",
            "run_at",
        ),
        (
            "SELECT skiplock.enqueue('noop', run_at => '1969-12-31 23:59:59+00')",
            "run_at",
        ),
        (
            "SELECT skiplock.enqueue_many('noop', ARRAY['{}'::jsonb], run_at => 'infinity')",
            "run_at",
        ),
        (
            "SELECT skiplock.enqueue_periodic('p', 'infinity', now(), 'noop')",
            "period_start",
        ),
    ] {
        let e = sqlx::query(AssertSqlSafe(sql))
            .execute(p)
            .await
            .expect_err(sql);
        assert_eq!(sqlstate(&e), "22023", "{sql}: {e}");
        assert!(
            e.to_string().contains(&format!("skiplock: {what} {range}")),
            "{sql}: {e}"
        );
    }
    // The pack timer cannot be pushed out of range through its durations either.
    refused(
        p,
        "SELECT skiplock.pack_arm('h', interval '1000000 years', interval '1 hour')",
        "quiet and max_wait must be durations from 0s to 100 years",
    )
    .await;
    // (The fetch politeness slot of release 0.1.0 is gone: politeness is a key rate limit,
    // whose period set_key_limit bounds to 366 days.)
    refused(
        p,
        "SELECT skiplock.set_key_limit('fetch', NULL, 1, interval '100000 years')",
        "period must be more than 0 and at most 366 days",
    )
    .await;
    // `replace` on a pack timer with 'infinity' (the steering attack) is refused too.
    refused(
        p,
        "SELECT skiplock.enqueue('do-the-packing', '{\"host\": \"h\"}', 'pack', 'infinity', \
         unique_key => 'pack:h', on_conflict => 'replace')",
        "skiplock:",
    )
    .await;
    assert_eq!(count(p, "SELECT count(*) FROM skiplock.jobs").await, 0);

    // Rust: refused before the round trip, with the same words.
    for t in [DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MAX_UTC] {
        let e = skiplock::store::jobs::enqueue(p, &NewJob::new("noop", json!({})).run_at(t))
            .await
            .unwrap_err();
        assert!(matches!(e, skiplock::Error::Invalid(_)), "{e}");
        assert!(e.to_string().contains(range), "{e}");
        let e = skiplock::store::jobs::enqueue_many(
            p,
            skiplock::store::jobs::ManyJobs {
                limit_key: None,
                kind: "noop",
                args: &[json!({})],
                queue: "default",
                run_at: Some(t),
                priority: 0,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains(range), "{e}");
    }
    // The CLI: one line, exit 1.
    let (code, _, err) = run_cmd(
        &db.url,
        &["enqueue", "noop", "--run-at", "0001-01-01T00:00:00Z"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(range) && err.lines().count() == 1, "{err}");
    assert_eq!(count(p, "SELECT count(*) FROM skiplock.jobs").await, 0);
    // The edges themselves are accepted.
    for t in [skiplock::time::earliest(), skiplock::time::latest()] {
        skiplock::store::jobs::enqueue(p, &NewJob::new("noop", json!({})).run_at(t))
            .await
            .unwrap();
    }
}

/// Rust (src/time/mod.rs) and SQL (skiplock._time_ok) state the same range, to the microsecond.
#[tokio::test]
async fn the_rust_and_sql_time_ranges_agree_at_the_edges() {
    let db = TestDb::new().await;
    let us = chrono::Duration::microseconds(1);
    let e = skiplock::time::earliest();
    let l = skiplock::time::latest();
    for t in [e - us, e, e + us, l - us, l, l + us] {
        let sql: bool = sqlx::query_scalar("SELECT skiplock._time_ok($1)")
            .bind(t)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(sql, skiplock::time::in_range(t), "{t}");
    }
    for (lit, ok) in [("infinity", false), ("-infinity", false), ("epoch", true)] {
        let sql: bool = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT skiplock._time_ok('{lit}'::timestamptz)"
        )))
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(sql, ok, "{lit}");
    }
}

/// Every timestamptz column of every skiplock table has a CHECK that calls skiplock._time_ok
/// (so a column added later without one fails here), and a superuser's plain INSERT of a
/// non-finite time is refused.
#[tokio::test]
async fn no_row_can_hold_a_time_outside_the_range_not_even_a_superusers() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let unguarded: Vec<String> = sqlx::query_scalar(
        "SELECT c.table_name || '.' || c.column_name
         FROM information_schema.columns c
         JOIN information_schema.tables t USING (table_schema, table_name)
         WHERE c.table_schema = 'skiplock' AND t.table_type = 'BASE TABLE'
           AND c.data_type = 'timestamp with time zone'
           -- sqlx's migration ledgers (one per part, src/store/schema.rs): only the
           -- migrating role writes them, with now()
           AND c.table_name NOT LIKE 'migrations\\_%'
           AND NOT EXISTS (
               SELECT 1 FROM pg_constraint k
               WHERE k.conrelid = format('skiplock.%I', c.table_name)::regclass AND k.contype = 'c'
                 AND pg_get_constraintdef(k.oid) LIKE format('%%_time_ok(%s)%%', c.column_name))
         ORDER BY 1",
    )
    .fetch_all(p)
    .await
    .unwrap();
    assert!(
        unguarded.is_empty(),
        "columns without a range CHECK: {unguarded:?}"
    );
    let n: i64 = count(
        p,
        "SELECT count(*) FROM information_schema.columns
         WHERE table_schema = 'skiplock' AND data_type = 'timestamp with time zone'",
    )
    .await;
    assert!(n >= 20, "{n} timestamptz columns found");

    for sql in [
        "INSERT INTO skiplock.jobs (kind, queue, scheduled_at) VALUES ('noop', 'fetch', '-infinity')",
        "INSERT INTO skiplock.jobs (kind, scheduled_at) VALUES ('timer-reset', 'infinity')",
        "INSERT INTO skiplock.jobs (kind, finalized_at) VALUES ('noop', '0044-03-15 BC')",
        "INSERT INTO skiplock.hosts (host, busy_until) VALUES ('h', '-infinity')",
        "INSERT INTO skiplock.pages (url, host, path, next_fetch) VALUES ('http://h/', 'h', '/', 'infinity')",
        "INSERT INTO skiplock.periodic_runs (name, period_start) VALUES ('p', 'infinity')",
    ] {
        refused(p, sql, "violates check constraint").await;
    }
    // hosts no longer default to '-infinity'.
    exec(p, "INSERT INTO skiplock.hosts (host) VALUES ('h')").await;
    let free: bool = sqlx::query_scalar(
        "SELECT next_slot_at = 'epoch' AND busy_until = 'epoch' FROM skiplock.hosts WHERE host = 'h'",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert!(free);
}

/// Nothing the database can hold panics a reader: with the CHECK dropped (as a superuser
/// could), the issue's rows — a noop at '-infinity' in queue fetch, a pack timer at
/// 'infinity' — are claimed, run, listed and shown. On the old code the producer of queue
/// fetch panicked (`NaiveDateTime + TimeDelta overflowed`) and timer-reset failed forever.
#[tokio::test]
async fn a_reader_never_panics_on_an_infinite_time() {
    let db = TestDb::new().await;
    let p = &db.pool;
    exec(
        p,
        "ALTER TABLE skiplock.jobs DROP CONSTRAINT IF EXISTS jobs_scheduled_at_range",
    )
    .await;
    let noop: i64 = sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, queue, scheduled_at) VALUES ('noop', 'fetch', '-infinity') RETURNING id",
    )
    .fetch_one(p)
    .await
    .unwrap();
    exec(
        p,
        "INSERT INTO skiplock.jobs (kind, args, queue, scheduled_at, unique_key)
         VALUES ('do-the-packing', '{\"host\": \"inf.test\"}', 'pack', 'infinity', 'pack:inf.test')",
    )
    .await;
    let reset: i64 = sqlx::query_scalar("SELECT skiplock.timer_reset('inf.test')")
        .fetch_one(p)
        .await
        .unwrap();

    // Library readers first.
    let listed = skiplock::store::jobs::list_jobs(
        p,
        &skiplock::store::jobs::JobFilter {
            limit: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        listed
            .iter()
            .any(|j| j.scheduled_at == skiplock::time::latest())
    );
    let row = skiplock::store::jobs::get_job(p, noop).await.unwrap();
    assert_eq!(row.scheduled_at, skiplock::time::earliest());
    skiplock::store::jobs::queue_stats(p).await.unwrap();

    let store = tempfile::tempdir().unwrap();
    let mut qs = fast_settings();
    qs.queues = Some(BTreeMap::from([
        ("fetch".to_string(), 2),
        ("pack".to_string(), 2),
    ]));
    let worker = start_worker(p, qs, |mut b| {
        skiplock::worker::builtin::register(b.registry_mut());
        pack::register_with(b, pack_settings(store.path())).unwrap()
    });
    wait_job(p, noop, "the -infinity noop to complete", |j| {
        j.state.as_str() == "completed"
    })
    .await;
    let r = wait_job(p, reset, "timer-reset to complete", |j| {
        j.state.as_str() == "completed"
    })
    .await;
    assert_eq!(
        r.result.unwrap()["fires_at"],
        json!("9999-12-31T23:59:59.999999Z")
    );
    worker.stop().await.unwrap();

    for args in [
        vec!["stats"],
        vec!["jobs"],
        vec!["jobs", "--json"],
        vec!["pack", "--status"],
    ] {
        let (code, out, err) = run_cmd(&db.url, &args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!out.is_empty(), "{args:?}");
    }
    let (code, out, err) = run_cmd(&db.url, &["job", &noop.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1970-01-01"), "{out}");
}

// ---------------------------------------------------------------------------------------
// 2. No blocking lock another login can hold
// ---------------------------------------------------------------------------------------

/// A login with no skiplock role holds the advisory locks the old packet and pack code
/// waited on (and tries every lock it could take) for 30 s. Meanwhile noop jobs on another
/// queue keep completing, heartbeats keep landing, packets are processed and a host is
/// packed. On the old code the packet jobs blocked inside the database, used up the pool and
/// starved every other queue (`pool timed out`), and the pack snoozed forever.
#[tokio::test]
async fn another_login_holding_every_lock_it_can_take_stalls_nothing() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let outsider = LoginRole::new(&db, None).await;
    let mut them = PgConnection::connect(&outsider.url(&db.url)).await.unwrap();
    let their_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut them)
        .await
        .unwrap();
    for sql in [
        "SELECT pg_advisory_lock(hashtext('skiplock.packets.processing'))",
        "SELECT pg_advisory_lock(hashtext('skiplock.pack'), hashtext('stall.test'))",
        "SELECT pg_advisory_lock(hashtext('skiplock.api'))",
    ] {
        sqlx::query(sql).execute(&mut them).await.unwrap();
    }
    // Everything else it might lock is out of its reach.
    for sql in [
        "LOCK TABLE skiplock.jobs IN ACCESS EXCLUSIVE MODE",
        "SELECT * FROM skiplock.locks FOR UPDATE",
        "SELECT * FROM skiplock.packets FOR UPDATE",
        "SELECT * FROM skiplock.jobs FOR UPDATE",
    ] {
        let mut tx = them.begin().await.unwrap();
        let e = sqlx::query(sql).execute(&mut *tx).await.expect_err(sql);
        assert!(e.to_string().contains("permission denied"), "{sql}: {e}");
        tx.rollback().await.unwrap();
    }

    let dir = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    exec(
        p,
        "INSERT INTO skiplock.pages (url, host, path, title, body, last_fetched)
         VALUES ('http://stall.test/', 'stall.test', '/', 'T', 'packed despite the outsider', now())",
    )
    .await;
    // The worker's own small pool: 4 connections, as in production.
    let wpool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(LONG)
        .connect(&db.url)
        .await
        .unwrap();
    let mut qs = fast_settings();
    // Heartbeats every 5 s (a quarter of the window), so 30 s must show several; a 20 s window
    // is still far longer than any stall of a loaded machine.
    qs.rescue_after = Duration::from_secs(20);
    qs.queues = Some(BTreeMap::from([
        ("packets".to_string(), 6),
        ("pack".to_string(), 2),
        ("other".to_string(), 2),
    ]));
    let store_path = store.path().to_path_buf();
    let worker = start_worker(&wpool, qs, move |mut b| {
        skiplock::worker::builtin::register(b.registry_mut());
        let b = packets::register_with(b, packet_settings(2));
        pack::register_with(b, pack_settings(&store_path)).unwrap()
    });
    let mut ids = Vec::new();
    for i in 0..6 {
        let src = frames(dir.path(), &format!("p{i}"));
        ids.push(
            packets::submit(p, src.to_str().unwrap(), None, None)
                .await
                .unwrap(),
        );
    }
    sqlx::query("SELECT skiplock.pack_now('stall.test')")
        .execute(p)
        .await
        .unwrap();
    let sleeper = skiplock::store::jobs::enqueue(
        p,
        &NewJob::new("sleep", json!({"ms": 600_000})).queue("other"),
    )
    .await
    .unwrap()
    .id;
    wait_job(p, sleeper, "the sleep job to start", |j| {
        j.state.as_str() == "running"
    })
    .await;

    // At least 30 s of the outsider holding its locks: noop jobs on another queue keep
    // completing, and the sleeping job's heartbeat keeps moving (a beat every 15 s; on a
    // loaded machine the third may land after the 30 s, so the window grows up to 120 s
    // until it has been seen).
    let held = Instant::now();
    let mut beats = std::collections::BTreeSet::new();
    let mut rounds = 0;
    while held.elapsed() < Duration::from_secs(30)
        || ((beats.len() < 3 || rounds < 10) && held.elapsed() < Duration::from_secs(120))
    {
        let id = skiplock::store::jobs::enqueue(p, &NewJob::new("noop", json!({})).queue("other"))
            .await
            .unwrap()
            .id;
        wait_job(p, id, "a noop on queue other to complete", |j| {
            j.state.as_str() == "completed"
        })
        .await;
        rounds += 1;
        let hb: Option<DateTime<Utc>> =
            sqlx::query_scalar("SELECT heartbeat_at FROM skiplock.jobs WHERE id = $1")
                .bind(sleeper)
                .fetch_one(p)
                .await
                .unwrap();
        beats.extend(hb);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(rounds >= 10, "{rounds} noop rounds in {:?}", held.elapsed());
    assert!(
        beats.len() >= 3,
        "the running job's heartbeat moved only {} times in {:?}",
        beats.len(),
        held.elapsed()
    );
    // Still holding: every packet is processed and the host is packed.
    for id in &ids {
        wait_packet(p, *id, PacketState::ReadyForReview).await;
    }
    wait_for("the host to be packed", LONG, || async {
        let n: i64 = count(
            p,
            "SELECT count(*) FROM skiplock.packs WHERE host = 'stall.test'",
        )
        .await;
        (n == 1).then_some(())
    })
    .await;
    let sleeping = skiplock::store::jobs::get_job(p, sleeper).await.unwrap();
    assert_eq!(
        (sleeping.state.as_str(), sleeping.attempt),
        ("running", 1),
        "never rescued: {:?}",
        sleeping.errors
    );
    // The outsider held its locks all along (it was never asked to let go).
    let holding: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND granted",
    )
    .bind(their_pid)
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(holding, 3);
    them.close().await.unwrap();
    worker.stop().await.unwrap();
    wpool.close().await;
}

// ---------------------------------------------------------------------------------------
// 3/4. Reserved workflow keys: no squatting, no steering
// ---------------------------------------------------------------------------------------

/// An enqueuer cannot create or replace a key in a workflow's namespace (`fetch:`, `pack:`,
/// `packet:`), from SQL, Rust or the CLI; the attacks of the issue (rewriting a pending
/// fetch to another URL at 'infinity', pushing a pack timer away, squatting `packet:N`)
/// leave the workflows' jobs as they were.
#[tokio::test]
async fn workflow_keys_are_reserved_so_no_caller_can_squat_or_steer_them() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let fetch: i64 = sqlx::query_scalar("SELECT skiplock.request_fetch('http://a.example/')")
        .fetch_one(p)
        .await
        .unwrap();
    let timer: i64 = sqlx::query_scalar(
        "SELECT skiplock.pack_arm('b.example', interval '1 hour', interval '2 hours')",
    )
    .fetch_one(p)
    .await
    .unwrap();
    let before: Vec<(i64, serde_json::Value, DateTime<Utc>)> =
        sqlx::query_as("SELECT id, args, scheduled_at FROM skiplock.jobs ORDER BY id")
            .fetch_all(p)
            .await
            .unwrap();

    let app = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let ap = app.pool(&db).await;
    let next_packet: i64 = count(p, "SELECT coalesce(max(id), 0) + 1 FROM skiplock.packets").await;
    for (kind, queue, key, prefix) in [
        (
            "fetch",
            "fetch",
            "fetch:http://a.example/".to_string(),
            "fetch:",
        ),
        (
            "do-the-packing",
            "pack",
            "pack:b.example".to_string(),
            "pack:",
        ),
        (
            "process-packet",
            "packets",
            format!("packet:{next_packet}"),
            "packet:",
        ),
        ("evil", "default", "packet:999999".to_string(), "packet:"),
    ] {
        for mode in ["replace", "keep"] {
            let sql = format!(
                "SELECT skiplock.enqueue('{kind}', '{{\"url\": \"http://evil.example/\", \"host\": \"evil\"}}', \
                 '{queue}', now() + interval '100 years', 0::smallint, 1, '{key}', '{mode}')"
            );
            let e = sqlx::query(AssertSqlSafe(sql.clone()))
                .execute(&ap)
                .await
                .expect_err(&sql);
            assert_eq!(sqlstate(&e), "22023", "{sql}: {e}");
            assert!(
                e.to_string()
                    .contains(&format!("unique_key prefix '{prefix}' is reserved")),
                "{sql}: {e}"
            );
        }
    }
    let after: Vec<(i64, serde_json::Value, DateTime<Utc>)> =
        sqlx::query_as("SELECT id, args, scheduled_at FROM skiplock.jobs ORDER BY id")
            .fetch_all(p)
            .await
            .unwrap();
    assert_eq!(before, after, "the workflows' jobs are untouched");
    assert!(after.iter().any(|r| r.0 == fetch) && after.iter().any(|r| r.0 == timer));

    // Rust and the CLI say the same.
    let e = skiplock::store::jobs::enqueue(
        p,
        &NewJob::new("fetch", json!({})).unique_key("fetch:http://a.example/", OnConflict::Replace),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("prefix 'fetch:' is reserved"), "{e}");
    let (code, _, err) = run_cmd(
        &db.url,
        &[
            "enqueue",
            "noop",
            "--unique-key",
            "pack:b.example",
            "--replace",
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("prefix 'pack:' is reserved"), "{err}");
    // The workflows' internal enqueue is out of the enqueuer's reach.
    refused(
        &ap,
        "SELECT skiplock._enqueue('fetch', '{}', 'fetch', now(), 0::smallint, 1, 'fetch:http://a.example/', 'replace')",
        "permission denied",
    )
    .await;
    // Other keys are shared per kind and queue, as before.
    let k: i64 = sqlx::query_scalar("SELECT skiplock.enqueue('report', unique_key => 'fetchy:1')")
        .fetch_one(&ap)
        .await
        .unwrap();
    assert!(k > 0);
    // And the workflows still use their keys from the enqueuer's entry points.
    let again: i64 = sqlx::query_scalar("SELECT skiplock.request_fetch('http://a.example/', true)")
        .fetch_one(&ap)
        .await
        .unwrap();
    assert_eq!(again, fetch);
    let id: i64 = sqlx::query_scalar("SELECT skiplock.submit_packet('/somewhere')")
        .fetch_one(&ap)
        .await
        .unwrap();
    assert_eq!(id, next_packet);
    ap.close().await;
}

/// A squatter on `packet:N` (left by an older release, or put there by a trusted role) and a
/// packet whose recovery fails neither stop a worker's start-up nor block submissions: the
/// squatter (of another kind and queue) blocks nothing, the poisoned packet is skipped (and logged), the
/// others are recovered and processed. On the old code start-up recovery failed and the
/// worker exited.
#[tokio::test]
async fn a_squatted_key_or_a_poisoned_packet_never_stops_start_up_or_submissions() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let dir = tempfile::tempdir().unwrap();
    let mut ids = Vec::new();
    for i in 0..3 {
        let src = frames(dir.path(), &format!("s{i}"));
        ids.push(
            packets::submit(p, src.to_str().unwrap(), None, None)
                .await
                .unwrap(),
        );
    }
    // Their jobs are gone (as if a worker died and the jobs were cancelled): recovery's work.
    exec(
        p,
        "UPDATE skiplock.jobs SET state = 'cancelled', finalized_at = now() WHERE kind = 'process-packet'",
    )
    .await;
    // Squatters, written straight into the table (as a superuser or an older release could):
    // on the first packet's key and on the key of the next packet to be submitted.
    let next = ids[2] + 1;
    for key in [format!("packet:{}", ids[0]), format!("packet:{next}")] {
        exec(
            p,
            &format!(
                "INSERT INTO skiplock.jobs (kind, args, queue, scheduled_at, unique_key)
                 VALUES ('evil', '{{}}', 'elsewhere', now() + interval '50 years', '{key}')"
            ),
        )
        .await;
    }
    // The second packet is poisoned: any change to its row fails.
    exec(
        p,
        &format!(
            "CREATE FUNCTION public.poison() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'poisoned packet %', NEW.id; END $$;
             CREATE TRIGGER poison BEFORE UPDATE ON skiplock.packets
                 FOR EACH ROW WHEN (NEW.id = {}) EXECUTE FUNCTION public.poison();",
            ids[1]
        ),
    )
    .await;

    let worker = start_worker(p, fast_settings(), |b| {
        packets::register_with(b, packet_settings(1))
    });
    wait_packet(p, ids[0], PacketState::ReadyForReview).await;
    wait_packet(p, ids[2], PacketState::ReadyForReview).await;
    assert!(!worker.handle.is_finished(), "the worker is still running");
    assert_eq!(
        packets::get(p, ids[1]).await.unwrap().state,
        PacketState::Queued
    );
    // Keys are namespaced by kind and queue (migrations/history/0013_enqueue_namespaces.sql): the
    // squatter holds a key of its own kind and queue, which blocks nothing, so it is left as
    // it is (earlier versions had to cancel it).
    let squatter: (String, serde_json::Value) = sqlx::query_as(
        "SELECT state::text, errors FROM skiplock.jobs WHERE kind = 'evil' AND unique_key = $1",
    )
    .bind(format!("packet:{}", ids[0]))
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(squatter, ("available".to_string(), json!([])));
    // A submission whose key is squatted goes through, and is processed.
    let src = frames(dir.path(), "next");
    let id = packets::submit(p, src.to_str().unwrap(), None, None)
        .await
        .unwrap();
    assert_eq!(id, next);
    wait_packet(p, id, PacketState::ReadyForReview).await;
    worker.stop().await.unwrap();
    exec(p, "DROP TRIGGER poison ON skiplock.packets").await;
}

// ---------------------------------------------------------------------------------------
// 9. Audit
// ---------------------------------------------------------------------------------------

/// The history cannot be forged: an enqueuer's submit is recorded as its login whatever
/// `actor` it passes; a worker-role member cannot make recovery's move by setting the old
/// GUC (nor through the recovery function when recovery's conditions do not hold); the
/// history is append-only for every role but the owner, even one granted UPDATE/DELETE.
#[tokio::test]
async fn the_audit_trail_cannot_be_forged() {
    let db = TestDb::new().await;
    let p = &db.pool;

    let app = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let ap = app.pool(&db).await;
    let pid: i64 =
        sqlx::query_scalar("SELECT skiplock.submit_packet('/frames/a', NULL, 'the-admin')")
            .fetch_one(&ap)
            .await
            .unwrap();
    let (actor, note): (String, Option<String>) = sqlx::query_as(
        "SELECT actor, note FROM skiplock.packet_events WHERE packet_id = $1 ORDER BY id LIMIT 1",
    )
    .bind(pid)
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(actor, app.name);
    assert!(note.unwrap_or_default().contains("actor given: the-admin"));
    ap.close().await;

    // The packet is processing for a running job.
    let job: i64 = sqlx::query_scalar("SELECT job_id FROM skiplock.packets WHERE id = $1")
        .bind(pid)
        .fetch_one(p)
        .await
        .unwrap();
    exec(
        p,
        &format!("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = {job}"),
    )
    .await;
    let started: String =
        sqlx::query_scalar("SELECT outcome::text FROM skiplock._packet_start($1, $2, 5, 'w')")
            .bind(pid)
            .bind(job)
            .fetch_one(p)
            .await
            .unwrap();
    assert_eq!(started, "started");

    let w = LoginRole::new(&db, Some("skiplock_worker")).await;
    let wp = w.pool(&db).await;
    let mut tx = wp.begin().await.unwrap();
    sqlx::query("SELECT set_config('skiplock.packet_recovering', 'on', true), set_config('skiplock.packet_actor', 'recovery', true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let e = sqlx::query("UPDATE skiplock.packets SET state = 'queued' WHERE id = $1")
        .bind(pid)
        .execute(&mut *tx)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("only recovery does that"), "{e}");
    tx.rollback().await.unwrap();
    // The recovery function checks recovery's conditions itself: the job is live and is
    // not the caller's, so nothing moves.
    for other in ["NULL", "424242"] {
        let moved: bool = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT skiplock._packet_requeue({pid}, {other}, 'forged')"
        )))
        .fetch_one(&wp)
        .await
        .unwrap();
        assert!(!moved);
    }
    assert_eq!(
        packets::get(p, pid).await.unwrap().state,
        PacketState::Processing
    );
    // The worker role cannot touch the history, nor delete a packet (which would delete it).
    for sql in [
        "UPDATE skiplock.packet_events SET actor = 'someone else'",
        "DELETE FROM skiplock.packet_events",
        "TRUNCATE skiplock.packet_events",
        "INSERT INTO skiplock.packet_events (packet_id, to_state, actor) VALUES (1, 'done', 'x')",
        "DELETE FROM skiplock.packets",
    ] {
        refused(&wp, sql, "permission denied").await;
    }
    wp.close().await;
    // Even a role granted those privileges is stopped by the trigger.
    let g = LoginRole::new(&db, None).await;
    exec(
        p,
        &format!(
            "GRANT USAGE ON SCHEMA skiplock TO {0};
             GRANT SELECT, UPDATE, DELETE, TRUNCATE ON skiplock.packet_events TO {0}",
            g.name
        ),
    )
    .await;
    let gp = g.pool(&db).await;
    for sql in [
        "UPDATE skiplock.packet_events SET actor = 'someone else'",
        "DELETE FROM skiplock.packet_events",
        "TRUNCATE skiplock.packet_events",
    ] {
        refused(&gp, sql, "the packet history is append-only").await;
    }
    gp.close().await;
    let n = count(p, "SELECT count(*) FROM skiplock.packet_events").await;
    assert_eq!(n, 2, "submit and start, nothing changed");
}

// ---------------------------------------------------------------------------------------
// 10a. enqueue_many limits
// ---------------------------------------------------------------------------------------

/// One `enqueue_many` call is capped in rows (100,000 by default) and in bytes of args
/// (32 MiB), set in skiplock.settings, which only the owner may change.
#[tokio::test]
async fn enqueue_many_caps_rows_and_bytes_per_call() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let defaults: Vec<(String, i64)> = sqlx::query_as(
        "SELECT name, value FROM skiplock.settings WHERE name LIKE 'enqueue_many.%' ORDER BY name",
    )
    .fetch_all(p)
    .await
    .unwrap();
    assert_eq!(
        defaults,
        vec![
            ("enqueue_many.max_bytes".to_string(), 33_554_432),
            ("enqueue_many.max_rows".to_string(), 100_000)
        ]
    );
    let e = refused(
        p,
        "SELECT skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[100001]))",
        "skiplock: enqueue_many got 100001 jobs (at most 100000 per call, setting enqueue_many.max_rows)",
    )
    .await;
    assert!(!e.contains('\n'));
    // 100 rows of 400 kB: each under the 512 KiB row cap, 40 MB together.
    refused(
        p,
        "SELECT skiplock.enqueue_many('noop', array_fill(jsonb_build_object('s', repeat('x', 400000)), ARRAY[100]))",
        "bytes of args (at most 33554432 per call, setting enqueue_many.max_bytes)",
    )
    .await;
    assert_eq!(count(p, "SELECT count(*) FROM skiplock.jobs").await, 0);
    // The owner lowers them; the enqueuer can neither change nor get around them.
    exec(
        p,
        "UPDATE skiplock.settings SET value = 3 WHERE name = 'enqueue_many.max_rows';
         UPDATE skiplock.settings SET value = 100 WHERE name = 'enqueue_many.max_bytes'",
    )
    .await;
    let app = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let ap = app.pool(&db).await;
    refused(
        &ap,
        "SELECT skiplock.enqueue_many('noop', ARRAY['{}', '{}', '{}', '{}']::jsonb[])",
        "at most 3 per call",
    )
    .await;
    refused(
        &ap,
        "SELECT skiplock.enqueue_many('noop', ARRAY[jsonb_build_object('s', repeat('x', 200))])",
        "at most 100 per call",
    )
    .await;
    refused(
        &ap,
        "UPDATE skiplock.settings SET value = 1000000",
        "permission denied",
    )
    .await;
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT skiplock.enqueue_many('noop', ARRAY['{}', '{}', '{}']::jsonb[])",
    )
    .fetch_one(&ap)
    .await
    .unwrap();
    assert_eq!(ids.len(), 3);
    ap.close().await;
    let w = LoginRole::new(&db, Some("skiplock_worker")).await;
    let wp = w.pool(&db).await;
    refused(
        &wp,
        "UPDATE skiplock.settings SET value = 1000000",
        "permission denied",
    )
    .await;
    wp.close().await;
}

// ---------------------------------------------------------------------------------------
// 10b. Ownership
// ---------------------------------------------------------------------------------------

/// `migrate` hands the schema and everything in it to the NOLOGIN role skiplock_owner (not
/// a superuser), so the SECURITY DEFINER functions never run as whoever migrated; several
/// databases migrating at once (roles are cluster-wide) all succeed.
#[tokio::test]
async fn migrate_hands_the_schema_to_skiplock_owner_and_races_safely() {
    let dbs = futures::future::join_all((0..6).map(|_| TestDb::new())).await;
    for db in &dbs {
        let p = &db.pool;
        let (login, superuser): (bool, bool) = sqlx::query_as(
            "SELECT rolcanlogin, rolsuper FROM pg_roles WHERE rolname = 'skiplock_owner'",
        )
        .fetch_one(p)
        .await
        .unwrap();
        assert!(!login && !superuser);
        let foreign: Vec<String> = sqlx::query_scalar(
            "SELECT 'schema' FROM pg_namespace WHERE nspname = 'skiplock' AND nspowner::regrole::text <> 'skiplock_owner'
             UNION ALL
             SELECT c.oid::regclass::text FROM pg_class c
             WHERE c.relnamespace = 'skiplock'::regnamespace AND c.relowner::regrole::text <> 'skiplock_owner'
             UNION ALL
             SELECT p.oid::regprocedure::text FROM pg_proc p
             WHERE p.pronamespace = 'skiplock'::regnamespace AND p.proowner::regrole::text <> 'skiplock_owner'
             UNION ALL
             SELECT t.oid::regtype::text FROM pg_type t
             WHERE t.typnamespace = 'skiplock'::regnamespace AND t.typowner::regrole::text <> 'skiplock_owner'",
        )
        .fetch_all(p)
        .await
        .unwrap();
        assert!(
            foreign.is_empty(),
            "not owned by skiplock_owner: {foreign:?}"
        );
        let definers: i64 = count(
            p,
            "SELECT count(*) FROM pg_proc WHERE pronamespace = 'skiplock'::regnamespace AND prosecdef",
        )
        .await;
        assert!(definers >= 6, "{definers}");
        // Migrating again changes nothing and still works.
        skiplock::store::schema::migrate_parts(p, &skiplock_workflows::schemas())
            .await
            .unwrap();
    }
}

/// docs/roles.md: a non-superuser login that is a member of skiplock_owner migrates a fresh
/// database (given CREATE on it and on schema public), and the result is owned by
/// skiplock_owner and works.
#[tokio::test]
async fn a_member_of_skiplock_owner_migrates_without_being_a_superuser() {
    let deployer;
    let db = {
        // The roles exist once any database was migrated on the server.
        let seed = TestDb::new().await;
        deployer = LoginRole::new(&seed, Some("skiplock_owner")).await;
        drop(seed);
        TestDb::empty().await
    };
    exec(
        &db.pool,
        &format!(
            "GRANT CREATE ON DATABASE {0} TO skiplock_owner; GRANT CREATE ON SCHEMA public TO {1}",
            db.name, deployer.name
        ),
    )
    .await;
    let dp = deployer.pool(&db).await;
    let superuser: bool =
        sqlx::query_scalar("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            .fetch_one(&dp)
            .await
            .unwrap();
    assert!(!superuser);
    skiplock::store::schema::migrate_parts(&dp, &skiplock_workflows::schemas())
        .await
        .expect("migrate as the deployer");
    skiplock::store::schema::migrate_parts(&dp, &skiplock_workflows::schemas())
        .await
        .expect("and again");
    let owner: String = sqlx::query_scalar(
        "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'skiplock'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(owner, "skiplock_owner");
    let id = skiplock::store::jobs::enqueue(&dp, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    assert_eq!(job_state(&db.pool, id).await, JobState::Available.as_str());
    dp.close().await;
}

// ---------------------------------------------------------------------------------------
// Built-in queues and kinds, namespaced keys, the politeness row, URL and pack caps
// ---------------------------------------------------------------------------------------

/// An enqueuer cannot put a job into skiplock's own queues (`skiplock.` prefix) or a built-in
/// workflow's queue, nor a job of a workflow's (or the maintenance) kind anywhere, from SQL
/// (enqueue, enqueue_many) or Rust: the error names the function to use. Unreserved, one
/// `sleep` in `packets` (concurrency 1) stopped the packet pipeline, two in
/// `skiplock.maintenance` stopped reaping. The workflows' own functions and the scheduler's
/// enqueue of the maintenance jobs still work.
#[tokio::test]
async fn built_in_queues_and_kinds_are_reserved_to_their_own_functions() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let app = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let ap = app.pool(&db).await;
    for (kind, queue, use_) in [
        ("sleep", "packets", "skiplock.submit_packet"),
        ("sleep", "skiplock.maintenance", "maintenance"),
        ("noop", "skiplock.anything", "maintenance"),
        ("reap", "default", "maintenance"),
        ("retain", "default", "maintenance"),
        ("fetch", "fetch", "skiplock.request_fetch"),
        ("fetch", "default", "skiplock.request_fetch"),
        ("sleep", "fetch", "skiplock.request_fetch"),
        ("timer-reset", "default", "skiplock.timer_reset"),
        ("do-the-packing", "pack", "skiplock.pack_now"),
        ("noop", "pack", "skiplock.timer_reset"),
        ("process-packet", "default", "skiplock.submit_packet"),
    ] {
        for sql in [
            format!(
                "SELECT skiplock.enqueue('{kind}', '{{\"ms\": 3600000}}', '{queue}', priority => (-32768)::smallint)"
            ),
            format!("SELECT skiplock.enqueue_many('{kind}', ARRAY['{{}}'::jsonb], '{queue}')"),
        ] {
            let e = sqlx::query(AssertSqlSafe(sql.clone()))
                .execute(&ap)
                .await
                .expect_err(&sql);
            assert_eq!(sqlstate(&e), "22023", "{sql}: {e}");
            let msg = e.to_string();
            assert!(
                msg.contains("is reserved for skiplock's own functions") && msg.contains(use_),
                "{sql}: {msg}"
            );
        }
        // Rust says the same before the round trip.
        let e = skiplock::store::jobs::enqueue(p, &NewJob::new(kind, json!({})).queue(queue))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("reserved for skiplock's own functions") && e.contains(use_),
            "{e}"
        );
        let e = skiplock::store::jobs::enqueue_many(
            p,
            skiplock::store::jobs::ManyJobs {
                kind,
                args: &[json!({})],
                queue,
                run_at: None,
                priority: 0,
                limit_key: None,
                ..Default::default()
            },
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("reserved for skiplock's own functions"), "{e}");
    }
    assert_eq!(count(p, "SELECT count(*) FROM skiplock.jobs").await, 0);
    // Names that only look alike are anyone's.
    for sql in [
        "SELECT skiplock.enqueue('sleep', '{\"ms\": 1}', 'packets2')",
        "SELECT skiplock.enqueue('fetchy', '{}', 'skiplock')",
        "SELECT skiplock.enqueue('noop', '{}', 'my.skiplock.queue')",
    ] {
        sqlx::query(sql)
            .execute(&ap)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    // The workflows' own entry points still put their jobs there.
    let dir = tempfile::tempdir().unwrap();
    for sql in [
        "SELECT skiplock.request_fetch('http://a.example/')".to_string(),
        "SELECT skiplock.timer_reset('a.example')".to_string(),
        format!(
            "SELECT skiplock.submit_packet('{}')",
            frames(dir.path(), "f").display()
        ),
    ] {
        sqlx::query(AssertSqlSafe(sql.clone()))
            .execute(&ap)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let made: Vec<(String, String)> =
        sqlx::query_as("SELECT kind, queue FROM skiplock.jobs WHERE queue IN ('fetch', 'pack', 'packets') ORDER BY id")
            .fetch_all(p)
            .await
            .unwrap();
    assert_eq!(
        made,
        [
            ("fetch", "fetch"),
            ("timer-reset", "pack"),
            ("process-packet", "packets")
        ]
        .map(|(k, q)| (k.to_string(), q.to_string()))
    );
    // And the scheduler (a worker-role function) enqueues the maintenance jobs.
    let id: Option<i64> = sqlx::query_scalar(
        "SELECT skiplock.enqueue_periodic('reap', now(), '-infinity', 'reap', '{}', 'skiplock.maintenance', 0::smallint, 1)",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert!(id.is_some());
    ap.close().await;
}

/// Unique keys belong to a kind and a queue: a job of another kind or queue with the same
/// key no longer blocks a tenant's keyed enqueue (without the guard it failed for as long as
/// the squatter waited), a replace that changes a waiting job's args records the args it
/// overwrote and the login that did it (without the guard they were gone without trace), and a
/// replace with the same args (a debounce) records nothing.
#[tokio::test]
async fn unique_keys_are_per_kind_and_queue_and_a_replace_records_what_it_overwrote() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let alice = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let mallory = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let (a, m) = (alice.pool(&db).await, mallory.pool(&db).await);
    let one = |pool: &PgPool, sql: &str| {
        let (pool, sql) = (pool.clone(), sql.to_string());
        async move {
            sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql.clone()))
                .fetch_one(&pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
        }
    };
    // Squatting another kind and queue's key blocks nothing.
    let squat = one(
        &m,
        "SELECT skiplock.enqueue('junk', '{}', 'junkq', run_at => '9999-12-31', unique_key => 'invoice:42')",
    )
    .await;
    let mine = one(
        &a,
        "SELECT skiplock.enqueue('send_invoice', '{\"to\": \"a@b\"}', 'billing', unique_key => 'invoice:42')",
    )
    .await;
    assert_ne!(mine, squat);
    let mine_too = one(
        &a,
        "SELECT skiplock.enqueue('send_invoice', '{\"to\": \"a@b\"}', 'billing', unique_key => 'invoice:42', on_conflict => 'replace')",
    )
    .await;
    assert_eq!(
        mine_too, mine,
        "the key is still shared within its kind and queue"
    );
    let other_kind = one(
        &m,
        "SELECT skiplock.enqueue('send_invoice', '{}', 'junkq', unique_key => 'invoice:42', on_conflict => 'replace')",
    )
    .await;
    assert!(![mine, squat].contains(&other_kind));

    // A replace records what it overwrote, and who did it.
    let order = one(
        &a,
        "SELECT skiplock.enqueue('send_invoice', '{\"to\": \"alice@corp\"}', 'billing', unique_key => 'order:7')",
    )
    .await;
    let same = one(
        &m,
        "SELECT skiplock.enqueue('send_invoice', '{\"to\": \"mallory@evil\"}', 'billing', unique_key => 'order:7', on_conflict => 'replace')",
    )
    .await;
    assert_eq!(same, order);
    let (args, errors): (serde_json::Value, serde_json::Value) =
        sqlx::query_as("SELECT args, errors FROM skiplock.jobs WHERE id = $1")
            .bind(order)
            .fetch_one(p)
            .await
            .unwrap();
    assert_eq!(args, json!({"to": "mallory@evil"}));
    let entries = errors.as_array().unwrap();
    assert_eq!(entries.len(), 1, "{errors}");
    assert_eq!(
        entries[0]["replaced_args"], r#"{"to": "alice@corp"}"#,
        "{errors}"
    );
    assert_eq!(entries[0]["truncated"], false);
    assert!(
        entries[0]["error"]
            .as_str()
            .unwrap()
            .contains(&format!("replaced by {}", mallory.name)),
        "{errors}"
    );
    // The same args again (a debounce moving the time only) record nothing.
    for _ in 0..3 {
        one(
            &m,
            "SELECT skiplock.enqueue('send_invoice', '{\"to\": \"mallory@evil\"}', 'billing', run_at => now() + interval '1 minute', unique_key => 'order:7', on_conflict => 'replace')",
        )
        .await;
    }
    let n: i32 =
        sqlx::query_scalar("SELECT jsonb_array_length(errors) FROM skiplock.jobs WHERE id = $1")
            .bind(order)
            .fetch_one(p)
            .await
            .unwrap();
    assert_eq!(n, 1);
    // Large args are kept in part, and say so.
    one(
        &a,
        "SELECT skiplock.enqueue('send_invoice', jsonb_build_object('blob', repeat('x', 100000)), 'billing', unique_key => 'order:7', on_conflict => 'replace')",
    )
    .await;
    one(
        &a,
        "SELECT skiplock.enqueue('send_invoice', '{}', 'billing', unique_key => 'order:7', on_conflict => 'replace')",
    )
    .await;
    let last: serde_json::Value =
        sqlx::query_scalar("SELECT errors -> -1 FROM skiplock.jobs WHERE id = $1")
            .bind(order)
            .fetch_one(p)
            .await
            .unwrap();
    assert_eq!(last["truncated"], true);
    assert_eq!(
        last["replaced_args"].as_str().unwrap().chars().count(),
        2000
    );

    // Retry and the statements that send jobs back look at the key within its kind and
    // queue: a finished job is retried next to an available job of another kind with its key.
    exec(p, "UPDATE skiplock.jobs SET state = 'completed', finalized_at = now() WHERE id = (SELECT id FROM skiplock.jobs WHERE kind = 'junk')").await;
    let retried: String = sqlx::query_scalar("SELECT skiplock.retry($1)::text")
        .bind(squat)
        .fetch_one(p)
        .await
        .unwrap();
    assert_eq!(retried, "available");
    // ... and still refused next to one of its own kind and queue.
    exec(
        p,
        &format!(
            "UPDATE skiplock.jobs SET state = 'completed', finalized_at = now() WHERE id = {squat}"
        ),
    )
    .await;
    one(
        &m,
        "SELECT skiplock.enqueue('junk', '{}', 'junkq', unique_key => 'invoice:42')",
    )
    .await;
    let e = sqlx::query("SELECT skiplock.retry($1)")
        .bind(squat)
        .execute(p)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "23505", "{e}");
    let n = count(p, "SELECT count(*) FROM pg_indexes WHERE schemaname = 'skiplock' AND indexname = 'jobs_unique_available_idx'").await;
    assert_eq!(n, 0, "the key-only index is gone");
    a.close().await;
    m.close().await;
}

/// The fetch queue's politeness row is the owner's: a worker login cannot delete or change
/// it, directly or through the key-limit setters (without the guard a DELETE removed the
/// politeness until a worker restarted); it sets a politeness only through
/// skiplock.set_politeness, and still claims from the limited queue.
#[tokio::test]
async fn the_worker_role_cannot_delete_or_loosen_the_fetch_politeness() {
    let db = TestDb::new().await;
    let p = &db.pool;
    // The politeness a worker sets at start (as the owner here, with the general setter).
    exec(
        p,
        "SELECT skiplock.set_key_limit('fetch', 1, 1, interval '2 seconds')",
    )
    .await;
    let wrk = LoginRole::new(&db, Some("skiplock_worker")).await;
    let wp = wrk.pool(&db).await;
    for sql in [
        "DELETE FROM skiplock.queues WHERE queue = 'fetch'",
        "UPDATE skiplock.queues SET key_rate = NULL, key_period = NULL WHERE queue = 'fetch'",
        "INSERT INTO skiplock.queues (queue) VALUES ('other')",
        "TRUNCATE skiplock.queues CASCADE",
        "SELECT skiplock.set_key_limit('fetch')",
        "SELECT skiplock.change_key_limit('fetch', true, NULL, true, NULL, NULL)",
    ] {
        refused(&wp, sql, "permission denied").await;
    }
    refused(
        &wp,
        "SELECT skiplock.set_politeness(interval '0')",
        "politeness must be more than 0s",
    )
    .await;
    sqlx::query("SELECT skiplock.set_politeness(interval '3 seconds')")
        .execute(&wp)
        .await
        .unwrap();
    let row: (Option<i32>, Option<i32>, Option<f64>) = sqlx::query_as(
        "SELECT key_concurrency, key_rate, extract(epoch FROM key_period)::float8 FROM skiplock.queues WHERE queue = 'fetch'",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(row, (Some(1), Some(1), Some(3.0)));
    // The limited claim locks the queue's row: still allowed.
    sqlx::query("SELECT * FROM skiplock._claim_limited('fetch', ARRAY['fetch'], 1, 'w')")
        .fetch_all(&wp)
        .await
        .unwrap();
    wp.close().await;
}

/// A URL over 2000 bytes is refused by request_fetch with a clear error (without the guard:
/// "index row size 3040 exceeds btree version 4 maximum 2704"), and a crawl's overlong link
/// is skipped while its other links are requested.
#[tokio::test]
async fn overlong_urls_are_refused_by_request_fetch_and_skipped_by_a_crawl() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let long = format!("http://a.example/{}", "x".repeat(3000));
    let msg = refused(
        p,
        &format!("SELECT skiplock.request_fetch('{long}', full => true)"),
        "is 3017 bytes long (at most 2000)",
    )
    .await;
    assert!(msg.contains("invalid URL"), "{msg}");
    let crawl: i64 =
        sqlx::query_scalar("SELECT skiplock.request_fetch('http://a.example/', full => true)")
            .fetch_one(p)
            .await
            .unwrap();
    let crawl_id: i64 =
        sqlx::query_scalar("SELECT (args->>'crawl')::bigint FROM skiplock.jobs WHERE id = $1")
            .bind(crawl)
            .fetch_one(p)
            .await
            .unwrap();
    let n: i32 = sqlx::query_scalar("SELECT skiplock._crawl_request($1, $2, false)")
        .bind(crawl_id)
        .bind(vec![long.clone(), "http://a.example/b".to_string()])
        .fetch_one(p)
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.jobs WHERE kind = 'fetch' AND args->>'url' = 'http://a.example/b'").await,
        1
    );
}

/// pack_now of a host with no fetched pages is refused with a clear error (unchecked,
/// each call for `..`, `.` or any made-up name wrote a 36 KiB artifact and a packs row).
#[tokio::test]
async fn pack_now_refuses_a_host_without_pages() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let app = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let ap = app.pool(&db).await;
    for host in ["..", ".", "%2e%2e", "made-up.example"] {
        let e = sqlx::query("SELECT skiplock.pack_now($1)")
            .bind(host)
            .execute(&ap)
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&e), "22023", "{host}: {e}");
        assert!(
            e.to_string().contains("has no fetched pages"),
            "{host}: {e}"
        );
    }
    assert_eq!(count(p, "SELECT count(*) FROM skiplock.jobs").await, 0);
    exec(
        p,
        "INSERT INTO skiplock.pages (url, host, path, title, body, last_fetched, next_fetch)
         VALUES ('http://real.example/', 'real.example', '/', 't', 'b', now(), now())",
    )
    .await;
    sqlx::query("SELECT skiplock.pack_now('Real.Example')")
        .execute(&ap)
        .await
        .unwrap();
    ap.close().await;
}

/// A keyed job replaced again and again with other args keeps only the latest
/// `skiplock._replaced_kept` (10) replace entries in its `errors`, numbered so the dropped ones
/// are counted; the entries of its failed attempts stay. Without the bound every replace added
/// about 2 KB to the row (and rewrote all of it), for as long as anyone kept replacing.
#[tokio::test]
async fn a_job_replaced_again_and_again_keeps_its_latest_replaces_only_and_counts_them() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let id: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('send', '{\"v\": 0}', 'replaced', unique_key => 'order:9')",
    )
    .fetch_one(&**p)
    .await
    .unwrap();
    // A failed attempt's entry, as an ack writes it.
    exec(
        p,
        &format!(
            "UPDATE skiplock.jobs SET errors = '[{{\"attempt\": 1, \"error\": \"boom\"}}]' WHERE id = {id}"
        ),
    )
    .await;
    for v in 1..=30 {
        let same: i64 = sqlx::query_scalar(
            "SELECT skiplock.enqueue('send', jsonb_build_object('v', $1::int, 'pad', repeat('x', 3000)),
                                     'replaced', unique_key => 'order:9', on_conflict => 'replace')",
        )
        .bind(v)
        .fetch_one(&**p)
        .await
        .unwrap();
        assert_eq!(same, id);
    }
    let errors: serde_json::Value =
        sqlx::query_scalar("SELECT errors FROM skiplock.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&**p)
            .await
            .unwrap();
    let entries = errors.as_array().unwrap();
    assert_eq!(entries.len(), 11, "{errors:#}");
    assert_eq!(entries[0]["error"], "boom");
    let numbers: Vec<i64> = entries[1..]
        .iter()
        .map(|e| e["replace"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, (21..=30).collect::<Vec<i64>>());
    // The latest entry holds the args the 30th replace overwrote (those of the 29th).
    assert!(
        entries[10]["replaced_args"]
            .as_str()
            .unwrap()
            .starts_with("{\"v\": 29"),
        "{:#}",
        entries[10]
    );
    assert!(
        errors.to_string().len() < 11 * 2300,
        "{}",
        errors.to_string().len()
    );
}

/// (id, outcome) of one `skiplock.enqueue_result` call `call` (its arguments) as `pool`'s login.
async fn enqueue_result(pool: &PgPool, call: &str) -> (i64, String) {
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT id, outcome::text FROM skiplock.enqueue_result({call})"
    )))
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| panic!("{call}: {e}"))
}

/// Another enqueuer (another login) cannot squat a `unique_for` window: the attacker's window
/// taken first in the victim's kind and queue (its job due in 9999) is the attacker's, and the
/// victim's enqueue makes the victim's own job, which its later enqueues in the window find.
/// Without key scopes the victim's call answered `deduplicated` with the attacker's job, for
/// the whole window.
#[tokio::test]
async fn another_enqueuer_cannot_squat_a_unique_for_window() {
    let db = TestDb::new().await;
    let attacker = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let victim = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let (e, v) = (attacker.pool(&db).await, victim.pool(&db).await);
    let (squat, _) = enqueue_result(
        &e,
        "'digest', '{\"evil\": 1}', 'mail', run_at => '9999-01-01', unique_for => interval '100 years'",
    )
    .await;
    let call = "'digest', '{\"user\": \"alice\"}', 'mail', unique_for => interval '100 years'";
    let (mine, outcome) = enqueue_result(&v, call).await;
    assert_ne!(mine, squat);
    assert_eq!(outcome, "inserted");
    assert_eq!(
        enqueue_result(&v, call).await,
        (mine, "deduplicated".to_string())
    );
    // The same with a key derived from the args.
    let by = "'digest', '{\"user\": \"bob\"}', 'mail', unique_by => 'args:user', unique_for => interval '100 years'";
    let (theirs, _) = enqueue_result(&e, by).await;
    let (mine, outcome) = enqueue_result(&v, by).await;
    assert_eq!(outcome, "inserted");
    assert_ne!(mine, theirs);
}

/// A window whose job was cancelled is free again: an operator cancelling a squatter (here a
/// job holding the victim's own key, which any enqueuer of the kind and queue may name), or an
/// enqueuer cancelling its own, lets the next enqueue in the window make a new job. Without it
/// the window stayed spent on the cancelled job, whatever the operator did.
#[tokio::test]
async fn a_cancelled_job_frees_its_unique_for_window() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let attacker = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let victim = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let (e, v) = (attacker.pool(&db).await, victim.pool(&db).await);
    let call =
        "'charge', '{}', 'billing', unique_key => 'order:77', unique_for => interval '100 years'";
    // The attacker holds the key (a key one names is shared by the kind and queue).
    let (squat, _) = enqueue_result(
        &e,
        "'charge', '{\"evil\": 1}', 'billing', run_at => '9999-01-01', unique_key => 'order:77',
         unique_for => interval '100 years'",
    )
    .await;
    assert_eq!(
        enqueue_result(&v, call).await,
        (squat, "deduplicated".to_string())
    );
    exec(p, &format!("SELECT skiplock.cancel({squat})")).await;
    let (mine, outcome) = enqueue_result(&v, call).await;
    assert_eq!(outcome, "inserted");
    assert_ne!(mine, squat);
    assert_eq!(
        enqueue_result(&v, call).await,
        (mine, "deduplicated".to_string())
    );
    // Its own job cancelled: the window is free again too.
    exec(p, &format!("SELECT skiplock.cancel({mine})")).await;
    let (again, outcome) = enqueue_result(&v, call).await;
    assert_eq!(outcome, "inserted");
    assert!(again != mine && again != squat);
}

/// `unique_by` is no oracle on another enqueuer's pending args: the attacker's guess of the
/// victim's args, in a transaction it rolls back, answers `inserted` (its own key), never
/// `deduplicated` with the victim's job; and it cannot name the victim's derived key itself,
/// `args:` being reserved to `unique_by`. Without key scopes the answer told the attacker
/// which addresses had a pending password reset, and left no trace.
#[tokio::test]
async fn unique_by_tells_another_enqueuer_nothing_of_pending_args() {
    let db = TestDb::new().await;
    let attacker = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let victim = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let (e, v) = (attacker.pool(&db).await, victim.pool(&db).await);
    let (reset, _) = enqueue_result(
        &v,
        "'reset-password', '{\"email\": \"alice@corp.example\", \"token\": \"t1\"}', 'auth',
         unique_by => 'args:email'",
    )
    .await;
    let mut tx = e.begin().await.unwrap();
    let (id, outcome): (i64, String) = sqlx::query_as(
        "SELECT id, outcome::text FROM skiplock.enqueue_result('reset-password',
             '{\"email\": \"alice@corp.example\"}', 'auth', unique_by => 'args:email')",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(outcome, "inserted");
    assert_ne!(id, reset);
    // The victim's key, named outright, is refused before anything is looked up.
    let key: String = sqlx::query_scalar("SELECT unique_key FROM skiplock.jobs WHERE id = $1")
        .bind(reset)
        .fetch_one(&*db.pool)
        .await
        .unwrap();
    let e_err = sqlx::query_scalar::<_, i64>(
        "SELECT skiplock.enqueue('reset-password', '{}', 'auth', unique_key => $1)",
    )
    .bind(&key)
    .fetch_one(&e)
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e_err.contains("unique_key prefix 'args:' is reserved"),
        "{e_err}"
    );
    // Nor can it replace the victim's job through its own call.
    let (replaced, outcome) = enqueue_result(
        &e,
        "'reset-password', '{\"email\": \"alice@corp.example\", \"redirect\": \"https://evil.example\"}',
         'auth', unique_by => 'args:email', on_conflict => 'replace'",
    )
    .await;
    assert_eq!(outcome, "inserted");
    assert_ne!(replaced, reset);
}

/// A failure the server raises for its own state (a full disk, no memory, an I/O error) is not
/// the statement's: the ack writer waits for the server with the batch whole instead of
/// splitting it down to single acks (`statement_failed`). Each SQLSTATE comes from the real
/// server, raised as it would raise it; a statement's own failures still count as its own.
#[tokio::test]
async fn the_servers_own_trouble_is_never_blamed_on_the_statement() {
    use skiplock::db::outage::statement_failed;
    let db = TestDb::new().await;
    let raised = |code: &'static str| {
        let pool = db.pool.clone();
        async move {
            let e = sqlx::raw_sql(AssertSqlSafe(format!(
                "DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '{code}'; END $$"
            )))
            .execute(&*pool)
            .await
            .expect_err(code);
            assert_eq!(sqlstate(&e), code);
            statement_failed(&skiplock::Error::from(e))
        }
    };
    for code in [
        "53000", "53100", "53200", "53300", "58000", "58030", "58P01", "57P01", "08006",
    ] {
        assert!(!raised(code).await, "{code} is the server's trouble");
    }
    for code in ["22023", "23505", "57014", "55P03", "40P01", "P0001"] {
        assert!(raised(code).await, "{code} is the statement's");
    }
}

/// An enqueuer's open transaction never makes another enqueuer's `unique_for` enqueue wait: the
/// attacker's uncommitted window is its own. (The window's primary key was the kind, queue and
/// key alone, so the victim's insert waited for the attacker's commit, for as long as the
/// attacker liked.) Within one login a second caller still waits for the first's commit and
/// then finds its job, and logins the owner gave one key scope share their windows.
#[tokio::test]
async fn another_enqueuers_open_transaction_never_makes_a_unique_for_enqueue_wait() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let attacker = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let victim = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let (e, v) = (attacker.pool(&db).await, victim.pool(&db).await);
    let call = "'digest2', '{}', 'mail', unique_for => interval '100 years'";
    let mut open = e.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT skiplock.enqueue_result({call})"
    )))
    .execute(&mut *open)
    .await
    .unwrap();
    let mut vc = v.acquire().await.unwrap();
    sqlx::query("SET statement_timeout = '5s'")
        .execute(&mut *vc)
        .await
        .unwrap();
    let (_, outcome): (i64, String) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT id, outcome::text FROM skiplock.enqueue_result({call})"
    )))
    .fetch_one(&mut *vc)
    .await
    .expect("the victim's enqueue waited for the attacker's open transaction");
    assert_eq!(outcome, "inserted");
    drop(vc);
    open.rollback().await.unwrap();
    // A second login given the victim's key scope by the owner shares its window.
    let sibling = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    exec(
        p,
        &format!(
            "SELECT skiplock.set_key_scope('{}', 'mail-service'); SELECT skiplock.set_key_scope('{}', 'mail-service')",
            victim.name, sibling.name
        ),
    )
    .await;
    let s = sibling.pool(&db).await;
    let (first, _) = enqueue_result(
        &s,
        "'digest3', '{}', 'mail', unique_for => interval '100 years'",
    )
    .await;
    assert_eq!(
        enqueue_result(
            &v,
            "'digest3', '{}', 'mail', unique_for => interval '100 years'"
        )
        .await,
        (first, "deduplicated".to_string())
    );
    // The scope is the owner's to give: an enqueuer cannot call set_key_scope.
    let e_err = sqlx::query("SELECT skiplock.set_key_scope(current_user, 'mail-service')")
        .execute(&e)
        .await
        .unwrap_err()
        .to_string();
    assert!(e_err.contains("permission denied"), "{e_err}");
}

// ---------------------------------------------------------------------------------------
// 11. Flows between tenants
// ---------------------------------------------------------------------------------------

/// Runs each of its jobs until the test opens the gate, and counts every run per job (a job
/// run twice shows).
#[derive(Clone)]
struct Gate {
    open: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    runs: std::sync::Arc<std::sync::Mutex<BTreeMap<i64, usize>>>,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            open: std::sync::Arc::new(tokio::sync::watch::channel(false).0),
            runs: Default::default(),
        }
    }
}

impl skiplock::worker::handler::Handler for Gate {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "gate"
    }
    async fn run(
        &self,
        ctx: skiplock::worker::JobContext,
        _args: serde_json::Value,
    ) -> skiplock::worker::HandlerResult {
        *self.runs.lock().unwrap().entry(ctx.id).or_default() += 1;
        let mut open = self.open.subscribe();
        let _ = open.wait_for(|o| *o).await;
        Ok(skiplock::worker::Outcome::Complete)
    }
}

/// The attack, with an enqueuer's login: `depends_on` naming a running job, a
/// due job and a held one, in a transaction left open. It holds no lock a worker or an
/// operator needs (the named jobs are locked FOR KEY SHARE, which no UPDATE of a job
/// conflicts with): the operator reschedules and cancels the held job at once; the due job is
/// claimed and runs; the running job and its batch-mate keep their heartbeats, are never
/// rescued and run once, and their acks land; all while the transaction stays open. Once it
/// commits, its job, whose dependencies have all finished by then, runs, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueuers_open_transaction_with_depends_on_stalls_no_worker_and_runs_no_job_twice() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let gate = Gate::new();
    let mut qs = fast_settings();
    // Heartbeats every 3 s; a job whose heartbeat failed for 12 s would be rescued and run
    // again by this worker's own rescuer.
    qs.rescue_after = Duration::from_secs(12);
    let g = gate.clone();
    let worker = start_worker(p, qs, move |mut b| {
        skiplock::worker::builtin::register(b.registry_mut());
        b.registry_mut().register(g);
        b
    });
    let gated = |p: &skiplock::Pool| {
        let p = p.clone();
        async move {
            skiplock::store::jobs::enqueue(&p, &NewJob::new("gate", json!({})))
                .await
                .unwrap()
                .id
        }
    };
    let running = gated(p).await;
    let mate = gated(p).await;
    for id in [running, mate] {
        wait_job(p, id, "the gated job to run", |j| {
            j.state.as_str() == "running"
        })
        .await;
    }
    let due = skiplock::store::jobs::enqueue(
        p,
        &NewJob::new("noop", json!({})).run_at(Utc::now() + chrono::Duration::seconds(2)),
    )
    .await
    .unwrap()
    .id;
    let held = skiplock::store::jobs::enqueue(
        p,
        &NewJob::new("noop", json!({})).run_at(Utc::now() + chrono::Duration::hours(1)),
    )
    .await
    .unwrap()
    .id;

    let app = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let mut them = PgConnection::connect(&app.url(&db.url)).await.unwrap();
    sqlx::query("BEGIN").execute(&mut them).await.unwrap();
    let waiter: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('noop', '{}', depends_on => $1, on_dependency_failure => 'run')",
    )
    .bind(vec![running, due, held])
    .fetch_one(&mut them)
    .await
    .unwrap();

    // The operator, with a lock timeout: it would fail rather than wait for the enqueuer.
    let op = Operator::new(&db).await;
    let mut opc = PgConnection::connect(&op.url).await.unwrap();
    sqlx::query("SET lock_timeout = '5s'")
        .execute(&mut opc)
        .await
        .unwrap();
    let moved: Vec<i64> =
        sqlx::query_scalar("SELECT skiplock.reschedule(ids => $1, priority => 5::smallint)")
            .bind(vec![held])
            .fetch_all(&mut opc)
            .await
            .unwrap();
    assert_eq!(moved, vec![held]);
    let state: String = sqlx::query_scalar("SELECT skiplock.cancel($1)::text")
        .bind(held)
        .fetch_one(&mut opc)
        .await
        .unwrap();
    assert_eq!(state, "cancelled");

    wait_job(p, due, "the due job to be claimed and run", |j| {
        j.state.as_str() == "completed"
    })
    .await;
    // Three heartbeats of each gated job, at least.
    let mut beats: BTreeMap<i64, std::collections::BTreeSet<DateTime<Utc>>> = BTreeMap::new();
    let deadline = Instant::now() + LONG;
    while beats.len() < 2 || beats.values().any(|b| b.len() < 3) {
        assert!(
            Instant::now() < deadline,
            "heartbeats of the running jobs: {beats:?}"
        );
        for id in [running, mate] {
            let hb: Option<DateTime<Utc>> =
                sqlx::query_scalar("SELECT heartbeat_at FROM skiplock.jobs WHERE id = $1")
                    .bind(id)
                    .fetch_one(p)
                    .await
                    .unwrap();
            beats.entry(id).or_default().extend(hb);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    gate.open.send_replace(true);
    for id in [running, mate] {
        let j = wait_job(p, id, "the gated job's ack to land", |j| {
            j.state.as_str() == "completed"
        })
        .await;
        assert_eq!(j.attempt, 1, "never rescued: {:?}", j.errors);
    }
    // Its own job still waits: the acks could not see its edges (not committed yet).
    let waits: String = sqlx::query_scalar("SELECT state::text FROM skiplock.wait($1, '0')")
        .bind(waiter)
        .fetch_one(&mut them)
        .await
        .unwrap();
    assert_eq!(waits, "waiting");
    sqlx::query("COMMIT").execute(&mut them).await.unwrap();
    wait_job(
        p,
        waiter,
        "the enqueued job to run after its dependencies",
        |j| j.state.as_str() == "completed",
    )
    .await;
    worker.stop().await.unwrap();
    assert_eq!(
        *gate.runs.lock().unwrap(),
        BTreeMap::from([(running, 1), (mate, 1)])
    );
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.jobs WHERE attempt > 1").await,
        0
    );
    them.close().await.unwrap();
    opc.close().await.unwrap();
}

/// A watcher (any enqueuer may watch any job) that calls `skiplock.watch` in a transaction it
/// leaves open holds its watch row's lock: the ack of the watched job, and of the rest of its
/// batch, never waits for it. The watcher is still told (the NOTIFY on the finished channel),
/// and its next call, which finds the job finished, removes the watch. The ack runs with a
/// lock timeout, so a wait fails it instead of hanging the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchers_open_transaction_never_blocks_the_ack_of_the_job_it_watches() {
    use skiplock::store::ack::ack_many;
    let db = TestDb::new().await;
    let p = &db.pool;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let id = skiplock::store::jobs::enqueue(p, &NewJob::new("noop", json!({})))
            .await
            .unwrap()
            .id;
        sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = $1")
            .bind(id)
            .execute(&**p)
            .await
            .unwrap();
        ids.push(id);
    }
    let watched = ids[0];
    let app = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let mut them = PgConnection::connect(&app.url(&db.url)).await.unwrap();
    let channel: String = sqlx::query_scalar("SELECT skiplock.finished_channel()")
        .fetch_one(&mut them)
        .await
        .unwrap();
    let mut heard = sqlx::postgres::PgListener::connect(&app.url(&db.url))
        .await
        .unwrap();
    heard.listen(&channel).await.unwrap();
    let watch = "SELECT state::text FROM skiplock.watch($1)";
    let s: String = sqlx::query_scalar(watch)
        .bind(watched)
        .fetch_one(&mut them)
        .await
        .unwrap();
    assert_eq!(s, "running");
    // Called again in a transaction left open: the row is locked (ON CONFLICT DO UPDATE locks
    // the row it finds even when its WHERE leaves it as it is).
    sqlx::query("BEGIN").execute(&mut them).await.unwrap();
    sqlx::query_scalar::<_, String>(watch)
        .bind(watched)
        .fetch_one(&mut them)
        .await
        .unwrap();

    let mut acking = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("SET lock_timeout = '10s'")
        .execute(&mut acking)
        .await
        .unwrap();
    let acks: Vec<_> = ids.iter().map(|&id| completed_ack(id, 1)).collect();
    let acked = ack_many(&mut acking, &acks)
        .await
        .expect("the ack never waits for the watcher's transaction");
    assert_eq!(acked.ids.len(), 2);
    for &id in &ids {
        assert_eq!(job_state(p, id).await, "completed");
    }
    let n = tokio::time::timeout(LONG, heard.recv())
        .await
        .expect("the watcher is told")
        .unwrap();
    assert_eq!(n.payload(), watched.to_string());
    sqlx::query("COMMIT").execute(&mut them).await.unwrap();
    let s: String = sqlx::query_scalar(watch)
        .bind(watched)
        .fetch_one(&mut them)
        .await
        .unwrap();
    assert_eq!(s, "completed");
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.job_watches").await,
        0
    );
    them.close().await.unwrap();
    acking.close().await.unwrap();
}

/// One call writes at most `depends_on.max_edges` dependency edges (100,000), whatever its
/// shape: a fan-out of `enqueue_many` (its rows times their dependencies, the one-by-one path
/// of unique_by included) and a flow (its jobs together); refused whole with the setting
/// named, nothing written. The owner may lower it; the enqueuer can neither change it nor get
/// around it.
#[tokio::test]
async fn a_call_writes_at_most_the_bound_of_dependency_edges() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let limit: i64 = sqlx::query_scalar(
        "SELECT value FROM skiplock.settings WHERE name = 'depends_on.max_edges'",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(limit, 100_000);
    let app = LoginRole::new(&db, Some("skiplock_enqueuer")).await;
    let ap = app.pool(&db).await;
    let deps: Vec<i64> = sqlx::query_scalar(
        "SELECT skiplock.enqueue_many('dep', array_fill('{}'::jsonb, ARRAY[333]), run_at => '9999-01-01')",
    )
    .fetch_one(&ap)
    .await
    .unwrap();
    // 301 × 333 = 100,233 edges, each factor far under its own cap.
    let e = sqlx::query(
        "SELECT skiplock.enqueue_many('x', array_fill('{}'::jsonb, ARRAY[301]), depends_on => $1)",
    )
    .bind(&deps)
    .execute(&ap)
    .await
    .unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    assert!(
        e.to_string().contains(
            "the call would write 100233 dependency edges (301 jobs, each waiting for 333; at most 100000 per call, setting depends_on.max_edges)"
        ),
        "{e}"
    );
    // The same, one by one (unique_by): refused before the first.
    let e = sqlx::query(
        "SELECT skiplock.enqueue_many('x', (SELECT array_agg(jsonb_build_object('n', g)) FROM generate_series(1, 301) g),
                                      unique_by => 'args:n', depends_on => $1)",
    )
    .bind(&deps)
    .execute(&ap)
    .await
    .unwrap_err();
    assert!(
        e.to_string().contains("setting depends_on.max_edges"),
        "{e}"
    );
    // 300 × 333 = 99,900: written.
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT skiplock.enqueue_many('x', array_fill('{}'::jsonb, ARRAY[300]), depends_on => $1)",
    )
    .bind(&deps)
    .fetch_one(&ap)
    .await
    .unwrap();
    assert_eq!(ids.len(), 300);
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.job_dependencies").await,
        99_900
    );

    exec(
        p,
        "UPDATE skiplock.settings SET value = 4 WHERE name = 'depends_on.max_edges'",
    )
    .await;
    // A flow: 2 + 3 = 5 edges together, each job's under the bound.
    let flow = json!([
        {"name": "a", "kind": "x"},
        {"name": "b", "kind": "x", "depends_on": ["a", deps[0]]},
        {"name": "c", "kind": "x", "depends_on": ["a", "b", deps[1]]},
    ]);
    let e = sqlx::query("SELECT skiplock.enqueue_flow($1)")
        .bind(&flow)
        .execute(&ap)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "the call would write 5 dependency edges (the flow's jobs together; at most 4 per call, setting depends_on.max_edges)"
        ),
        "{e}"
    );
    let e = sqlx::query("SELECT skiplock.enqueue('x', '{}', depends_on => $1)")
        .bind(&deps[..5])
        .execute(&ap)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("at most 4 per call"), "{e}");
    refused(
        &ap,
        "UPDATE skiplock.settings SET value = 1000000",
        "permission denied",
    )
    .await;
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.jobs WHERE kind = 'x'").await,
        300
    );
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.job_dependencies").await,
        99_900
    );
    ap.close().await;
}

/// A claimed row that could not be read failed the whole claim, stranding every job it had
/// just marked running: a tags array with a NULL element (a plain UPDATE writes one; the API
/// never does) is read without it, and the claim hands over every job of its batch.
#[tokio::test]
async fn a_claim_gets_past_a_row_it_cannot_read() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            skiplock::store::jobs::enqueue(p, &NewJob::new("noop", json!({})).queue("badrow"))
                .await
                .unwrap()
                .id,
        );
    }
    sqlx::query("UPDATE skiplock.jobs SET tags = '{a,NULL}' WHERE id = $1")
        .bind(ids[1])
        .execute(&**p)
        .await
        .unwrap();
    let mut jobs = skiplock::store::claim::claim(
        p.pg(),
        skiplock::store::claim::ClaimParams {
            queue: "badrow",
            kinds: &["noop".to_string()],
            limit: 10,
            worker: "w:1:x",
        },
    )
    .await
    .expect("the claim gets past the row");
    jobs.sort_by_key(|j| j.id);
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), ids);
    assert_eq!(jobs[1].tags, vec!["a".to_string()]);
}
