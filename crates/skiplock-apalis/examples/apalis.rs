//! An apalis 1.x worker on skiplock (feature `apalis`): the handler and middleware are plain
//! apalis; only the backend line differs from an apalis-postgres worker.
//!
//! ```sh
//! DATABASE_URL=postgres://root@127.0.0.1:5432/skiplock cargo run -p skiplock-apalis --example apalis
//! ```
//!
//! It migrates the database, pushes 20 emails through apalis's `TaskSink` (one of them a
//! debounced digest that only keeps its last version), runs them with 10 at a time and
//! stops on Ctrl-C (SIGINT) or SIGTERM, returning the jobs it still holds.

use std::time::Duration;

use apalis::prelude::*;
use serde::{Deserialize, Serialize};
use skiplock::queue::OnConflict;
use skiplock_apalis::{JobOptions, SkiplockJob, SkiplockStorage};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Email {
    to: String,
    subject: String,
}

/// A plain apalis handler: `Ok` completes the skiplock job, an error retries it with
/// skiplock's backoff, `AbortError` discards it at once.
async fn send_email(email: Email, job: Data<SkiplockJob>) -> Result<(), BoxDynError> {
    if email.to.is_empty() {
        return Err(AbortError::new("no recipient").into());
    }
    println!(
        "job {} (attempt {}): mail to {} about {:?}",
        job.id, job.attempt, email.to, email.subject
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .init();
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/skiplock".into());
    let pool = skiplock::db::connect(&url, 10).await?;
    skiplock::store::schema::migrate(&pool).await?;
    let settings = skiplock::config::QueueSettings::from_env()?;

    // The one line that changes: `PostgresStorage::new(&pool)` becomes this.
    let storage = SkiplockStorage::<Email>::new(pool, "send-email")
        .settings(settings)
        .concurrency(10);

    let mut sink = storage.clone();
    let emails = (0..20)
        .map(|i| Email {
            to: format!("user{i}@example.com"),
            subject: "welcome".into(),
        })
        .collect();
    sink.push_bulk(emails).await?;
    for version in 1..=3 {
        let digest = TaskBuilder::new(Email {
            to: "team@example.com".into(),
            subject: format!("digest v{version}"),
        })
        .data(
            JobOptions::new()
                .unique_key("digest:team", OnConflict::Replace)
                .run_at(chrono::Utc::now() + chrono::Duration::seconds(2)),
        )
        .build();
        sink.push_task(digest).await?;
    }

    WorkerBuilder::new("email")
        .backend(storage)
        .concurrency(10)
        .build(send_email)
        .run_until(async {
            skiplock::worker::shutdown::signal().await;
            Ok::<(), std::io::Error>(())
        })
        .await?;
    Ok(())
}
