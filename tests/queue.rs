//! The queue's SQL API and statements against a real Postgres: enqueue rules, unique keys
//! (keep / replace, concurrent callers), bulk insert, claim, fenced acks, cancel and retry.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use skiplock::queue::{JobState, NewJob, OnConflict};
use skiplock::store::ack::{Ack, ack_many};
use skiplock::store::claim::{ClaimParams, claim};
use skiplock::store::jobs::{self, ManyJobs, enqueue, enqueue_many};
use support::TestDb;

fn kinds(k: &[&str]) -> Vec<String> {
    k.iter().map(|s| s.to_string()).collect()
}

async fn state_of(db: &TestDb, id: i64) -> String {
    sqlx::query_scalar("SELECT state::text FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn enqueue_claim_and_complete() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("noop", json!({"a": 1})))
        .await
        .unwrap()
        .id;
    let jobs = claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 10,
            worker: "w1",
        },
    )
    .await
    .unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].id, id);
    assert_eq!(jobs[0].attempt, 1);
    assert_eq!(jobs[0].args, json!({"a": 1}));
    assert_eq!(state_of(&db, id).await, "running");
    // Nothing left to claim.
    assert!(
        claim(
            db.pool.pg(),
            ClaimParams {
                queue: "default",
                kinds: &kinds(&["noop"]),
                limit: 10,
                worker: "w1",
            },
        )
        .await
        .unwrap()
        .is_empty()
    );
    let ack = Ack {
        id,
        attempt: 1,
        state: JobState::Completed,
        scheduled_at: None,
        give_back: false,
        error: None,
        result: Some(json!({"ok": true})),
        started_at: None,
    };
    assert_eq!(ack_many(&db.pool, &[ack]).await.unwrap().ids, vec![id]);
    let row = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!(row.state.as_str(), "completed");
    assert!(row.finalized_at.is_some());
    assert_eq!(row.result.as_deref(), Some(&json!({"ok": true})));
    assert_eq!(row.attempted_by.as_deref(), Some("w1"));
}

#[tokio::test]
async fn claim_respects_queue_kind_schedule_and_priority() {
    let db = TestDb::new().await;
    let low = enqueue(&db.pool, &NewJob::new("noop", json!({})).priority(5))
        .await
        .unwrap()
        .id;
    let high = enqueue(&db.pool, &NewJob::new("noop", json!({})).priority(-1))
        .await
        .unwrap()
        .id;
    let _other_queue = enqueue(&db.pool, &NewJob::new("noop", json!({})).queue("other"))
        .await
        .unwrap()
        .id;
    let _other_kind = enqueue(&db.pool, &NewJob::new("mystery", json!({})))
        .await
        .unwrap()
        .id;
    let _future = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({})).run_at(Utc::now() + chrono::Duration::hours(1)),
    )
    .await
    .unwrap()
    .id;
    let first = claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 1,
            worker: "w",
        },
    )
    .await
    .unwrap();
    assert_eq!(first[0].id, high, "smaller priority runs first");
    let rest = claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 10,
            worker: "w",
        },
    )
    .await
    .unwrap();
    assert_eq!(rest.iter().map(|j| j.id).collect::<Vec<_>>(), vec![low]);
}

#[tokio::test]
async fn acks_are_fenced_by_attempt() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 1,
            worker: "w1",
        },
    )
    .await
    .unwrap();
    // The job is rescued and claimed again (attempt 2) by another worker.
    sqlx::query("UPDATE skiplock.jobs SET state = 'available' WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    let again = claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 1,
            worker: "w2",
        },
    )
    .await
    .unwrap();
    assert_eq!(again[0].attempt, 2);
    let late = Ack {
        id,
        attempt: 1,
        state: JobState::Discarded,
        scheduled_at: None,
        give_back: false,
        error: Some("late".into()),
        result: None,
        started_at: None,
    };
    assert!(
        ack_many(&db.pool, &[late]).await.unwrap().ids.is_empty(),
        "late ack must not apply"
    );
    assert_eq!(state_of(&db, id).await, "running");
    let current = Ack {
        id,
        attempt: 2,
        state: JobState::Completed,
        scheduled_at: None,
        give_back: false,
        error: None,
        result: None,
        started_at: None,
    };
    assert_eq!(ack_many(&db.pool, &[current]).await.unwrap().ids, vec![id]);
    assert_eq!(state_of(&db, id).await, "completed");
}

