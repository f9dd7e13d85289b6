//! Debounce with a unique key: each change re-enqueues the same key with `OnConflict::Replace`
//! and a `run_at` a moment ahead, so the waiting job is updated (its args and its time) rather
//! than a second one added, and only the last version runs once the changes stop.
//! (`OnConflict::Keep` instead keeps the first and answers `Deduplicated`.) Builds with the
//! core alone:
//!
//! ```sh
//! DATABASE_URL=postgres://root@127.0.0.1:5432/skiplock cargo run --example debounce
//! ```
//!
//! Expected output (the id differs):
//!
//! ```text
//! version 1: job 7, Inserted
//! version 2: job 7, Replaced
//! version 3: job 7, Replaced
//! reindexing doc-42 at version 3
//! ```

use std::time::Duration;

use skiplock::prelude::*;

#[derive(Serialize, Deserialize)]
struct Reindex {
    doc: String,
    version: u32,
}

impl JobArgs for Reindex {
    const KIND: &'static str = "reindex";
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = skiplock::connect(&std::env::var("DATABASE_URL")?, 10).await?;
    skiplock::migrate(&pool).await?;
    for version in 1..=3 {
        let run_at = chrono::Utc::now() + chrono::TimeDelta::milliseconds(300);
        let options = JobOptions::new()
            .unique_key("reindex:doc-42", OnConflict::Replace)
            .run_at(run_at);
        let job = skiplock::enqueue_with(
            &pool,
            Reindex {
                doc: "doc-42".into(),
                version,
            },
            options,
        )
        .await?;
        println!("version {version}: job {}, {:?}", job.id, job.outcome);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Worker::builder(pool)
        .queue("default", 1)
        .register_typed(|_ctx: JobContext, job: Reindex| async move {
            println!("reindexing {} at version {}", job.doc, job.version);
        })
        .without_maintenance()
        .build()
        .run(tokio::time::sleep(Duration::from_secs(2)))
        .await?;
    Ok(())
}
