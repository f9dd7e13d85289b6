//! The command line under attack: values written by anyone with an enqueuer role (kinds,
//! queues, args, errors, packet names) are printed escaped, never as raw control characters
//! that would steer the operator's terminal; every numeric flag and setting has a range and
//! a clear error (a huge queue concurrency once panicked, and with `--exit-when-idle` never
//! exited); and a config file with an error is named with its line and column, never quoted
//! (it may be `/etc/shadow`, or a file of secrets).

mod support;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// Whether `s` holds a character a terminal would act on: C0 controls other than the
/// newlines of the output itself, DEL, or C1 controls.
fn raw_controls(s: &str) -> Vec<char> {
    s.chars()
        .filter(|c| (c.is_control() && *c != '\n') || ('\u{80}'..='\u{9f}').contains(c))
        .collect()
}

/// The evil strings of this test: clear the screen, retitle the window, a C1 CSI, a
/// bidi override, and a newline to fake an extra line.
const EVIL_KIND: &str = "\u{1b}[2J\u{1b}]0;pwned\u{7}kind";
const EVIL_QUEUE: &str = "q\u{9b}31m\u{202e}";
const EVIL_ERROR: &str = "bad\nerror: fake line\r\u{1b}[1A";

#[tokio::test]
async fn values_from_the_database_are_printed_escaped_by_every_command() {
    let db = TestDb::new().await;
    let id: i64 = sqlx::query_scalar("SELECT skiplock.enqueue($1, $2, queue => $3)")
        .bind(EVIL_KIND)
        .bind(serde_json::json!({"s": "\u{7f}\u{9b}x\u{1b}"}))
        .bind(EVIL_QUEUE)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    // A failed attempt on record, with control characters in its error.
    sqlx::query(
        "UPDATE skiplock.jobs SET errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', $2::text)) WHERE id = $1",
    )
    .bind(id)
    .bind(EVIL_ERROR)
    .execute(&db.pool)
    .await
    .unwrap();
    let packet: i64 = sqlx::query_scalar("SELECT skiplock.submit_packet($1, $2)")
        .bind("/nowhere/\u{1b}[2J")
        .bind("reel \u{1b}]0;pwned\u{7}")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let id_s = id.to_string();
    let packet_s = packet.to_string();
    let commands: Vec<Vec<&str>> = vec![
        vec!["jobs"],
        vec!["job", &id_s],
        vec!["stats"],
        vec!["packet", "list"],
        vec!["packet", "show", &packet_s],
    ];
    for args in commands {
        let (code, out, err) = run_cmd(&db.url, &args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            raw_controls(&out).is_empty(),
            "{args:?} printed raw control characters {:?}:\n{out}",
            raw_controls(&out)
        );
        assert!(out.contains("\\x1b"), "{args:?} shows the escape: {out}");
    }
    let (_, out, _) = run_cmd(&db.url, &["job", &id_s]);
    assert!(
        out.contains("kind:          \\x1b[2J\\x1b]0;pwned\\x07kind"),
        "{out}"
    );
    assert!(out.contains("queue:         q\\x9b31m\\u{202e}"), "{out}");
    assert!(out.contains("bad\\nerror: fake line\\r\\x1b[1A"), "{out}");
    // JSON output stays valid JSON carrying the exact values.
    let (code, out, _) = run_cmd(&db.url, &["job", &id_s, "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], EVIL_KIND);
    // An error line quoting a hostile value is escaped too (and stays one line): a job of a
    // reserved queue is refused, quoting its kind. (Unique keys are per kind and queue now,
    // so a key another kind holds no longer gives an error to quote.)
    let key = "k\u{1b}[2J\u{1b}]0;pwned\u{7}";
    let (code, _, err) = run_cmd(&db.url, &["enqueue", key, "--queue", "packets"]);
    assert_eq!(code, 1, "{err}");
    assert!(raw_controls(&err).is_empty(), "{err:?}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("k\\x1b[2J"), "{err}");
}

#[tokio::test]
async fn characters_that_show_nothing_are_printed_escaped() {
    // Hangul fillers and tag characters show as nothing: a kind `b\u{3164}` looked like
    // `b`, and tag characters hid text in plain sight (docs/security.md).
    let db = TestDb::new().await;
    let kind = "b\u{3164}\u{115f}\u{e0041}\u{2800}";
    let id: i64 = sqlx::query_scalar("SELECT skiplock.enqueue($1, '{}', meta => $2)")
        .bind(kind)
        .bind(serde_json::json!({"who": "a\u{ffa0}\u{e007f}"}))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let (code, out, err) = run_cmd(&db.url, &["job", &id.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("kind:          b\\u{3164}\\u{115f}\\u{e0041}\\u{2800}"),
        "{out}"
    );
    assert!(out.contains("a\\u{ffa0}\\u{e007f}"), "{out}");
    for c in [
        '\u{3164}',
        '\u{115f}',
        '\u{e0041}',
        '\u{2800}',
        '\u{ffa0}',
        '\u{e007f}',
    ] {
        assert!(!out.contains(c), "{c:?} printed raw: {out}");
    }
    let (code, out, _) = run_cmd(&db.url, &["jobs"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("b\\u{3164}") && !out.contains('\u{3164}'),
        "{out}"
    );
}

/// Waits for `child` up to a window far larger than it needs; kills it and fails if it
/// is still running then (the old behaviour of a huge `--queues` count).
fn finish(mut child: Child, what: &str) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (
                status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn numbers_out_of_range_get_one_clear_line_not_a_panic_or_a_hang() {
    let db = TestDb::new().await;
    let worker = |args: &[&str], envs: &[(&str, &str)]| {
        let mut c = cmd(&db.url);
        c.arg("worker")
            .arg("--exit-when-idle")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            c.env(k, v);
        }
        c.spawn().unwrap()
    };
    let huge = "default=2305843009213693952";
    /// (flags, settings, what the error line says).
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec!["--queues", huge],
            vec![],
            "invalid --queues: queue \"default\": concurrency",
        ),
        (
            vec!["--queues", "default=99999999999999999999999"],
            vec![],
            "out of range (1 to 10000)",
        ),
        (vec![], vec![("SKIPLOCK_QUEUES", huge)], "SKIPLOCK_QUEUES"),
        (
            vec![],
            vec![("SKIPLOCK_MAX_CONNECTIONS", "4294967298")],
            "SKIPLOCK_MAX_CONNECTIONS: must be at most 1000",
        ),
        (
            vec![],
            vec![("SKIPLOCK_POLL_INTERVAL", "99999999d")],
            "SKIPLOCK_POLL_INTERVAL: must be at most 1h",
        ),
        (
            vec![],
            vec![("SKIPLOCK_JOB_TIMEOUT", "9999999999999d")],
            "SKIPLOCK_JOB_TIMEOUT",
        ),
        (
            vec![],
            vec![("SKIPLOCK_PACKET_CONCURRENCY", "4294967297")],
            "SKIPLOCK_PACKET_CONCURRENCY: must be at most 1000",
        ),
        (
            vec![],
            vec![("SKIPLOCK_FETCH_MAX_BYTES", "99999999999999")],
            "SKIPLOCK_FETCH_MAX_BYTES: must be at most",
        ),
        (
            vec![],
            vec![("SKIPLOCK_PACK_QUIET", "100000d")],
            "SKIPLOCK_PACK_QUIET: must be at most 30d",
        ),
        (
            vec![],
            vec![("SKIPLOCK_RETAIN_FAILED", "99999d")],
            "SKIPLOCK_RETAIN_FAILED: must be at most 3650d",
        ),
    ];
    for (args, envs, want) in cases {
        let what = format!("worker {args:?} {envs:?}");
        let (code, err) = finish(worker(&args, &envs), &what);
        assert_eq!(code, Some(1), "{what}: {err}");
        let last = err.trim().lines().last().unwrap_or("");
        assert!(
            last.starts_with("error: ") && last.contains(want),
            "{what}: {err}"
        );
        assert!(!err.contains("panicked"), "{what}: {err}");
    }
    for args in [
        vec!["jobs", "--limit", "99999999999"],
        vec!["packet", "list", "--limit", "0"],
        vec!["packet", "list", "--limit=-5"],
        vec!["reap", "--dry-run", "--limit", "100000000"],
    ] {
        let (code, _, err) = run_cmd(&db.url, &args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.trim()
                .lines()
                .last()
                .unwrap_or("")
                .contains("invalid --limit"),
            "{args:?}: {err}"
        );
    }
    // In range, the same worker runs and exits when idle.
    let (code, err) = finish(worker(&["--queues", "default=10000"], &[]), "in range");
    assert_eq!(code, Some(0), "{err}");
}

#[tokio::test]
async fn a_config_file_error_names_file_line_and_column_never_its_text() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("secret-line-1.toml", "hunter2-s3cret-token\n"),
        (
            "shadow-like.toml",
            "root:$6$hunter2s3cret:19000:0:99999:7:::\n",
        ),
        ("key.toml", "hunter2_s3cret = 1\n"),
        ("value.toml", "default = \"hunter2-s3cret\"\n"),
        ("unclosed.toml", "default = \"hunter2-s3cret\n"),
    ];
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let p = path.to_str().unwrap();
        for (setting, args) in [
            ("SKIPLOCK_PERIODIC_FILE", vec!["periodic"]),
            ("SKIPLOCK_PERIODIC_FILE", vec!["worker", "--exit-when-idle"]),
            ("SKIPLOCK_SCHEDULES", vec!["worker", "--exit-when-idle"]),
            ("SKIPLOCK_SCHEDULES", vec!["fetch", "http://example.com/"]),
        ] {
            let out = cmd(&db.url)
                .args(&args)
                .env(setting, p)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            let what = format!("{setting}={name} {args:?}");
            assert_eq!(out.status.code(), Some(1), "{what}: {err}");
            assert!(
                !err.contains("hunter2") && !err.contains("s3cret"),
                "{what} quotes the file: {err}"
            );
            let last = err.trim().lines().last().unwrap_or("");
            assert!(
                last.starts_with(&format!(
                    "error: invalid setting {setting}: {p}: line 1, column "
                )),
                "{what}: {err}"
            );
        }
    }
    // A real secret file: refused without a word of it.
    if std::fs::read_to_string("/etc/shadow").is_ok() {
        let shadow = std::fs::read_to_string("/etc/shadow").unwrap();
        let out = cmd(&db.url)
            .args(["periodic"])
            .env("SKIPLOCK_PERIODIC_FILE", "/etc/shadow")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let first = shadow.lines().next().unwrap_or("");
        let user = first.split(':').next().unwrap_or("");
        assert!(
            !user.is_empty() && !err.contains(&format!("{user}:")),
            "{err}"
        );
    }
    // The same for a .env with a broken line holding a password.
    std::fs::write(
        dir.path().join(".env"),
        "SKIPLOCK_POLL_INTERVAL=1s\nDATABASE_URL=\"postgres://u:hunter2s3cret@h/db\n",
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .arg("stats")
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("/.env: line 2: cannot parse it"), "{err}");
    // A broken line in the middle is pointed at by line and column.
    std::fs::write(dir.path().join(".env"), "A=1\nhunter2 s3cret=x\nB=2\n").unwrap();
    let out = std::process::Command::new(bin())
        .arg("stats")
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("hunter2") && !err.contains("s3cret"), "{err}");
    assert!(err.contains("/.env: line 2, column "), "{err}");
}
