//! Built-in workflows: plain handlers, registered with the worker exactly as a user's
//! handlers would be.
//!
//! - [`fetch`]: polite, scheduled page fetching (the crawler's "entree").
//! - [`pack`]: debounced packing of a host's pages into a SQLite artifact.
//! - [`packets`]: the six-state packet pipeline.

#[cfg(feature = "fetch")]
pub mod fetch;
#[cfg(feature = "pack")]
pub mod pack;
#[cfg(feature = "packets")]
pub mod packets;

use crate::error::Result;
use crate::worker::{StartHook, WorkerBuilder};

/// A workflow's first start-up hook: its part of the schema is installed as this build
/// installs it (`store::schema::ensure_part`), so a worker with the workflow refuses, in one
/// line, a database a program without it migrated, before any of its other hooks runs.
pub(crate) fn part_hook(part: &'static str) -> StartHook {
    Box::new(move |pool: crate::store::Pool| {
        Box::pin(async move { crate::store::schema::ensure_part(&pool, part).await })
    })
}

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
