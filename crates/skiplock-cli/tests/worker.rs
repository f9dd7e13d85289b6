//! The worker through the `skiplock worker` process (the rest is the core's tests/worker.rs).

#![allow(unused_imports)]

mod support;
use serde_json::json;
use skiplock::config::QueueSettings;
use skiplock::queue::NewJob;
use skiplock::store::jobs::{self, ManyJobs, enqueue, enqueue_many};
use skiplock::worker::handler::Handler;
use skiplock::worker::{HandlerResult, JobContext, JobError, Outcome, builtin};
use sqlx::postgres::PgPoolOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::*;

/// Asserts that error `i` of a job's `errors` array contains `needle`.
fn assert_error(errors: impl std::ops::Deref<Target = serde_json::Value>, i: usize, needle: &str) {
    let e = errors[i]["error"].as_str().unwrap_or_default();
    assert!(
        e.contains(needle),
        "error {i} is {e:?}, expected it to contain {needle:?}"
    );
}

#[tokio::test]
async fn a_killed_worker_process_loses_no_job() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("sleep", json!({"ms": 60000})))
        .await
        .unwrap()
        .id;
    let mut child = spawn_worker_process(&db.url, &[], &[("SKIPLOCK_RESCUE_AFTER", "2s")]);
    wait_job(&db.pool, id, "job running", |r| {
        r.state.as_str() == "running"
    })
    .await;
    sigkill(&child);
    let _ = child.wait();
    // Shorten the job so the rescuing worker finishes it quickly.
    sqlx::query("UPDATE skiplock.jobs SET args = '{\"ms\": 10}' WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    // Another worker's own rescuer brings the job back. Its window is short, so a stall of
    // this machine may let it rescue the job again while it runs it: every extra attempt
    // must then be explained by a rescue, which is what is asserted.
    let settings = QueueSettings {
        rescue_after: Duration::from_secs(2),
        ..fast_settings()
    };
    let w = start_builtin(&db.pool, settings);
    let row = wait_job(&db.pool, id, "completed", |r| {
        r.state.as_str() == "completed"
    })
    .await;
    w.stop().await.unwrap();
    let errors = row.errors.as_array().unwrap();
    assert!(!errors.is_empty(), "the job was rescued: {}", row.errors);
    assert_eq!(
        row.attempt as usize,
        errors.len() + 1,
        "one rescue per extra attempt: {}",
        row.errors
    );
    assert_eq!(errors[0]["attempt"], 1, "{}", row.errors);
    for i in 0..errors.len() {
        assert_error(row.errors.clone(), i, "rescued");
    }
}

#[tokio::test]
async fn sigterm_stops_a_worker_process_cleanly() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("sleep", json!({"ms": 600000})))
        .await
        .unwrap()
        .id;
    let mut child = spawn_worker_process(&db.url, &[], &[]);
    wait_job(&db.pool, id, "job running", |r| {
        r.state.as_str() == "running"
    })
    .await;
    sigterm(&child);
    let status = child.wait().unwrap();
    let mut log = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut log);
    }
    assert_eq!(status.code(), Some(0), "{log}");
    let r = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!((r.state.as_str(), r.attempt), ("available", 0), "{log}");
}

/// A worker process killed while it holds jobs claimed ahead loses none: the rescuer returns
/// the buffered ones like the started ones.
#[tokio::test]
async fn jobs_claimed_ahead_by_a_killed_worker_are_rescued() {
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(
            enqueue(&db.pool, &NewJob::new("sleep", json!({"ms": 60000})))
                .await
                .unwrap()
                .id,
        );
    }
    // One slot and one job of buffer (claim-ahead is at most the queue's concurrency).
    let mut child = spawn_worker_process(
        &db.url,
        &[],
        &[
            ("SKIPLOCK_QUEUES", "default=1"),
            ("SKIPLOCK_CLAIM_AHEAD", "1"),
            ("SKIPLOCK_RESCUE_AFTER", "2s"),
        ],
    );
    wait_for("both jobs claimed", Duration::from_secs(60), || async {
        (count_state(&db.pool, "running").await == 2).then_some(())
    })
    .await;
    sigkill(&child);
    let _ = child.wait();
    sqlx::query("UPDATE skiplock.jobs SET args = '{\"ms\": 10}'")
        .execute(&db.pool)
        .await
        .unwrap();
    let settings = QueueSettings {
        rescue_after: Duration::from_secs(2),
        ..fast_settings()
    };
    let w = start_builtin(&db.pool, settings);
    for id in &ids {
        wait_job(&db.pool, *id, "completed", |r| {
            r.state.as_str() == "completed"
        })
        .await;
    }
    w.stop().await.unwrap();
    for id in ids {
        let r = jobs::get_job(&db.pool, id).await.unwrap();
        assert_eq!(r.state.as_str(), "completed", "job {id}");
        let errors = r.errors.as_array().unwrap();
        assert!(!errors.is_empty(), "job {id} was rescued: {}", r.errors);
        assert_eq!(r.attempt as usize, errors.len() + 1, "{}", r.errors);
        for i in 0..errors.len() {
            assert_error(r.errors.clone(), i, "rescued");
        }
    }
}

