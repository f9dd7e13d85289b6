//! What a handler can answer, and the state each leaves the job in: completed (`Ok(())`), a
//! result stored with it (`Outcome::CompleteWith`), snoozed (run again later, no attempt spent),
//! cancelled (`Outcome::Cancel`), discarded at once (`JobError::discard`), or retried with a
//! backoff (any other error) until `max_attempts`. Builds with the core alone:
//!
//! ```sh
//! DATABASE_URL=postgres://root@127.0.0.1:5432/skiplock cargo run --example outcomes
//! ```
//!
//! Expected output:
//!
//! ```text
//! complete: completed after 1 attempt
//! result: completed after 1 attempt
//! snooze: completed after 1 attempt
//! cancel: cancelled after 1 attempt
//! discard: discarded after 1 attempt
//! fail: discarded after 2 attempts
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use skiplock::prelude::*;

/// Whether the snoozing job has snoozed once already (a snooze gives the attempt back, so the
/// attempt number cannot tell).
static SNOOZED: AtomicBool = AtomicBool::new(false);

#[derive(Serialize, Deserialize)]
struct Task {
    what: String,
}

impl JobArgs for Task {
    const KIND: &'static str = "task";
}

async fn run(_ctx: JobContext, task: Task) -> Result<Outcome, JobError> {
    match task.what.as_str() {
        "complete" => Ok(Outcome::Complete),
        "result" => Ok(Outcome::CompleteWith(serde_json::json!({"rows": 3}))),
        // Run again in 200 ms; the attempt is given back.
        "snooze" if !SNOOZED.swap(true, Ordering::Relaxed) => {
            Ok(Outcome::Snooze(Duration::from_millis(200)))
        }
        "snooze" => Ok(Outcome::Complete),
        "cancel" => Ok(Outcome::Cancel("nothing to do any more".into())),
        "discard" => Err(JobError::discard("bad input: retrying cannot help")),
        _ => Err(JobError::retry("the remote said no")),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = skiplock::connect(&std::env::var("DATABASE_URL")?, 10).await?;
    skiplock::migrate(&pool).await?;
    let mut ids = Vec::new();
    for what in ["complete", "result", "snooze", "cancel", "discard", "fail"] {
        let options = JobOptions::new().queue("outcomes").max_attempts(2);
        let job = skiplock::enqueue_with(&pool, Task { what: what.into() }, options).await?;
        ids.push((what, job.id));
    }
    // A short backoff, so the failing job's second attempt comes at once.
    let settings = QueueSettings {
        backoff_unit: Duration::from_millis(10),
        ..QueueSettings::default()
    };
    Worker::builder(pool.clone())
        .settings(settings)
        .queue("outcomes", 4)
        .register_typed(run)
        .without_maintenance()
        .build()
        .run(tokio::time::sleep(Duration::from_secs(3)))
        .await?;
    for (what, id) in ids {
        let job = skiplock::admin::get_job(&pool, id).await?;
        let n = job.attempt;
        println!(
            "{what}: {} after {n} attempt{}",
            job.state,
            if n == 1 { "" } else { "s" }
        );
    }
    Ok(())
}
