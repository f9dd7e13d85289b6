//! `skiplock fetch URL [--force] [--full]`: requests a polite fetch through the SQL API
//! (`skiplock.request_fetch`) and prints the fetch job's id. The URL and the schedule
//! file's allow list are checked here too, so a mistake is reported at once.

use clap::Args;

use super::connect_migrated;
use super::output::say;
use skiplock_workflows::fetch::normalize::{host_key, normalize};
use skiplock_workflows::fetch::request_fetch;
use skiplock_workflows::fetch::schedule::Schedule;

/// `skiplock fetch URL [--force] [--full]`.
#[derive(Debug, Args)]
pub struct FetchArgs {
    /// The page to fetch (http or https).
    pub url: String,
    /// Fetch even if the page is not due yet (the hall pass).
    #[arg(long)]
    pub force: bool,
    /// Also request every same-host page it links to, each once (a full crawl).
    #[arg(long)]
    pub full: bool,
}

/// Runs `skiplock fetch`.
pub async fn run(url: Option<&str>, a: FetchArgs) -> anyhow::Result<()> {
    let page = normalize(&a.url).map_err(|e| anyhow::anyhow!(e))?;
    let host = host_key(&page);
    let schedule = Schedule::from_env()?;
    if !schedule.is_allowed(&host) {
        anyhow::bail!("host {host} is not allowed by the schedule file's allow list");
    }
    let pool = connect_migrated(url).await?;
    let id = request_fetch(&pool, page.as_str(), a.force, a.full).await?;
    say!("{id}");
    Ok(())
}
