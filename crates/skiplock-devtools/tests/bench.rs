//! `skiplock-devtools bench` end to end at smoke size: every part it was asked for reports a figure,
//! every part it skipped reports none, and the targets table is complete. Timings are not
//! checked (they mean nothing on a loaded machine); what is checked is that each instrument
//! measured something. The Graphile drain needs `npm ci` in scripts/graphile and is left to
//! the smoke run of scripts/bench.

mod support;
use skiplock_devtools::bench;

use std::path::PathBuf;

use bench::targets::{TARGETS, Verdict};
use bench::{BenchOptions, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_smoke_reports_every_figure_it_was_asked_for() {
    let o = BenchOptions {
        runs: 1,
        jobs: 1000,
        latency_jobs: 20,
        scale_finished: 2000,
        scale_future: 200,
        worker_bin: Some(PathBuf::from(support::bin())),
        skip_graphile: true,
        // The peers' harnesses are built by scripts/bench, not by the test suite.
        skip_awa: true,
        pgbouncer: bench::pgbouncer::find(),
        ..BenchOptions::default()
    };
    let pgbouncer = o.pgbouncer.is_some();
    assert!(
        pgbouncer || std::env::var_os("SKIPLOCK_TEST_REQUIRE_PGBOUNCER").is_none(),
        "pgbouncer is not installed and SKIPLOCK_TEST_REQUIRE_PGBOUNCER is set"
    );
    let r = run(&support::admin_url(), &o, |_| {}).await.expect("bench");

    let version: i32 = r.postgres["server_version"]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|v| v.parse().ok())
        .expect("server_version");
    for (name, d) in [
        ("1 process", Some(&r.drain)),
        ("3 processes", r.drain_processes.as_ref()),
        ("ceiling", r.ceiling.as_ref()),
        ("ceiling, two commits", r.ceiling_two_commits.as_ref()),
    ] {
        let d = d.unwrap_or_else(|| panic!("{name}: no figures"));
        assert!(d.jobs_per_s.median > 0.0, "{name}: {d:?}");
        assert!(d.wal_bytes_per_job.median > 0.0, "{name}: {d:?}");
        // commits are counted from Postgres 15 on (forced stats flush)
        match &d.commits_per_1000 {
            Some(c) => assert!(version >= 15 && c.median > 0.0, "{name}: {d:?}"),
            None => assert!(
                version < 15,
                "{name}: no commit count on Postgres {version}"
            ),
        }
    }
    assert!(r.drain.idle_pct.is_some(), "idle % of the drain (Linux)");
    // The server's CPU per job, read from /proc: the test server runs on this machine. A
    // short drain may round to 0 ticks, so only that each was read is checked.
    for (name, d) in [
        ("1 process", Some(&r.drain)),
        ("3 processes", r.drain_processes.as_ref()),
        ("ceiling", r.ceiling.as_ref()),
        ("ceiling, two commits", r.ceiling_two_commits.as_ref()),
    ] {
        let d = d.unwrap();
        assert!(d.server_us_per_job.is_some(), "{name}: server CPU: {d:?}");
        assert!(d.client_us_per_job.is_some(), "{name}: client CPU: {d:?}");
    }
    assert!(r.drain_processes.as_ref().unwrap().idle_pct.is_none());
    assert!(r.graphile.is_none() && r.drain_to_graphile.is_none());
    assert!(r.enqueue_single.as_ref().unwrap().median > 0.0);
    assert!(r.enqueue_many.as_ref().unwrap().median > 0.0);
    assert!(r.latency_p99_ms.as_ref().unwrap().median >= r.latency_p50_ms.as_ref().unwrap().median);
    assert!(r.scale_ratio.unwrap() > 0.0);
    assert!(r.drain_to_ceiling.as_ref().unwrap().median > 0.0);
    assert!(r.drain_to_ceiling_two_commits.as_ref().unwrap().median > 0.0);
    assert!(r.ceiling_two_commits_to_ceiling.as_ref().unwrap().median > 0.0);
    // The drains under limits that never bind, the fair queue's, and the polite crawl.
    assert!(r.drain_key_rate.as_ref().unwrap().jobs_per_s.median > 0.0);
    assert!(r.drain_queue_limit.as_ref().unwrap().jobs_per_s.median > 0.0);
    assert!(r.key_rate_to_drain.as_ref().unwrap().median > 0.0);
    assert!(r.queue_limit_to_drain.as_ref().unwrap().median > 0.0);
    assert!(r.drain_fair.as_ref().unwrap().jobs_per_s.median > 0.0);
    assert!(r.fair_to_drain.as_ref().unwrap().median > 0.0);
    // The durable steps' figures.
    for s in [
        &r.step_jobs_per_s,
        &r.step_plain_jobs_per_s,
        &r.step_job_to_ten_plain,
        &r.checkpoint_ms,
        &r.step_ms,
    ] {
        assert!(s.as_ref().unwrap().median > 0.0);
    }
    // The flow, its plain drain, the release ceiling between them, and the flow's halves.
    for d in [&r.drain_flow, &r.drain_flow_plain, &r.drain_flow_ceiling] {
        assert!(d.as_ref().unwrap().jobs_per_s.median > 0.0);
    }
    for s in [
        &r.flow_to_drain,
        &r.flow_ceiling_to_drain,
        &r.flow_to_ceiling,
        &r.fan_out_to_drain,
        &r.fan_in_to_drain,
    ] {
        assert!(s.as_ref().unwrap().median > 0.0);
    }
    let crawl = r.crawl_pages_per_s.as_ref().unwrap().median;
    assert!(crawl > 0.0);
    // Politeness holds: a host's 20 starts, one per 200 ms, take at least 19 intervals, so
    // 100 hosts cannot beat 2,000 pages / 3.8 s (a little above the target's ideal of
    // hosts / interval, which rounds the first start away).
    use bench::limits::{CRAWL_HOSTS, CRAWL_PAGES, CRAWL_POLITENESS};
    let bound = (CRAWL_HOSTS * CRAWL_PAGES) as f64
        / ((CRAWL_PAGES - 1) as f64 * CRAWL_POLITENESS.as_secs_f64());
    assert!(
        crawl <= bound,
        "{crawl} pages/s, above the politeness bound {bound}"
    );

    // The drain through PgBouncer in transaction mode, where it is installed.
    assert_eq!(r.drain_cli_pgbouncer.is_some(), pgbouncer);
    if pgbouncer {
        assert!(r.pgbouncer_to_cli.as_ref().unwrap().median > 0.0);
    }

    assert_eq!(r.targets.len(), TARGETS.len());
    for t in &r.targets {
        let skipped = t.target.key.contains("graphile")
            || t.target.key.contains("awa")
            || (t.target.key.contains("pgbouncer") && !pgbouncer);
        assert_eq!(
            t.verdict == Verdict::NotMeasured,
            skipped,
            "{}: {:?}",
            t.target.key,
            t.verdict
        );
    }
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["targets"].as_array().unwrap().len() == TARGETS.len());
    assert!(
        json["drain"]["wal_bytes_per_job"]["median"]
            .as_f64()
            .unwrap()
            > 0.0
    );
}

