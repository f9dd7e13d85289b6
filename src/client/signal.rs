//! Signals from a service (docs/steps.md, "Signals"): what `skiplock.signal` does from SQL,
//! with the payload checked first so a bad one is refused in one line naming the problem.

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::store::{self, Executor};

/// Sends signal `name` with `payload` to job `job` (as `skiplock.signal` does from SQL):
/// kept until the job's wait for it, and a job waiting for it is made due now. `exec` is a
/// pool (`&pool`) or a transaction (`&mut *tx`: the signal counts once it commits). Returns
/// whether it was kept: `false` when this login's key scope already sent that job a signal of
/// that name. A job that does not exist or has finished is refused.
pub async fn signal<'e, E: Executor<'e>>(
    exec: E,
    job: i64,
    name: &str,
    payload: &impl Serialize,
) -> Result<bool> {
    let payload = signal_payload(name, payload)?;
    store::steps::signal(exec, job, name, Some(&payload)).await
}

/// `payload` as the JSON a signal carries, or an error naming the problem: not JSON, or a NUL
/// character (`\u0000`), which no `jsonb` holds (the server would refuse it less clearly).
fn signal_payload(name: &str, payload: &impl Serialize) -> Result<Value> {
    let payload = serde_json::to_value(payload)
        .map_err(|e| Error::Invalid(format!("the payload of signal {name:?} is not JSON: {e}")))?;
    if let Some(path) = crate::queue::enqueue::find_nul(&payload) {
        return Err(Error::Invalid(format!(
            "the payload of signal {name:?} holds a NUL character (\\u0000) at {path}, which Postgres cannot store in jsonb"
        )));
    }
    Ok(payload)
}
