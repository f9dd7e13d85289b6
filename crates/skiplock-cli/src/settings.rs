//! The one place `skiplock worker` reads its settings: [`Settings::from_env`] parses and
//! validates every setting the worker uses, once, before anything starts, and the worker,
//! its maintenance and the workflows get them passed in. (The library below the CLI never
//! reads the environment; each section's `from_env` is called from here or another
//! command of `src/cli/`.)

use skiplock::config::QueueSettings;
use skiplock::error::Result;
use skiplock::maintenance::MaintenanceSettings;
use skiplock_workflows::WorkflowSettings;

/// Everything a worker process is configured with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The worker runtime's (`SKIPLOCK_QUEUES`, `SKIPLOCK_POLL_INTERVAL`, …).
    pub queue: QueueSettings,
    /// The reaper's, retention's and the periodic jobs' (`SKIPLOCK_REAPER_*`,
    /// `SKIPLOCK_RETAIN_*`, `SKIPLOCK_PERIODIC_FILE`).
    pub maintenance: MaintenanceSettings,
    /// The built-in workflows' (`SKIPLOCK_FETCH_*`, `SKIPLOCK_PACK_*`, `SKIPLOCK_PACKET_*`, …).
    pub workflows: WorkflowSettings,
}

impl Settings {
    /// Reads and validates every worker setting from the environment (and `.env`, loaded by
    /// `main` before this). The first bad one is the error, naming the variable.
    pub fn from_env() -> Result<Self> {
        Ok(Settings {
            queue: QueueSettings::from_env()?,
            maintenance: MaintenanceSettings::from_env()?,
            workflows: WorkflowSettings::from_env()?,
        })
    }
}
