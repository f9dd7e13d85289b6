//! `skiplock::testing` with durable steps, against a real Postgres (docs/steps.md): a handler's
//! steps run inline and recorded, so the next inline attempt of the same job replays them; a
//! wait answered by a signal between two inline attempts; a job a worker recorded replayed by
//! id with a fixed handler.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use skiplock::prelude::*;
use skiplock::queue::JobState;
use skiplock::testing;
use support::*;

#[derive(Serialize, Deserialize)]
struct Order {
    items: u32,
}
impl JobArgs for Order {
    const KIND: &'static str = "order";
}

static RESERVED: AtomicUsize = AtomicUsize::new(0);
static CHARGED: AtomicUsize = AtomicUsize::new(0);
static SHIPPED: AtomicUsize = AtomicUsize::new(0);

/// Three steps; the charge fails on the first attempt.
async fn order(ctx: JobContext, o: Order) -> skiplock::Result<Outcome> {
    let reserved: u32 = ctx
        .step("reserve", || async {
            RESERVED.fetch_add(1, Ordering::SeqCst);
            Ok::<_, JobError>(o.items)
        })
        .await?;
    let attempt = ctx.attempt;
    let charge: String = ctx
        .step("charge", || async move {
            if attempt == 1 {
                return Err(JobError::retry("the card network is down"));
            }
            CHARGED.fetch_add(1, Ordering::SeqCst);
            Ok(format!("ch_{reserved}"))
        })
        .await?;
    ctx.step("ship", || async {
        SHIPPED.fetch_add(1, Ordering::SeqCst);
        Ok::<_, JobError>(())
    })
    .await?;
    Ok(Outcome::CompleteWith(json!({ "charge": charge })))
}

fn counts() -> [usize; 3] {
    [
        RESERVED.load(Ordering::SeqCst),
        CHARGED.load(Ordering::SeqCst),
        SHIPPED.load(Ordering::SeqCst),
    ]
}

#[tokio::test]
async fn steps_run_inline_are_recorded_and_the_next_inline_attempt_replays_them() {
    let db = TestDb::new().await;
    let first = testing::run_recorded(&db.pool, order, Order { items: 3 })
        .await
        .unwrap();
    assert_eq!(first.attempt, 1);
    assert_eq!(first.state, JobState::Available, "{first:?}");
    assert!(
        first
            .error
            .as_deref()
            .is_some_and(|e| e.contains("the card network is down")),
        "{first:?}"
    );
    let names: Vec<&str> = first.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["reserve"]);
    assert_eq!(counts(), [1, 0, 0]);

    // The next attempt, at once (the retry's backoff is not waited for): the reservation is
    // replayed, the charge and the shipment run.
    let second = testing::replay_job(&db.pool, order, first.id)
        .await
        .unwrap();
    assert_eq!(second.attempt, 2);
    assert_eq!(second.state, JobState::Completed, "{second:?}");
    assert_eq!(second.result, Some(json!({ "charge": "ch_3" })));
    assert_eq!(counts(), [1, 1, 1]);
    let names: Vec<&str> = second.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["reserve", "charge", "ship"]);

    // A finished job replays too (made available again first): every step from its record.
    let third = testing::replay_job(&db.pool, order, first.id)
        .await
        .unwrap();
    assert_eq!(third.attempt, 3);
    assert_eq!(third.state, JobState::Completed);
    assert_eq!(third.result, Some(json!({ "charge": "ch_3" })));
    assert_eq!(counts(), [1, 1, 1], "nothing ran again");
    assert_eq!(third.steps, second.steps, "nothing was recorded again");

    // Not a job of this handler's kind, or no job at all: refused, naming why.
    let other = skiplock::enqueue_job(&db.pool, &NewJob::new("other", json!({})))
        .await
        .unwrap()
        .id;
    let e = testing::replay_job(&db.pool, order, other)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("is of kind \"other\""), "{e}");
    let e = testing::replay_job(&db.pool, order, other + 100)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("job {}", other + 100)), "{e}");
}

#[derive(Serialize, Deserialize)]
struct Approve {
    rows: u32,
}
impl JobArgs for Approve {
    const KIND: &'static str = "approve";
}

