//! The versioned SQL API through the `skiplock` command (the rest is the core's
//! tests/schema_version.rs): `skiplock migrate` records it, and a worker and a CLI command
//! refuse, in one clear line, a schema at another version.

#![allow(unused_imports)]

mod support;
use skiplock::error::SchemaMismatch;
use skiplock::store::schema::{self, API_VERSION};
use std::time::Duration;
use support::*;

/// `skiplock jobs` (a CLI command that needs the schema): its exit code and its one error line.
fn jobs_refusal(url: &str) -> (i32, String) {
    let (code, out, err) = run_cmd(url, &["jobs"]);
    assert_eq!(out, "", "nothing printed on stdout");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    (code, lines[0].to_string())
}

/// `skiplock worker` (the process): its exit code and its last stderr line (logs come first).
/// SKIPLOCK_CONNECT_TIMEOUT only bounds the test should the refusal be retried like an outage.
fn worker_refusal(url: &str) -> (i32, String) {
    let out = cmd(url)
        .args(["worker", "--exit-when-idle"])
        .env("SKIPLOCK_CONNECT_TIMEOUT", "120s")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run skiplock worker");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "one error line: {err}");
    assert_eq!(err.lines().last(), Some(errors[0]), "{err}");
    (out.status.code().unwrap_or(-1), errors[0].to_string())
}

/// The library worker's result against this database (it must end at once, not retry).
async fn library_worker(db: &TestDb) -> skiplock::Result<()> {
    let w = start_builtin(&db.pool, fast_settings());
    tokio::time::timeout(Duration::from_secs(120), w.handle)
        .await
        .expect("the worker gives up at start-up instead of retrying")
        .expect("worker task")
}

async fn recorded(db: &TestDb) -> (i32, String, String) {
    sqlx::query_as("SELECT api_version, api_hash, migrated_by FROM skiplock.schema_info")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_older_schema_is_refused_until_migrated() {
    let db = TestDb::new().await;
    // No record: the API of a database migrated before versions were recorded.
    sqlx::query("DELETE FROM skiplock.schema_info")
        .execute(&db.pool)
        .await
        .unwrap();
    let want = format!(
        "schema is at API version 0, this binary needs {API_VERSION}: run `skiplock migrate`"
    );
    let (code, line) = jobs_refusal(&db.url);
    assert_eq!(
        (code, line.as_str()),
        (1, format!("error: {want}").as_str())
    );
    let (code, line) = worker_refusal(&db.url);
    assert_eq!(
        (code, line.as_str()),
        (1, format!("error: {want}").as_str())
    );
    let e = library_worker(&db).await.unwrap_err();
    assert!(
        matches!(
            e,
            skiplock::Error::Schema(SchemaMismatch::Older { db: 0, binary }) if binary == API_VERSION
        ),
        "{e}"
    );
    assert_eq!(e.to_string(), want);

    // An older version number, the same.
    if API_VERSION > 1 {
        let (code, _, _) = run_cmd(&db.url, &["migrate"]);
        assert_eq!(code, 0);
        sqlx::query("UPDATE skiplock.schema_info SET api_version = api_version - 1")
            .execute(&db.pool)
            .await
            .unwrap();
        let (code, line) = jobs_refusal(&db.url);
        assert_eq!(code, 1);
        assert!(
            line.contains(&format!("API version {}", API_VERSION - 1)),
            "{line}"
        );
    }

    // `migrate` fixes it, and both run again.
    let (code, out, err) = run_cmd(&db.url, &["migrate"]);
    assert_eq!((code, out.trim()), (0, "migrated"), "{err}");
    let (code, _, err) = run_cmd(&db.url, &["jobs"]);
    assert_eq!(code, 0, "{err}");
    let out = cmd(&db.url)
        .args(["worker", "--exit-when-idle"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_never_migrated_back() {
    let db = TestDb::new().await;
    let newer = API_VERSION + 1;
    sqlx::query("UPDATE skiplock.schema_info SET api_version = $1, api_hash = 'from-the-future'")
        .bind(newer as i32)
        .execute(&db.pool)
        .await
        .unwrap();
    let want = format!(
        "schema was migrated by a newer skiplock (API version {newer}); this binary knows {API_VERSION}"
    );
    let (code, line) = jobs_refusal(&db.url);
    assert_eq!(code, 1);
    assert!(line.starts_with(&format!("error: {want}")), "{line}");
    let (code, line) = worker_refusal(&db.url);
    assert_eq!(code, 1);
    assert!(line.starts_with(&format!("error: {want}")), "{line}");
    let e = library_worker(&db).await.unwrap_err();
    assert!(
        matches!(e, skiplock::Error::Schema(SchemaMismatch::Newer { db, binary })
            if db == newer && binary == API_VERSION),
        "{e}"
    );

    // No downgrade: migrate refuses, and changes nothing.
    let before: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_proc")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let (code, line) = {
        let (code, out, err) = run_cmd(&db.url, &["migrate"]);
        assert_eq!(out, "");
        assert_eq!(err.lines().count(), 1, "{err}");
        (code, err.trim().to_string())
    };
    assert_eq!(code, 1);
    assert!(line.starts_with(&format!("error: {want}")), "{line}");
    let e = schema::migrate_parts(&db.pool, &skiplock_workflows::schemas())
        .await
        .unwrap_err();
    assert!(
        matches!(e, skiplock::Error::Schema(SchemaMismatch::Newer { .. })),
        "{e}"
    );
    let (v, hash, _) = recorded(&db).await;
    assert_eq!((v, hash.as_str()), (newer as i32, "from-the-future"));
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_proc")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(before, after);
}

#[tokio::test]
async fn another_build_of_the_same_version_is_refused_until_migrated() {
    let db = TestDb::new().await;
    sqlx::query("UPDATE skiplock.schema_info SET api_hash = 'another-build'")
        .execute(&db.pool)
        .await
        .unwrap();
    let (code, line) = jobs_refusal(&db.url);
    assert_eq!(code, 1);
    assert!(
        line.contains(&format!("API version {API_VERSION}"))
            && line.ends_with("run `skiplock migrate`"),
        "{line}"
    );
    let (code, _, _) = run_cmd(&db.url, &["migrate"]);
    assert_eq!(code, 0);
    schema::ensure_ready(&db.pool).await.unwrap();
}

/// A database migrated by an earlier build of this API version, one that lacked its last
/// migration, is refused as another build (not as "API version 8, this binary needs 8").
#[tokio::test]
async fn an_earlier_build_missing_a_migration_is_refused_as_another_build() {
    let db = TestDb::new().await;
    for sql in [
        "DELETE FROM skiplock.migrations_core WHERE version = (SELECT max(version) FROM skiplock.migrations_core)",
        "UPDATE skiplock.schema_info SET api_hash = 'an-earlier-build'",
    ] {
        sqlx::query(sql).execute(&db.pool).await.unwrap();
    }
    let (code, line) = jobs_refusal(&db.url);
    assert_eq!(code, 1);
    assert_eq!(
        line,
        format!(
            "error: schema has another build's SQL API (both say API version {API_VERSION}): run `skiplock migrate`"
        )
    );
}
