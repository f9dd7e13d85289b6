//! Flows (docs/flows.md): a fan-out and fan-in (split → ten parts → merge, the merge reading
//! its parts' results), a batch whose callback counts how its jobs went, and waiting for each
//! end from the enqueuing program with `skiplock::wait_for`. Builds with the core alone:
//!
//! ```sh
//! DATABASE_URL=postgres://root@127.0.0.1:5432/skiplock cargo run --example flows
//! ```
//!
//! Expected output:
//!
//! ```text
//! merge: completed, {"sum_of_squares":385}
//! batch: completed, {"completed":4,"discarded":1,"total":5}
//! ```

use std::time::Duration;

use skiplock::prelude::*;

#[derive(Serialize, Deserialize)]
struct Split {
    parts: u32,
}
impl JobArgs for Split {
    const KIND: &'static str = "split";
}

#[derive(Serialize, Deserialize)]
struct Part {
    n: u32,
}
impl JobArgs for Part {
    const KIND: &'static str = "part";
}

#[derive(Serialize, Deserialize)]
struct Merge {}
impl JobArgs for Merge {
    const KIND: &'static str = "merge";
}

#[derive(Serialize, Deserialize)]
struct Report {}
impl JobArgs for Report {
    const KIND: &'static str = "report";
}

async fn split(_ctx: JobContext, s: Split) -> Result<Outcome, JobError> {
    Ok(Outcome::CompleteWith(
        serde_json::json!({ "parts": s.parts }),
    ))
}

/// Squares its number; part 0 is bad input, discarded (the batch's callback counts it).
async fn part(_ctx: JobContext, p: Part) -> Result<Outcome, JobError> {
    if p.n == 0 {
        return Err(JobError::discard("part 0 has nothing to square"));
    }
    Ok(Outcome::CompleteWith(
        serde_json::json!({ "square": p.n * p.n }),
    ))
}

/// The fan-in: runs once every part has completed, and adds up their results.
async fn merge(ctx: JobContext, _m: Merge) -> Result<Outcome, JobError> {
    let mut sum = 0;
    for dep in ctx.dependency_results().await? {
        if let Some(r) = dep.result_as::<serde_json::Value>()? {
            sum += r["square"].as_u64().unwrap_or(0);
        }
    }
    Ok(Outcome::CompleteWith(
        serde_json::json!({ "sum_of_squares": sum }),
    ))
}

/// A batch's callback: runs once every job of the batch has finished, however.
async fn report(ctx: JobContext, _r: Report) -> Result<Outcome, JobError> {
    let s = BatchSummary::of(&ctx.dependency_results().await?);
    Ok(Outcome::CompleteWith(serde_json::json!({
        "total": s.total, "completed": s.completed, "discarded": s.discarded,
    })))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = skiplock::connect(&std::env::var("DATABASE_URL")?, 10).await?;
    skiplock::migrate(&pool).await?;

    // split → parts 1..=10 → merge, in one transaction-safe call.
    let mut flow = Flow::new().job(
        "split",
        NewJob::typed(&Split { parts: 10 }, JobOptions::new())?,
    );
    let mut parts = Vec::new();
    for n in 1..=10 {
        let name = format!("part-{n}");
        flow = flow.job_after(
            &name,
            NewJob::typed(&Part { n }, JobOptions::new())?,
            ["split"],
        );
        parts.push(name);
    }
    flow = flow.job_after("merge", NewJob::typed(&Merge {}, JobOptions::new())?, parts);
    let fan = skiplock::enqueue_flow(&pool, &flow).await?;

    // Five parts, one of them bad, and a callback that reports how they went.
    let batch = Flow::batch(
        (0..5)
            .map(|n| NewJob::typed(&Part { n }, JobOptions::new().max_attempts(1)))
            .collect::<skiplock::Result<Vec<_>>>()?,
        NewJob::typed(&Report {}, JobOptions::new())?,
    );
    let batch = skiplock::enqueue_flow(&pool, &batch).await?;

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(
        Worker::builder(pool.clone())
            .queue("default", 8)
            .register_typed(split)
            .register_typed(part)
            .register_typed(merge)
            .register_typed(report)
            .without_maintenance()
            .build()
            .run(async move {
                let _ = stopped.await;
            }),
    );
    for (what, id) in [("merge", fan.id("merge")), ("batch", batch.id("callback"))] {
        let id = id.expect("the flow names it");
        let w = skiplock::wait_for(&pool, id, Duration::from_secs(30)).await?;
        let result = w.result.map(|r| r.to_string()).unwrap_or_default();
        println!("{what}: {}, {result}", w.state);
    }
    let _ = stop.send(());
    worker.await??;
    Ok(())
}