static WALKED: AtomicUsize = AtomicUsize::new(0);

/// Walks its rows with a cursor, then waits for a signal.
async fn approve(ctx: JobContext, a: Approve) -> skiplock::Result<Outcome> {
    let mut at: u32 = ctx.cursor().await?.unwrap_or(0);
    while at < a.rows {
        WALKED.fetch_add(1, Ordering::SeqCst);
        at += 1;
        ctx.checkpoint(&at).await?;
    }
    let got = ctx
        .wait_for::<String>("go", Duration::from_secs(3600))
        .await?;
    Ok(Outcome::CompleteWith(json!({
        "rows": at,
        "by": got.map(|s| s.payload),
    })))
}

#[tokio::test]
async fn an_inline_wait_ends_the_attempt_and_the_replay_after_the_signal_gets_it() {
    let db = TestDb::new().await;
    let first = testing::run_recorded(&db.pool, approve, Approve { rows: 4 })
        .await
        .unwrap();
    assert_eq!(first.state, JobState::Available, "{first:?}");
    let until = first.suspended_until.expect("the wait ended the attempt");
    assert!(until > chrono::Utc::now() + chrono::Duration::minutes(50));
    assert_eq!(WALKED.load(Ordering::SeqCst), 4);
    let kinds: Vec<&str> = first.steps.iter().map(|s| s.kind.as_str()).collect();
    assert_eq!(kinds, ["cursor", "wait"]);

    // Before the signal: the wait ends the attempt again, the cursor reads as saved.
    let again = testing::replay_job(&db.pool, approve, first.id)
        .await
        .unwrap();
    assert_eq!(
        again.suspended_until,
        Some(until),
        "the wait's deadline counts from the first"
    );
    assert_eq!(again.attempt, 1, "a wait gives its attempt back");
    assert_eq!(WALKED.load(Ordering::SeqCst), 4, "the cursor was read");

    assert!(
        skiplock::signal(&db.pool, first.id, "go", &"ops")
            .await
            .unwrap()
    );
    let last = testing::replay_job(&db.pool, approve, first.id)
        .await
        .unwrap();
    assert_eq!(last.state, JobState::Completed, "{last:?}");
    assert_eq!(last.result, Some(json!({ "rows": 4, "by": "ops" })));
    assert_eq!(last.suspended_until, None);
    assert_eq!(WALKED.load(Ordering::SeqCst), 4);
}

#[derive(Serialize, Deserialize)]
struct Import {
    files: u32,
}
impl JobArgs for Import {
    const KIND: &'static str = "import";
}

static IMPORTED: AtomicUsize = AtomicUsize::new(0);

/// Imports its files, one step each; the buggy version fails the last file for good.
async fn import(ctx: JobContext, i: Import, buggy: bool) -> skiplock::Result<Outcome> {
    for f in 0..i.files {
        ctx.step(format!("file-{f}"), || async move {
            if buggy && f + 1 == i.files {
                return Err(JobError::discard(format!("file-{f} does not parse")));
            }
            IMPORTED.fetch_add(1, Ordering::SeqCst);
            Ok(f)
        })
        .await?;
    }
    Ok(Outcome::Complete)
}

#[tokio::test]
async fn a_job_a_worker_recorded_is_replayed_by_id_with_a_fixed_handler() {
    let db = TestDb::new().await;
    let id = skiplock::enqueue(&db.pool, Import { files: 5 })
        .await
        .unwrap()
        .id;
    let drained = testing::drain(
        Worker::builder(db.pool.clone())
            .settings(fast_settings())
            .register_typed(|ctx, i: Import| import(ctx, i, true)),
    )
    .await
    .unwrap();
    assert_eq!(drained.discarded, 1);
    assert_eq!(IMPORTED.load(Ordering::SeqCst), 4);

    let fixed = testing::replay_job(&db.pool, |ctx, i: Import| import(ctx, i, false), id)
        .await
        .unwrap();
    assert_eq!(fixed.state, JobState::Completed, "{fixed:?}");
    assert_eq!(
        IMPORTED.load(Ordering::SeqCst),
        5,
        "the four files the worker imported were replayed, the fifth ran"
    );
    assert_eq!(fixed.steps.len(), 5);
}
