//! Bad input at every core entry point gets a clear answer (docs/errors.md): a one-line
//! error and a non-zero exit from the CLI, a SQL error from the functions, a discarded job
//! with the decode error recorded for job args. Never a panic or a silently dropped job.
//! Extends the cases already in tests/cli.rs and tests/queue.rs.

mod support;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use skiplock::queue::{NewJob, OnConflict};
use skiplock::store::jobs::enqueue;
use skiplock::worker::builtin;
use support::*;

/// The last stderr line, which must be the one-line error.
fn error_line(code: i32, err: &str) -> String {
    assert_ne!(code, 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let last = err.lines().last().unwrap_or("").to_string();
    assert!(last.starts_with("error: "), "stderr: {err}");
    last
}

#[tokio::test]
async fn cli_hostile_oversized_and_out_of_range_input() {
    let db = TestDb::new().await;
    let long = "k".repeat(10_000);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["enqueue", &long], "at most 200"),
        (vec!["enqueue", "noop", "--queue", &long], "queue name"),
        (
            vec!["enqueue", "noop", "--max-attempts", "0"],
            "must be at least 1",
        ),
        (
            vec!["enqueue", "noop", "\"just a string\""],
            "expected a JSON object",
        ),
        (vec!["enqueue", "noop", "null"], "expected a JSON object"),
        (vec!["enqueue", "noop", "{\"a\": 1"], "invalid ARGS_JSON"),
        (vec!["enqueue", "noop", "{\"s\": \"\\u0000\"}"], "\\u0000"),
        (
            vec!["enqueue", "noop", "{\"s\": \"\\ud800\"}"],
            "invalid ARGS_JSON",
        ),
        (vec!["enqueue", "noop", "--in", "99999999999d"], "--in"),
        (
            vec!["jobs", "--state", "'; DROP TABLE skiplock.jobs; --"],
            "unknown job state",
        ),
        (vec!["cancel", "0"], "does not exist"),
        (vec!["job", "0"], "not found"),
    ];
    for (args, want) in &cases {
        let (code, _, err) = run_cmd(&db.url, args);
        let line = error_line(code, &err);
        assert!(line.contains(want), "{:?}: {line}", &args[..1]);
        assert!(
            line.len() < 2000,
            "error line is not short: {} bytes",
            line.len()
        );
    }
    // A unique key of 10,000 random characters: rejected with a message, not a btree error.
    let key: String = (0..10_000)
        .map(|i| char::from(b'a' + ((i * 7919 + i / 3) % 26) as u8))
        .collect();
    let (code, _, err) = run_cmd(&db.url, &["enqueue", "noop", "--unique-key", &key]);
    let line = error_line(code, &err);
    assert!(line.contains("unique_key"), "{line}");

    // clap rejects malformed values itself: exit 2, naming the flag.
    for args in [
        vec!["enqueue", "noop", "--priority", "-40000"],
        vec!["enqueue", "noop", "--max-attempts", "3000000000"],
        vec!["job", "abc"],
        vec!["enqueue", "noop", "--in", "-5s"],
        vec!["cancel", "-1"],
        vec!["jobs", "--limit", "-1"],
        vec!["frobnicate"],
    ] {
        let (code, _, err) = run_cmd(&db.url, &args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.starts_with("error:"), "{err}");
    }
    // Non-UTF-8 bytes in an argument.
    let out = cmd(&db.url)
        .arg("enqueue")
        .arg(OsStr::from_bytes(b"no\xffop"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("UTF-8"));

    // Hostile strings are data: quotes and SQL in kind, queue and args round-trip.
    let evil = "'; DROP TABLE skiplock.jobs; --";
    let (code, id, err) = run_cmd(
        &db.url,
        &[
            "enqueue",
            evil,
            "{\"q\": \"\\\"'; DELETE FROM skiplock.jobs\"}",
            "--queue",
            "it's",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run_cmd(&db.url, &["job", id.trim()]);
    assert_eq!(code, 0);
    assert!(out.contains(evil), "{out}");
    // An unknown kind is accepted (any process may handle it later) and shows up in stats.
    let (code, out, err) = run_cmd(&db.url, &["stats"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(evil), "{out}");
    assert_eq!(count_state(&db.pool, "available").await, 1);
}

#[tokio::test]
async fn settings_and_dotenv_errors_name_the_setting() {
    let db = TestDb::new().await;
    // (setting, value, the answer docs/errors.md promises)
    for (name, value, want) in [
        (
            "SKIPLOCK_MAX_CONNECTIONS",
            "-1",
            "\"-1\" is not a positive whole number",
        ),
        (
            "SKIPLOCK_MAX_CONNECTIONS",
            "lots",
            "\"lots\" is not a positive whole number",
        ),
        ("SKIPLOCK_MAX_CONNECTIONS", "1", "must be at least 2"),
        ("SKIPLOCK_QUEUES", "=5", "queue entry \"=5\" has no name"),
        (
            "SKIPLOCK_QUEUES",
            "default=-3",
            "concurrency \"-3\" is not a positive whole number",
        ),
        (
            "SKIPLOCK_BACKOFF_UNIT",
            "forever",
            "invalid duration \"forever\"",
        ),
        (
            "SKIPLOCK_RESCUE_AFTER",
            "'; DROP TABLE x",
            "invalid duration",
        ),
        ("SKIPLOCK_JOB_TIMEOUT", "10", "invalid duration \"10\""),
        ("SKIPLOCK_POLL_INTERVAL", "1ms", "must be at least 10ms"),
    ] {
        let out = cmd(&db.url)
            .args(["worker", "--exit-when-idle"])
            .env(name, value)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code().unwrap_or(-1);
        let line = error_line(code, &err);
        assert_eq!(code, 1, "{name}={value}: {err}");
        assert!(
            line.contains(&format!("invalid setting {name}: ")) && line.contains(want),
            "{name}={value}: {line}"
        );
    }
    // Nothing ran: every bad setting stopped the worker before it registered.
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.workers").await,
        0
    );
    // A setting that is not UTF-8 is an error, not silently the default.
    let out = cmd(&db.url)
        .args(["worker", "--exit-when-idle"])
        .env("SKIPLOCK_POLL_INTERVAL", OsStr::from_bytes(b"1\xffs"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let line = error_line(out.status.code().unwrap_or(-1), &err);
    assert!(line.contains("SKIPLOCK_POLL_INTERVAL"), "{line}");

    // A malformed .env names the file and the problem.
    for content in [
        &b"DATABASE_URL=x\nTHIS IS NOT A SETTING\n"[..],
        &b"A=\"unterminated\n"[..],
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".env"), content).unwrap();
        let out = std::process::Command::new(bin())
            .arg("jobs")
            .current_dir(dir.path())
            .env_remove("DATABASE_URL")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let line = error_line(out.status.code().unwrap_or(-1), &err);
        assert!(line.contains(".env"), "{line}");
    }
}

#[tokio::test]
async fn sql_functions_reject_bad_input_with_sql_errors() {
    let db = TestDb::new().await;
    let cases: Vec<(&str, &str)> = vec![
        ("SELECT skiplock.enqueue(NULL)", "kind must not be empty"),
        (
            "SELECT skiplock.enqueue('noop', NULL)",
            "must be a JSON object, got NULL",
        ),
        ("SELECT skiplock.enqueue('noop', '\"s\"')", "got string"),
        (
            "SELECT skiplock.enqueue('noop', '{bad')",
            "invalid input syntax for type json",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{\"s\": \"\\u0000\"}')",
            "unsupported Unicode escape sequence",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', max_attempts => 0)",
            "max_attempts must be at least 1",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', priority => NULL)",
            "priority must not be NULL",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', priority => (-32769)::smallint)",
            "smallint out of range",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', priority => 40000)",
            "does not exist",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', queue => NULL)",
            "queue name",
        ),
        ("SELECT skiplock.enqueue(repeat('k', 10000))", "at most 200"),
        (
            "SELECT skiplock.request_fetch('http://' || repeat(md5(g::text), 313) || '.com/') FROM generate_series(1, 1) g",
            "at most 253",
        ),
        (
            "SELECT skiplock.request_fetch('ftp://example.com/')",
            "only http and https",
        ),
        ("SELECT skiplock.timer_reset('')", "host"),
        (
            "SELECT skiplock.submit_packet(repeat('/x', 3000))",
            "at most 4096",
        ),
        (
            "SELECT skiplock.submit_packet('')",
            "needs a source directory",
        ),
        (
            "SELECT skiplock.enqueue('noop', unique_key => 'k', on_conflict => NULL)",
            "on_conflict",
        ),
        (
            "SELECT skiplock.enqueue('noop', unique_key => repeat(md5(g::text), 320)) FROM generate_series(1, 1) g",
            "unique_key",
        ),
        (
            "SELECT skiplock.enqueue_many('noop', ARRAY['{}'::jsonb, NULL])",
            "args[2]",
        ),
        (
            "SELECT skiplock.enqueue_many('noop', ARRAY['{}'::jsonb, '[1]'])",
            "args[2]",
        ),
        (
            "SELECT skiplock.enqueue_many('', ARRAY['{}'::jsonb])",
            "kind must not be empty",
        ),
        (
            "SELECT skiplock.enqueue_many('noop', ARRAY[jsonb_build_object('x', repeat('a', 1048576))])",
            "at most 524288",
        ),
        ("SELECT skiplock.cancel(NULL)", "does not exist"),
        ("SELECT skiplock.retry(-1)", "does not exist"),
        (
            "SELECT * FROM skiplock.jobs WHERE state = 'done'",
            "invalid input value for enum",
        ),
    ];
    for (sql, want) in cases {
        let err = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&db.pool)
            .await
            .expect_err(sql);
        let msg = err.to_string();
        assert!(msg.contains(want), "{sql}: {msg}");
    }
    // Our own errors carry SQLSTATE 22023 (invalid_parameter_value) for clients to match on.
    let e = sqlx::query("SELECT skiplock.enqueue('')")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert_eq!(
        e.as_database_error().unwrap().code().as_deref(),
        Some("22023")
    );
    assert_eq!(
        count_state(&db.pool, "available").await,
        0,
        "nothing half-inserted"
    );
}

#[tokio::test]
async fn library_enqueue_rejects_oversized_and_nul_args_clearly() {
    let db = TestDb::new().await;
    let big = json!({ "x": "a".repeat(1024 * 1024) });
    let e = enqueue(&db.pool, &NewJob::new("noop", big))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("at most 524288"), "{e}");
    let e = enqueue(&db.pool, &NewJob::new("noop", json!({"s": "a\u{0}b"})))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("NUL character (\\u0000) at $.s"),
        "{e}"
    );
    let e = enqueue(&db.pool, &NewJob::new("no\u{0}op", json!({})))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("kind contains a NUL character"),
        "{e}"
    );
    let e = enqueue(&db.pool, &NewJob::new("noop", json!({})).max_attempts(-1))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_attempts"), "{e}");
    // Highly compressible (it would fit the index), yet over the documented 1000 bytes.
    let e = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({})).unique_key("x".repeat(10_000), OnConflict::Keep),
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("unique_key is 10000 bytes long (at most 1000)"),
        "{e}"
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.jobs").await,
        0,
        "a rejected enqueue left a row"
    );
}

