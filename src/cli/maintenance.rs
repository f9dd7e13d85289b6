//! `skiplock periodic` and `skiplock reap` (not built yet).

use clap::Args;

/// `skiplock periodic`.
#[derive(Debug, Args)]
pub struct PeriodicArgs {}

/// `skiplock reap [--dry-run]`.
#[derive(Debug, Args)]
pub struct ReapArgs {
    /// List what would be deleted, delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `skiplock periodic`.
pub async fn periodic(_url: Option<&str>, _a: PeriodicArgs) -> anyhow::Result<()> {
    anyhow::bail!("`skiplock periodic` is not implemented yet")
}

/// Runs `skiplock reap`.
pub async fn reap(_url: Option<&str>, _a: ReapArgs) -> anyhow::Result<()> {
    anyhow::bail!("`skiplock reap` is not implemented yet")
}
