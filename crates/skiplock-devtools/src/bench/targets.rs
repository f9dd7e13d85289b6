//! The benchmark's targets, in one table, and the pure check of a run's figures against them.
//! Relative targets compare with a baseline measured in the same run on the same server
//! (Graphile Worker, the plain-SQL ceiling), never with a figure from another day.

use std::collections::BTreeMap;

use serde::Serialize;

/// Which side of the bound passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cmp {
    /// value ≥ bound
    AtLeast,
    /// value ≤ bound
    AtMost,
}

/// One target: the figure (a key of the run's figures), the bound and its unit.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Target {
    /// Key of the figure in [`super::BenchReport::figures`].
    pub key: &'static str,
    /// What is compared, for the table.
    pub label: &'static str,
    /// Which side passes.
    pub cmp: Cmp,
    /// The bound.
    pub bound: f64,
    /// Unit of value and bound ("×" for same-run ratios).
    pub unit: &'static str,
}

/// The drain, enqueue and cost targets.
pub const TARGETS: &[Target] = &[
    Target {
        key: "drain_to_graphile",
        label: "skiplock / graphile (batched)",
        cmp: Cmp::AtLeast,
        bound: 1.3,
        unit: "×",
    },
    Target {
        key: "drain_to_ceiling",
        label: "skiplock / plain-SQL ceiling",
        cmp: Cmp::AtLeast,
        bound: 0.70,
        unit: "×",
    },
    Target {
        key: "idle_pct",
        label: "machine idle during skiplock's drain",
        cmp: Cmp::AtMost,
        bound: 10.0,
        unit: "%",
    },
    Target {
        key: "wal_to_graphile",
        label: "WAL per job, skiplock / graphile",
        cmp: Cmp::AtMost,
        bound: 1.0,
        unit: "×",
    },
    Target {
        key: "enqueue_many",
        label: "enqueue_many",
        cmp: Cmp::AtLeast,
        bound: 200_000.0,
        unit: "jobs/s",
    },
    Target {
        key: "enqueue_single",
        label: "single enqueue, 8 clients",
        cmp: Cmp::AtLeast,
        bound: 6_000.0,
        unit: "jobs/s",
    },
    // An admission limit far from binding costs the single enqueue little: it adds to the
    // queue's bound instead of counting the queue (docs/operations.md, "Admission control");
    // both sides with the same backlog waiting, in the same run.
    Target {
        key: "admission_to_single",
        label: "single enqueue, admission limit far from full / no limit",
        cmp: Cmp::AtLeast,
        bound: 0.9,
        unit: "×",
    },
    Target {
        key: "latency_p50_ms",
        label: "latency enqueue→start p50",
        cmp: Cmp::AtMost,
        bound: 1.0,
        unit: "ms",
    },
    Target {
        key: "latency_p99_ms",
        label: "latency enqueue→start p99",
        cmp: Cmp::AtMost,
        bound: 5.0,
        unit: "ms",
    },
    Target {
        key: "scale_ratio",
        label: "scale ratio (ballast / plain drain)",
        cmp: Cmp::AtLeast,
        bound: 0.95,
        unit: "×",
    },
    // Limits cost nothing much while they do not bind, and a polite crawl of many
    // hosts runs near the pace politeness allows.
    Target {
        key: "key_rate_to_drain",
        label: "drain, per-key rate never binding / plain",
        cmp: Cmp::AtLeast,
        bound: 0.9,
        unit: "×",
    },
    Target {
        key: "queue_limit_to_drain",
        label: "drain, queue limit never binding / plain",
        cmp: Cmp::AtLeast,
        bound: 0.9,
        unit: "×",
    },
    // Fair mode pays for its round-robin pick (and its claims wait for each other on the
    // queue's row), but stays a drain, not a crawl.
    Target {
        key: "fair_to_drain",
        label: "drain, fair queue / plain",
        cmp: Cmp::AtLeast,
        bound: 0.7,
        unit: "×",
    },
    // A flow's jobs are released by the acks of their dependencies (the root's ack releases
    // the first slice of its children and the worker the rest, slice by slice; each child's
    // ack counts down the fan-in): docs/flows.md. The release ceiling beside it in the report
    // is what a release with no bookkeeping reaches (docs/performance.md, "Flows").
    Target {
        key: "flow_to_drain",
        label: "drain, fan-out + fan-in / plain (same count)",
        cmp: Cmp::AtLeast,
        bound: 0.7,
        unit: "×",
    },
    Target {
        key: "crawl_to_ideal",
        label: "crawl pages/s / hosts per interval",
        cmp: Cmp::AtLeast,
        bound: 0.8,
        unit: "×",
    },
    // `skiplock worker` as users run it (the CLI, maintenance on), one process.
    Target {
        key: "cli_to_graphile",
        label: "skiplock worker --queues default=100 / graphile",
        cmp: Cmp::AtLeast,
        bound: 1.3,
        unit: "×",
    },
    // awa, the closest peer, at its newest release with its documented settings.
    Target {
        key: "cli_to_awa",
        label: "skiplock worker --queues default=100 / awa",
        cmp: Cmp::AtLeast,
        bound: 1.3,
        unit: "×",
    },
    Target {
        key: "cli_default_to_cli",
        label: "skiplock worker (no flags) / with --queues",
        cmp: Cmp::AtLeast,
        bound: 0.8,
        unit: "×",
    },
    // The same process behind PgBouncer in transaction mode: a transaction of its own per
    // statement, unnamed statements (two more round trips and a parse each).
    Target {
        key: "pgbouncer_to_cli",
        label: "skiplock worker via PgBouncer (transaction) / direct",
        cmp: Cmp::AtLeast,
        bound: 0.5,
        unit: "×",
    },
    Target {
        key: "first_claim_ms",
        label: "skiplock worker start to first claim",
        cmp: Cmp::AtMost,
        bound: 100.0,
        unit: "ms",
    },
];

