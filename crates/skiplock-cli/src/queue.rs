//! `skiplock queue`: limits at claim time (queue concurrency, per-key concurrency and rate)
//! and pause/resume, through the SQL API (`sql/api/15_control.sql`).

use std::time::Duration;

use anyhow::bail;
use clap::{Args, Subcommand};

use super::connect_migrated;
use super::output::{print_json, print_table, say};
use skiplock::config::parse_duration;
use skiplock::store::control::{self, KeyLimitChange, Rate};

/// `skiplock queue`.
#[derive(Debug, Args)]
pub struct QueueArgs {
    #[command(subcommand)]
    pub command: QueueCommand,
}

/// The `skiplock queue` subcommands.
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Set limits of a queue (flags not given keep their value; `none` clears one).
    Limit(LimitArgs),
    /// Stop claiming from a queue (running jobs finish).
    Pause(NameArg),
    /// Claim from a paused queue again.
    Resume(NameArg),
    /// Serve a queue's limit keys round-robin: one key's backlog delays another key's first
    /// job by at most one claim (--off: claim order again).
    Fair(FairArgs),
    /// Queues with limits or live jobs: limits, paused, counts.
    List(ListArgs),
}

/// `skiplock queue limit`.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// The queue.
    pub queue: String,
    /// Running jobs of the queue, all workers together (N or `none`).
    #[arg(long, allow_hyphen_values = true)]
    pub concurrency: Option<String>,
    /// Running jobs per limit_key (N or `none`).
    #[arg(long, allow_hyphen_values = true)]
    pub per_key: Option<String>,
    /// Starts per limit_key: N/DURATION, e.g. 1/500ms or 60/1m (or `none`).
    #[arg(long, allow_hyphen_values = true)]
    pub rate: Option<String>,
}

/// `skiplock queue fair`.
#[derive(Debug, Args)]
pub struct FairArgs {
    /// The queue.
    pub queue: String,
    /// Turn fair mode off.
    #[arg(long)]
    pub off: bool,
}

/// A queue name argument.
#[derive(Debug, Args)]
pub struct NameArg {
    /// The queue.
    pub queue: String,
}

/// `skiplock queue list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `skiplock queue …`.
pub async fn run(url: Option<&str>, a: QueueArgs) -> anyhow::Result<()> {
    match a.command {
        QueueCommand::Limit(a) => limit(url, a).await,
        QueueCommand::Pause(a) => {
            check_name(&a.queue)?;
            let pool = connect_migrated(url).await?;
            let was_running = control::pause(&pool, &a.queue).await?;
            say!(
                "queue {} paused{}",
                a.queue,
                if was_running { "" } else { " (it already was)" }
            );
            Ok(())
        }
        QueueCommand::Resume(a) => {
            check_name(&a.queue)?;
            let pool = connect_migrated(url).await?;
            let was_paused = control::resume(&pool, &a.queue).await?;
            say!(
                "queue {} resumed{}",
                a.queue,
                if was_paused {
                    ""
                } else {
                    " (it was not paused)"
                }
            );
            Ok(())
        }
        QueueCommand::Fair(a) => {
            check_name(&a.queue)?;
            let pool = connect_migrated(url).await?;
            control::set_queue_fairness(&pool, &a.queue, !a.off).await?;
            say!(
                "queue {}: {}",
                a.queue,
                if a.off {
                    "claim order"
                } else {
                    "fair (limit keys round-robin)"
                }
            );
            Ok(())
        }
        QueueCommand::List(a) => list(url, a).await,
    }
}

/// A flag's value: unchanged (flag not given), cleared (`none`), or set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting<T> {
    /// Keep the current value.
    Keep,
    /// Remove the limit.
    Clear,
    /// Set the limit.
    Set(T),
}

impl<T: Copy> Setting<T> {
    fn apply(self, current: Option<T>) -> Option<T> {
        match self {
            Setting::Keep => current,
            Setting::Clear => None,
            Setting::Set(v) => Some(v),
        }
    }

    /// As a store change: `None` keeps, `Some(None)` clears, `Some(Some(v))` sets.
    fn change(self) -> Option<Option<T>> {
        match self {
            Setting::Keep => None,
            Setting::Clear => Some(None),
            Setting::Set(v) => Some(Some(v)),
        }
    }
}

/// Parses a count flag: a number from 1 to 1,000,000, or `none`.
pub fn parse_count(flag: &str, v: Option<&str>) -> anyhow::Result<Setting<i32>> {
    let Some(v) = v.map(str::trim) else {
        return Ok(Setting::Keep);
    };
    if v.eq_ignore_ascii_case("none") {
        return Ok(Setting::Clear);
    }
    match v.parse::<i64>() {
        Ok(n) if (1..=1_000_000).contains(&n) => Ok(Setting::Set(n as i32)),
        _ => bail!("invalid {flag} {v:?}: must be a number from 1 to 1000000, or none"),
    }
}

