//! `skiplock worker`: the settings from the environment plus flags, every built-in handler
//! and workflow registered, and the maintenance services.

use clap::Args;

use super::settings::Settings;
use crate::progress::{DrainCount, Progress};
use skiplock::config::{self, parse_queues};
use skiplock::worker::{Worker, builtin, shutdown};
use skiplock_console::metrics::serve;
use skiplock_console::{http, web};

/// `skiplock worker` flags.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Queues and their concurrency, e.g. `default=10,fetch=4` (default: every queue, 10 each;
    /// env SKIPLOCK_QUEUES).
    #[arg(long)]
    pub queues: Option<String>,
    /// Exit 0 once nothing in these queues is claimable now and nothing runs (jobs left waiting
    /// for a dependency that finished are released first).
    #[arg(long)]
    pub exit_when_idle: bool,
}

/// Runs the worker until a signal (or idle).
pub async fn run(url: Option<&str>, a: WorkerArgs) -> anyhow::Result<()> {
    // Every setting parsed and validated once, here, before anything starts.
    let Settings {
        queue: mut settings,
        maintenance,
        workflows,
    } = Settings::from_env()?;
    if let Some(q) = &a.queues {
        settings.queues =
            Some(parse_queues(q).map_err(|e| anyhow::anyhow!("invalid --queues: {e}"))?);
    }
    // Built without contacting the database: the worker waits for it (with a capped
    // backoff, forever unless SKIPLOCK_CONNECT_TIMEOUT), where one-shot commands fail fast.
    let pool = skiplock::db::session::handler_pool(&config::database_url(url)?, &settings)?;
    // The built-in workflows as parts: the worker runs them, the metrics endpoint reads their
    // gauges.
    let parts = serve::Parts(std::sync::Arc::new(workflows.parts()));
    // The metrics endpoint first: a refused or taken address fails before any work starts,
    // and the recorder must be installed before the worker resolves its metric handles.
    let metrics_stop = tokio_util::sync::CancellationToken::new();
    let metrics = match config::env_opt(serve::LISTEN_SETTING).filter(|l| !l.trim().is_empty()) {
        None => None,
        Some(listen) => {
            let hosts_setting = http::hosts::METRICS_HOSTS_SETTING;
            let endpoint = serve::EndpointSettings {
                listen: listen.trim().to_string(),
                allow_remote: config::env_bool(serve::ALLOW_REMOTE_SETTING, false)?,
                extra_hosts: http::hosts::parse_hosts(
                    &config::env_opt(hosts_setting).unwrap_or_default(),
                )
                .map_err(|m| skiplock::Error::config(hosts_setting, m))?,
                read_timeout: config::env_duration(
                    serve::READ_TIMEOUT_SETTING,
                    http::server::DEFAULT_READ_TIMEOUT,
                )?,
                top_queues: config::env_usize(web::TOP_QUEUES_SETTING, web::DEFAULT_TOP_QUEUES)?,
                parts: parts.clone(),
            };
            let scrape_pool = serve::scrape_pool(&pool, settings.session_limits());
            let (bound, task) = serve::start(endpoint, scrape_pool, metrics_stop.clone()).await?;
            println!("skiplock metrics on http://{bound}/metrics");
            let _ = std::io::Write::flush(&mut std::io::stdout());
            tracing::info!(%bound, "metrics endpoint listening");
            Some(task)
        }
    };
    let served: Option<Vec<String>> = settings
        .queues
        .as_ref()
        .map(|q| q.keys().cloned().collect());
    let mut builder = Worker::builder(pool.clone())
        .settings(settings)
        .exit_when_idle(a.exit_when_idle);
    // The diagnostic kinds are a convenience of the tour and the scripts, and a `sleep` job
    // holds a slot for up to the job timeout: a setting turns them off (docs/security.md).
    if config::diagnostic_kinds()? {
        builtin::register(builder.registry_mut());
    }
    let installed: Vec<&dyn skiplock::part::Part> = parts.0.iter().map(|p| p.as_ref()).collect();
    builder = skiplock::part::install_all(builder, &installed)?;
    builder = builder.maintenance(maintenance);
    let worker = builder.build();
    let meter = a
        .exit_when_idle
        .then(|| drain_progress(pool.clone(), served.clone()))
        .flatten();
    let result = worker.run(shutdown::signal()).await;
    if let Some((progress, task)) = meter {
        task.abort();
        progress.finish();
    }
    metrics_stop.cancel();
    if let Some(task) = metrics {
        let _ = task.await;
    }
    result?;
    Ok(())
}

/// A drain's bar (`--exit-when-idle` on a terminal): jobs done out of the jobs that were
/// available or running in the served queues (all queues when none are named), sampled from
/// `skiplock.queue_stats` twice a second by a task of its own.
fn drain_progress(
    pool: skiplock::store::Pool,
    queues: Option<Vec<String>>,
) -> Option<(Progress, tokio::task::JoinHandle<()>)> {
    let progress = Progress::bar(0, "drain");
    if !progress.is_drawn() {
        return None;
    }
    let p = progress.clone();
    let task = tokio::spawn(async move {
        let mut count = DrainCount::default();
        loop {
            if let Ok(stats) = skiplock::store::jobs::queue_stats(&pool).await {
                let remaining: i64 = stats
                    .iter()
                    .filter(|s| {
                        matches!(
                            s.state,
                            skiplock::queue::JobState::Available
                                | skiplock::queue::JobState::Running
                        )
                    })
                    .filter(|s| queues.as_ref().is_none_or(|q| q.contains(&s.queue)))
                    .map(|s| s.count)
                    .sum();
                let (done, total) = count.sample(remaining.max(0) as u64);
                p.set_of(done, total);
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    });
    Some((progress, task))
}
