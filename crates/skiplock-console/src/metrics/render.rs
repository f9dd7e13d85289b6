//! The database's part of a scrape in Prometheus text format: queue depth and the oldest
//! waiting job per queue, the optional parts' gauges (the packet pipeline's packets per
//! state), and whether the read succeeded. Pure: the snapshot comes from
//! [`super::serve::database_text`].
//!
//! Per-queue series are bounded: only the snapshot's first N queues (`SKIPLOCK_TOP_QUEUES`,
//! paused first, then by live jobs) have them, and the rest are added up in the
//! `skiplock_other_queues*` series, so any number of queue names costs a scrape N + 1
//! lines per family. Rendering looks each listed queue's settings up in a map, never by a
//! scan of every setting row (cost linear in queues plus settings).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::store::metrics::Snapshot;

/// Jobs per queue and live state (`available`, `scheduled`, `running`).
pub const QUEUE_DEPTH: &str = "skiplock_queue_depth";
/// Age of the oldest due, waiting job per queue.
pub const OLDEST_WAIT: &str = "skiplock_queue_oldest_wait_seconds";
/// 1 for a paused queue, 0 for one that runs (per queue with live jobs or settings).
pub const QUEUE_PAUSED: &str = "skiplock_queue_paused";
/// The limits set on a queue (label `limit`: `concurrency`, `key_concurrency`,
/// `key_starts_per_second`); a limit that is not set is absent.
pub const QUEUE_LIMIT: &str = "skiplock_queue_limit";
/// Queues past the first N, whose jobs the `skiplock_other_queues_*` series add up.
pub const OTHER_QUEUES: &str = "skiplock_other_queues";
/// Live jobs per state over the queues past the first N.
pub const OTHER_DEPTH: &str = "skiplock_other_queues_depth";
/// Age of the oldest due, waiting job over the queues past the first N.
pub const OTHER_OLDEST_WAIT: &str = "skiplock_other_queues_oldest_wait_seconds";
/// Paused queues among those past the first N.
pub const OTHER_PAUSED: &str = "skiplock_other_queues_paused";
/// Seconds since the oldest transaction holding the vacuum horizon began.
pub const HORIZON_AGE: &str = "skiplock_vacuum_horizon_age_seconds";
/// The largest xid age a session, a prepared transaction or a replication slot holds.
pub const HORIZON_XID_AGE: &str = "skiplock_vacuum_horizon_xid_age";
/// Dead tuples in skiplock's tables.
pub const DEAD_TUPLES: &str = "skiplock_dead_tuples";
/// 1 when the scrape's database read succeeded.
pub const DATABASE_UP: &str = "skiplock_metrics_database_up";
/// How long the scrape's database read took.
pub const SCRAPE_DURATION: &str = "skiplock_metrics_scrape_duration_seconds";

/// A label value escaped for the text format (backslash, double quote, newline).
pub fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A sample value: finite numbers as Rust prints them, the rest as the format spells them.
fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

fn header(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
}

