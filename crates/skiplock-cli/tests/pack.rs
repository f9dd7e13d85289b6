//! Debounced packing: the timer is a row; packs happen after quiet, within the max wait, once
//! per window, never twice at once; the artifact is a SQLite + FTS5 file in the object store.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use skiplock_workflows::pack::{self, PackSettings};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use support::*;

const LONG: Duration = Duration::from_secs(60);

fn settings(store: &std::path::Path, quiet: u64, max_wait: u64) -> PackSettings {
    PackSettings {
        quiet: Duration::from_secs(quiet),
        max_wait: Duration::from_secs(max_wait),
        store: store.to_str().unwrap().to_string(),
    }
}

/// An in-process worker serving queue `pack` with `concurrency` slots and its own small pool.
async fn pack_worker(db: &TestDb, s: PackSettings, concurrency: usize) -> RunningWorker {
    let pool: skiplock::Pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(LONG)
        .connect(&db.url)
        .await
        .unwrap()
        .into();
    let mut qs = fast_settings();
    qs.queues = Some(BTreeMap::from([("pack".to_string(), concurrency)]));
    start_worker(&pool, qs, |b| {
        pack::register_with(b, s).expect("register pack")
    })
}

async fn insert_page(pool: &PgPool, host: &str, path: &str, title: &str, body: Option<&str>) {
    sqlx::query(
        "INSERT INTO skiplock.pages (url, host, path, title, headings, body, last_fetched, content_hash)
         VALUES ($1, $2, $3, $4, 'Heading', $5, now(), md5(coalesce($5, '')))",
    )
    .bind(format!("http://{host}{path}"))
    .bind(host)
    .bind(path)
    .bind(title)
    .bind(body)
    .execute(pool)
    .await
    .unwrap();
}

