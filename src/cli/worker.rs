//! `skiplock worker`: the settings from the environment plus flags, every built-in handler
//! and workflow registered, and the maintenance services.

use clap::Args;

use crate::config::{self, QueueSettings, parse_queues};
use crate::worker::{Worker, builtin, shutdown};

/// `skiplock worker` flags.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Queues and their concurrency, e.g. `default=10,fetch=4` (default: every queue, 10 each;
    /// env SKIPLOCK_QUEUES).
    #[arg(long)]
    pub queues: Option<String>,
    /// Exit 0 once nothing in these queues is claimable now and nothing runs.
    #[arg(long)]
    pub exit_when_idle: bool,
}

/// Runs the worker until a signal (or idle).
pub async fn run(url: Option<&str>, a: WorkerArgs) -> anyhow::Result<()> {
    let mut settings = QueueSettings::from_env()?;
    if let Some(q) = &a.queues {
        settings.queues =
            Some(parse_queues(q).map_err(|e| anyhow::anyhow!("invalid --queues: {e}"))?);
    }
    // Built without contacting the database: the worker waits for it (with a capped
    // backoff, forever unless SKIPLOCK_CONNECT_TIMEOUT), where one-shot commands fail fast.
    let pool = crate::db::session::handler_pool(&config::database_url(url)?, &settings)?;
    let mut builder = Worker::builder(pool.clone(), settings).exit_when_idle(a.exit_when_idle);
    builtin::register(builder.registry_mut());
    builder = crate::workflows::register_all(builder)?;
    builder = crate::maintenance::register_all(builder)?;
    let worker = builder.build();
    worker.run(shutdown::signal()).await?;
    Ok(())
}
