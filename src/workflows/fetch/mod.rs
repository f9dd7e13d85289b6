//! Workflow `fetch` (not built yet).

use crate::error::Result;
use crate::worker::WorkerBuilder;

/// Registers this workflow's handlers, services and start-up hooks.
pub fn register(builder: WorkerBuilder) -> Result<WorkerBuilder> {
    Ok(builder)
}
