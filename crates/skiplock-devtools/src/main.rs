//! `skiplock-devtools`: the `skiplock` command's subcommands (so a bench drain through
//! worker processes and the chaos run's workers start this same binary, `current_exe`) plus
//! the dev tools', `bench`, `chaos` and `chaos-worker`. Errors as the `skiplock` binary
//! gives them: one line on stderr and a non-zero exit code.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use skiplock_cli::output::escape;
use skiplock_cli::{self as cli, LogFormat};
use skiplock_devtools::{bench, chaos};
use tracing_subscriber::EnvFilter;

/// skiplock with its dev tools: the benchmark and the fault-injection runs.
#[derive(Debug, Parser)]
#[command(name = "skiplock-devtools", version, about, long_about = None)]
struct Args {
    /// Postgres URL (default: DATABASE_URL from the environment or .env).
    #[arg(long, global = true)]
    database_url: Option<String>,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The library's commands ([`skiplock_cli::Command`]) and the dev tools'.
#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Queue(cli::Command),
    /// Measure throughput and latency against a plain-SQL ceiling.
    Bench(bench::command::BenchArgs),
    /// Fault injection: SIGKILLed workers and a Postgres restart (scripts/chaos).
    #[command(hide = true)]
    Chaos(chaos::command::ChaosArgs),
    /// A worker with only the chaos_record kind (started by `skiplock-devtools chaos`).
    #[command(hide = true)]
    ChaosWorker,
}

async fn run(args: Args) -> anyhow::Result<()> {
    let url = args.database_url.as_deref();
    match args.command {
        Command::Queue(command) => {
            cli::run(cli::Cli {
                database_url: args.database_url.clone(),
                log_format: args.log_format,
                command,
            })
            .await
        }
        Command::Bench(a) => bench::command::run_cli(url, a).await,
        Command::Chaos(a) => chaos::command::run(url, a).await,
        Command::ChaosWorker => chaos::command::worker(url).await,
    }
}

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(skiplock::db::DEFAULT_LOG_FILTER));
    // Colours only on a terminal: logs redirected to files (scripts/chaos) stay plain text.
    // Every log line goes through the password scrubber (see skiplock_cli::ScrubbedStderr).
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(skiplock_cli::ScrubbedStderr);
    match format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
}

fn main() -> ExitCode {
    // Like any Unix filter: a closed pipe (`skiplock jobs | head`) ends the process quietly
    // instead of making println! panic. Rust ignores SIGPIPE by default; restore the default.
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; only resets a disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    if let Err(e) = skiplock::config::load_dotenv() {
        eprintln!("error: {}", escape(&e.to_string()));
        return ExitCode::from(1);
    }
    let cli = Args::parse();
    let url = cli
        .database_url
        .clone()
        .or_else(|| std::env::var("DATABASE_URL").ok())
        .unwrap_or_default();
    // Before anything can log or fail: the URL's passwords are never printed from here on.
    skiplock_cli::register_url(&url);
    init_tracing(cli.log_format);
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<skiplock_cli::ExitStatus>().is_some() => ExitCode::from(
            e.downcast_ref::<skiplock_cli::ExitStatus>()
                .map_or(1, |s| s.0),
        ),
        Err(e) => {
            // One line, the whole chain, never the database password, no raw control
            // characters (an error may quote a job kind or key someone else wrote).
            let msg = skiplock::db::scrub(&format!("{e:#}"), &url);
            eprintln!("error: {}", escape(&msg));
            ExitCode::from(1)
        }
    }
}
