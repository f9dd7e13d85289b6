//! `skiplock timer-reset HOST`, `skiplock pack HOST` and `skiplock pack --status [HOST]`:
//! thin wrappers over the SQL API (`skiplock.timer_reset`, `skiplock.pack_now`) and the
//! `skiplock.pack_status` view, so psql users and the CLI get the same behaviour.

use anyhow::bail;
use clap::Args;

use super::connect_migrated;
use super::output::{print_json, print_table, say, ts};
use skiplock_workflows::store;

/// `skiplock timer-reset HOST`.
#[derive(Debug, Args)]
pub struct TimerResetArgs {
    /// The host whose pack timer to push forward (e.g. example.com or 127.0.0.1:8080).
    pub host: String,
}

/// `skiplock pack HOST` or `skiplock pack --status [HOST]`.
#[derive(Debug, Args)]
pub struct PackArgs {
    /// The host to pack now (with --status: the host to show; default all).
    pub host: Option<String>,
    /// Show when hosts were last packed and their pending timers instead of packing.
    #[arg(long)]
    pub status: bool,
    /// With --status: print JSON.
    #[arg(long, requires = "status")]
    pub json: bool,
}

/// Enqueues a `timer-reset` and prints its job id.
pub async fn timer_reset(url: Option<&str>, a: TimerResetArgs) -> anyhow::Result<()> {
    let pool = connect_migrated(url).await?;
    let id = store::pack::timer_reset(&pool, &a.host).await?;
    say!("{id}");
    Ok(())
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref()
        .map(|v| v.to_string())
        .unwrap_or_else(|| "-".into())
}

/// Packs a host now (prints the do-the-packing job id), or shows the status.
pub async fn pack(url: Option<&str>, a: PackArgs) -> anyhow::Result<()> {
    if !a.status {
        let Some(host) = a.host else {
            bail!("give a HOST to pack (e.g. `skiplock pack example.com`), or --status");
        };
        let pool = connect_migrated(url).await?;
        let id = store::pack::pack_now(&pool, &host).await?;
        say!("{id}");
        return Ok(());
    }
    let pool = connect_migrated(url).await?;
    let rows = store::pack::status(&pool, a.host.as_deref()).await?;
    if a.json {
        return print_json(&rows);
    }
    if rows.is_empty() {
        match &a.host {
            Some(h) => say!("{h}: never packed, no timer pending"),
            None => say!("no host packed yet, no timer pending"),
        }
        return Ok(());
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let location = match (&r.store, &r.object_key) {
                (Some(s), Some(k)) => format!("{}/{}", s.trim_end_matches('/'), k),
                _ => "-".into(),
            };
            vec![
                opt(&r.host),
                ts(r.packed_at),
                opt(&r.pages),
                opt(&r.bytes),
                opt(&r.pack_count),
                r.timer_at
                    .map(|t| ts(Some(t)))
                    .unwrap_or_else(|| "-".into()),
                location,
            ]
        })
        .collect();
    print_table(
        &[
            "HOST",
            "PACKED_AT",
            "PAGES",
            "BYTES",
            "PACKS",
            "TIMER_AT",
            "ARTIFACT",
        ],
        &table,
    );
    Ok(())
}
