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

/// The settings of every built-in workflow.
#[derive(Debug, Clone)]
pub struct WorkflowSettings {
    /// `fetch`'s (`SKIPLOCK_POLITENESS`, `SKIPLOCK_SCHEDULES`, …).
    pub fetch: fetch::FetchSettings,
    /// `pack`'s (`SKIPLOCK_PACK_QUIET`, `SKIPLOCK_STORE`, …).
    pub pack: pack::PackSettings,
    /// `process-packet`'s (`SKIPLOCK_PACKET_ROOTS`, `SKIPLOCK_PACKET_CONCURRENCY`, …).
    pub packets: packets::PacketSettings,
}

impl WorkflowSettings {
    /// Reads and validates every workflow setting (for the program's edge: `skiplock
    /// worker`; the library itself never reads the environment).
    pub fn from_env() -> Result<Self> {
        Ok(WorkflowSettings {
            fetch: fetch::FetchSettings::from_env()?,
            pack: pack::PackSettings::from_env()?,
            packets: packets::PacketSettings::from_env()?,
        })
    }
}

/// Registers every built-in workflow's handlers, services and start-up hooks with `settings`.
pub fn register_all(builder: WorkerBuilder, settings: WorkflowSettings) -> Result<WorkerBuilder> {
    let builder = fetch::register_with(builder, settings.fetch)?;
    let builder = pack::register_with(builder, settings.pack)?;
    Ok(packets::register_with(builder, settings.packets))
}
