//! The `chaos_record` kind: writes one row to `skiplock_chaos.executions` (committed on its
//! own, before the ack), then works for a few milliseconds. A SIGKILL between the two is the
//! at-least-once case the chaos verdict must attribute to that kill.

use std::time::Duration;

use serde::Deserialize;

use crate::chaos::store::Execution;
use skiplock::worker::{Handler, HandlerResult, JobContext, Outcome};

/// The kind chaos runs enqueue.
pub const KIND: &str = "chaos_record";

/// Args of `chaos_record`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordArgs {
    /// The job's number in the run (for people reading the table; the handler ignores it).
    #[allow(dead_code)]
    pub n: i64,
    /// How long to work after recording, in milliseconds.
    #[serde(default)]
    pub ms: u64,
}

/// Records each execution with the worker id and process id that ran it.
pub struct Record;

impl Handler for Record {
    type Args = RecordArgs;
    fn kind(&self) -> &'static str {
        KIND
    }
    async fn run(&self, ctx: JobContext, args: RecordArgs) -> HandlerResult {
        let x = Execution {
            job_id: ctx.id,
            attempt: ctx.attempt,
            worker_id: &ctx.worker_id,
            pid: std::process::id() as i32,
        };
        crate::chaos::store::record(&ctx.pool, x).await?;
        if args.ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.ms)).await;
        }
        Ok(Outcome::Complete)
    }
}