/// The durable steps phase alone (docs/steps.md, "Cost"), at tiny size: its drains run every
/// job and record every step, and each figure is measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_steps_phase_measures_step_jobs_against_plain_jobs_and_checkpoints_in_a_row() {
    let db = support::TestDb::new().await;
    let o = BenchOptions {
        concurrency: 20,
        connections: 4,
        ..BenchOptions::default()
    };
    let sizes = bench::steps::Sizes {
        step_jobs: 5,
        in_a_row: 7,
    };
    let r = bench::steps::measure(&db.url, &o, &db.pool, sizes)
        .await
        .expect("steps phase");
    for (name, v) in [
        ("step jobs/s", r.step_jobs_per_s),
        ("plain jobs/s", r.plain_jobs_per_s),
        ("ratio", r.step_job_to_ten_plain),
        ("checkpoint ms", r.checkpoint_ms),
        ("step ms", r.step_ms),
    ] {
        assert!(v.is_finite() && v > 0.0, "{name}: {r:?}");
    }
    let (completed, others, steps, cursors): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM skiplock.jobs WHERE state = 'completed'),
                (SELECT count(*) FROM skiplock.jobs WHERE state <> 'completed'),
                (SELECT count(*) FROM skiplock.job_steps WHERE kind = 'step'),
                (SELECT count(*) FROM skiplock.job_steps WHERE kind = 'cursor')",
    )
    .fetch_one(&*db.pool)
    .await
    .unwrap();
    assert_eq!(completed, 5 * 10 + 5 + 1);
    assert_eq!(others, 0);
    assert_eq!(
        steps,
        5 * 10 + 7,
        "every step of the drain and of the row recorded"
    );
    assert_eq!(cursors, 1);
}