/// Renders `snap` (`None`: the read failed, and only [`DATABASE_UP`] 0 is reported) and
/// how long the read `took`.
pub fn database(snap: Option<&Snapshot>, took: Duration) -> String {
    let mut out = String::new();
    header(
        &mut out,
        DATABASE_UP,
        "1 when this scrape could read queue depth and the parts' gauges from the database.",
    );
    let _ = writeln!(out, "{DATABASE_UP} {}", u8::from(snap.is_some()));
    header(
        &mut out,
        SCRAPE_DURATION,
        "How long this scrape's database read took.",
    );
    let _ = writeln!(out, "{SCRAPE_DURATION} {}", value(took.as_secs_f64()));
    let Some(snap) = snap else {
        return out;
    };
    // Queues with only control settings and no live job have no depth series (as before
    // the bound): their three counts are zero.
    let live = |q: &&crate::store::metrics::QueueDepth| q.available + q.scheduled + q.running > 0;
    header(
        &mut out,
        QUEUE_DEPTH,
        "Live jobs per queue: available (due now), scheduled (due later), running. Queues without live jobs are absent; only the first SKIPLOCK_TOP_QUEUES queues (paused first, then most live jobs) are listed, the rest are in skiplock_other_queues_depth.",
    );
    for q in snap.queues.iter().filter(live) {
        let queue = escape(q.queue.as_deref().unwrap_or_default());
        for (state, n) in [
            ("available", q.available),
            ("scheduled", q.scheduled),
            ("running", q.running),
        ] {
            let _ = writeln!(
                out,
                "{QUEUE_DEPTH}{{queue=\"{queue}\",state=\"{state}\"}} {n}"
            );
        }
    }
    header(
        &mut out,
        OLDEST_WAIT,
        "Age of the oldest job that is due and waiting, per listed queue (0: none waits).",
    );
    for q in snap.queues.iter().filter(live) {
        let _ = writeln!(
            out,
            "{OLDEST_WAIT}{{queue=\"{}\"}} {}",
            escape(q.queue.as_deref().unwrap_or_default()),
            value(q.oldest_wait_seconds.max(0.0))
        );
    }
    header(
        &mut out,
        QUEUE_PAUSED,
        "1 when the queue is paused (no job of it is claimed), else 0; per listed queue with live jobs or control settings.",
    );
    for q in &snap.queues {
        let _ = writeln!(
            out,
            "{QUEUE_PAUSED}{{queue=\"{}\"}} {}",
            escape(q.queue.as_deref().unwrap_or_default()),
            u8::from(q.paused)
        );
    }
    header(
        &mut out,
        QUEUE_LIMIT,
        "Limits set on a listed queue: concurrency (running, all workers), key_concurrency (running per limit_key), key_starts_per_second (rate per limit_key). Unset limits are absent.",
    );
    let control: HashMap<&str, &crate::store::metrics::QueueControl> =
        snap.control.iter().map(|c| (c.queue.as_str(), c)).collect();
    for q in &snap.queues {
        let Some(c) = q.queue.as_deref().and_then(|n| control.get(n)) else {
            continue;
        };
        let queue = escape(&c.queue);
        for (limit, v) in [
            ("concurrency", c.concurrency.map(f64::from)),
            ("key_concurrency", c.key_concurrency.map(f64::from)),
            ("key_starts_per_second", c.key_rate_per_second),
        ] {
            if let Some(v) = v {
                let _ = writeln!(
                    out,
                    "{QUEUE_LIMIT}{{queue=\"{queue}\",limit=\"{limit}\"}} {}",
                    value(v)
                );
            }
        }
    }
    let none = crate::store::metrics::QueueDepth {
        queue: None,
        available: 0,
        scheduled: 0,
        running: 0,
        oldest_wait_seconds: 0.0,
        paused: false,
        queues: 0,
        paused_queues: 0,
    };
    let o = snap.others.as_ref().unwrap_or(&none);
    header(
        &mut out,
        OTHER_QUEUES,
        "Queues past the first SKIPLOCK_TOP_QUEUES, which have no per-queue series; skiplock_other_queues_* add them up.",
    );
    let _ = writeln!(out, "{OTHER_QUEUES} {}", o.queues);
    header(
        &mut out,
        OTHER_DEPTH,
        "Live jobs of the queues past the first SKIPLOCK_TOP_QUEUES, added up, per state.",
    );
    for (state, n) in [
        ("available", o.available),
        ("scheduled", o.scheduled),
        ("running", o.running),
    ] {
        let _ = writeln!(out, "{OTHER_DEPTH}{{state=\"{state}\"}} {n}");
    }
    header(
        &mut out,
        OTHER_OLDEST_WAIT,
        "Age of the oldest job that is due and waiting in any queue past the first SKIPLOCK_TOP_QUEUES (0: none waits).",
    );
    let _ = writeln!(
        out,
        "{OTHER_OLDEST_WAIT} {}",
        value(o.oldest_wait_seconds.max(0.0))
    );
    header(
        &mut out,
        OTHER_PAUSED,
        "Paused queues among those past the first SKIPLOCK_TOP_QUEUES.",
    );
    let _ = writeln!(out, "{OTHER_PAUSED} {}", o.paused_queues);
    header(
        &mut out,
        HORIZON_AGE,
        "Seconds since the oldest transaction with an xid or a snapshot began (a session's, the scrape's own excluded, or a prepared one): vacuum removes no dead tuple newer than it. Other logins' sessions count only with pg_monitor.",
    );
    let _ = writeln!(
        out,
        "{HORIZON_AGE} {}",
        value(snap.horizon.age_seconds.max(0.0))
    );
    header(
        &mut out,
        HORIZON_XID_AGE,
        "The largest transaction-id age a session, a prepared transaction or a replication slot holds.",
    );
    let _ = writeln!(out, "{HORIZON_XID_AGE} {}", snap.horizon.xid_age);
    header(
        &mut out,
        DEAD_TUPLES,
        "Dead tuples in skiplock's tables now: what vacuum has not removed, or cannot while the horizon is held (skiplock doctor names the holder).",
    );
    let _ = writeln!(out, "{DEAD_TUPLES} {}", snap.horizon.dead_tuples);
    // The parts' gauges, each series' header once, before its first sample.
    let mut named: Vec<&str> = Vec::new();
    for g in &snap.parts {
        if !named.contains(&g.name) {
            header(&mut out, g.name, g.help);
            named.push(g.name);
        }
        let labels: Vec<String> = g
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let labels = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", labels.join(","))
        };
        let _ = writeln!(out, "{}{labels} {}", g.name, value(g.value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::metrics::{QueueControl, QueueDepth};

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("x\ny"), "x\\ny");
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn a_failed_read_reports_only_that() {
        let t = database(None, Duration::from_millis(1500));
        assert!(t.contains("skiplock_metrics_database_up 0\n"));
        assert!(t.contains("skiplock_metrics_scrape_duration_seconds 1.5\n"));
        assert!(!t.contains(QUEUE_DEPTH));
    }

    #[test]
    fn queues_and_the_parts_gauges_are_rendered() {
        let depth = |name: &str, available: i64, paused: bool| QueueDepth {
            queue: Some(name.into()),
            available,
            scheduled: u8::from(available > 0).into(),
            running: 2 * i64::from(available > 0),
            oldest_wait_seconds: 4.25,
            paused,
            queues: 1,
            paused_queues: paused.into(),
        };
        let snap = Snapshot {
            queues: vec![depth("held", 0, true), depth("we\"ird", 3, false)],
            others: Some(QueueDepth {
                queue: None,
                available: 40,
                scheduled: 0,
                running: 1,
                oldest_wait_seconds: 9.0,
                paused: true,
                queues: 300,
                paused_queues: 2,
            }),
            parts: ["queued", "in_review"]
                .into_iter()
                .map(|state| crate::store::metrics::Gauge {
                    name: "skiplock_packets",
                    help: "Packets per state.",
                    labels: vec![("state", state.to_string())],
                    value: if state == "in_review" { 7.0 } else { 0.0 },
                })
                .collect(),
            control: vec![QueueControl {
                queue: "held".into(),
                paused: true,
                concurrency: Some(2),
                key_concurrency: None,
                key_rate_per_second: Some(0.5),
            }],
            horizon: crate::store::metrics::Horizon {
                age_seconds: 12.5,
                xid_age: 40,
                dead_tuples: 900,
            },
        };
        let t = database(Some(&snap), Duration::ZERO);
        assert!(t.contains("skiplock_metrics_database_up 1\n"));
        assert!(t.contains("skiplock_vacuum_horizon_age_seconds 12.5\n"));
        assert!(t.contains("skiplock_vacuum_horizon_xid_age 40\n"));
        assert!(t.contains("skiplock_dead_tuples 900\n"));
        assert!(t.contains("skiplock_queue_depth{queue=\"we\\\"ird\",state=\"available\"} 3\n"));
        assert!(t.contains("skiplock_queue_depth{queue=\"we\\\"ird\",state=\"running\"} 2\n"));
        assert!(t.contains("skiplock_queue_oldest_wait_seconds{queue=\"we\\\"ird\"} 4.25\n"));
        assert!(t.contains("skiplock_packets{state=\"in_review\"} 7\n"));
        assert!(t.contains("skiplock_queue_paused{queue=\"held\"} 1\n"));
        assert!(t.contains("skiplock_queue_paused{queue=\"we\\\"ird\"} 0\n"));
        assert!(t.contains("skiplock_queue_limit{queue=\"held\",limit=\"concurrency\"} 2\n"));
        assert!(t.contains(
            "skiplock_queue_limit{queue=\"held\",limit=\"key_starts_per_second\"} 0.5\n"
        ));
        assert!(!t.contains("limit=\"key_concurrency\""));
        assert!(t.contains("skiplock_packets{state=\"queued\"} 0\n"));
        assert_eq!(t.matches("# HELP skiplock_packets ").count(), 1);
        assert!(
            !t.contains("skiplock_queue_depth{queue=\"held\""),
            "a queue with settings and no live job has no depth series"
        );
        assert!(t.contains("skiplock_other_queues 300\n"));
        assert!(t.contains("skiplock_other_queues_depth{state=\"available\"} 40\n"));
        assert!(t.contains("skiplock_other_queues_depth{state=\"running\"} 1\n"));
        assert!(t.contains("skiplock_other_queues_oldest_wait_seconds 9\n"));
        assert!(t.contains("skiplock_other_queues_paused 2\n"));
        assert_eq!(value(f64::INFINITY), "+Inf");
        assert_eq!(value(f64::NAN), "NaN");
    }

    #[test]
    fn per_queue_series_follow_the_listed_queues_not_every_setting_row() {
        // 5,000 paused queues with settings, 50 listed: the per-queue families hold 50
        // queues, each looked up once in a map (the render is linear in queues plus
        // settings, not their product).
        let control: Vec<QueueControl> = (0..5000)
            .map(|i| QueueControl {
                queue: format!("p{i:04}"),
                paused: true,
                concurrency: Some(1),
                key_concurrency: None,
                key_rate_per_second: None,
            })
            .collect();
        let queues: Vec<QueueDepth> = (0..50)
            .map(|i| QueueDepth {
                queue: Some(format!("p{i:04}")),
                available: 1,
                scheduled: 0,
                running: 0,
                oldest_wait_seconds: 1.0,
                paused: true,
                queues: 1,
                paused_queues: 1,
            })
            .collect();
        let snap = Snapshot {
            queues,
            others: None,
            parts: vec![],
            control,
            horizon: Default::default(),
        };
        let t = database(Some(&snap), Duration::ZERO);
        let count = |prefix: &str| t.lines().filter(|l| l.starts_with(prefix)).count();
        assert_eq!(count("skiplock_queue_paused{"), 50);
        assert_eq!(count("skiplock_queue_limit{"), 50);
        assert_eq!(count("skiplock_queue_depth{"), 150);
        assert!(t.contains("skiplock_other_queues 0\n"));
    }
}
