//! Typed jobs: the args type names its kind, `skiplock::enqueue` writes it (in the caller's
//! transaction or on a pool) with the type's default options and the caller's overrides,
//! and `register_typed` runs it, found by the same type.

mod support;

use std::time::Duration;

use skiplock::prelude::*;
use skiplock::store::jobs;
use support::*;

#[derive(Serialize, Deserialize)]
struct Greet {
    name: String,
}

impl JobArgs for Greet {
    const KIND: &'static str = "greet";
    fn options() -> JobOptions {
        JobOptions::new().queue("greetings").max_attempts(3)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_jobs_are_enqueued_in_the_callers_transaction_and_run_by_their_typed_handler() {
    let db = TestDb::new().await;

    // Rolled back: no job.
    let mut tx = db.pool.begin().await.unwrap();
    skiplock::enqueue(
        &mut *tx,
        Greet {
            name: "nobody".into(),
        },
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.jobs").await,
        0
    );

    // Committed: the kind and the defaults come from the type.
    let mut tx = db.pool.begin().await.unwrap();
    let id = skiplock::enqueue(&mut *tx, Greet { name: "ada".into() })
        .await
        .unwrap()
        .id;
    tx.commit().await.unwrap();
    let row = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!(
        (row.kind.as_str(), row.queue.as_str(), row.max_attempts),
        ("greet", "greetings", 3)
    );
    assert_eq!(row.args, serde_json::json!({"name": "ada"}));

    // Options override the type's defaults; a unique key keeps one waiting job.
    let opts = || {
        JobOptions::new()
            .priority(-2)
            .unique_key("greet:bob", OnConflict::Keep)
    };
    let a = skiplock::enqueue_with(&db.pool, Greet { name: "bob".into() }, opts())
        .await
        .unwrap()
        .id;
    let b = skiplock::enqueue_with(
        &db.pool,
        Greet {
            name: "bob2".into(),
        },
        opts(),
    )
    .await
    .unwrap()
    .id;
    assert_eq!(a, b, "the key holder's id comes back");
    let row = jobs::get_job(&db.pool, a).await.unwrap();
    assert_eq!((row.queue.as_str(), row.priority), ("greetings", -2));

    // A job of the same kind with args the type cannot read is discarded with the decode
    // error, like any handler's.
    let bad = jobs::enqueue(
        &db.pool,
        &NewJob::new("greet", serde_json::json!({"nom": 1})).queue("greetings"),
    )
    .await
    .unwrap()
    .id;

    let w = start_worker(&db.pool, fast_settings(), |b| {
        b.register_typed(|_ctx: JobContext, job: Greet| async move {
            // A handler may return the outcome itself (see IntoJobResult).
            Outcome::CompleteWith(serde_json::json!({"hello": job.name}))
        })
    });
    wait_all_finished(&db.pool, Duration::from_secs(60)).await;
    w.stop().await.unwrap();

    let row = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!(row.state.as_str(), "completed");
    assert_eq!(
        row.result.as_deref(),
        Some(&serde_json::json!({"hello": "ada"}))
    );
    let row = jobs::get_job(&db.pool, a).await.unwrap();
    assert_eq!(
        row.result.as_deref(),
        Some(&serde_json::json!({"hello": "bob"}))
    );
    let row = jobs::get_job(&db.pool, bad).await.unwrap();
    assert_eq!(row.state.as_str(), "discarded");
    assert!(
        row.errors
            .to_string()
            .contains("invalid args for kind greet"),
        "{}",
        row.errors
    );
}
