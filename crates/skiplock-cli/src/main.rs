//! The `skiplock` binary: parse the command line, set up logging, run, and turn any error
//! into one line on stderr and a non-zero exit code (no panics, no backtraces).

use std::process::ExitCode;

use clap::Parser;
use skiplock_cli::output::escape;
use skiplock_cli::{self as cli, LogFormat};
use tracing_subscriber::EnvFilter;

/// skiplock: a Postgres-as-queue job runner.
#[derive(Debug, Parser)]
#[command(name = "skiplock", version, about, long_about = None)]
struct Args {
    /// Postgres URL (default: DATABASE_URL from the environment or .env).
    #[arg(long, global = true)]
    database_url: Option<String>,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    command: cli::Command,
}

async fn run(args: Args) -> anyhow::Result<()> {
    cli::run(cli::Cli {
        database_url: args.database_url,
        log_format: args.log_format,
        command: args.command,
    })
    .await
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