#[tokio::test]
async fn failed_acks_append_errors_and_snoozes_give_the_attempt_back() {
    let db = TestDb::new().await;
    let a = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    let b = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 2,
            worker: "w",
        },
    )
    .await
    .unwrap();
    let later = Utc::now() + chrono::Duration::seconds(30);
    let acks = vec![
        Ack {
            id: a,
            attempt: 1,
            state: JobState::Available,
            scheduled_at: Some(later),
            give_back: false,
            error: Some("boom".into()),
            result: None,
            started_at: None,
        },
        Ack {
            id: b,
            attempt: 1,
            state: JobState::Available,
            scheduled_at: Some(later),
            give_back: true,
            error: None,
            result: None,
            started_at: None,
        },
    ];
    let mut written = ack_many(&db.pool, &acks).await.unwrap().ids;
    written.sort();
    assert_eq!(written, vec![a, b]);
    let ra = jobs::get_job(&db.pool, a).await.unwrap();
    assert_eq!(ra.state.as_str(), "available");
    assert_eq!(ra.attempt, 1);
    assert_eq!(ra.errors[0]["error"], "boom");
    assert_eq!(ra.errors[0]["attempt"], 1);
    let rb = jobs::get_job(&db.pool, b).await.unwrap();
    assert_eq!(rb.attempt, 0, "snooze does not use up an attempt");
    assert_eq!(rb.errors, json!([]));
    assert!((rb.scheduled_at - later).num_milliseconds().abs() < 5);
}

#[tokio::test]
async fn unique_key_keep_and_replace() {
    let db = TestDb::new().await;
    let first = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({"v": 1})).unique_key("k", OnConflict::Keep),
    )
    .await
    .unwrap()
    .id;
    let kept = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({"v": 2})).unique_key("k", OnConflict::Keep),
    )
    .await
    .unwrap()
    .id;
    assert_eq!(first, kept);
    assert_eq!(
        jobs::get_job(&db.pool, first).await.unwrap().args,
        json!({"v": 1})
    );
    let later = Utc::now() + chrono::Duration::minutes(5);
    let replaced = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({"v": 3}))
            .run_at(later)
            .unique_key("k", OnConflict::Replace),
    )
    .await
    .unwrap()
    .id;
    assert_eq!(first, replaced);
    let row = jobs::get_job(&db.pool, first).await.unwrap();
    assert_eq!(row.args, json!({"v": 3}));
    assert!((row.scheduled_at - later).num_milliseconds().abs() < 5);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
    // Once the holder runs, the key is free for a new available job.
    sqlx::query("UPDATE skiplock.jobs SET state = 'running' WHERE id = $1")
        .bind(first)
        .execute(&db.pool)
        .await
        .unwrap();
    let fresh = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({})).unique_key("k", OnConflict::Keep),
    )
    .await
    .unwrap()
    .id;
    assert_ne!(fresh, first);
}