/// The outcome of one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Met.
    Pass,
    /// Not met.
    Miss,
    /// Not measured in this run (a skipped part), or not a finite number.
    NotMeasured,
}

/// Whether `value` meets `bound`.
pub fn verdict(cmp: Cmp, bound: f64, value: Option<f64>) -> Verdict {
    match value {
        Some(v) if v.is_finite() => {
            let ok = match cmp {
                Cmp::AtLeast => v >= bound,
                Cmp::AtMost => v <= bound,
            };
            if ok { Verdict::Pass } else { Verdict::Miss }
        }
        _ => Verdict::NotMeasured,
    }
}

/// One target checked.
#[derive(Debug, Clone, Serialize)]
pub struct TargetResult {
    /// The target.
    #[serde(flatten)]
    pub target: Target,
    /// This run's figure (median of the runs), if measured.
    pub value: Option<f64>,
    /// The outcome.
    pub verdict: Verdict,
}

/// Every target of [`TARGETS`] checked against `figures` (missing keys: not measured).
pub fn evaluate(figures: &BTreeMap<String, f64>) -> Vec<TargetResult> {
    TARGETS
        .iter()
        .map(|t| {
            let value = figures.get(t.key).copied();
            TargetResult {
                target: *t,
                value,
                verdict: verdict(t.cmp, t.bound, value),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_sided() {
        assert_eq!(verdict(Cmp::AtLeast, 1.3, Some(1.3)), Verdict::Pass);
        assert_eq!(verdict(Cmp::AtLeast, 1.3, Some(1.29)), Verdict::Miss);
        assert_eq!(verdict(Cmp::AtMost, 10.0, Some(10.0)), Verdict::Pass);
        assert_eq!(verdict(Cmp::AtMost, 10.0, Some(10.5)), Verdict::Miss);
        assert_eq!(verdict(Cmp::AtLeast, 1.3, None), Verdict::NotMeasured);
        // a ratio over a zero baseline is not a pass
        assert_eq!(
            verdict(Cmp::AtLeast, 1.3, Some(f64::INFINITY)),
            Verdict::NotMeasured
        );
        assert_eq!(
            verdict(Cmp::AtMost, 5.0, Some(f64::NAN)),
            Verdict::NotMeasured
        );
    }

    #[test]
    fn every_target_is_reported_once_in_table_order() {
        let figures = BTreeMap::from([
            ("drain_to_graphile".to_string(), 1.5),
            ("idle_pct".to_string(), 30.0),
        ]);
        let r = evaluate(&figures);
        assert_eq!(r.len(), TARGETS.len());
        assert_eq!(r[0].target.key, "drain_to_graphile");
        assert_eq!(r[0].verdict, Verdict::Pass);
        assert_eq!(r[1].verdict, Verdict::NotMeasured);
        assert_eq!(r[2].verdict, Verdict::Miss);
        let keys: std::collections::BTreeSet<_> = TARGETS.iter().map(|t| t.key).collect();
        assert_eq!(keys.len(), TARGETS.len());
    }
}
