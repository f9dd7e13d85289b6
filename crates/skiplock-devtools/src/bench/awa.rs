//! awa, the peer closest to skiplock (a Rust queue on Postgres), in the same run on the same
//! server: its drain is a program of the bench's own, `scripts/awa` (a Cargo project apart
//! from skiplock's build, pinned by its lock file to awa's newest release when it was last
//! updated), run through the contract of `harness.rs`.

use std::path::PathBuf;

use super::DrainRun;
use super::meter::Meter;
use skiplock::error::{Error, Result};

/// awa's settings in the comparison, from its configuration guide: one queue on its default
/// queue storage, 1,024 worker permits ("the 10k/s offered-rate reference shape needs 1,024
/// in-flight worker permits"), its default claim batch of 512 and no per-attempt deadline
/// ([`AWA_DEADLINE_MS`]); completions batched by its runtime's defaults.
pub const AWA_MAX_WORKERS: u32 = 1024;
/// See [`AWA_MAX_WORKERS`].
pub const AWA_CLAIM_BATCH: usize = 512;
/// awa's `deadline_duration` in the comparison, in ms: 0, as its own throughput benchmark runs.
/// Without a deadline its claim takes the compact path its design notes describe (one receipt
/// row per claim batch); with its default of 5 minutes every claimed job gets a receipt row of
/// its own, with six indexes, and the drain costs several times more.
pub const AWA_DEADLINE_MS: u64 = 0;

/// The built awa harness.
#[derive(Debug, Clone)]
pub struct Awa {
    /// The harness's executable (`scripts/awa/target/release/skiplock-bench-awa`).
    pub bin: PathBuf,
}

impl Awa {
    /// A clear error now rather than after minutes of other measurements.
    pub fn check(&self) -> Result<()> {
        if !self.bin.is_file() {
            return Err(Error::Invalid(format!(
                "bench: no awa harness at {}: build it with `cargo build --release \
                 --manifest-path scripts/awa/Cargo.toml --target-dir scripts/awa/target` \
                 (scripts/bench does), pass --awa-bin, or --skip-awa",
                self.bin.display()
            )));
        }
        Ok(())
    }
}

/// awa drains `n` no-op jobs, pre-inserted with its bulk COPY, in the benchmark's database
/// (its own schema `awa`): jobs/s as the harness timed it (client start to the last
/// completion written), with the window's cost, and awa's version.
pub(crate) async fn drain(
    url: &str,
    n: usize,
    a: &Awa,
    meter: &Meter<'_>,
) -> Result<(DrainRun, Option<String>)> {
    let mut cmd = tokio::process::Command::new(&a.bin);
    cmd.args(["--jobs", &n.to_string()])
        .args(["--max-workers", &AWA_MAX_WORKERS.to_string()])
        .args(["--claim-batch", &AWA_CLAIM_BATCH.to_string()])
        .args(["--deadline-ms", &AWA_DEADLINE_MS.to_string()]);
    super::harness::drain(cmd, "awa", "awa", url, n, meter).await
}