#[tokio::test]
async fn unique_key_is_safe_under_concurrent_callers() {
    let db = TestDb::new().await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for j in 0..25 {
                let mode = if (i + j) % 2 == 0 {
                    OnConflict::Keep
                } else {
                    OnConflict::Replace
                };
                let id = enqueue(
                    &pool,
                    &NewJob::new("noop", json!({"i": i, "j": j})).unique_key("hot", mode),
                )
                .await
                .expect("no unique violation may leak out")
                .id;
                ids.push(id);
            }
            ids
        }));
    }
    let mut all = HashSet::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    assert_eq!(all.len(), 1, "every caller got the same job");
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn enqueue_many_returns_ids_in_order() {
    let db = TestDb::new().await;
    let args: Vec<_> = (0..100).map(|i| json!({"n": i})).collect();
    let ids = enqueue_many(
        &db.pool,
        ManyJobs {
            limit_key: None,
            kind: "noop",
            args: &args,
            queue: "bulk",
            run_at: None,
            priority: 0,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(ids.len(), 100);
    for (i, id) in ids.iter().enumerate() {
        let row = jobs::get_job(&db.pool, *id).await.unwrap();
        assert_eq!(row.args.to_value().unwrap()["n"], i as i64);
        assert_eq!(row.queue, "bulk");
    }
    let bad_args = [json!({}), json!([1])];
    let bad = enqueue_many(
        &db.pool,
        ManyJobs {
            limit_key: None,
            kind: "noop",
            args: &bad_args,
            queue: "bulk",
            run_at: None,
            priority: 0,
            ..Default::default()
        },
    )
    .await;
    let msg = bad.unwrap_err().db_message().unwrap().to_string();
    assert!(msg.contains("args[2]"), "{msg}");
}

#[tokio::test]
async fn the_sql_api_rejects_bad_input_with_clear_errors() {
    let db = TestDb::new().await;
    let cases: Vec<(&str, &str)> = vec![
        ("SELECT skiplock.enqueue('')", "kind must not be empty"),
        (
            "SELECT skiplock.enqueue('noop', '[1,2]')",
            "must be a JSON object",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', max_attempts => -1)",
            "max_attempts must be at least 1",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', unique_key => 'k', on_conflict => 'merge')",
            "on_conflict must be",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', queue => '')",
            "queue name",
        ),
        (
            "SELECT skiplock.enqueue('noop', jsonb_build_object('x', repeat('a', 600000)))",
            "at most 524288",
        ),
        // Each rule once more: skiplock._enqueue skips its checks when one expression says
        // every rule passes, so none of these may slip through that expression.
        ("SELECT skiplock.enqueue(repeat('k', 201))", "at most 200"),
        (
            "SELECT skiplock.enqueue('noop', '{}', queue => repeat('q', 201))",
            "queue name",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', max_attempts => NULL)",
            "max_attempts must be at least 1",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', run_at => 'infinity')",
            "must be a finite time",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', on_conflict => NULL)",
            "on_conflict must be",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', limit_key => '')",
            "limit_key must not be empty",
        ),
        (
            "SELECT skiplock.enqueue('noop', '{}', limit_key => repeat('x', 1001))",
            "limit_key is 1001 bytes long",
        ),
        ("SELECT skiplock.cancel(424242)", "does not exist"),
        ("SELECT skiplock.retry(424242)", "does not exist"),
    ];
    for (sql, want) in cases {
        let err = sqlx::query(sql).execute(&db.pool).await.unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(want), "{sql}: {msg}");
    }
    // Hostile strings are just data.
    let id: i64 = sqlx::query_scalar("SELECT skiplock.enqueue($1, $2)")
        .bind("'; DROP TABLE skiplock.jobs; --")
        .bind(json!({"q": "\"'; DROP TABLE x"}))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        jobs::get_job(&db.pool, id).await.unwrap().kind,
        "'; DROP TABLE skiplock.jobs; --"
    );
    // Priority overflow is a type error from Postgres, not a silent wrap.
    assert!(
        sqlx::query("SELECT skiplock.enqueue('noop', '{}', priority => 99999)")
            .execute(&db.pool)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn cancel_and_retry() {
    let db = TestDb::new().await;
    let id: i64 = sqlx::query_scalar("SELECT skiplock.enqueue('noop')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    jobs::cancel_job(&db.pool, id).await.unwrap();
    assert_eq!(state_of(&db, id).await, "cancelled");
    let e = jobs::cancel_job(&db.pool, id)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("already cancelled"), "{e}");
    jobs::retry_job(&db.pool, id).await.unwrap();
    assert_eq!(state_of(&db, id).await, "available");
    // A discarded job out of attempts gets one more.
    sqlx::query(
        "UPDATE skiplock.jobs SET state = 'discarded', attempt = 3, max_attempts = 3, \
         finalized_at = now() WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    jobs::retry_job(&db.pool, id).await.unwrap();
    let row = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!((row.state.as_str(), row.max_attempts), ("available", 4));
    assert!(row.finalized_at.is_none());
}

#[tokio::test]
async fn queue_stats_view_works_from_plain_sql() {
    let db = TestDb::new().await;
    for _ in 0..3 {
        sqlx::query("SELECT skiplock.enqueue('noop', '{}', 'q1')")
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let (count,): (i64,) = sqlx::query_as(
        "SELECT count FROM skiplock.queue_stats WHERE queue = 'q1' AND state = 'available'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(count, 3);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.jobs WHERE state = 'available'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 3);
}

#[tokio::test]
async fn migrate_is_idempotent_and_detects_missing_schema() {
    let db = TestDb::empty().await;
    let e = skiplock::store::schema::ensure_ready(&db.pool)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("skiplock migrate"), "{e}");
    skiplock::store::schema::migrate(&db.pool).await.unwrap();
    skiplock::store::schema::migrate(&db.pool).await.unwrap();
    skiplock::store::schema::ensure_ready(&db.pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_requeued_keyed_job_is_superseded_by_the_waiting_one() {
    let db = TestDb::new().await;
    let first = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({})).unique_key("k", OnConflict::Keep),
    )
    .await
    .unwrap()
    .id;
    let other = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 2,
            worker: "w",
        },
    )
    .await
    .unwrap();
    // While `first` runs, a new job takes the key.
    let second = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({})).unique_key("k", OnConflict::Keep),
    )
    .await
    .unwrap()
    .id;
    assert_ne!(first, second);
    // `first` fails and would go back to available: the batch must not fail.
    let acks = vec![
        Ack {
            id: first,
            attempt: 1,
            state: JobState::Available,
            scheduled_at: Some(Utc::now()),
            give_back: false,
            error: Some("boom".into()),
            result: None,
            started_at: None,
        },
        Ack {
            id: other,
            attempt: 1,
            state: JobState::Completed,
            scheduled_at: None,
            give_back: false,
            error: None,
            result: None,
            started_at: None,
        },
    ];
    assert_eq!(ack_many(&db.pool, &acks).await.unwrap().ids.len(), 2);
    let f = jobs::get_job(&db.pool, first).await.unwrap();
    assert_eq!(f.state.as_str(), "cancelled");
    assert!(
        f.errors[1]["error"]
            .as_str()
            .unwrap()
            .contains("superseded"),
        "{}",
        f.errors
    );
    assert_eq!(state_of(&db, second).await, "available");
    assert_eq!(state_of(&db, other).await, "completed");
    // The rescuer path too.
    claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 1,
            worker: "w",
        },
    )
    .await
    .unwrap();
    enqueue(
        &db.pool,
        &NewJob::new("noop", json!({})).unique_key("k", OnConflict::Keep),
    )
    .await
    .unwrap();
    assert_eq!(rescue_queue(&db, "default").await, 1);
    assert_eq!(count_state_k(&db, "available").await, 1);
}

