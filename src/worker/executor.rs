//! Runs one attempt of one job: look up the handler, decode, enforce the timeout, turn a
//! panic into an error. No SQL here; the ack writer writes the result.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use super::handler::{ErasedHandler, JobContext};
use super::outcome::{Attempt, cap_error_owned};
use crate::queue::RawArgs;
use futures::FutureExt;

/// Runs `handler` on `args` under its timeout (or `default_timeout`). The handler parses
/// the args itself, so args it cannot read fail this job alone (src/queue/args.rs).
pub async fn execute(
    handler: Option<ErasedHandler>,
    ctx: JobContext,
    args: RawArgs,
    default_timeout: Duration,
) -> Attempt {
    let Some(h) = handler else {
        return Attempt::NoHandler;
    };
    let timeout = h.timeout().unwrap_or(default_timeout);
    let steps = ctx.steps.clone();
    let fut = AssertUnwindSafe(h.call(ctx, args)).catch_unwind();
    let attempt = run(fut, timeout).await;
    // An attempt that ended itself (a durable sleep or wait) is due again then, whatever its
    // handler returned after; a step's own error (a discard) is the verdict when the handler
    // returned an error (docs/steps.md).
    if let Some(until) = steps.suspended() {
        return Attempt::Suspended(until);
    }
    match (attempt, steps.failed()) {
        (Attempt::Returned(Err(_)), Some(mut e)) => {
            e.message = cap_error_owned(e.message);
            Attempt::Returned(Err(e))
        }
        (attempt, _) => attempt,
    }
}

async fn run(
    fut: impl std::future::Future<
        Output = Result<super::HandlerResult, Box<dyn Any + Send + 'static>>,
    >,
    timeout: Duration,
) -> Attempt {
    // Messages capped here, before the worker logs the attempt and acks it (the ack caps
    // again, a no-op then): neither the log line nor `errors` holds more than
    // MAX_ERROR_BYTES of a message (docs/reliability.md, "Errors").
    match tokio::time::timeout(timeout, fut).await {
        Err(_) => Attempt::TimedOut(timeout),
        Ok(Err(panic)) => Attempt::Panicked(cap_error_owned(panic_message(panic.as_ref()))),
        Ok(Ok(Err(mut e))) => {
            e.message = cap_error_owned(e.message);
            Attempt::Returned(Err(e))
        }
        Ok(Ok(result)) => Attempt::Returned(result),
    }
}

/// The text of a panic payload.
pub fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
