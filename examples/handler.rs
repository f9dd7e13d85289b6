//! The README's handler example, compiled by `cargo test --all-targets` so it stays true.
//! Run: `DATABASE_URL=... cargo run --example handler` (Ctrl-C to stop).

use serde::Deserialize;
use skiplock::worker::{Handler, HandlerResult, JobContext, JobError, Outcome, Worker};

#[derive(Deserialize)]
struct Email {
    to: String,
}

struct SendEmail;

impl Handler for SendEmail {
    type Args = Email; // bad args discard the job with the decode error
    fn kind(&self) -> &'static str {
        "send-email"
    }
    async fn run(&self, _ctx: JobContext, args: Email) -> HandlerResult {
        if args.to.is_empty() {
            return Err(JobError::discard("no recipient"));
        }
        // ... any `?` on a std error here is a retryable error ...
        Ok(Outcome::Complete)
    }
}

#[tokio::main]
async fn main() -> skiplock::Result<()> {
    let url = skiplock::config::database_url(None)?;
    let pool = skiplock::db::connect(&url, 10).await?;
    skiplock::store::schema::migrate(&pool).await?;
    let job = skiplock::queue::NewJob::new("send-email", serde_json::json!({"to": "a@b.c"}));
    skiplock::store::jobs::enqueue(&pool, &job).await?;
    let settings = skiplock::config::QueueSettings::from_env()?;
    Worker::builder(pool, settings)
        .register(SendEmail)
        .build()
        .run(skiplock::worker::shutdown::signal()) // SIGINT/SIGTERM: graceful shutdown
        .await
}