/// Claims up to 5 due `noop` jobs of `queue` as worker `w`; their ids.
async fn claim_noop_as_w(db: &TestDb, queue: &str) -> Vec<i64> {
    claim(
        db.pool.pg(),
        ClaimParams {
            queue,
            kinds: &kinds(&["noop"]),
            limit: 5,
            worker: "w",
        },
    )
    .await
    .unwrap()
    .iter()
    .map(|j| j.id)
    .collect()
}

/// Two jobs with one unique_key, both running in `queue` for worker `w` (the first was claimed
/// before the second was enqueued, so the key was free again): (older, newer).
async fn two_running_with_one_key(db: &TestDb, queue: &str) -> (i64, i64) {
    let mut ids = Vec::new();
    for _ in 0..2 {
        let id = enqueue(
            &db.pool,
            &NewJob::new("noop", json!({}))
                .queue(queue)
                .unique_key(format!("key-{queue}"), OnConflict::Keep),
        )
        .await
        .unwrap()
        .id;
        assert_eq!(claim_noop_as_w(db, queue).await, vec![id]);
        ids.push(id);
    }
    (ids[0], ids[1])
}

/// The older one was cancelled, superseded by the newer, which waits.
async fn assert_superseded(db: &TestDb, older: i64, newer: i64) {
    let o = jobs::get_job(&db.pool, older).await.unwrap();
    assert_eq!(o.state.as_str(), "cancelled", "{}", o.errors);
    let last = o.errors.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last["error"].as_str().unwrap(),
        format!(
            "superseded: job {newer} already waits with unique_key key-{}",
            o.queue
        ),
    );
    assert_eq!(state_of(db, newer).await, "available");
}

/// Two keyed jobs going back to `available` in one statement (both failed in one ack batch,
/// both rescued, both released at shutdown) must not fail the statement on the unique index
/// (a batch that always fails would be retried forever): the newer stays, the older is
/// superseded; the rest of the batch lands.
#[tokio::test]
async fn keyed_jobs_going_back_together_keep_the_newest_and_the_statement_lands() {
    let db = TestDb::new().await;
    // One ack batch.
    let (older, newer) = two_running_with_one_key(&db, "acked").await;
    let other = enqueue(&db.pool, &NewJob::new("noop", json!({})).queue("acked"))
        .await
        .unwrap()
        .id;
    assert_eq!(claim_noop_as_w(&db, "acked").await, vec![other]);
    let done = Ack {
        id: other,
        attempt: 1,
        state: JobState::Completed,
        scheduled_at: None,
        give_back: false,
        error: None,
        result: None,
        started_at: None,
    };
    let mut written = ack_many(&db.pool, &[retry_ack(older, 1), retry_ack(newer, 1), done])
        .await
        .unwrap()
        .ids;
    written.sort();
    assert_eq!(written, vec![older, newer, other]);
    assert_superseded(&db, older, newer).await;
    assert_eq!(state_of(&db, other).await, "completed");
    let n = jobs::get_job(&db.pool, newer).await.unwrap();
    assert_eq!(n.errors.as_array().unwrap().len(), 1, "{}", n.errors);

    // One rescue.
    let (older, newer) = two_running_with_one_key(&db, "rescued").await;
    assert_eq!(rescue_queue(&db, "rescued").await, 2);
    assert_superseded(&db, older, newer).await;

    // One release of a stopping worker's unstarted jobs.
    let (older, newer) = two_running_with_one_key(&db, "released").await;
    assert_eq!(release_all(&db, "released").await, 2);
    assert_superseded(&db, older, newer).await;
}

/// An ack of attempt `attempt` of job `id`: failed, back to `available` in an hour.
fn retry_ack(id: i64, attempt: i32) -> Ack {
    Ack {
        id,
        attempt,
        state: JobState::Available,
        scheduled_at: Some(Utc::now() + chrono::Duration::hours(1)),
        give_back: false,
        error: Some("boom".into()),
        result: None,
        started_at: None,
    }
}

