//! `skiplock packet …` (not built yet).

use clap::Args;

/// `skiplock packet SUBCOMMAND`.
#[derive(Debug, Args)]
pub struct PacketArgs {
    /// Arguments.
    pub rest: Vec<String>,
}

/// Runs `skiplock packet`.
pub async fn run(_url: Option<&str>, _a: PacketArgs) -> anyhow::Result<()> {
    anyhow::bail!("`skiplock packet` is not implemented yet")
}
