//! Faults one worker sees while the others carry on (docs/reliability.md, "Faults one worker
//! sees"), scaled for CI: each worker process in a network namespace of its own, its link cut
//! both ways or only the server's answers, slowed, reset, its commits' answers lost, its process
//! paused past the rescue window, and the jobs' disk filled; every kind at least once per
//! schedule, then the whole recorded history checked. The long run is
//! `scripts/chaos --partitions`, with the same driver (src/chaos/partitions/). The checker's
//! own tests (each kind of bad history caught) are unit tests of src/chaos/partitions/checker.rs.

mod support;
use skiplock_devtools::chaos;

use std::time::Duration;

use chaos::partitions::schedule::Kind;
use chaos::partitions::{self, PartitionConfig, net};
use support::bin;

/// Whether this machine lets the test make network namespaces; without them the test says why
/// and passes, unless `SKIPLOCK_TEST_REQUIRE_NETNS` is set (CI sets it and installs the tools).
fn namespaces_allowed() -> bool {
    match net::unsupported() {
        None => true,
        Some(why) => {
            assert!(
                std::env::var_os("SKIPLOCK_TEST_REQUIRE_NETNS").is_none(),
                "the partition faults cannot run and SKIPLOCK_TEST_REQUIRE_NETNS is set: {why}"
            );
            eprintln!("skipping the partition faults: {why}");
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_one_worker_sees_lose_nothing_and_every_duplicate_is_explained() {
    if !namespaces_allowed() {
        return;
    }
    let mut cfg = PartitionConfig::new(600, bin());
    // Names, addresses and a port of this test's own: the long run (tag p) may run meanwhile.
    cfg.tag = 't';
    cfg.net_base = 20;
    cfg.port = 55420;
    cfg.schedules = 2;
    cfg.rescue_after = Duration::from_secs(3);
    cfg.span = Duration::from_secs(6);
    cfg.extra_faults = 0;
    cfg.concurrency = 6;
    if let Some(seed) = std::env::var("SKIPLOCK_TEST_PARTITION_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        cfg.seed = seed;
    }
    eprintln!(
        "partition schedules from seed {} (SKIPLOCK_TEST_PARTITION_SEED replays them)",
        cfg.seed
    );
    let report = partitions::run(&cfg, |line| eprintln!("{line}"))
        .await
        .expect("the partition run");
    eprintln!("{}", report.summary_line());
    assert!(report.ok(), "{}", report.summary_line());
    let faults = report.faults();
    for k in Kind::ALL {
        assert_eq!(faults.get(k.name()), Some(&2), "{}: {faults:?}", k.name());
    }
    assert!(report.schedules.iter().all(|s| s.verdict.jobs >= 600));
}
