//! Database passwords never reach an error or a log line, wherever the URL carries them: the
//! userinfo (`user:PASSWORD@`, also percent-encoded) or a query parameter (`?password=`), in
//! well-formed and malformed URLs, and against a server that really checks passwords (a
//! private cluster with SCRAM over TCP: the shared server trusts 127.0.0.1, so a wrong
//! password is accepted there and cannot be tested on it).

mod support;
use skiplock_devtools::chaos;

use std::process::Stdio;
use std::time::Duration;

use chaos::cluster::PrivateCluster;
use sqlx::postgres::PgPoolOptions;
use support::*;

fn one_line(err: &str) -> &str {
    let t = err.trim();
    assert_eq!(t.lines().count(), 1, "one line expected: {err}");
    t
}

/// Runs `skiplock ARGS` against `url` and returns (exit code, stderr).
fn run_err(url: &str, args: &[&str]) -> (i32, String) {
    let (code, _, err) = run_cmd(url, args);
    (code, err)
}

#[test]
fn a_password_in_a_query_parameter_is_never_printed() {
    // Unreachable server: the error names the URL, with both places redacted.
    let url = "postgres://alice@127.0.0.1:1/nowhere?sslmode=disable&password=hunter2secret";
    let (code, err) = run_err(url, &["jobs"]);
    assert_eq!(code, 1);
    let line = one_line(&err);
    assert!(!err.contains("hunter2secret"), "{err}");
    assert!(
        line.contains("postgres://alice@127.0.0.1:1/nowhere?sslmode=disable&password=***"),
        "{line}"
    );
    // Percent-encoded key and value; upper case; libpq's sslpassword. sqlx does not know
    // the first two and logs a WARN quoting the parameter: that line is scrubbed too.
    for url in [
        "postgres://alice@127.0.0.1:1/x?PASSWORD=hunter2%2Fsecret",
        "postgres://alice@127.0.0.1:1/x?pass%77ord=hunter2%2Fsecret",
        "postgres://alice@127.0.0.1:1/x?sslpassword=hunter2%2Fsecret",
    ] {
        let (code, err) = run_err(url, &["stats"]);
        assert_eq!(code, 1, "{url}");
        let last = err.trim().lines().last().unwrap_or("");
        assert!(
            !err.contains("hunter2") && last.starts_with("error: ") && last.contains("=***"),
            "{url}: {err}"
        );
    }
}

#[test]
fn userinfo_passwords_show_as_user_stars_even_when_encoded_or_malformed() {
    for (url, shown) in [
        (
            "postgres://alice:hunter2secret@127.0.0.1:1/nowhere",
            "postgres://alice:***@127.0.0.1:1/nowhere",
        ),
        (
            "postgres://alice:hunter2%40se%2Fcret@127.0.0.1:1/nowhere",
            "postgres://alice:***@127.0.0.1:1/nowhere",
        ),
        // Malformed: a port that is not a number (the URL does not parse at all).
        (
            "postgres://alice:hunter2secret@127.0.0.1:port/nowhere",
            "postgres://alice:***@127.0.0.1:port/nowhere",
        ),
        // Malformed: raw '@' and '/' inside the password.
        (
            "postgres://alice:hunter2@se/cret@127.0.0.1:1/nowhere",
            "postgres://alice:***@127.0.0.1:1/nowhere",
        ),
    ] {
        let (code, err) = run_err(url, &["jobs"]);
        assert_eq!(code, 1, "{url}");
        let line = one_line(&err);
        assert!(line.contains(shown), "{url}: {line}");
        for secret in ["hunter2", "se/cret", "se%2Fcret"] {
            assert!(!line.contains(secret), "{url}: {line}");
        }
    }
}

#[test]
fn malformed_urls_and_key_value_strings_never_print_the_password() {
    // A raw `?`, `#` or `/` in a URL's password (read as a host and a port before), and
    // libpq's key=value strings (not recognised before): the error line shows the
    // connection string with `***` and no piece of the password (docs/security.md).
    for (setting, url) in [
        (
            "DATABASE_URL",
            "postgres://app:Hunter2?Secret@127.0.0.1:1/db",
        ),
        (
            "DATABASE_URL",
            "postgres://app:Hunter2#Secret@127.0.0.1:1/db",
        ),
        (
            "DATABASE_URL",
            "postgres://app:Hunter2/Secret@127.0.0.1:1/db",
        ),
        (
            "DATABASE_URL",
            "postgres://app:Hunter2/Se?cr#et@127.0.0.1:1,127.0.0.2:1/db",
        ),
        (
            "DATABASE_URL",
            "host=127.0.0.1 port=1 user=app password=Hunter2Secret dbname=db",
        ),
        (
            "DATABASE_URL",
            r"host=127.0.0.1 password='Hunter2 \'Secret' dbname=db",
        ),
        (
            "SKIPLOCK_LISTEN_URL",
            "postgres://app:Hunter2?Secret@127.0.0.1:1/db",
        ),
        (
            "SKIPLOCK_LISTEN_URL",
            "host=127.0.0.1 password=Hunter2Secret",
        ),
    ] {
        let mut c = std::process::Command::new(bin());
        c.current_dir(std::env::temp_dir())
            .env("DATABASE_URL", "postgres://app@127.0.0.1:1/db")
            .env(setting, url);
        if setting == "SKIPLOCK_LISTEN_URL" {
            c.env("SKIPLOCK_POOL_MODE", "transaction")
                .args(["worker", "--exit-when-idle"]);
        } else {
            c.arg("jobs");
        }
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {err}");
        for piece in ["Hunter", "Secret", "Se?cr", "cr#et"] {
            assert!(!err.contains(piece), "{setting}={url}: {err}");
        }
        assert!(err.contains("***"), "{setting}={url}: {err}");
    }
}