#[tokio::test]
async fn a_huge_error_is_stored_and_logged_capped_on_every_attempt() {
    // docs/reliability.md "Errors": a 520 KB message is cut to 8 KiB (with a marker of what
    // was cut) in each stored error and in each WARN line, so an enqueuer cannot amplify its
    // input by max_attempts into the row and the logs.
    const CAP: usize = 8 * 1024;
    let db = TestDb::new().await;
    let huge = "é".repeat(260_000);
    let id = enqueue(
        &db.pool,
        &NewJob::new("fail", json!({ "message": huge })).max_attempts(3),
    )
    .await
    .unwrap()
    .id;
    let mut child = spawn_worker_process(
        &db.url,
        &[
            "--queues",
            "default=1",
            "--exit-when-idle",
            "--log-format",
            "json",
        ],
        &[("SKIPLOCK_BACKOFF_UNIT", "1ms")],
    );
    let mut stderr = child.stderr.take().expect("stderr piped");
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let status = wait_exit_within(&mut child, Duration::from_secs(120)).await;
    let log = log.join().unwrap();
    assert!(status.success(), "{:.2000}", log);
    let r = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!((r.state.as_str(), r.attempt), ("discarded", 3));
    let errors = r.errors.as_array().unwrap();
    assert_eq!(errors.len(), 3, "{:.300}", r.errors);
    for e in errors {
        let msg = e["error"].as_str().unwrap();
        assert!(msg.len() <= CAP, "a stored error of {} bytes", msg.len());
        assert!(
            msg.starts_with("éé") && msg.contains("bytes cut"),
            "{msg:.100}"
        );
    }
    // The kind's first failure in full, the next two summed into one line (with the latest
    // error, capped as well) when the worker stops (src/worker/failure_log.rs).
    let failed: Vec<&str> = log.lines().filter(|l| l.contains("job failed")).collect();
    assert_eq!(failed.len(), 1, "{:.2000}", log);
    let summed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("more job(s) of kind"))
        .collect();
    assert_eq!(summed.len(), 1, "{:.2000}", log);
    assert!(summed[0].contains("\"failures\":2"), "{:.2000}", summed[0]);
    for l in log.lines() {
        // The capped message plus the line's other fields (JSON escapes é as itself).
        assert!(l.len() <= CAP + 1024, "a log line of {} bytes", l.len());
    }
}

/// `SKIPLOCK_LISTEN_URL` set to the same address and database as a `DATABASE_URL` that
/// `SKIPLOCK_POOL_MODE=transaction` says is a transaction-mode pool: a LISTEN there would
/// never hear, so the worker says so in one line naming the setting and polls (here against
/// the server itself, which serves transaction mode as well).
#[tokio::test]
async fn a_listen_url_through_the_transaction_pooler_is_named_and_not_listened_on() {
    let db = TestDb::new().await;
    enqueue_noops(&db.pool, 5).await;
    let out = cmd(&db.url)
        .args(["worker", "--exit-when-idle"])
        .env("SKIPLOCK_POOL_MODE", "transaction")
        .env("SKIPLOCK_LISTEN_URL", &db.url)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let named: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("SKIPLOCK_LISTEN_URL"))
        .collect();
    assert_eq!(named.len(), 1, "{err}");
    assert!(
        named[0].contains("reaches the same address and database as DATABASE_URL"),
        "{err}"
    );
    assert_eq!(count_state(&db.pool, "completed").await, 5);
}
