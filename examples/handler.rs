//! The README's handler example, compiled by `cargo test --all-targets` so it stays true.
//! Run: `DATABASE_URL=... cargo run --example handler` (Ctrl-C to stop).

use skiplock::prelude::*;

/// The job's args; the type names its kind, so enqueue and handler agree by construction.
#[derive(Serialize, Deserialize)]
struct SendEmail {
    to: String,
}

impl JobArgs for SendEmail {
    const KIND: &'static str = "send-email";
}

async fn send_email(_ctx: JobContext, job: SendEmail) -> HandlerResult {
    if job.to.is_empty() {
        return Err(JobError::discard("no recipient")); // bad input: no retry
    }
    // ... any `?` on a std error here is a retryable error ...
    Ok(Outcome::Complete)
}

#[tokio::main]
async fn main() -> skiplock::Result<()> {
    let url = std::env::var("DATABASE_URL").unwrap_or("postgres://root@127.0.0.1/skiplock".into());
    let pool = skiplock::db::connect(&url, 10).await?;
    skiplock::store::schema::migrate(&pool).await?;
    skiplock::enqueue(&pool, SendEmail { to: "a@b.c".into() }).await?;
    // The rescuer, reaper, retention and periodic scheduler come with the builder.
    Worker::builder(pool, QueueSettings::default())
        .register_typed(send_email)
        .build()
        .run(skiplock::worker::shutdown::signal()) // SIGINT/SIGTERM: graceful shutdown
        .await
}
