//! The `fault_job` kind of the partition run: records its start (committed on its own, before
//! anything else), works its time unless told its job was taken away (`ctx.lost()`), records
//! its end, and completes naming its execution in the result, so the checker can tell which
//! execution a completion came from.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use crate::chaos::store::partitions as sql;
use skiplock::worker::{Handler, HandlerResult, JobContext, Outcome};

/// The kind partition runs enqueue.
pub const KIND: &str = "fault_job";

/// Args of `fault_job`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultArgs {
    /// The job's number in the run (the checker matches enqueues by it).
    #[allow(dead_code)]
    pub n: i64,
    /// How long to work, in milliseconds.
    #[serde(default)]
    pub ms: u64,
}

/// Records each execution, then works.
pub struct FaultJob;

impl Handler for FaultJob {
    type Args = FaultArgs;
    fn kind(&self) -> &'static str {
        KIND
    }
    async fn run(&self, ctx: JobContext, args: FaultArgs) -> HandlerResult {
        let pid = std::process::id() as i32;
        let exec = sql::started(&ctx.pool, ctx.id, ctx.attempt, &ctx.worker_id, pid).await?;
        let outcome = tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(args.ms)) => "done",
            _ = ctx.lost() => "lost",
        };
        // Best effort: the link may be down now; the start is what the checker needs.
        let _ = sql::ended(&ctx.pool, exec, outcome).await;
        Ok(Outcome::CompleteWith(json!({ "exec": exec })))
    }
}