async fn release_all(db: &TestDb, queue: &str) -> usize {
    skiplock::store::ack::release_unstarted(
        &db.pool,
        skiplock::store::ack::ReleaseParams {
            worker: "w",
            queue: Some(queue),
            held: &[],
            count_attempt: false,
            reason: "released: shutting down",
        },
    )
    .await
    .unwrap()
    .len()
}

/// Only a job that really goes back, and waits afterwards, supersedes another: not one whose
/// ack the fence turns away, not one discarded for being out of attempts. A batch naming one
/// job twice still lands, and a release next to a job already waiting supersedes like the ack
/// and the rescue do.
#[tokio::test]
async fn superseding_counts_only_jobs_that_really_go_back_and_wait() {
    let db = TestDb::new().await;
    // The newer one's ack is for an attempt it is not running: fenced off, it stays running
    // and holds no key, so the older one goes back and waits.
    let (older, newer) = two_running_with_one_key(&db, "fenced").await;
    let written = ack_many(&db.pool, &[retry_ack(older, 1), retry_ack(newer, 2)])
        .await
        .unwrap()
        .ids;
    assert_eq!(written, vec![older]);
    assert_eq!(state_of(&db, older).await, "available");
    assert_eq!(state_of(&db, newer).await, "running");

    // The newer one is out of attempts: the rescue discards it, and the older one waits.
    let (older, newer) = two_running_with_one_key(&db, "spent").await;
    sqlx::query("UPDATE skiplock.jobs SET max_attempts = 1 WHERE id = $1")
        .bind(newer)
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(rescue_queue(&db, "spent").await, 2);
    assert_eq!(state_of(&db, older).await, "available");
    assert_eq!(state_of(&db, newer).await, "discarded");

    // One keyed job named twice in one batch going back.
    let (_, twice) = two_running_with_one_key(&db, "twice").await;
    let written = ack_many(&db.pool, &[retry_ack(twice, 1), retry_ack(twice, 1)])
        .await
        .unwrap()
        .ids;
    assert_eq!(written, vec![twice]);
    assert_eq!(state_of(&db, twice).await, "available");

    // A release next to a job already waiting with the key.
    let (_, running) = two_running_with_one_key(&db, "waiting").await;
    let waiting = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({}))
            .queue("waiting")
            .unique_key("key-waiting", OnConflict::Keep),
    )
    .await
    .unwrap()
    .id;
    sqlx::query("UPDATE skiplock.jobs SET state = 'completed', finalized_at = now() WHERE queue = 'waiting' AND id < $1")
        .bind(running)
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(release_all(&db, "waiting").await, 1);
    assert_superseded(&db, running, waiting).await;
}

/// Claims, acks and heartbeats update every job row: a row-level BEFORE UPDATE trigger on
/// skiplock.jobs (any, whatever its WHEN clause) makes Postgres lock and WAL-log each row
/// before updating it, about a tenth of the drain rate and 50 bytes of WAL per job (docs/performance.md;
/// the superseding of requeued keyed jobs lives in the statements instead).
#[tokio::test]
async fn no_row_trigger_runs_before_updates_of_jobs() {
    let db = TestDb::new().await;
    let before_update: Vec<String> = sqlx::query_scalar(
        "SELECT tgname::text FROM pg_trigger
         WHERE tgrelid = 'skiplock.jobs'::regclass AND NOT tgisinternal
           AND tgtype & (1 | 2 | 16) = (1 | 2 | 16)",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(before_update, Vec::<String>::new());
}

/// Makes the running jobs of `queue` look abandoned (heartbeat an hour old) and runs the
/// rescuer's statement; returns how many jobs it rescued.
async fn rescue_queue(db: &TestDb, queue: &str) -> u64 {
    sqlx::query(
        "UPDATE skiplock.jobs SET heartbeat_at = now() - interval '1 hour'
         WHERE state = 'running' AND queue = $1",
    )
    .bind(queue)
    .execute(&db.pool)
    .await
    .unwrap();
    skiplock::maintenance::rescuer::rescue(&db.pool, Duration::from_secs(60))
        .await
        .unwrap()
}

async fn count_state_k(db: &TestDb, state: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM skiplock.jobs WHERE unique_key = 'k' AND state::text = $1",
    )
    .bind(state)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Claims job `id` (the only due `noop` job) as `worker` and acks it with a retryable error:
/// the job waits for its retry, `available` with one more error. Returns the attempt it ran.
async fn fail_once(db: &TestDb, id: i64, worker: &str) -> i32 {
    let jobs = claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 1,
            worker,
        },
    )
    .await
    .unwrap();
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id]);
    let ack = Ack {
        id,
        attempt: jobs[0].attempt,
        state: JobState::Available,
        scheduled_at: Some(Utc::now()),
        give_back: false,
        error: Some(format!("boom {}", jobs[0].attempt)),
        result: None,
        started_at: None,
    };
    assert_eq!(ack_many(&db.pool, &[ack]).await.unwrap().ids, vec![id]);
    jobs[0].attempt
}

