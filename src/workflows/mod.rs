//! Built-in workflows: plain handlers, registered with the worker exactly as a user's
//! handlers would be.
//!
//! - [`fetch`]: polite, scheduled page fetching (the crawler's "entree").
//! - [`pack`]: debounced packing of a host's pages into a SQLite artifact.
//! - [`packets`]: the six-state packet pipeline.

pub mod fetch;
pub mod pack;
pub mod packets;

use crate::error::Result;
use crate::worker::WorkerBuilder;

/// Registers every built-in workflow's handlers, services and start-up hooks, reading
/// their settings from the environment (a bad setting stops the worker at start-up).
pub fn register_all(builder: WorkerBuilder) -> Result<WorkerBuilder> {
    let builder = fetch::register(builder)?;
    let builder = pack::register(builder)?;
    packets::register(builder)
}
