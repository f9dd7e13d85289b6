//! `skiplock fetch` (not built yet).

use clap::Args;

/// `skiplock fetch URL [--force] [--full]`.
#[derive(Debug, Args)]
pub struct FetchArgs {
    /// The page to fetch.
    pub url: String,
}

/// Runs `skiplock fetch`.
pub async fn run(_url: Option<&str>, _a: FetchArgs) -> anyhow::Result<()> {
    anyhow::bail!("`skiplock fetch` is not implemented yet")
}
