//! `skiplock timer-reset` and `skiplock pack` (not built yet).

use clap::Args;

/// `skiplock timer-reset HOST`.
#[derive(Debug, Args)]
pub struct TimerResetArgs {
    /// The host whose pack timer to push forward.
    pub host: String,
}

/// `skiplock pack HOST`.
#[derive(Debug, Args)]
pub struct PackArgs {
    /// The host to pack now.
    pub host: Option<String>,
}

/// Runs `skiplock timer-reset`.
pub async fn timer_reset(_url: Option<&str>, _a: TimerResetArgs) -> anyhow::Result<()> {
    anyhow::bail!("`skiplock timer-reset` is not implemented yet")
}

/// Runs `skiplock pack`.
pub async fn pack(_url: Option<&str>, _a: PackArgs) -> anyhow::Result<()> {
    anyhow::bail!("`skiplock pack` is not implemented yet")
}
