//! The `skiplock` binary: output of the operator commands, and one clear line plus a
//! non-zero exit for every kind of bad input.

mod support;

use support::*;

fn one_line(stderr: &str) -> String {
    // Logging is on; the error is the last line and starts with "error:".
    let last = stderr.lines().last().unwrap_or("").to_string();
    assert!(last.starts_with("error: "), "stderr: {stderr}");
    last
}

#[tokio::test]
async fn enqueue_list_show_cancel_retry_stats() {
    let db = TestDb::new().await;
    let (code, out, err) = run_cmd(
        &db.url,
        &[
            "enqueue",
            "noop",
            r#"{"a": 1}"#,
            "--queue",
            "q1",
            "--priority",
            "-2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let id: i64 = out.trim().parse().expect("prints the id");
    let (code, out, _) = run_cmd(&db.url, &["jobs", "--state", "available"]);
    assert_eq!(code, 0);
    assert!(out.contains("noop") && out.contains("q1"), "{out}");
    let (code, out, _) = run_cmd(&db.url, &["jobs", "--json", "--queue", "q1"]);
    assert_eq!(code, 0);
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["id"], id);
    assert_eq!(rows[0]["priority"], -2);
    let (code, out, _) = run_cmd(&db.url, &["job", &id.to_string()]);
    assert_eq!(code, 0);
    assert!(out.contains("state:         available"), "{out}");
    assert_eq!(run_cmd(&db.url, &["cancel", &id.to_string()]).0, 0);
    let (code, _, err) = run_cmd(&db.url, &["cancel", &id.to_string()]);
    assert_eq!(code, 1);
    assert!(one_line(&err).contains("already cancelled"), "{err}");
    assert_eq!(run_cmd(&db.url, &["retry", &id.to_string()]).0, 0);
    let (code, out, _) = run_cmd(&db.url, &["stats", "--json"]);
    assert_eq!(code, 0);
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(stats["queues"][0]["queue"], "q1");
    assert_eq!(stats["queues"][0]["count"], 1);
    // Nobody handles noop right now (no worker is running).
    assert_eq!(stats["unhandled_kinds"][0]["kind"], "noop");
    let (code, out, _) = run_cmd(&db.url, &["stats"]);
    assert_eq!(code, 0);
    assert!(out.contains("no live worker handles: noop (1)"), "{out}");
}

/// `skiplock cancel --key` and `skiplock reschedule` (skiplock.cancel_by_key, skiplock.reschedule).
#[tokio::test]
async fn cancel_and_reschedule_by_key_from_the_command_line() {
    let db = TestDb::new().await;
    let enqueue = |key: &str| {
        let (code, out, err) = run_cmd(
            &db.url,
            &["enqueue", "noop", "--in", "1h", "--unique-key", key],
        );
        assert_eq!(code, 0, "{err}");
        out.trim().parse::<i64>().unwrap()
    };
    let (a, b) = (enqueue("report:1"), enqueue("report:2"));
    let (code, out, err) = run_cmd(
        &db.url,
        &[
            "reschedule",
            "--key",
            "report:2",
            "--in",
            "2h",
            "--priority",
            "-3",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("1 waiting job(s) rescheduled: {b}")),
        "{out}"
    );
    let (priority, hours): (i16, f64) = sqlx::query_as(
        "SELECT priority, extract(epoch FROM scheduled_at - now())::float8 / 3600 \
         FROM skiplock.jobs WHERE id = $1",
    )
    .bind(b)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(priority, -3);
    assert!((1.9..=2.0).contains(&hours), "{hours}");
    let (code, out, err) = run_cmd(
        &db.url,
        &["reschedule", &a.to_string(), "--max-attempts", "3"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("1 waiting job(s) rescheduled: {a}")),
        "{out}"
    );
    // Nothing to change, a bad limit, ids and a key at once: refused, nothing done.
    let (code, _, err) = run_cmd(&db.url, &["reschedule", &a.to_string()]);
    assert_eq!(code, 1);
    assert!(one_line(&err).contains("nothing to change"), "{err}");
    let (code, _, err) = run_cmd(
        &db.url,
        &["reschedule", "--key", "x", "--max-attempts", "0"],
    );
    assert_eq!(code, 1);
    assert!(one_line(&err).contains("must be at least 1"), "{err}");
    let (code, _, _) = run_cmd(
        &db.url,
        &["reschedule", &a.to_string(), "--key", "x", "--in", "1m"],
    );
    assert_eq!(code, 2);

    let (code, out, err) = run_cmd(&db.url, &["cancel", "--key", "report:1", "--kind", "noop"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1 job(s) with unique key \"report:1\" cancelled"),
        "{out}"
    );
    let states: Vec<String> =
        sqlx::query_scalar("SELECT state::text FROM skiplock.jobs ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(states, ["cancelled", "available"]);
    let (code, _, _) = run_cmd(&db.url, &["cancel", "--kind", "noop"]);
    assert_eq!(code, 2, "an id or --key is needed");
}

#[tokio::test]
async fn unique_keys_and_run_times_from_the_cli() {
    let db = TestDb::new().await;
    let (code, a, err) = run_cmd(&db.url, &["enqueue", "noop", "--unique-key", "k"]);
    assert_eq!(code, 0, "{err}");
    let a: i64 = a.trim().parse().expect("prints the id");
    let (code, b, err) = run_cmd(
        &db.url,
        &[
            "enqueue",
            "noop",
            r#"{"v":2}"#,
            "--unique-key",
            "k",
            "--replace",
            "--in",
            "1h",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        b.trim().parse::<i64>().expect("prints the id"),
        a,
        "same job"
    );
    let (code, out, _) = run_cmd(&db.url, &["job", &a.to_string(), "--json"]);
    assert_eq!(code, 0);
    let row: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(row["args"]["v"], 2);
    // --replace moved the run time an hour ahead (database clock).
    let ahead: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM scheduled_at - created_at)::float8 FROM skiplock.jobs WHERE id = $1",
    )
    .bind(a)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(ahead >= 3600.0, "scheduled {ahead} s after creation");
    let (code, out, err) = run_cmd(
        &db.url,
        &["enqueue", "noop", "--run-at", "2030-01-01T00:00:00Z"],
    );
    assert_eq!(code, 0, "{err}");
    let id: i64 = out.trim().parse().expect("prints the id");
    let at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT scheduled_at FROM skiplock.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(at.to_rfc3339(), "2030-01-01T00:00:00+00:00");
}

#[tokio::test]
async fn bad_input_gets_one_clear_line_and_a_non_zero_exit() {
    let db = TestDb::new().await;
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["enqueue", "noop", "{not json"], "invalid ARGS_JSON"),
        (vec!["enqueue", "noop", "[1,2]"], "expected a JSON object"),
        (
            vec!["enqueue", "noop", "--max-attempts", "-1"],
            "--max-attempts",
        ),
        (vec!["enqueue", "noop", "--in", "soon"], "invalid --in"),
        (
            vec!["enqueue", "noop", "--run-at", "tomorrow"],
            "invalid --run-at",
        ),
        (vec!["enqueue", ""], "kind must not be empty"),
        (
            vec!["jobs", "--state", "done"],
            "unknown job state \"done\"",
        ),
        (vec!["job", "999999"], "job 999999 not found"),
        (vec!["retry", "999999"], "does not exist"),
        (
            vec!["worker", "--queues", "default=zero"],
            "invalid --queues",
        ),
        (vec!["enqueue", "noop", "--meta", "[1]"], "invalid --meta"),
        (
            vec!["enqueue", "noop", "--unique-for", "soon"],
            "invalid --unique-for",
        ),
        (
            vec!["enqueue", "noop", "--unique-for", "1h", "--replace"],
            "--replace needs --unique-key or --unique-by",
        ),
        (
            vec!["enqueue", "noop", "--tag", ""],
            "must be 1 to 100 characters",
        ),
        (vec!["jobs", "--meta", "{"], "invalid --meta"),
    ];
    for (args, want) in cases {
        let (code, _, err) = run_cmd(&db.url, &args);
        assert_eq!(code, 1, "{args:?}: {err}");
        let line = one_line(&err);
        assert!(line.contains(want), "{args:?}: {line}");
        assert!(
            !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
            "{err}"
        );
    }
    // clap rejects malformed flags itself (exit 2), e.g. an out-of-range priority.
    let (code, _, err) = run_cmd(&db.url, &["enqueue", "noop", "--priority", "99999"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--priority"), "{err}");
    let (code, _, err) = run_cmd(&db.url, &["enqueue", "noop", "--unique-by", "kind"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unique_by must be"), "{err}");
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.jobs").await,
        0
    );
}

#[tokio::test]
async fn tags_meta_and_uniqueness_by_args_from_the_cli() {
    let db = TestDb::new().await;
    let enqueue = |extra: &[&str]| {
        let mut args = vec!["enqueue", "digest", r#"{"user": 7, "items": [1]}"#];
        args.extend_from_slice(extra);
        run_cmd(&db.url, &args)
    };
    let (code, first, err) = enqueue(&[
        "--unique-by",
        "args:user",
        "--unique-for",
        "3650d",
        "--tag",
        "eu",
        "--tag",
        "billing",
        "--meta",
        r#"{"tenant": "acme"}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, again, err) = enqueue(&["--unique-by", "args:user"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(again, first, "same user: the waiting job");
    assert!(err.contains("already exists"), "{err}");
    let (code, plain, err) = enqueue(&[]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(plain, first);

    let (code, out, err) = run_cmd(&db.url, &["job", first.trim()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("tags:          billing, eu"), "{out}");
    assert!(out.contains(r#"meta:          {"tenant":"acme"}"#), "{out}");
    for filter in [["--tag", "eu"], ["--meta", r#"{"tenant": "acme"}"#]] {
        let mut args = vec!["jobs", "--json"];
        args.extend_from_slice(&filter);
        let (code, out, err) = run_cmd(&db.url, &args);
        assert_eq!(code, 0, "{err}");
        let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
        let ids: Vec<String> = rows.iter().map(|r| r["id"].to_string()).collect();
        assert_eq!(ids, [first.trim()], "{filter:?}");
        assert_eq!(rows[0]["tags"], serde_json::json!(["billing", "eu"]));
    }
}

#[tokio::test]
async fn a_job_whose_meta_cannot_be_read_is_shown_and_listed_with_its_meta_as_text() {
    // A meta serde_json cannot read, written past enqueue's check: `skiplock job` and
    // `skiplock jobs` failed on it ("error occurred while decoding column meta").
    let db = TestDb::new().await;
    let bad: i64 = sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, args, meta) VALUES ('noop', '{}', '{\"m\": 1e400}') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let (code, out, err) = run_cmd(&db.url, &["job", &bad.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("meta:          {\"m\": 1000"), "{out}");
    assert!(out.contains("(unreadable: number out of range"), "{out}");
    for args in [
        vec!["jobs"],
        vec!["job", &*bad.to_string(), "--json"],
        vec!["jobs", "--json"],
    ] {
        let (code, out, err) = run_cmd(&db.url, &args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(out.contains(&bad.to_string()), "{args:?}: {out}");
    }
    // A filter holding `\u0000` is refused by name (Postgres's jsonb cannot hold it).
    let (code, _, err) = run_cmd(&db.url, &["jobs", "--meta", r#"{"a": "\u0000"}"#]);
    assert_eq!(code, 1, "{err}");
    assert!(
        one_line(&err).contains("NUL character (\\u0000) at $.a"),
        "{err}"
    );
}

#[tokio::test]
async fn bad_settings_are_named() {
    let db = TestDb::new().await;
    let out = cmd(&db.url)
        .args(["worker", "--exit-when-idle"])
        .env("SKIPLOCK_POLL_INTERVAL", "often")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(one_line(&err).contains("SKIPLOCK_POLL_INTERVAL"), "{err}");
}

#[tokio::test]
async fn database_problems_are_named_without_the_password() {
    // Unreachable server.
    let url = "postgres://alice:hunter2secret@127.0.0.1:1/nowhere";
    let (code, _, err) = run_cmd(url, &["jobs"]);
    assert_eq!(code, 1);
    let line = one_line(&err);
    assert!(line.contains("cannot connect to the database"), "{line}");
    assert!(line.contains("refused"), "the real cause is named: {line}");
    assert!(!err.contains("hunter2secret"), "{err}");
    // Not migrated.
    let db = TestDb::empty().await;
    let (code, _, err) = run_cmd(&db.url, &["jobs"]);
    assert_eq!(code, 1);
    assert!(one_line(&err).contains("run `skiplock migrate`"), "{err}");
    let (code, out, _) = run_cmd(&db.url, &["migrate"]);
    assert_eq!((code, out.trim()), (0, "migrated"));
    // No DATABASE_URL at all.
    let out = std::process::Command::new(bin())
        .arg("jobs")
        .env_remove("DATABASE_URL")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DATABASE_URL"));
}

#[tokio::test]
async fn a_worker_process_drains_and_exits_when_idle() {
    let db = TestDb::new().await;
    for _ in 0..20 {
        assert_eq!(run_cmd(&db.url, &["enqueue", "noop"]).0, 0);
    }
    let (code, _, err) = run_cmd(
        &db.url,
        &["worker", "--exit-when-idle", "--queues", "default=4"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(count_state(&db.pool, "completed").await, 20);
}

#[tokio::test]
async fn a_closed_stdout_pipe_ends_the_command_quietly() {
    let db = TestDb::new().await;
    let args: Vec<_> = (0..2000).map(|i| serde_json::json!({"i": i})).collect();
    skiplock::store::jobs::enqueue_many(
        &db.pool,
        skiplock::store::jobs::ManyJobs {
            limit_key: None,
            kind: "noop",
            args: &args,
            queue: "default",
            run_at: None,
            priority: 0,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // Far more than a pipe buffer of output, read by nobody (like `skiplock jobs | head -1`).
    let mut child = cmd(&db.url)
        .args(["jobs", "--json", "--limit", "2000"])
        .env("RUST_BACKTRACE", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(out.status.code(), Some(101), "no panic exit: {err}");
}
