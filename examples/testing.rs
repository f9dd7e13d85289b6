//! Testing a program that uses skiplock (`skiplock::testing`), against a real database: a
//! handler run inline, what a transaction enqueued, and a worker draining the queue. Builds with
//! the core alone:
//!
//! ```sh
//! DATABASE_URL=postgres://root@127.0.0.1:5432/skiplock cargo run --example testing
//! ```
//!
//! Expected output:
//!
//! ```text
//! inline: Ok(Complete)
//! inline, bad input: discarded (no address)
//! enqueued in the transaction: 2
//! drained: 2 completed, 0 discarded
//! ```

use skiplock::prelude::*;
use skiplock::testing;

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Notify {
    to: String,
}

impl JobArgs for Notify {
    const KIND: &'static str = "notify";
}

async fn notify(_ctx: JobContext, job: Notify) -> Result<(), JobError> {
    if job.to.is_empty() {
        return Err(JobError::discard("no address"));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = skiplock::connect(&std::env::var("DATABASE_URL")?, 10).await?;
    skiplock::migrate(&pool).await?;

    let verdict = testing::run_job(
        &pool,
        notify,
        Notify {
            to: "ada@example.org".into(),
        },
    )
    .await;
    println!("inline: {verdict:?}");
    let bad = testing::run_job(&pool, notify, Notify { to: String::new() }).await;
    assert!(bad.as_ref().is_err_and(|e| !e.retryable));
    println!(
        "inline, bad input: discarded ({})",
        bad.unwrap_err().message
    );

    let mut tx = pool.begin().await?;
    skiplock::enqueue(
        &mut *tx,
        Notify {
            to: "ada@example.org".into(),
        },
    )
    .await?;
    skiplock::enqueue(
        &mut *tx,
        Notify {
            to: "bob@example.org".into(),
        },
    )
    .await?;
    let seen = testing::enqueued::<Notify, _>(&mut *tx).await?;
    println!("enqueued in the transaction: {}", seen.len());
    tx.commit().await?;

    let drained = testing::drain(
        Worker::builder(pool)
            .queue("default", 4)
            .register_typed(notify),
    )
    .await?;
    println!(
        "drained: {} completed, {} discarded",
        drained.completed, drained.discarded
    );
    Ok(())
}
