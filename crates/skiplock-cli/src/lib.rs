//! The `skiplock` command: clap definitions and dispatch (the binary is src/main.rs). Errors
//! bubble up as `anyhow` and `main` prints them on one line. A library too, so the dev tools'
//! binary (crates/skiplock-devtools) takes every command.

pub mod doctor;
pub mod fetch;
pub mod flows;
pub mod jobs;
pub mod maintenance;
pub mod output;
pub mod pack;
pub mod packets;
pub mod progress;
pub mod queue;
pub mod settings;
pub mod web;
pub mod worker;

use clap::{Parser, Subcommand};

/// What a program's edge needs to log and print without leaking a database password: the
/// registration of the URL whose password [`ScrubbedStderr`] hides.
pub use skiplock::redact::register_url;

/// Stderr for `tracing_subscriber`, with every registered password scrubbed from each line
/// (`skiplock::redact::ScrubbedWriter`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ScrubbedStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for ScrubbedStderr {
    type Writer = skiplock::redact::ScrubbedWriter;

    fn make_writer(&'a self) -> Self::Writer {
        skiplock::redact::ScrubbedWriter
    }
}

use skiplock::config;
use skiplock::store::{Pool, schema};

/// skiplock: a Postgres-as-queue job runner.
#[derive(Debug, Parser)]
#[command(name = "skiplock", version, about, long_about = None)]
pub struct Cli {
    /// Postgres URL (default: DATABASE_URL from the environment or .env).
    #[arg(long, global = true)]
    pub database_url: Option<String>,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade the skiplock schema and SQL API.
    Migrate,
    /// Run the worker pool until SIGINT/SIGTERM (or idle, with --exit-when-idle).
    Worker(worker::WorkerArgs),
    /// Enqueue a job; prints its id.
    Enqueue(jobs::EnqueueArgs),
    /// List jobs, newest first.
    Jobs(jobs::JobsArgs),
    /// Show one job, with its dependencies and dependents.
    Job(jobs::JobArgs),
    /// Wait for a job to finish; the exit status says how (0 completed, 3 discarded,
    /// 4 cancelled, 5 timed out).
    Wait(flows::WaitArgs),
    /// Show a flow's progress and its jobs.
    Flow(flows::FlowArgs),
    /// Cancel a waiting, available or running job, or the unfinished jobs with a unique key.
    Cancel(jobs::CancelArgs),
    /// Make a discarded, cancelled or completed job available again, now.
    Retry(jobs::IdArg),
    /// Send a signal to a job (what its durable `wait_for` waits for); a job waiting for it
    /// is made due now.
    Signal(jobs::SignalArgs),
    /// Give waiting jobs (by id or unique key) a new run time, priority or attempt limit.
    Reschedule(jobs::RescheduleArgs),
    /// Counts per queue and state, and kinds no live worker handles.
    Stats(jobs::StatsArgs),
    /// Queue control: limits (queue and per key), pause, resume, list.
    Queue(queue::QueueArgs),
    /// Request a polite fetch of a page (skipped unless due, or --force).
    Fetch(fetch::FetchArgs),
    /// Push a host's pack timer forward (debounce).
    TimerReset(pack::TimerResetArgs),
    /// Pack a host now, or show pack status.
    Pack(pack::PackArgs),
    /// The packet pipeline: submit, list, show, take, complete, retry.
    Packet(packets::PacketArgs),
    /// List periodic jobs and when they next run.
    Periodic(maintenance::PeriodicArgs),
    /// Discard abandoned jobs left unfinished past the maximum age, never held ones (see --dry-run).
    Reap(maintenance::ReapArgs),
    /// Check the database's health: what holds the vacuum horizon, stuck jobs, settings (exit
    /// 0 all well, 1 warnings, 2 action needed).
    Doctor(doctor::DoctorArgs),
    /// The operator console in the browser (default http://127.0.0.1:8080/).
    Web(web::WebArgs),
}

/// A command's outcome told only by its exit status (`skiplock wait`): the binary exits
/// with this code and prints no error line (the command printed what it saw).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus(pub u8);

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for ExitStatus {}

/// Refuses a numeric flag outside `min..=max` with one line naming the flag and the range
/// (a huge count is a typo, and would only fail later, less clearly, or never end).
pub fn check_flag(flag: &str, value: i128, min: i128, max: i128) -> anyhow::Result<()> {
    if value < min || value > max {
        anyhow::bail!("invalid {flag} {value}: must be {min} to {max}");
    }
    Ok(())
}

/// [`check_flag`] for a duration flag.
pub fn check_duration_flag(
    flag: &str,
    value: std::time::Duration,
    min: std::time::Duration,
    max: std::time::Duration,
) -> anyhow::Result<()> {
    if value < min || value > max {
        anyhow::bail!(
            "invalid {flag}: must be {} to {}",
            config::format_duration(min),
            config::format_duration(max)
        );
    }
    Ok(())
}

/// The most rows a listing command prints (`--limit`).
pub const MAX_LIMIT: i128 = 100_000;

/// Connects with the settings' pool size.
pub async fn connect(cli_url: Option<&str>, max: u32) -> anyhow::Result<Pool> {
    let url = config::database_url(cli_url)?;
    Ok(skiplock::db::connect_in_mode(&url, max, config::pool_mode()?).await?)
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let url = cli.database_url.as_deref();
    match cli.command {
        Command::Migrate => {
            let pool = connect(url, 2).await?;
            // The core and every built-in workflow (skiplock-workflows' parts).
            schema::migrate_parts(&pool, &skiplock_workflows::schemas()).await?;
            println!("migrated");
            Ok(())
        }
        Command::Worker(a) => worker::run(url, a).await,
        Command::Enqueue(a) => jobs::enqueue(url, a).await,
        Command::Jobs(a) => jobs::list(url, a).await,
        Command::Job(a) => jobs::show(url, a).await,
        Command::Wait(a) => flows::wait(url, a).await,
        Command::Flow(a) => flows::flow(url, a).await,
        Command::Cancel(a) => jobs::cancel(url, a).await,
        Command::Retry(a) => jobs::retry(url, a).await,
        Command::Signal(a) => jobs::signal(url, a).await,
        Command::Reschedule(a) => jobs::reschedule(url, a).await,
        Command::Stats(a) => jobs::stats(url, a).await,
        Command::Queue(a) => queue::run(url, a).await,
        Command::Fetch(a) => fetch::run(url, a).await,
        Command::TimerReset(a) => pack::timer_reset(url, a).await,
        Command::Pack(a) => pack::pack(url, a).await,
        Command::Packet(a) => packets::run(url, a).await,
        Command::Periodic(a) => maintenance::periodic(url, a).await,
        Command::Reap(a) => maintenance::reap(url, a).await,
        Command::Doctor(a) => doctor::run(url, a).await,
        Command::Web(a) => web::run(url, a).await,
    }
}

/// Connects for a short command and checks the schema is there, at this binary's SQL API
/// version ([`schema::ensure_ready`]).
pub async fn connect_migrated(url: Option<&str>) -> anyhow::Result<Pool> {
    let pool = connect(url, 2).await?;
    schema::ensure_ready(&pool).await?;
    Ok(pool)
}
