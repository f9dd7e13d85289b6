//! The queue through the `skiplock` command (the rest is the core's tests/queue.rs).

#![allow(unused_imports)]

mod support;
use chrono::Utc;
use serde_json::json;
use skiplock::queue::{JobState, NewJob, OnConflict};
use skiplock::store::ack::{Ack, ack_many};
use skiplock::store::claim::{ClaimParams, claim};
use skiplock::store::jobs::{self, ManyJobs, enqueue, enqueue_many};
use std::collections::HashSet;
use std::time::Duration;
use support::TestDb;

async fn state_of(db: &TestDb, id: i64) -> String {
    sqlx::query_scalar("SELECT state::text FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// `SKIPLOCK_DIAGNOSTIC_KINDS=off` keeps `skiplock worker` from registering `noop`, `sleep`
/// and `fail` (registered, they let any enqueuer hold a worker slot with one `sleep` job until
/// the job timeout): their jobs stay waiting, as jobs
/// of a kind nobody handles do. The default (on) still runs them.
#[tokio::test]
async fn the_diagnostic_kinds_can_be_turned_off() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    let run = |setting: Option<&str>| {
        let mut c = support::cmd(&db.url);
        c.args(["worker", "--exit-when-idle", "--queues", "default=1"])
            .stdin(std::process::Stdio::null());
        match setting {
            Some(v) => c.env("SKIPLOCK_DIAGNOSTIC_KINDS", v),
            None => c.env_remove("SKIPLOCK_DIAGNOSTIC_KINDS"),
        };
        c.output().unwrap()
    };
    let out = run(Some("off"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(state_of(&db, id).await, "available");
    let kinds: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT unnest(kinds) FROM skiplock.workers ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap_or_default();
    assert!(!kinds.iter().any(|k| k == "noop"), "{kinds:?}");
    let out = run(Some("maybe"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("SKIPLOCK_DIAGNOSTIC_KINDS"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(state_of(&db, id).await, "completed");
}
