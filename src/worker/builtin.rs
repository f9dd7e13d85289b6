//! Diagnostic kinds for smoke tests and benchmarks: `noop`, `sleep` and `fail`.

use std::time::Duration;

use serde::Deserialize;

use super::handler::{Handler, JobContext};
use super::outcome::{HandlerResult, JobError, Outcome};

/// `noop`: completes at once. Args are ignored.
pub struct Noop;

impl Handler for Noop {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "noop"
    }
    async fn run(&self, _ctx: JobContext, _args: serde_json::Value) -> HandlerResult {
        Ok(Outcome::Complete)
    }
}

/// Args of `sleep`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SleepArgs {
    /// How long to sleep, in milliseconds.
    pub ms: u64,
    /// Record when the sleep started and ended (this machine's clock, microseconds since
    /// the epoch) in the job's result: `{"started_us", "finished_us"}`. Tests of limits read
    /// them to see how many jobs really ran at once.
    #[serde(default)]
    pub record: bool,
}

/// `sleep`: sleeps `{"ms": N}`; cut short by shutdown (the job goes back, attempt kept).
pub struct Sleep;

impl Handler for Sleep {
    type Args = SleepArgs;
    fn kind(&self) -> &'static str {
        "sleep"
    }
    async fn run(&self, ctx: JobContext, args: SleepArgs) -> HandlerResult {
        let started_us = chrono::Utc::now().timestamp_micros();
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(args.ms)) => Ok(if args.record {
                Outcome::CompleteWith(serde_json::json!({
                    "started_us": started_us,
                    "finished_us": chrono::Utc::now().timestamp_micros(),
                }))
            } else {
                Outcome::Complete
            }),
            _ = ctx.shutdown_requested() => Ok(Outcome::Snooze(Duration::ZERO)),
            _ = ctx.lost() => Err(JobError::retry("job was taken away")),
        }
    }
}

/// Args of `fail`.
#[derive(Debug, Deserialize)]
pub struct FailArgs {
    /// The error message (default "failed on purpose").
    #[serde(default)]
    pub message: Option<String>,
}

/// `fail`: always errors with `{"message": "…"}`.
pub struct Fail;

impl Handler for Fail {
    type Args = FailArgs;
    fn kind(&self) -> &'static str {
        "fail"
    }
    async fn run(&self, _ctx: JobContext, args: FailArgs) -> HandlerResult {
        Err(JobError::retry(
            args.message.unwrap_or_else(|| "failed on purpose".into()),
        ))
    }
}

/// Registers the three diagnostic kinds.
pub fn register(r: &mut super::handler::Registry) {
    r.register(Noop);
    r.register(Sleep);
    r.register(Fail);
}