#[tokio::test]
async fn replace_of_a_pending_retry_from_rust_takes_everything_given_and_starts_at_attempt_0() {
    let db = TestDb::new().await;
    let id = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({"v": 1}))
            .max_attempts(3)
            .unique_key("k", OnConflict::Keep),
    )
    .await
    .unwrap()
    .id;
    fail_once(&db, id, "w1").await;
    fail_once(&db, id, "w2").await;
    let before = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!((before.state.as_str(), before.attempt), ("available", 2));

    let later = Utc::now() + chrono::Duration::minutes(5);
    let replaced = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({"v": 2}))
            .run_at(later)
            .priority(-5)
            .max_attempts(7)
            .unique_key("k", OnConflict::Replace),
    )
    .await
    .unwrap()
    .id;
    assert_eq!(replaced, id, "replace keeps the row");
    let r = jobs::get_job(&db.pool, id).await.unwrap();
    // Changed: what the caller gave, and the attempt count.
    assert_eq!(r.args, json!({"v": 2}));
    assert!((r.scheduled_at - later).num_milliseconds().abs() < 5);
    assert_eq!(r.priority, -5);
    assert_eq!(r.max_attempts, 7);
    assert_eq!(r.attempt, 0, "a pending retry starts again at attempt 0");
    // Kept: id, kind, queue, key, created_at and the earlier errors; the replace adds one
    // entry with the args it overwrote (docs/concepts.md, "Unique keys").
    assert_eq!(
        (r.kind.as_str(), r.queue.as_str(), r.state.as_str()),
        ("noop", "default", "available")
    );
    assert_eq!(r.unique_key.as_deref(), Some("k"));
    assert_eq!(r.created_at, before.created_at);
    let entries = r.errors.as_array().unwrap();
    assert_eq!(&entries[..2], before.errors.as_array().unwrap().as_slice());
    assert_eq!(entries[2]["replaced_args"], r#"{"v": 1}"#);
    let errors: Vec<(i64, String)> = r
        .errors
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["attempt"].as_i64().unwrap(),
                e["error"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(errors[..2], [(1, "boom 1".into()), (2, "boom 2".into())]);
    assert!(errors[2].1.starts_with("replaced by "), "{errors:?}");
    assert_eq!(count_all(&db).await, 1, "no second row for the key");
}

#[tokio::test]
async fn replace_of_a_pending_retry_from_sql_takes_priority_and_max_attempts() {
    let db = TestDb::new().await;
    let id: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('noop', '{\"v\": 1}', max_attempts => 25, unique_key => 'report')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // 24 failed attempts of 25: under the old rule the new payload would get one try.
    sqlx::query(
        "UPDATE skiplock.jobs SET attempt = 24, errors = (SELECT jsonb_agg(jsonb_build_object( \
             'attempt', n, 'at', now(), 'error', 'boom')) FROM generate_series(1, 24) n) \
         WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    let replaced: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('noop', '{\"v\": 2}', priority => -2::smallint, max_attempts => 10, \
                                 unique_key => 'report', on_conflict => 'replace')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(replaced, id);
    let (args, priority, attempt, max_attempts, errors): (serde_json::Value, i16, i32, i32, i64) =
        sqlx::query_as(
            "SELECT args, priority, attempt, max_attempts, jsonb_array_length(errors)::bigint \
             FROM skiplock.jobs WHERE id = $1",
        )
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        (args, priority, attempt, max_attempts, errors),
        (json!({"v": 2}), -2, 0, 10, 25),
        "the 24 errors, and the replaced args"
    );
    // The next claim is attempt 1 of 10.
    let jobs = claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 1,
            worker: "w",
        },
    )
    .await
    .unwrap();
    assert_eq!(
        (jobs[0].id, jobs[0].attempt, jobs[0].max_attempts),
        (id, 1, 10)
    );
}

