//! `skiplock bench` (not built yet).

use clap::Args;

/// `skiplock bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Runs `skiplock bench`.
pub async fn run(_url: Option<&str>, _a: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("`skiplock bench` is not implemented yet")
}