async fn timer_reset(pool: &PgPool, host: &str) -> i64 {
    sqlx::query_scalar("SELECT skiplock.timer_reset($1)")
        .bind(host)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn pack_now(pool: &PgPool, host: &str) -> i64 {
    sqlx::query_scalar("SELECT skiplock.pack_now($1)")
        .bind(host)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn pack_count(pool: &PgPool, host: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce((SELECT pack_count FROM skiplock.packs WHERE host = $1), 0)",
    )
    .bind(host)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// (state, attempt, result) of a job.
async fn job(pool: &PgPool, id: i64) -> (String, i32, Option<Value>) {
    sqlx::query_as("SELECT state::text, attempt, result FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn wait_state(pool: &PgPool, id: i64, state: &str) {
    wait_job(pool, id, state, |r| r.state.as_str() == state).await;
}

/// The pending (available, keyed) timer of a host: (id, scheduled_at).
async fn timer(pool: &PgPool, host: &str) -> Option<(i64, chrono::DateTime<chrono::Utc>)> {
    sqlx::query_as(
        "SELECT id, scheduled_at FROM skiplock.jobs
         WHERE kind = 'do-the-packing' AND state = 'available' AND unique_key = skiplock.pack_key($1)",
    )
    .bind(host)
    .fetch_optional(pool)
    .await
    .unwrap()
}

/// URLs of the artifact at `path` matching an FTS5 query.
fn fts(path: &std::path::Path, query: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut st = conn
        .prepare("SELECT url FROM pages_fts WHERE pages_fts MATCH ?1 ORDER BY url")
        .unwrap();
    st.query_map([query], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn artifact(store: &std::path::Path, host: &str) -> std::path::PathBuf {
    store.join("packs").join(format!("{host}.sqlite"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundred_resets_from_four_tasks_give_exactly_one_pack_after_the_quiet_period() {
    let db = TestDb::new().await;
    let store = tempfile::tempdir().unwrap();
    let host = "site.test:8080";
    insert_page(&db.pool, host, "/", "Home", Some("welcome home")).await;

    // Two workers with four slots each handle the resets side by side. The quiet period is
    // ten minutes, so no stall of this machine between two resets can let the timer fire
    // early; once every reset is handled, the test moves the timer's clock to its fire time.
    let w1 = pack_worker(&db, settings(store.path(), 600, 3600), 4).await;
    let w2 = pack_worker(&db, settings(store.path(), 600, 3600), 4).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                timer_reset(&pool, host).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    wait_for("the 100 resets handled", LONG, || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM skiplock.jobs WHERE kind = 'timer-reset' AND state = 'completed'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        (n == 100).then_some(())
    })
    .await;

    // One timer, pushed by every reset to the quiet period after the last one handled (both
    // times from the database clock).
    let timers: Vec<i64> = sqlx::query_scalar(
        "SELECT DISTINCT (result->>'timer_job')::bigint FROM skiplock.jobs WHERE kind = 'timer-reset'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        timers.len(),
        1,
        "every reset pushed the same timer: {timers:?}"
    );
    let timer_id = timers[0];
    let (quiet_respected, detail): (bool, String) = sqlx::query_as(
        "SELECT t.scheduled_at >= r.last + interval '600 seconds' AND t.state = 'available',
                format('timer %s scheduled %s; last reset claimed %s, latest fires_at %s',
                       t.state, t.scheduled_at, r.last, r.fires)
         FROM skiplock.jobs t,
              (SELECT max(attempted_at) AS last, max(result->>'fires_at') AS fires
               FROM skiplock.jobs WHERE kind = 'timer-reset') r
         WHERE t.id = $1",
    )
    .bind(timer_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        quiet_respected,
        "the timer does not wait the quiet period after the last reset: {detail}"
    );
    assert_eq!(pack_count(&db.pool, host).await, 0, "nothing packed yet");

    // The quiet period is over (test clock): the timer fires, once.
    sqlx::query("UPDATE skiplock.jobs SET scheduled_at = now() WHERE id = $1")
        .bind(timer_id)
        .execute(&db.pool)
        .await
        .unwrap();
    wait_all_finished(&db.pool, LONG).await;
    w1.stop().await.unwrap();
    w2.stop().await.unwrap();

    let packs: Vec<(i64, Value)> = sqlx::query_as(
        "SELECT id, result FROM skiplock.jobs WHERE kind = 'do-the-packing' AND state = 'completed'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(packs.len(), 1, "exactly one pack job: {packs:?}");
    assert_eq!(packs[0].0, timer_id);
    assert_eq!(packs[0].1["packed"], 1, "{packs:?}");
    let others: i64 =
        sqlx::query_scalar("SELECT count(*) FROM skiplock.jobs WHERE kind = 'do-the-packing'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(others, 1, "no other do-the-packing row was ever made");
    assert_eq!(pack_count(&db.pool, host).await, 1);
    assert!(artifact(store.path(), host).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_max_wait_bounds_a_host_that_is_reset_continuously() {
    let db = TestDb::new().await;
    let store = tempfile::tempdir().unwrap();
    let host = "busy.test";
    insert_page(&db.pool, host, "/", "Busy", Some("always changing")).await;
    // A ten-minute quiet period: every reset would push the timer ten minutes on, so only
    // the 8 s maximum wait can let a pack through while the resets go on.
    let w = pack_worker(&db, settings(store.path(), 600, 8), 2).await;

    // A burst of resets, then one every 200 ms until a pack has happened.
    for _ in 0..5 {
        timer_reset(&db.pool, host).await;
    }
    let deadline = tokio::time::Instant::now() + LONG;
    while pack_count(&db.pool, host).await == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pack within {LONG:?} of continuous resets"
        );
        timer_reset(&db.pool, host).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    w.stop().await.unwrap();
    let (id, created, scheduled, attempted): (
        i64,
        chrono::DateTime<chrono::Utc>,
        chrono::DateTime<chrono::Utc>,
        chrono::DateTime<chrono::Utc>,
    ) = sqlx::query_as(
        "SELECT id, created_at, scheduled_at, attempted_at FROM skiplock.jobs
         WHERE kind = 'do-the-packing' AND state = 'completed' ORDER BY id LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // The max wait, not the ten-minute quiet period, set the fire time (the first reset
    // computes it from its own clock, a moment after the row's created_at).
    assert!(
        scheduled >= created + chrono::Duration::seconds(8)
            && scheduled < created + chrono::Duration::seconds(600),
        "timer of a window begun at {created} fired at {scheduled}"
    );
    assert!(
        attempted >= scheduled,
        "packed at {attempted}, before {scheduled}"
    );
    // Several resets reached this very timer (the burst came 8 s before it could fire), and
    // each of them left it at the capped time.
    let fires: Vec<Option<chrono::DateTime<chrono::Utc>>> = sqlx::query_scalar(
        "SELECT (result->>'fires_at')::timestamptz FROM skiplock.jobs
         WHERE kind = 'timer-reset' AND state = 'completed' AND (result->>'timer_job')::bigint = $1",
    )
    .bind(id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        fires.len() >= 2,
        "only {} reset(s) reached the timer",
        fires.len()
    );
    assert!(
        fires.iter().all(|f| *f == Some(scheduled)),
        "a reset moved the timer past the max wait: {fires:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_during_a_pack_gives_a_second_pack_with_the_new_content() {
    let db = TestDb::new().await;
    let store = tempfile::tempdir().unwrap();
    let host = "during.test";
    insert_page(&db.pool, host, "/a", "Apple", Some("an apple a day")).await;
    // The upload waits 3 s, so the reset below lands while the first pack runs.
    skiplock_workflows::pack::faults::delay_upload(host, Duration::from_secs(3));
    let w = pack_worker(&db, settings(store.path(), 1, 3600), 4).await;
    let first = pack_now(&db.pool, host).await;
    wait_state(&db.pool, first, "running").await;
    // Wait until the pack has read its pages and sits in the upload delay, so the page below
    // is certainly new to it. Not "idle in transaction after the pages query" in
    // pg_stat_activity: a connection shows that already when the query was only prepared
    // (Parse and Describe have a Sync of their own, before Bind and Execute take the
    // snapshot), and a page committed in between was packed by the first pack.
    wait_for("the first pack to read its pages", LONG, || async {
        (skiplock_workflows::pack::faults::upload_delays_reached(host) > 0).then_some(())
    })
    .await;
    insert_page(&db.pool, host, "/z", "Zebra", Some("a striped zebra")).await;
    timer_reset(&db.pool, host).await;

    wait_for("two packs", LONG, || async {
        (pack_count(&db.pool, host).await >= 2).then_some(())
    })
    .await;
    wait_all_finished(&db.pool, LONG).await;
    w.stop().await.unwrap();

    let (state, attempt, result) = job(&db.pool, first).await;
    assert_eq!(state, "completed");
    let errors: Value = sqlx::query_scalar("SELECT errors FROM skiplock.jobs WHERE id = $1")
        .bind(first)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let all: Vec<(i64, String, String, i32, Option<Value>)> = sqlx::query_as(
        "SELECT id, kind, state::text, attempt, result FROM skiplock.jobs ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        result.unwrap()["packed"],
        1,
        "the first pack saw only the first page (attempt {attempt}, errors {errors}, every job: {all:?})"
    );
    let second: Vec<(i64, Value)> = sqlx::query_as(
        "SELECT id, result FROM skiplock.jobs WHERE kind = 'do-the-packing' AND id <> $1 AND result ? 'packed'",
    )
    .bind(first)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0].1["packed"], 2);
    assert_eq!(pack_count(&db.pool, host).await, 2);
    assert_eq!(
        fts(&artifact(store.path(), host), "zebra"),
        vec![format!("http://{host}/z")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_with_a_later_timer_pending_skips_and_pack_now_brings_the_timer_forward() {
    let db = TestDb::new().await;
    let store = tempfile::tempdir().unwrap();
    let host = "pending.test";
    insert_page(&db.pool, host, "/", "Pending", Some("waiting for quiet")).await;
    let w = pack_worker(&db, settings(store.path(), 600, 3600), 2).await;

    timer_reset(&db.pool, host).await;
    let (timer_id, _) = wait_for("a timer", LONG, || async { timer(&db.pool, host).await }).await;
    // A stray do-the-packing (no unique key, due now; a trusted role's, as skiplock.enqueue
    // refuses the pack queue) finds the live timer and skips.
    let stray: i64 = sqlx::query_scalar(
        "SELECT skiplock._enqueue('do-the-packing', jsonb_build_object('host', $1::text), 'pack', now(), 0::smallint, 25, NULL, 'keep')",
    )
    .bind(host)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    wait_state(&db.pool, stray, "completed").await;
    let result = job(&db.pool, stray).await.2.unwrap();
    assert_eq!(result["skipped"], "timer pending", "{result}");
    assert_eq!(result["pending_job"], timer_id);
    assert_eq!(pack_count(&db.pool, host).await, 0);
    assert_eq!(
        timer(&db.pool, host).await.map(|t| t.0),
        Some(timer_id),
        "the timer is untouched"
    );

    // Pack now (through the CLI) reuses the timer rather than adding a second one.
    let (code, out, err) = run_cmd(&db.url, &["pack", host]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim().parse::<i64>().unwrap(), timer_id);
    wait_state(&db.pool, timer_id, "completed").await;
    assert_eq!(job(&db.pool, timer_id).await.2.unwrap()["packed"], 1);
    assert_eq!(pack_count(&db.pool, host).await, 1);
    w.stop().await.unwrap();

    let (code, out, err) = run_cmd(&db.url, &["pack", "--status", host]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(host) && out.contains(&format!("packs/{host}.sqlite")),
        "{out}"
    );
    let (code, out, _) = run_cmd(&db.url, &["pack", "--status", "--json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["pages"], 1, "{v}");
    // The CLI's timer-reset goes through the SQL API; a bad host is one clear error.
    let (code, out, _) = run_cmd(&db.url, &["timer-reset", host]);
    assert_eq!(code, 0);
    let id: i64 = out.trim().parse().unwrap();
    assert_eq!(job(&db.pool, id).await.0, "available");
    let (code, _, err) = run_cmd(&db.url, &["timer-reset", " "]);
    assert_eq!(code, 1);
    assert!(err.contains("host must not be empty"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_artifact_opens_with_sqlite_and_fts5_finds_a_word() {
    let db = TestDb::new().await;
    let store = tempfile::tempdir().unwrap();
    let host = "127.0.0.1:8080";
    insert_page(
        &db.pool,
        host,
        "/cats",
        "Cats",
        Some("the cat sat on the mat"),
    )
    .await;
    insert_page(
        &db.pool,
        host,
        "/dogs",
        "Dogs",
        Some("dogs chase the postman"),
    )
    .await;
    insert_page(&db.pool, host, "/blocked", "Blocked", None).await;
    insert_page(
        &db.pool,
        "other.test",
        "/cats",
        "Other",
        Some("another cat elsewhere"),
    )
    .await;
    let w = pack_worker(&db, settings(store.path(), 1, 3600), 2).await;
    let id = pack_now(&db.pool, host).await;
    wait_state(&db.pool, id, "completed").await;
    w.stop().await.unwrap();

    let path = artifact(store.path(), host);
    assert_eq!(fts(&path, "postman"), vec![format!("http://{host}/dogs")]);
    assert_eq!(fts(&path, "cat"), vec![format!("http://{host}/cats")]);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM pages", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2, "only pages with content, only this host");
    let (pages, bytes, key): (i64, i64, String) =
        sqlx::query_as("SELECT pages, bytes, object_key FROM skiplock.packs WHERE host = $1")
            .bind(host)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((pages, key.as_str()), (2, "packs/127.0.0.1:8080.sqlite"));
    assert_eq!(bytes as u64, std::fs::metadata(&path).unwrap().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_pack_is_rescued_and_the_pack_retried() {
    let db = TestDb::new().await;
    let store = tempfile::tempdir().unwrap();
    let host = "crash.test";
    insert_page(&db.pool, host, "/", "Crash", Some("survives a kill")).await;
    let dir = store.path().to_str().unwrap().to_string();
    let env = |delay: &'static str| {
        vec![
            ("SKIPLOCK_STORE", dir.clone()),
            ("SKIPLOCK_FAULT_UPLOAD_DELAY", delay.to_string()),
            ("SKIPLOCK_POLL_INTERVAL", "200ms".to_string()),
            ("SKIPLOCK_BACKOFF_UNIT", "10ms".to_string()),
            ("SKIPLOCK_QUEUES", "pack=2".to_string()),
        ]
    };
    let spawn = |delay: &'static str| {
        let e = env(delay);
        let refs: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        spawn_worker_process(&db.url, &[], &refs)
    };

    let id = pack_now(&db.pool, host).await;
    let mut first = spawn("60s");
    wait_state(&db.pool, id, "running").await;
    sigkill(&first);
    first.wait().unwrap();
    assert!(
        !artifact(store.path(), host).exists(),
        "nothing was uploaded before the kill"
    );
    assert_eq!(pack_count(&db.pool, host).await, 0);
    // The dead process sends no more heartbeats; the rescuer (called here, at a moment the
    // test controls, instead of waiting out a window) returns its job to the queue. The
    // second worker's own window is the default minute, so it never rescues its live pack.
    rescue_now(&db.pool, id).await;

    let mut second = spawn("0s");
    wait_state(&db.pool, id, "completed").await;
    sigterm(&second);
    second.wait().unwrap();
    let (_, attempt, result) = job(&db.pool, id).await;
    assert_eq!(attempt, 2, "the rescued job ran a second attempt");
    assert_eq!(result.unwrap()["packed"], 1);
    let errors: Value = sqlx::query_scalar("SELECT errors FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(errors.to_string().contains("rescued"), "{errors}");
    assert_eq!(
        fts(&artifact(store.path(), host), "survives"),
        vec![format!("http://{host}/")]
    );
    assert_eq!(pack_count(&db.pool, host).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upload_is_retried_and_nothing_is_recorded_until_one_succeeds() {
    let db = TestDb::new().await;
    let store = tempfile::tempdir().unwrap();
    let host = "unreachable.test";
    insert_page(&db.pool, host, "/", "Down", Some("the store is down")).await;
    // A file where the store's packs/ directory must go: every upload fails, as against a
    // store that cannot be reached, until the test removes it.
    let blocker = store.path().join("packs");
    std::fs::write(&blocker, "not a directory").unwrap();
    let w = pack_worker(&db, settings(store.path(), 1, 3600), 2).await;
    let id = pack_now(&db.pool, host).await;

    // Two failed attempts: each is an error on the job, which goes back to the queue (it is
    // not acknowledged as done), and no pack is recorded.
    let row = wait_job(&db.pool, id, "two failed uploads", |r| {
        r.errors.as_array().is_some_and(|e| e.len() >= 2)
    })
    .await;
    assert_ne!(row.state.as_str(), "completed");
    assert_eq!(row.result, None);
    for e in row.errors.as_array().unwrap() {
        let msg = e["error"].as_str().unwrap_or_default();
        assert!(msg.contains("object store"), "{msg}");
    }
    assert!(row.attempt >= 2, "retried: attempt {}", row.attempt);
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.packs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(recorded, 0, "a pack whose upload failed left a packs row");

    // The store comes back: the next retry uploads and records the pack.
    std::fs::remove_file(&blocker).unwrap();
    wait_state(&db.pool, id, "completed").await;
    w.stop().await.unwrap();
    let (_, attempt, result) = job(&db.pool, id).await;
    assert_eq!(result.unwrap()["packed"], 1);
    let errors: Value = sqlx::query_scalar("SELECT errors FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        errors.as_array().unwrap().len() as i32,
        attempt - 1,
        "every attempt but the last failed: {errors}"
    );
    assert_eq!(pack_count(&db.pool, host).await, 1);
    assert_eq!(
        fts(&artifact(store.path(), host), "store"),
        vec![format!("http://{host}/")]
    );
}

/// A child process killed (and reaped) when this is dropped.
fn find_in_path(bin: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(bin))
                .find(|f| f.is_file())
        })
        .unwrap_or(None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_to_an_s3_compatible_server() {
    let Some(moto) = find_in_path("moto_server") else {
        // CI (`.ci/run`) installs moto_server and sets this, so there a missing server fails
        // the test; only a developer's machine may skip it.
        let required = std::env::var("SKIPLOCK_TEST_REQUIRE_S3").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "moto_server not found on PATH but SKIPLOCK_TEST_REQUIRE_S3=1: pip install 'moto[server]'"
        );
        eprintln!(
            "SKIPPED uploads_to_an_s3_compatible_server: moto_server not found (pip install 'moto[server]')"
        );
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = std::process::Command::new(moto)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start moto_server");
    // Stopped however the test ends, so a failure leaves no server behind.
    let server = KillOnDrop(server);
    let endpoint = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    wait_for("moto_server to answer", LONG, || async {
        http.put(format!("{endpoint}/skiplock-test"))
            .send()
            .await
            .ok()
            .filter(|r| r.status().is_success())
    })
    .await;

    let db = TestDb::new().await;
    let host = "s3.test";
    insert_page(&db.pool, host, "/", "Cloud", Some("objects in a bucket")).await;
    let envs = [
        ("SKIPLOCK_STORE", "s3://skiplock-test/crawl"),
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
        ("SKIPLOCK_QUEUES", "pack=2"),
        ("SKIPLOCK_POLL_INTERVAL", "200ms"),
    ];
    let mut worker = spawn_worker_process(&db.url, &[], &envs);
    let id = pack_now(&db.pool, host).await;
    wait_state(&db.pool, id, "completed").await;
    sigterm(&worker);
    worker.wait().unwrap();

    use object_store::ObjectStoreExt;
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_bucket_name("skiplock-test")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_region("us-east-1")
        .build()
        .unwrap();
    // The whole body is read before the server stops (a GET returns once the headers are in;
    // the body still streams from the server).
    let got = match s3
        .get(&object_store::path::Path::from(
            "crawl/packs/s3.test.sqlite",
        ))
        .await
    {
        Ok(r) => r.bytes().await,
        Err(e) => Err(e),
    };
    drop(server);
    let bytes = got.expect("artifact object in the bucket");
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), &bytes).unwrap();
    assert_eq!(fts(f.path(), "bucket"), vec![format!("http://{host}/")]);
    let store: String = sqlx::query_scalar("SELECT store FROM skiplock.packs WHERE host = $1")
        .bind(host)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(store, "s3://skiplock-test/crawl");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pack_arm_keeps_one_timer_caps_it_never_pulls_it_back_and_leaves_pack_now_alone() {
    let db = TestDb::new().await;
    type Row = (
        i64,
        chrono::DateTime<chrono::Utc>,
        chrono::DateTime<chrono::Utc>,
    );
    async fn arm(pool: &PgPool, host: &str, quiet: i64, max_wait: i64) -> Row {
        // created_at is read after the arm, in a statement of its own (it never changes).
        let (id, at): (i64, chrono::DateTime<chrono::Utc>) = sqlx::query_as(
            "SELECT timer_id, fires_at FROM skiplock.pack_arm_at($1, make_interval(secs => $2), make_interval(secs => $3))",
        )
        .bind(host)
        .bind(quiet as f64)
        .bind(max_wait as f64)
        .fetch_one(pool)
        .await
        .unwrap();
        let created = sqlx::query_scalar("SELECT created_at FROM skiplock.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap();
        (id, created, at)
    }
    let h = "arm.test";
    // pack_now (below) needs a host with pages.
    insert_page(&db.pool, h, "/", "Arm", Some("armed")).await;
    let (id, created, s1) = arm(&db.pool, h, 600, 3600).await;
    assert!(s1 > created);
    // A shorter quiet period applied later never pulls the timer back.
    assert_eq!(arm(&db.pool, h, 1, 3600).await, (id, created, s1));
    // The max wait caps the push: created_at + 900 s exactly.
    let (id2, _, s3) = arm(&db.pool, h, 1200, 900).await;
    assert_eq!(id2, id);
    assert_eq!(s3, created + chrono::Duration::seconds(900));
    // Pack now brings the same timer to now, and later resets leave it there.
    assert_eq!(pack_now(&db.pool, h).await, id);
    let (_, _, s4) = arm(&db.pool, h, 600, 3600).await;
    assert!(
        s4 < s3,
        "pack now moved the timer to now and a reset did not push it away"
    );

    // Many concurrent arms of a fresh host: one timer.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..25 {
                ids.push(arm(&pool, "many.test", 60, 3600).await.0);
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.extend(t.await.unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let n: i64 =
        sqlx::query_scalar("SELECT count(*) FROM skiplock.jobs WHERE args->>'host' = 'many.test'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(n, 1);
}

/// The debounce rule lives in SQL alone (`skiplock._pack_next_fire`, used by
/// `skiplock.pack_arm_at`): when a reset at `now` makes a host's timer fire, on a table of
/// cases (seconds after a fixed time; quiet 60 s, max wait 3600 s unless given).
#[tokio::test]
async fn the_debounce_rule_is_the_sql_functions() {
    let db = TestDb::new().await;
    /// (now, window_start, fires_at, max_wait, expected fire time, what it shows)
    type Case = (i64, Option<i64>, Option<i64>, i64, i64, &'static str);
    let cases: &[Case] = &[
        (
            0,
            None,
            None,
            3600,
            60,
            "a first reset fires after the quiet period",
        ),
        (
            30,
            Some(0),
            Some(60),
            3600,
            90,
            "each reset pushes the timer forward",
        ),
        (89, Some(0), Some(90), 3600, 149, "… and again"),
        (
            10,
            Some(0),
            Some(90),
            3600,
            90,
            "a late-applied older reset never pulls it back",
        ),
        (
            3590,
            Some(0),
            Some(3600),
            3600,
            3600,
            "the max wait caps a host that never goes quiet",
        ),
        (
            3570,
            Some(0),
            Some(3600),
            3600,
            3600,
            "… just before the cap",
        ),
        (4000, Some(0), Some(3600), 3600, 3600, "… and after it"),
        (
            0,
            None,
            None,
            10,
            10,
            "a max wait shorter than the quiet period wins at once",
        ),
    ];
    for (now, window, fires, max_wait, want, what) in cases {
        let got: f64 = sqlx::query_scalar(
            "SELECT extract(epoch FROM skiplock._pack_next_fire(
                 t0 + make_interval(secs => $1), interval '60 seconds', make_interval(secs => $4),
                 t0 + make_interval(secs => $2), t0 + make_interval(secs => $3)) - t0)::float8
             FROM (SELECT timestamptz '2026-01-01 00:00:00+00' AS t0) AS c",
        )
        .bind(*now as f64)
        .bind(window.map(|w| w as f64))
        .bind(fires.map(|f| f as f64))
        .bind(*max_wait as f64)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(got, *want as f64, "{what}");
    }
}