#[tokio::test]
async fn replace_after_an_attempt_was_taken_away_keeps_counting_so_the_late_ack_stays_fenced() {
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for key in ["rescued", "cancelled"] {
        let job = NewJob::new("noop", json!({"v": 1}))
            .max_attempts(3)
            .unique_key(key, OnConflict::Keep);
        ids.push(enqueue(&db.pool, &job).await.unwrap().id);
    }
    let (rescued, cancelled) = (ids[0], ids[1]);
    let claimed = claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 2,
            worker: "stalled",
        },
    )
    .await
    .unwrap();
    assert_eq!(claimed.len(), 2);
    // One is cancelled while running, then retried; the other is rescued. The worker
    // running them may still be alive and ack attempt 1 of either late.
    jobs::cancel_job(&db.pool, cancelled).await.unwrap();
    support::rescue_now(&db.pool, rescued).await;
    jobs::retry_job(&db.pool, cancelled).await.unwrap();

    for (id, key) in [(rescued, "rescued"), (cancelled, "cancelled")] {
        let replaced = enqueue(
            &db.pool,
            &NewJob::new("noop", json!({"v": 2}))
                .priority(-1)
                .max_attempts(5)
                .unique_key(key, OnConflict::Replace),
        )
        .await
        .unwrap()
        .id;
        assert_eq!(replaced, id);
        let r = jobs::get_job(&db.pool, id).await.unwrap();
        let jobs = claim(
            db.pool.pg(),
            ClaimParams {
                queue: "default",
                kinds: &kinds(&["noop"]),
                limit: 1,
                worker: "fresh",
            },
        )
        .await
        .unwrap();
        assert_eq!(jobs[0].id, id, "{key}");
        let late = Ack {
            id,
            attempt: 1,
            state: JobState::Completed,
            scheduled_at: None,
            give_back: false,
            error: None,
            result: Some(json!({"payload": "old"})),
            started_at: None,
        };
        assert!(
            ack_many(&db.pool, &[late]).await.unwrap().ids.is_empty(),
            "{key}: the late ack of the taken attempt must not land on the new one"
        );
        assert_eq!(
            (
                r.args.to_value().unwrap(),
                r.priority,
                r.attempt,
                r.max_attempts
            ),
            (json!({"v": 2}), -1, 1, 6),
            "{key}: attempt 1 may still be acked, so counting goes on (5 more tries)"
        );
        let r = jobs::get_job(&db.pool, id).await.unwrap();
        assert_eq!(
            (r.state.as_str(), r.attempt, r.attempted_by.as_deref()),
            ("running", 2, Some("fresh")),
            "{key}"
        );
    }
}

#[tokio::test]
async fn cancelling_a_running_job_records_the_attempt_clears_the_heartbeat_and_fences_the_ack() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    let jobs = claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 1,
            worker: "w1",
        },
    )
    .await
    .unwrap();
    assert_eq!(jobs[0].attempt, 1);
    assert!(
        jobs::get_job(&db.pool, id)
            .await
            .unwrap()
            .heartbeat_at
            .is_some()
    );
    let before: chrono::DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    jobs::cancel_job(&db.pool, id).await.unwrap();
    let r = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!(r.state.as_str(), "cancelled");
    assert_eq!(r.heartbeat_at, None, "the stale heartbeat is cleared");
    let errors = r.errors.as_array().unwrap();
    assert_eq!(errors.len(), 1, "{}", r.errors);
    assert_eq!(errors[0]["attempt"], 1);
    assert_eq!(errors[0]["error"], "cancelled while running");
    let at = chrono::DateTime::parse_from_rfc3339(errors[0]["at"].as_str().unwrap()).unwrap();
    assert!(at >= before, "{at} is before the cancel");

    // The worker's late ack changes nothing.
    let late = Ack {
        id,
        attempt: 1,
        state: JobState::Completed,
        scheduled_at: None,
        give_back: false,
        error: None,
        result: Some(json!({"late": true})),
        started_at: None,
    };
    assert!(ack_many(&db.pool, &[late]).await.unwrap().ids.is_empty());
    let after = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!(after.state.as_str(), "cancelled");
    assert_eq!(after.result, None);
    assert_eq!(after.errors, r.errors);

    // A job cancelled while waiting had no attempt to interrupt: no entry.
    let waiting = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    jobs::cancel_job(&db.pool, waiting).await.unwrap();
    assert_eq!(
        jobs::get_job(&db.pool, waiting).await.unwrap().errors,
        json!([])
    );
}

async fn count_all(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM skiplock.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// A row whose attempt counter is at the integer maximum (only a trusted role can write one)
/// at the head of a queue fails alone: the claim discards it with the reason in its errors and
/// takes the jobs behind it, instead of failing on `integer out of range` at every try.
#[tokio::test]
async fn an_attempt_counter_at_its_maximum_fails_only_its_own_row() {
    let db = TestDb::new().await;
    let poison: i64 = sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, attempt, max_attempts, priority)
         VALUES ('noop', 2147483647, 2147483647, -5) RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let next = enqueue(&db.pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id;
    let got = claim(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds(&["noop"]),
            limit: 10,
            worker: "w",
        },
    )
    .await
    .unwrap();
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![next]);
    assert_eq!(state_of(&db, poison).await, "discarded");
    let errors: serde_json::Value =
        sqlx::query_scalar("SELECT errors FROM skiplock.jobs WHERE id = $1")
            .bind(poison)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        errors
            .to_string()
            .contains("attempt counter is at its maximum"),
        "{errors}"
    );
}

