//! A highly available Postgres for failover runs: `scripts/ha` (two Patroni-managed nodes,
//! etcd, HAProxy; docs/operations.md, "Patroni") in a temporary directory, brought down and
//! removed on drop. The chaos run crashes its primary or switches it over through this.

use std::path::{Path, PathBuf};
use std::process::Command;

use skiplock::error::{Error, Result};

/// How a failover is caused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failover {
    /// SIGKILL of the primary's postmaster: Patroni notices and promotes the standby.
    Postmaster,
    /// SIGKILL of the primary's Patroni and Postgres (the machine died): its leader key must
    /// expire first, the longest gap.
    Node,
    /// A planned switchover through Patroni's REST API.
    Switchover,
}

impl Failover {
    /// The kinds in the order a run cycles through them.
    pub const CYCLE: [Failover; 3] = [Failover::Postmaster, Failover::Node, Failover::Switchover];

    /// Its name in the summary line.
    pub fn name(self) -> &'static str {
        match self {
            Failover::Postmaster => "postmaster-kill",
            Failover::Node => "node-kill",
            Failover::Switchover => "switchover",
        }
    }
}

/// A running HA cluster; brought down and deleted when dropped.
pub struct HaCluster {
    dir: tempfile::TempDir,
    script: PathBuf,
}

/// `scripts/ha` of the source tree this binary was built from (`SKIPLOCK_HA_SCRIPT` to use
/// another): the repository's root is two folders above this crate's.
pub fn script() -> PathBuf {
    skiplock::config::env_opt("SKIPLOCK_HA_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ha"))
}

impl HaCluster {
    /// Starts a new cluster (about 10 s) and waits until it has a primary and a synchronous
    /// standby.
    pub fn start() -> Result<HaCluster> {
        // Under /tmp: the nodes' socket paths must stay short, and `postgres` must reach them.
        let dir = tempfile::Builder::new()
            .prefix("skiplock-ha-")
            .tempdir_in("/tmp")?;
        let ha = HaCluster {
            dir,
            script: script(),
        };
        ha.run(&["up"])?;
        Ok(ha)
    }

    fn run(&self, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new(&self.script);
        cmd.arg(args[0]).arg(self.dir.path()).args(&args[1..]);
        let out = cmd
            .output()
            .map_err(|e| Error::Other(format!("cannot run {}: {e}", self.script.display())))?;
        if !out.status.success() {
            return Err(Error::Other(format!(
                "scripts/ha {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The URL of database `db` through HAProxy (follows the primary).
    pub fn url(&self, db: &str) -> Result<String> {
        self.run(&["url", db])
    }

    /// The URL of database `db` naming both nodes (`target_session_attrs=read-write`).
    pub fn hosts_url(&self, db: &str) -> Result<String> {
        self.run(&["hosts-url", db])
    }

    /// Causes a failover of kind `f`; returns the node that was primary, once the failover
    /// was set off (a switchover: once done).
    pub fn fail_over(&self, f: Failover) -> Result<String> {
        match f {
            Failover::Postmaster => self.run(&["kill", "postmaster"]),
            Failover::Node => self.run(&["kill", "node"]),
            Failover::Switchover => self.run(&["switchover"]),
        }
    }

    /// After a failover away from `old`: waits for the new primary, brings `old` back as its
    /// standby and waits until it is synchronous again.
    pub fn heal(&self, old: &str) -> Result<()> {
        self.run(&["heal", old]).map(|_| ())
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        if let Err(e) = self.run(&["down"]) {
            tracing::warn!("could not stop the HA cluster: {e}");
        }
    }
}