#[tokio::test]
async fn cancel_and_retry_refusals_carry_their_sqlstates() {
    let db = TestDb::new().await;
    let finished: i64 = sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, state, attempt, finalized_at) \
         VALUES ('noop', 'completed', 1, now()) RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let running: i64 = sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, state, attempt, attempted_at, heartbeat_at) \
         VALUES ('noop', 'running', 1, now(), now()) RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // (call, message, SQLSTATE): docs/errors.md's table of SQL answers.
    let cases = [
        (
            format!("SELECT skiplock.cancel({finished})"),
            format!("skiplock: job {finished} is already completed and cannot be cancelled"),
            "55000",
        ),
        (
            format!("SELECT skiplock.retry({running})"),
            format!("skiplock: job {running} is running and cannot be retried"),
            "55000",
        ),
        (
            "SELECT skiplock.cancel(NULL)".to_string(),
            "skiplock: job <NULL> does not exist".to_string(),
            "P0002",
        ),
        (
            "SELECT skiplock.cancel(424242)".to_string(),
            "skiplock: job 424242 does not exist".to_string(),
            "P0002",
        ),
        (
            "SELECT skiplock.retry(-1)".to_string(),
            "skiplock: job -1 does not exist".to_string(),
            "P0002",
        ),
    ];
    for (sql, message, code) in &cases {
        let e = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&db.pool)
            .await
            .expect_err(sql);
        let d = e.as_database_error().expect("a database error");
        assert_eq!(d.message(), message.as_str(), "{sql}");
        assert_eq!(d.code().as_deref(), Some(*code), "{sql}: {d}");
    }
    // Both rows are as they were.
    let states: Vec<String> =
        sqlx::query_scalar("SELECT state::text FROM skiplock.jobs ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(states, ["completed", "running"]);
    // The CLI gives the same answers on one line, exit 1.
    for (args, want) in [
        (
            vec!["cancel".to_string(), finished.to_string()],
            "already completed and cannot be cancelled",
        ),
        (
            vec!["retry".to_string(), running.to_string()],
            "is running and cannot be retried",
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = run_cmd(&db.url, &args);
        let line = error_line(code, &err);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(line.contains(want), "{args:?}: {line}");
    }
}

#[tokio::test]
async fn bad_args_of_builtin_kinds_discard_the_job_with_the_decode_error() {
    let db = TestDb::new().await;
    let evil = "'; DROP TABLE skiplock.jobs; --";
    let long = "m".repeat(10_000);
    let cases: Vec<(&str, serde_json::Value, &str, &str)> = vec![
        ("sleep", json!({}), "discarded", "missing field `ms`"),
        ("sleep", json!({"ms": "ten"}), "discarded", "invalid type"),
        ("sleep", json!({"ms": -5}), "discarded", "invalid value"),
        ("sleep", json!({"ms": 1e30}), "discarded", "invalid type"),
        (
            "sleep",
            json!({"ms": 1, "extra": true}),
            "discarded",
            "unknown field `extra`",
        ),
        ("fail", json!({"message": 5}), "discarded", "invalid type"),
        ("fail", json!({"message": evil}), "discarded", evil),
        ("fail", json!({"message": long}), "discarded", &long[..8000]),
        (
            "noop",
            json!({"anything": [1, {"goes": null}], "q": evil}),
            "completed",
            "",
        ),
        ("sleep", json!({"ms": 1}), "completed", ""),
    ];
    let mut ids = Vec::new();
    for (kind, args, _, _) in &cases {
        ids.push(
            enqueue(&db.pool, &NewJob::new(*kind, args.clone()).max_attempts(1))
                .await
                .unwrap()
                .id,
        );
    }
    let mut settings = fast_settings();
    settings.queues = Some(BTreeMap::from([("default".to_string(), 4)]));
    let w = start_worker(&db.pool, settings, |mut b| {
        builtin::register(b.registry_mut());
        b
    });
    wait_all_finished(&db.pool, Duration::from_secs(60)).await;
    w.stop().await.unwrap();
    for ((kind, args, state, want), id) in cases.iter().zip(ids) {
        let (got, errors): (String, serde_json::Value) =
            sqlx::query_as("SELECT state::text, errors FROM skiplock.jobs WHERE id = $1")
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(&got, state, "{kind} {args}");
        if state == &"discarded" {
            let msg = errors[0]["error"].as_str().unwrap_or_default();
            assert!(msg.contains(want), "{kind} {args}: {msg:.200}");
        } else {
            assert_eq!(errors, json!([]));
        }
    }
    // The table survived the hostile strings.
    assert_eq!(count_state(&db.pool, "completed").await, 2);
}

/// Inserts, as the superuser the test pool logs in as (past enqueue's check), a job whose
/// args are valid jsonb that serde_json cannot read; returns its id.
async fn insert_unreadable(db: &TestDb, args: &str) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, args, queue) VALUES ('zzz', $1::text::jsonb, 'nowhere') RETURNING id",
    )
    .bind(args)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn job_views_show_args_serde_json_cannot_read_as_text() {
    // docs/errors.md: `skiplock job`, `skiplock jobs` and the
    // console's job page read args as text, so a row written past enqueue's check is shown,
    // not an error.
    let db = TestDb::new().await;
    let deep = format!("{}1{}", "{\"a\": ".repeat(300), "}".repeat(300));
    let cases = [
        (deep.as_str(), "{\"a\": {\"a\": "),
        (r#"{"x": 1e400}"#, "{\"x\": 1000000"),
    ];
    let console = {
        let mut c = cmd(&db.url);
        c.args(["web", "--listen", "127.0.0.1:0"])
            .env_remove("SKIPLOCK_WEB_TOKEN")
            .env_remove("SKIPLOCK_WEB_LISTEN");
        Served::start(c, Duration::from_secs(60))
    };
    for (args, shown) in cases {
        let id = insert_unreadable(&db, args).await;
        let (code, out, err) = run_cmd(&db.url, &["job", &id.to_string()]);
        assert_eq!(code, 0, "{err}");
        let line = out.lines().find(|l| l.starts_with("args:")).unwrap_or("");
        assert!(line.contains(shown), "{line:.200}");
        let (code, out, err) = run_cmd(&db.url, &["job", &id.to_string(), "--json"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(shown), "{out:.200}");
        let (code, out, err) = run_cmd(&db.url, &["jobs", "--queue", "nowhere"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(&id.to_string()), "{out:.200}");
        // The library's readers too (the console's reader, and `get_job`).
        let row = skiplock_console::store::web::job(&db.pool, id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.id, id);
        let row = skiplock::store::jobs::get_job(&db.pool, id).await.unwrap();
        assert_eq!(row.id, id);
        let page = reqwest::get(console.url(&format!("/jobs/{id}")))
            .await
            .unwrap();
        assert_eq!(page.status(), 200, "/jobs/{id}");
        let body = page.text().await.unwrap();
        let text = ["&#34;", "&quot;", "&#x22;"]
            .iter()
            .fold(body, |b, q| b.replace(q, "\""));
        let at = text.find("<pre").unwrap_or(0);
        assert!(text[at..].contains(shown), "{:.2000}", &text[at..]);
    }
}

#[tokio::test]
async fn enqueue_refuses_args_serde_json_cannot_read_naming_the_problem() {
    // docs/errors.md: valid jsonb the worker could not decode
    // (serde_json reads at most 127 nested arrays/objects, and numbers within f64) is refused
    // by every enqueue path, so it never reaches a claim.
    let db = TestDb::new().await;
    let nest = |d: usize| format!("{}1{}", "{\"a\": ".repeat(d), "}".repeat(d));
    let arrays = |d: usize| format!("{{\"a\": {}1{}}}", "[".repeat(d - 1), "]".repeat(d - 1));
    let too_deep = "nested 128 or more levels deep";
    let too_big = "outside the range of a 64-bit float";
    let refused: Vec<(String, &str)> = vec![
        (nest(300), too_deep),
        (nest(128), too_deep),
        (arrays(128), too_deep),
        (r#"{"x": 1e400}"#.into(), too_big),
        (r#"{"x": -1e400}"#.into(), too_big),
        (
            r#"{"x": [1, {"y": 1.7976931348623159e308}]}"#.into(),
            too_big,
        ),
        // f64::MAX's shortest form: Postgres sends it as 309 digits, which serde_json reads
        // as out of range (skiplock._unreadable_args says why).
        (r#"{"x": 1.7976931348623157e308}"#.into(), too_big),
    ];
    let accepted: Vec<String> = vec![
        nest(127),
        arrays(127),
        r#"{"x": 1e308, "y": -1e308, "z": 1.7976931348623156e308, "w": 1e-400}"#.into(),
        format!(r#"{{"s": "{}"}}"#, "[{".repeat(200)),
    ];
    for (args, want) in &refused {
        for sql in [
            "SELECT skiplock.enqueue('noop', $1::text::jsonb)",
            "SELECT skiplock.enqueue('noop', $1::text::jsonb, unique_key => 'k')",
            "SELECT skiplock.enqueue_many('noop', ARRAY['{}'::jsonb, '{}', $1::text::jsonb])",
        ] {
            let e = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(args)
                .execute(&db.pool)
                .await
                .expect_err(sql)
                .to_string();
            assert!(e.contains(want), "{sql} {args:.60}: {e}");
            if sql.contains("enqueue_many") {
                assert!(e.contains("args[3]"), "{e}");
            }
        }
    }
    // A value built in Rust has no depth limit, and serializes: the library's enqueue is
    // refused the same way (it goes through skiplock.enqueue).
    let deep = (0..127).fold(json!(1), |v, _| json!({ "a": v }));
    let e = enqueue(&db.pool, &NewJob::new("noop", json!({ "a": deep })))
        .await
        .unwrap_err();
    assert!(e.to_string().contains(too_deep), "{e}");
    for args in &accepted {
        sqlx::query("SELECT skiplock.enqueue('noop', $1::text::jsonb)")
            .bind(args)
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("{args:.60}: {e}"));
        sqlx::query("SELECT skiplock.enqueue_many('noop', ARRAY[$1::text::jsonb])")
            .bind(args)
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("{args:.60}: {e}"));
    }
    assert_eq!(count_state(&db.pool, "available").await, 8);
}

/// The enqueue check matches the decoder exactly: a number from serde_json's float edge on
/// (1.7976931348623156225e308 in magnitude, as Postgres sends it: plain digits) is refused in
/// args and in meta by every enqueue path, naming the problem, and a job whose args and meta
/// hold the largest magnitude below it is read and run by a worker, not discarded.
#[tokio::test]
async fn enqueue_refuses_numbers_from_the_decoders_edge_on_in_args_and_meta_and_a_worker_runs_one_below_it()
 {
    let db = TestDb::new().await;
    let p = &db.pool;
    let edge = "outside the range of a 64-bit float";
    for number in [
        "1.7976931348623157e308",
        "-1.7976931348623157e308",
        "1.7976931348623156225e308",
    ] {
        let doc = format!(r#"{{"m": {number}}}"#);
        for (sql, what) in [
            (
                "SELECT skiplock.enqueue('noop', $1::text::jsonb)",
                "job args",
            ),
            (
                "SELECT skiplock.enqueue('noop', meta => $1::text::jsonb)",
                "meta",
            ),
            (
                "SELECT skiplock.enqueue_many('noop', ARRAY['{}'::jsonb], meta => $1::text::jsonb)",
                "meta",
            ),
            (
                "SELECT skiplock.enqueue_many('noop', ARRAY[$1::text::jsonb])",
                "args[1]",
            ),
            (
                "SELECT skiplock.enqueue_flow(jsonb_build_array(jsonb_build_object(
                     'name', 'a', 'kind', 'noop', 'meta', $1::text::jsonb)))",
                "meta",
            ),
            (
                "SELECT skiplock.enqueue_flow(jsonb_build_array(jsonb_build_object(
                     'name', 'a', 'kind', 'noop', 'args', $1::text::jsonb)))",
                "job args",
            ),
        ] {
            let e = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(&doc)
                .execute(&**p)
                .await
                .expect_err(sql)
                .to_string();
            assert!(e.contains(edge) && e.contains(what), "{sql} {doc}: {e}");
        }
    }
    assert_eq!(count(p, "SELECT count(*) FROM skiplock.jobs").await, 0);
    // The largest magnitude below the edge Postgres can hold with these digits, in both.
    let below = format!("17976931348623156224{}.5", "9".repeat(289));
    let id: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('noop', jsonb_build_object('x', $1::numeric),
                                 meta => jsonb_build_object('m', -$1::numeric))",
    )
    .bind(&below)
    .fetch_one(&**p)
    .await
    .unwrap();
    let mut qs = fast_settings();
    qs.queues = Some(BTreeMap::from([("default".to_string(), 1)]));
    let worker = start_worker(p, qs, |mut b| {
        builtin::register(b.registry_mut());
        b
    });
    wait_job(p, id, "completed", |r| r.state.as_str() == "completed").await;
    worker.stop().await.unwrap();
}