/// `skiplock.cancel_by_key` and `skiplock.reschedule` (through `skiplock::admin`): only the
/// jobs with the key (of the kind asked) change; a running job is cancelled as `cancel` does
/// it and never rescheduled; a past run_at means now; bad arguments are refused by name.
#[tokio::test]
async fn cancel_by_key_and_reschedule_touch_only_the_jobs_they_name() {
    use skiplock::admin::{self, Reschedule};
    let db = TestDb::new().await;
    let later = Utc::now() + chrono::Duration::hours(2);
    let keyed = |kind: &str, queue: &str, key: &str| {
        NewJob::new(kind, json!({}))
            .queue(queue)
            .run_at(later)
            .unique_key(key, OnConflict::Keep)
    };
    let a = enqueue(&db.pool, &keyed("noop", "default", "k1"))
        .await
        .unwrap()
        .id;
    let b = enqueue(&db.pool, &keyed("noop", "default", "k2"))
        .await
        .unwrap()
        .id;
    let c = enqueue(&db.pool, &keyed("other", "default", "k1"))
        .await
        .unwrap()
        .id;
    let d = enqueue(&db.pool, &keyed("noop", "elsewhere", "k1"))
        .await
        .unwrap()
        .id;
    // d runs (as a claim leaves it).
    sqlx::query(
        "UPDATE skiplock.jobs SET state = 'running', attempt = 1, attempted_at = now(), \
         heartbeat_at = now() WHERE id = $1",
    )
    .bind(d)
    .execute(&db.pool)
    .await
    .unwrap();

    // By key: b only, due an hour from now at priority 5.
    let soon = Utc::now() + chrono::Duration::hours(1);
    let moved = admin::reschedule(
        &db.pool,
        &Reschedule {
            key: Some("k2"),
            run_at: Some(soon),
            priority: Some(5),
            ..Reschedule::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(moved, [b]);
    let (at, priority): (chrono::DateTime<Utc>, i16) =
        sqlx::query_as("SELECT scheduled_at, priority FROM skiplock.jobs WHERE id = $1")
            .bind(b)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (at.timestamp_micros(), priority),
        (soon.timestamp_micros(), 5)
    );
    // By id: the running one is left alone; a run_at in the past means now.
    let before = Utc::now();
    let past = chrono::DateTime::parse_from_rfc3339("2000-01-01T00:00:00Z").unwrap();
    let moved = admin::reschedule(
        &db.pool,
        &Reschedule {
            ids: Some(&[a, d]),
            run_at: Some(past.with_timezone(&Utc)),
            ..Reschedule::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(moved, [a]);
    let due: chrono::DateTime<Utc> =
        sqlx::query_scalar("SELECT scheduled_at FROM skiplock.jobs WHERE id = $1")
            .bind(a)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(due >= before - chrono::Duration::seconds(5), "{due}");
    for (call, want) in [
        (
            "SELECT * FROM skiplock.reschedule()",
            "ids or a key (exactly one)",
        ),
        (
            "SELECT * FROM skiplock.reschedule(ids => '{1}', key => 'k1')",
            "ids or a key (exactly one)",
        ),
        (
            "SELECT * FROM skiplock.reschedule(key => 'k1', max_attempts => 0)",
            "max_attempts must be at least 1",
        ),
        (
            "SELECT * FROM skiplock.reschedule(key => 'k1', run_at => 'infinity')",
            "run_at must be a finite time",
        ),
        (
            "SELECT skiplock.cancel_by_key('')",
            "cancel_by_key needs a unique_key",
        ),
    ] {
        let e = sqlx::query(call).execute(&db.pool).await.unwrap_err();
        let d = e.as_database_error().unwrap();
        assert_eq!(d.code().as_deref(), Some("22023"), "{call}");
        assert!(d.message().contains(want), "{call}: {}", d.message());
    }

    // Cancel by key and kind: a (waiting) and d (running, in another queue); c is another kind.
    let n = admin::cancel_by_key(&db.pool, "k1", Some("noop"), None)
        .await
        .unwrap();
    assert_eq!(n, 2);
    let rows: Vec<(i64, String, Option<i32>, bool)> = sqlx::query_as(
        "SELECT id, state::text, taken_attempt, errors::text LIKE '%cancelled while running%' \
         FROM skiplock.jobs ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            (a, "cancelled".into(), None, false),
            (b, "available".into(), None, false),
            (c, "available".into(), None, false),
            (d, "cancelled".into(), Some(1), true),
        ]
    );
    // Any kind: c; then nothing is left with the key.
    assert_eq!(
        admin::cancel_by_key(&db.pool, "k1", None, None)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        admin::cancel_by_key(&db.pool, "k1", None, None)
            .await
            .unwrap(),
        0
    );
}
