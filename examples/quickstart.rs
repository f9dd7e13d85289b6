//! skiplock in a service, in the order a service uses it: define a typed job, enqueue it in
//! your own transaction (it exists only if the transaction commits), start a worker, stop it.
//! This is the README's Rust example; it builds with the core alone:
//!
//! ```sh
//! DATABASE_URL=postgres://root@127.0.0.1:5432/skiplock cargo run --example quickstart
//! ```
//!
//! Expected output (the ids differ):
//!
//! ```text
//! enqueued job 1 (Inserted) in a transaction that commits
//! a transaction that rolls back enqueued nothing
//! sending the welcome mail to ada@example.org
//! done: the worker ran every due job and stopped
//! ```

use skiplock::prelude::*;

/// A job's args; the type names its kind, so enqueue and handler agree by construction.
#[derive(Serialize, Deserialize)]
struct SendWelcome {
    to: String,
}

impl JobArgs for SendWelcome {
    const KIND: &'static str = "send-welcome";
}

/// The handler: any error that displays is retried with a backoff (`JobError::discard` ends the
/// job at once); returning `Ok(())` completes it.
async fn send_welcome(_ctx: JobContext, job: SendWelcome) -> anyhow::Result<()> {
    anyhow::ensure!(job.to.contains('@'), "no address to send to");
    println!("sending the welcome mail to {}", job.to);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL")?;
    let pool = skiplock::connect(&url, 10).await?;
    skiplock::migrate(&pool).await?;

    // Enqueue inside your own transaction, next to the rows it belongs with.
    let mut tx = pool.begin().await?;
    // sqlx::query("INSERT INTO users …").execute(&mut *tx).await?;
    let job = skiplock::enqueue(
        &mut *tx,
        SendWelcome {
            to: "ada@example.org".into(),
        },
    )
    .await?;
    tx.commit().await?;
    println!(
        "enqueued job {} ({:?}) in a transaction that commits",
        job.id, job.outcome
    );

    let mut tx = pool.begin().await?;
    skiplock::enqueue(
        &mut *tx,
        SendWelcome {
            to: "bob@example.org".into(),
        },
    )
    .await?;
    tx.rollback().await?;
    let waiting = skiplock::testing::enqueued::<SendWelcome, _>(&pool).await?;
    assert_eq!(waiting.len(), 1);
    println!("a transaction that rolls back enqueued nothing");

    // A worker: 10 jobs of queue `default` at a time. `exit_when_idle` stops it once nothing
    // is due; a service runs it until SIGINT/SIGTERM instead (`run(shutdown::signal())`).
    Worker::builder(pool)
        .queue("default", 10)
        .register_typed(send_welcome)
        .exit_when_idle(true)
        .build()
        .run(skiplock::worker::shutdown::signal())
        .await?;
    println!("done: the worker ran every due job and stopped");
    Ok(())
}
