//! Limits enforced when jobs are claimed, for every worker at once: a queue's per-key rate
//! (here: one start per 500 ms per tenant, the `limit_key`) and its concurrency. A job its
//! limits hold back is not claimed at all (no attempt, no worker slot) and starts as soon as
//! they allow. Builds with the core alone:
//!
//! ```sh
//! DATABASE_URL=postgres://root@127.0.0.1:5432/skiplock cargo run --example limits
//! ```
//!
//! Expected output: each tenant's three jobs start about 500 ms apart, the two tenants side by
//! side (times differ):
//!
//! ```text
//! tenant a, job 1 at +0 ms
//! tenant b, job 1 at +3 ms
//! tenant a, job 2 at +502 ms
//! tenant b, job 2 at +503 ms
//! tenant a, job 3 at +1004 ms
//! tenant b, job 3 at +1005 ms
//! ```

use std::time::{Duration, Instant};

use skiplock::admin::{self, KeyLimit, Rate};
use skiplock::prelude::*;

#[derive(Serialize, Deserialize)]
struct Call {
    tenant: String,
    n: u32,
}

impl JobArgs for Call {
    const KIND: &'static str = "call-tenant-api";
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = skiplock::connect(&std::env::var("DATABASE_URL")?, 10).await?;
    skiplock::migrate(&pool).await?;
    // Per tenant: one start per 500 ms; the queue as a whole: at most 4 running jobs.
    admin::set_key_limit(
        &pool,
        "tenants",
        KeyLimit {
            concurrency: None,
            rate: Some(Rate {
                count: 1,
                period: Duration::from_millis(500),
            }),
        },
    )
    .await?;
    admin::set_queue_limit(&pool, "tenants", Some(4)).await?;
    for n in 1..=3 {
        for tenant in ["a", "b"] {
            let call = Call {
                tenant: tenant.into(),
                n,
            };
            let options = JobOptions::new().queue("tenants").limit_key(tenant);
            skiplock::enqueue_with(&pool, call, options).await?;
        }
    }
    let start = Instant::now();
    Worker::builder(pool)
        .queue("tenants", 4)
        .register_typed(move |_ctx: JobContext, call: Call| async move {
            println!(
                "tenant {}, job {} at +{} ms",
                call.tenant,
                call.n,
                start.elapsed().as_millis()
            );
        })
        .without_maintenance()
        .exit_when_idle(true)
        .build()
        .run(std::future::pending::<()>())
        .await?;
    Ok(())
}