/// Parses `--rate`: `N/DURATION` (N from 1 to 1,000,000; the duration from 1 ms to 366
/// days), or `none`.
pub fn parse_rate(v: Option<&str>) -> anyhow::Result<Setting<Rate>> {
    let Some(v) = v.map(str::trim) else {
        return Ok(Setting::Keep);
    };
    if v.eq_ignore_ascii_case("none") {
        return Ok(Setting::Clear);
    }
    let bad = || {
        anyhow::anyhow!("invalid --rate {v:?}: write N/DURATION, e.g. 1/500ms or 60/1m, or none")
    };
    let (n, d) = v.split_once('/').ok_or_else(bad)?;
    let count = match n.trim().parse::<i64>() {
        Ok(n) if (1..=1_000_000).contains(&n) => n as i32,
        _ => return Err(bad()),
    };
    let period = parse_duration(d.trim()).map_err(|_| bad())?;
    if period < Duration::from_millis(1) || period > Duration::from_secs(366 * 86_400) {
        bail!("invalid --rate {v:?}: the period must be 1ms to 366d");
    }
    Ok(Setting::Set(Rate { count, period }))
}

fn check_name(q: &str) -> anyhow::Result<()> {
    Ok(skiplock::store::control::check_queue(q)?)
}

async fn limit(url: Option<&str>, a: LimitArgs) -> anyhow::Result<()> {
    check_name(&a.queue)?;
    let concurrency = parse_count("--concurrency", a.concurrency.as_deref())?;
    let per_key = parse_count("--per-key", a.per_key.as_deref())?;
    let rate = parse_rate(a.rate.as_deref())?;
    if concurrency == Setting::Keep && per_key == Setting::Keep && rate == Setting::Keep {
        bail!("nothing to set: give --concurrency, --per-key or --rate (N, or none)");
    }
    let pool = connect_migrated(url).await?;
    if concurrency != Setting::Keep {
        control::set_queue_limit(&pool, &a.queue, concurrency.apply(None)).await?;
    }
    if per_key != Setting::Keep || rate != Setting::Keep {
        // One statement: the limit not given is kept as it is at that moment, even if
        // another operator changes it meanwhile.
        let change = KeyLimitChange {
            concurrency: per_key.change(),
            rate: rate.change(),
        };
        control::change_key_limit(&pool, &a.queue, change).await?;
    }
    let now = control::list(&pool).await?;
    match now.iter().find(|q| q.queue == a.queue) {
        Some(q) => say!("queue {}: {}", q.queue, describe(q)),
        None => say!("queue {}: no limits", a.queue),
    }
    Ok(())
}

/// "concurrency 2, per key 1, rate 1/500ms, paused", or "no limits".
pub fn describe(q: &control::QueueControl) -> String {
    let mut parts = control::describe_limits(
        q.concurrency,
        q.key_concurrency,
        control::rate_of(q.key_rate, q.key_period_secs),
    );
    if q.fair {
        parts.push("fair".into());
    }
    if q.paused {
        parts.push("paused".into());
    }
    if parts.is_empty() {
        "no limits".into()
    } else {
        parts.join(", ")
    }
}

async fn list(url: Option<&str>, a: ListArgs) -> anyhow::Result<()> {
    let pool = connect_migrated(url).await?;
    let rows = control::list(&pool).await?;
    if a.json {
        return print_json(&rows);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|q| {
            vec![
                q.queue.clone(),
                if q.paused { "paused" } else { "running" }.into(),
                describe(&control::QueueControl {
                    paused: false,
                    ..q.clone()
                }),
                q.available.to_string(),
                q.running.to_string(),
            ]
        })
        .collect();
    print_table(
        &["QUEUE", "STATUS", "LIMITS", "AVAILABLE", "RUNNING"],
        &table,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_numbers_or_none() {
        assert_eq!(parse_count("--x", None).unwrap(), Setting::Keep);
        assert_eq!(parse_count("--x", Some("none")).unwrap(), Setting::Clear);
        assert_eq!(parse_count("--x", Some("5")).unwrap(), Setting::Set(5));
        for bad in ["0", "-1", "x", "", "1000001", "99999999999999999999"] {
            let e = parse_count("--x", Some(bad)).unwrap_err().to_string();
            assert!(e.contains("--x"), "{bad}: {e}");
        }
    }

    #[test]
    fn rates_are_n_per_duration_or_none() {
        assert_eq!(parse_rate(None).unwrap(), Setting::Keep);
        assert_eq!(parse_rate(Some("NONE")).unwrap(), Setting::Clear);
        assert_eq!(
            parse_rate(Some("1/500ms")).unwrap(),
            Setting::Set(Rate {
                count: 1,
                period: Duration::from_millis(500)
            })
        );
        assert_eq!(
            parse_rate(Some("60/1m")).unwrap(),
            Setting::Set(Rate {
                count: 60,
                period: Duration::from_secs(60)
            })
        );
        for bad in ["1", "/5s", "0/1s", "x/1s", "1/", "1/0s", "1/400d", "1/xyz"] {
            assert!(parse_rate(Some(bad)).is_err(), "{bad}");
        }
    }
}
