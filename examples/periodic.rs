//! Periodic jobs: declared in code, enqueued once per period however many workers run (the
//! period's own row in `skiplock.periodic_runs` is the fence), run by the worker that declares
//! them. Builds with the core alone:
//!
//! ```sh
//! DATABASE_URL=postgres://root@127.0.0.1:5432/skiplock cargo run --example periodic
//! ```
//!
//! It runs for about five seconds. Expected output (times differ):
//!
//! ```text
//! tick at 10:00:00.012
//! tick at 10:00:02.003
//! tick at 10:00:04.001
//! stopped after 5 s
//! ```

use std::time::Duration;

use skiplock::maintenance::periodic::{PeriodicJob, PeriodicJobs};
use skiplock::prelude::*;

#[derive(Serialize, Deserialize)]
struct Tick {}

impl JobArgs for Tick {
    const KIND: &'static str = "tick";
}

async fn tick(_ctx: JobContext, _job: Tick) {
    println!("tick at {}", chrono::Utc::now().format("%H:%M:%S%.3f"));
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = skiplock::connect(&std::env::var("DATABASE_URL")?, 10).await?;
    skiplock::migrate(&pool).await?;
    // Every 2 s; `PeriodicJob::cron("nightly", "0 3 * * *", …)` takes a cron expression (UTC).
    let every_two = PeriodicJob::every(
        "tick",
        Duration::from_secs(2),
        NewJob::typed(&Tick {}, JobOptions::default())?,
    )?;
    let worker = Worker::builder(pool)
        .queue("default", 1)
        .register_typed(tick)
        .periodic(PeriodicJobs::new().add(every_two))
        .build();
    worker
        .run(tokio::time::sleep(Duration::from_secs(5)))
        .await?;
    println!("stopped after 5 s");
    Ok(())
}