#[tokio::test]
async fn a_worker_logs_nothing_of_a_query_parameter_password() {
    let db = TestDb::new().await;
    for _ in 0..5 {
        assert_eq!(run_cmd(&db.url, &["enqueue", "noop"]).0, 0);
    }
    // Trust auth ignores the password, so this URL connects; debug logs are on.
    let url = format!("{}?password=hunter2secret", db.url);
    let out = cmd(&url)
        .args(["worker", "--exit-when-idle", "--queues", "default=2"])
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(count_state(&db.pool, "completed").await, 5);
    assert!(
        !err.contains("hunter2secret"),
        "password in the log:\n{err}"
    );
    // The same against a database that does not exist: a clear error, redacted.
    let bad = url.replace(&db.name, "skiplock_no_such_database");
    let out = cmd(&bad)
        .args(["worker", "--queues", "default=1"])
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The worker names the database it could not reach (without the query string, or with
    // its password masked) and never the password.
    assert!(err.contains("skiplock_no_such_database"), "{err}");
    assert!(!err.contains("hunter2secret"), "{err}");
}

/// Real password authentication: a private cluster whose TCP logins need SCRAM, a scratch
/// role with a random name and password (percent-encoded in the URL), right and wrong
/// passwords in the userinfo and in the query.
#[tokio::test]
async fn wrong_passwords_are_refused_by_a_scram_server_and_never_printed() {
    let cluster = tokio::task::spawn_blocking(PrivateCluster::start)
        .await
        .unwrap()
        .expect("start a private cluster");
    cluster.require_passwords().expect("switch TCP to scram");
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&cluster.socket_url("postgres"))
        .await
        .expect("connect over the socket");
    let role = format!("skiplock_pw_{:012x}", rand::random::<u64>() >> 16);
    // Characters that need percent-encoding in a URL, and a random part.
    let password = format!("Pw@{:016x}/:%x", rand::random::<u64>());
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {role} LOGIN PASSWORD '{password}'"
    )))
    .execute(&admin)
    .await
    .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {role} OWNER {role}"
    )))
    .execute(&admin)
    .await
    .unwrap();
    let url_with = |pw: &str| {
        let mut u = url::Url::parse(&format!(
            "postgres://{role}@127.0.0.1:{}/{role}",
            cluster.port()
        ))
        .unwrap();
        u.set_password(Some(pw)).unwrap();
        u.to_string()
    };
    let right = url_with(&password);
    let wrong_pw = format!("Wrong@{:016x}/pw", rand::random::<u64>());
    let wrong = url_with(&wrong_pw);
    assert!(right.contains("%40") && right.contains("%2F"), "{right}");

    // The reload takes effect asynchronously: wait until a wrong password is refused.
    wait_for(
        "the server to refuse a wrong password",
        Duration::from_secs(60),
        || async {
            PgPoolOptions::new()
                .max_connections(1)
                .connect(&wrong)
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;

    let secrets = [
        password.clone(),
        url::form_urlencoded::byte_serialize(password.as_bytes()).collect::<String>(),
        wrong_pw.clone(),
    ];
    let clean = |what: &str, text: &str| {
        for s in &secrets {
            assert!(
                !text.contains(s.as_str()),
                "{what}: a password shows: {text}"
            );
        }
        for part in [&password[3..19], &wrong_pw[6..22]] {
            assert!(
                !text.contains(part),
                "{what}: part of a password shows: {text}"
            );
        }
    };

    // The right password works (migrate, enqueue, a worker at debug level).
    let (code, out, err) = run_cmd(&right, &["migrate"]);
    assert_eq!((code, out.trim()), (0, "migrated"), "{err}");
    clean("migrate", &err);
    assert_eq!(run_cmd(&right, &["enqueue", "noop"]).0, 0);
    let out = cmd(&right)
        .args(["worker", "--exit-when-idle", "--queues", "default=2"])
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    clean("worker log", &err);

    // A wrong password is refused, named, and shown as user:***@.
    let (code, err) = run_err(&wrong, &["jobs"]);
    assert_eq!(code, 1);
    let line = one_line(&err);
    assert!(line.contains("password authentication failed"), "{line}");
    assert!(
        line.contains(&format!(
            "postgres://{role}:***@127.0.0.1:{}/{role}",
            cluster.port()
        )),
        "{line}"
    );
    clean("wrong password", line);

    // The same in a query parameter: honoured when right, redacted when wrong.
    let base = format!("postgres://{role}@127.0.0.1:{}/{role}", cluster.port());
    let enc = |p: &str| url::form_urlencoded::byte_serialize(p.as_bytes()).collect::<String>();
    let (code, _, err) = run_cmd(&format!("{base}?password={}", enc(&password)), &["stats"]);
    assert_eq!(code, 0, "{err}");
    let (code, err) = run_err(&format!("{base}?password={}", enc(&wrong_pw)), &["stats"]);
    assert_eq!(code, 1);
    let line = one_line(&err);
    assert!(
        line.contains("password authentication failed") && line.contains("?password=***"),
        "{line}"
    );
    clean("wrong password in the query", line);

    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {role} WITH (FORCE)"
    )))
    .execute(&admin)
    .await
    .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP ROLE {role}")))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
}
