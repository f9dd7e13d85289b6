//! Waiting for a job from outside (docs/flows.md, "Waiting for a job"): [`wait_for`] returns
//! once the job has finished, woken by the NOTIFY its ack sends to watchers
//! (`skiplock.watch`), so a job nobody waits for costs nothing and a waiter polls nothing
//! while it is told. A re-read every second covers what the NOTIFY cannot: a job finished
//! by the rescuer or the reaper, a connection through a transaction-mode PgBouncer.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

use crate::error::Result;
use crate::queue::JobState;
use crate::store::{self, Pool};

/// How often a waiter re-reads the job even when nothing was announced.
const REREAD: Duration = Duration::from_secs(1);

/// What [`wait_for`] saw last.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Waited {
    /// The job's state.
    pub state: JobState,
    /// Its result (what the handler returned on completion).
    pub result: Option<Value>,
    /// Whether it finished (`false`: the timeout passed first).
    pub finished: bool,
}

/// Waits up to `timeout` for job `id` to finish (completed, discarded or cancelled); its
/// state and result. Takes no lock a worker needs: a LISTEN connection and one short read
/// per announcement or per second. A job that does not exist is refused
/// ([`crate::Error::Refused`], SQLSTATE `P0002`).
pub async fn wait_for(pool: &Pool, id: i64, timeout: Duration) -> Result<Waited> {
    let deadline = Instant::now() + timeout;
    let mut listener = store::flows::finished_listener(pool).await?;
    let want = id.to_string();
    loop {
        let (state, result) = store::flows::watch(pool, id).await?;
        let finished = state.is_finished();
        let now = Instant::now();
        if finished || now >= deadline {
            return Ok(Waited {
                state,
                result,
                finished,
            });
        }
        let until = deadline.min(now + REREAD);
        // Announcements of other jobs are skipped; ours, a lost connection or the re-read
        // time all lead to the read above.
        loop {
            match tokio::time::timeout_at(until, listener.try_recv()).await {
                Ok(Ok(Some(n))) if n.payload() != want => continue,
                Ok(Ok(_)) | Err(_) => break,
                Ok(Err(e)) => return Err(e.into()),
            }
        }
    }
}
