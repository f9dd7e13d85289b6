//! Limits at claim time and queue pause/resume (docs/concepts.md, "Limits and pause"), with
//! real worker processes (the built binary) against a real Postgres. Every wait is a
//! condition wait with a generous deadline; what the tests assert comes from the jobs' own
//! recorded run times (`sleep` with `record`) or the database's clock (`attempted_at`).

mod support;

use std::collections::HashMap;
use std::process::Child;
use std::time::Duration;

use serde_json::json;
use skiplock::queue::NewJob;
use skiplock::store::claim::ClaimParams;
use skiplock::store::control::{self, KeyLimit, Rate};
use skiplock::store::jobs::{ManyJobs, enqueue, enqueue_many};
use support::*;

const LONG: Duration = Duration::from_secs(120);

/// Worker processes killed when the test ends, whatever happens.
struct Procs(Vec<Child>);

impl Procs {
    fn start(url: &str, n: usize, args: &[&str], envs: &[(&str, &str)]) -> Procs {
        Procs(
            (0..n)
                .map(|_| spawn_worker_process(url, args, envs))
                .collect(),
        )
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // Only a child still running: a reaped child's pid may belong to another process.
            if let Ok(None) = c.try_wait() {
                sigkill(c);
                let _ = c.wait();
            }
        }
    }
}

/// The most intervals that contain one instant.
fn max_overlap(mut spans: Vec<(i64, i64)>) -> usize {
    let mut events: Vec<(i64, i32)> = Vec::new();
    for (s, e) in spans.drain(..) {
        events.push((s, 1));
        events.push((e, -1));
    }
    // At equal times an end comes before a start: touching intervals do not overlap.
    events.sort();
    let (mut cur, mut max) = (0i32, 0i32);
    for (_, d) in events {
        cur += d;
        max = max.max(cur);
    }
    max as usize
}

#[test]
fn overlap_counts_intervals_sharing_an_instant() {
    assert_eq!(max_overlap(vec![]), 0);
    assert_eq!(max_overlap(vec![(0, 10), (10, 20)]), 1);
    assert_eq!(max_overlap(vec![(0, 10), (5, 20), (9, 11)]), 3);
    assert_eq!(max_overlap(vec![(0, 10), (11, 20), (12, 13)]), 2);
}

/// The recorded run times (`sleep` with `record`) of the completed jobs `ids`.
async fn run_spans(pool: &sqlx::PgPool, ids: &[i64]) -> Vec<(i64, i64)> {
    let rows: Vec<(serde_json::Value,)> = sqlx::query_as(
        "SELECT result FROM skiplock.jobs WHERE id = ANY($1) AND state = 'completed'",
    )
    .bind(ids)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), ids.len(), "every job completed");
    rows.iter()
        .map(|(r,)| {
            (
                r["started_us"].as_i64().expect("started_us"),
                r["finished_us"].as_i64().expect("finished_us"),
            )
        })
        .collect()
}

async fn wait_completed(pool: &sqlx::PgPool, ids: &[i64], what: &str) {
    wait_for(what, LONG, || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM skiplock.jobs WHERE id = ANY($1) AND state = 'completed'",
        )
        .bind(ids)
        .fetch_one(pool)
        .await
        .unwrap();
        (n == ids.len() as i64).then_some(())
    })
    .await
}

async fn running_in(pool: &sqlx::PgPool, queue: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM skiplock.jobs WHERE queue = $1 AND state = 'running'")
        .bind(queue)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn sleeps(n: usize, ms: u64) -> Vec<serde_json::Value> {
    vec![json!({"ms": ms, "record": true}); n]
}

/// Enqueues one `sleep` job per `args` in `queue`, all under `limit_key`; returns their ids.
async fn enqueue_sleeps(
    pool: &sqlx::PgPool,
    queue: &str,
    limit_key: Option<&str>,
    args: &[serde_json::Value],
) -> Vec<i64> {
    enqueue_many(
        pool,
        ManyJobs {
            kind: "sleep",
            args,
            queue,
            run_at: None,
            priority: 0,
            limit_key,
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_concurrency_holds_across_processes_and_can_be_raised_at_runtime() {
    let db = TestDb::new().await;
    control::set_queue_limit(&db.pool, "lim", Some(2))
        .await
        .unwrap();
    let args = sleeps(12, 300);
    let first = enqueue_sleeps(&db.pool, "lim", None, &args).await;
    let _procs = Procs::start(
        &db.url,
        3,
        &["--queues", "lim=3"],
        &[("SKIPLOCK_POLL_INTERVAL", "100ms")],
    );
    wait_completed(&db.pool, &first, "the first 12 jobs to complete").await;
    let spans = run_spans(&db.pool, &first).await;
    let most = max_overlap(spans);
    assert!(most <= 2, "{most} jobs ran at once under a limit of 2");
    // A producer with 3 free slots claims 2 jobs in one statement: they do overlap.
    assert_eq!(most, 2, "the limit let 2 jobs run at once");

    // Raised at runtime: 5 run at once (3 processes x 3 slots could run 9).
    control::set_queue_limit(&db.pool, "lim", Some(5))
        .await
        .unwrap();
    let args = sleeps(10, 2500);
    let second = enqueue_sleeps(&db.pool, "lim", None, &args).await;
    let pool = &db.pool;
    wait_for(
        "5 jobs running at once after raising the limit",
        LONG,
        || async move { (running_in(pool, "lim").await >= 5).then_some(()) },
    )
    .await;
    wait_completed(&db.pool, &second, "the next 10 jobs to complete").await;
    let most = max_overlap(run_spans(&db.pool, &second).await);
    assert!(
        (3..=5).contains(&most),
        "{most} jobs ran at once under a limit of 5"
    );
    let attempts: i64 = sqlx::query_scalar("SELECT max(attempt)::bigint FROM skiplock.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 1, "no job spent an attempt waiting for the limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rate_spaces_starts_of_one_key_and_lets_other_keys_run() {
    let db = TestDb::new().await;
    control::set_key_limit(
        &db.pool,
        "rated",
        KeyLimit {
            concurrency: None,
            rate: Some(Rate {
                count: 1,
                period: Duration::from_millis(500),
            }),
        },
    )
    .await
    .unwrap();
    let mut ids = Vec::new();
    for k in 0..5 {
        let args = vec![json!({"ms": 10}); 10];
        let key = format!("host-{k}");
        ids.extend(enqueue_sleeps(&db.pool, "rated", Some(&key), &args).await);
    }
    // A poll interval far longer than the whole run: producers held back by a key's rate
    // must wake at the time the claim named, not at the next poll.
    let _procs = Procs::start(
        &db.url,
        3,
        &["--queues", "rated=4"],
        &[("SKIPLOCK_POLL_INTERVAL", "1h")],
    );
    wait_completed(&db.pool, &ids, "all 50 rate-limited jobs to complete").await;
    let rows: Vec<(String, i64, i32)> = sqlx::query_as(
        "SELECT limit_key, (extract(epoch FROM attempted_at) * 1000000)::bigint, attempt
         FROM skiplock.jobs WHERE queue = 'rated' ORDER BY attempted_at",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 50);
    assert!(rows.iter().all(|r| r.2 == 1), "no attempt count above 1");
    let mut by_key: HashMap<&str, Vec<i64>> = HashMap::new();
    for (k, t, _) in &rows {
        by_key.entry(k).or_default().push(*t);
    }
    assert_eq!(by_key.len(), 5);
    for (k, starts) in &by_key {
        for w in starts.windows(2) {
            // Database clock, microseconds; 1 ms of slack for the clock's granularity.
            assert!(
                w[1] - w[0] >= 499_000,
                "key {k}: starts {} us apart (rate 1 per 500 ms)",
                w[1] - w[0]
            );
        }
    }
    let close = rows
        .windows(2)
        .any(|w| w[0].0 != w[1].0 && w[1].1 - w[0].1 < 100_000);
    assert!(close, "jobs of different keys started side by side");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_slot_returns_after_rescue() {
    let db = TestDb::new().await;
    control::set_queue_limit(&db.pool, "one", Some(1))
        .await
        .unwrap();
    let held = enqueue(
        &db.pool,
        &NewJob::new("sleep", json!({"ms": 600_000}))
            .queue("one")
            .max_attempts(1),
    )
    .await
    .unwrap()
    .id;
    let mut p1 = Procs::start(&db.url, 1, &["--queues", "one=2"], &[]);
    wait_job(&db.pool, held, "the long job running", |r| {
        r.state.as_str() == "running"
    })
    .await;
    let next = enqueue(&db.pool, &NewJob::new("noop", json!({})).queue("one"))
        .await
        .unwrap()
        .id;
    sigkill(&p1.0[0]);
    let _ = p1.0[0].wait();
    drop(p1);
    // The dead worker's job still counts: nothing may be claimed.
    let kinds = vec!["noop".to_string(), "sleep".to_string()];
    let got = control::claim_limited(
        &db.pool,
        ClaimParams {
            queue: "one",
            kinds: &kinds,
            limit: 10,
            worker: "test",
        },
        0,
    )
    .await
    .unwrap();
    assert!(got.controlled);
    assert!(
        got.jobs.is_empty(),
        "claimed past the limit: {:?}",
        got.jobs
    );
    rescue_now(&db.pool, held).await;
    let _p2 = Procs::start(
        &db.url,
        1,
        &["--queues", "one=2"],
        &[("SKIPLOCK_POLL_INTERVAL", "100ms")],
    );
    wait_job(
        &db.pool,
        next,
        "the waiting job to run once the slot returned",
        |r| r.state.as_str() == "completed",
    )
    .await;
    let r = skiplock::store::jobs::get_job(&db.pool, held)
        .await
        .unwrap();
    assert_eq!(
        r.state.as_str(),
        "discarded",
        "the rescued job was out of attempts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_queue_is_not_claimed_and_resumes() {
    let db = TestDb::new().await;
    let first = enqueue(
        &db.pool,
        &NewJob::new("sleep", json!({"ms": 1500})).queue("p"),
    )
    .await
    .unwrap()
    .id;
    let _procs = Procs::start(
        &db.url,
        2,
        &["--queues", "p=2"],
        &[("SKIPLOCK_POLL_INTERVAL", "100ms")],
    );
    wait_job(&db.pool, first, "the first job running", |r| {
        r.state.as_str() == "running"
    })
    .await;
    let (code, out, err) = run_cmd(&db.url, &["queue", "pause", "p"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("queue p paused"), "{out}");
    let second = enqueue(&db.pool, &NewJob::new("noop", json!({})).queue("p"))
        .await
        .unwrap()
        .id;
    // The running job finishes.
    wait_job(
        &db.pool,
        first,
        "the running job to finish while paused",
        |r| r.state.as_str() == "completed",
    )
    .await;
    // Both workers were woken by the insert and poll every 100 ms: 20 polls later the job
    // still waits.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let r = skiplock::store::jobs::get_job(&db.pool, second)
        .await
        .unwrap();
    assert_eq!(r.state.as_str(), "available", "a paused queue was claimed");
    let (code, out, _) = run_cmd(&db.url, &["queue", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with("p ") && l.contains("paused")),
        "{out}"
    );

    let (code, out, err) = run_cmd(&db.url, &["queue", "resume", "p"]);
    assert_eq!(code, 0, "{out}{err}");
    wait_job(&db.pool, second, "the job to run after resume", |r| {
        r.state.as_str() == "completed"
    })
    .await;
    // A queue that no longer has a setting goes back to the plain claim. (The workers set
    // the packets and pack queues' limits at start: those rows stay.)
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.queues WHERE queue = 'p'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn queue_commands_refuse_bad_input_with_a_clear_error() {
    let db = TestDb::new().await;
    for (args, says) in [
        (&["queue", "pause", ""][..], "queue name"),
        (&["queue", "limit", "q"][..], "nothing to set"),
        (
            &["queue", "limit", "q", "--concurrency", "0"][..],
            "--concurrency",
        ),
        (&["queue", "limit", "q", "--rate", "5"][..], "--rate"),
        (&["queue", "limit", "q", "--per-key", "-3"][..], "--per-key"),
    ] {
        let (code, out, err) = run_cmd(&db.url, args);
        assert_ne!(code, 0, "{args:?}: {out}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let (code, out, err) = run_cmd(
        &db.url,
        &[
            "queue",
            "limit",
            "q",
            "--concurrency",
            "3",
            "--per-key",
            "1",
            "--rate",
            "2/1s",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("concurrency 3, per key 1, rate 2/1s"), "{out}");
    // Flags not given keep their value.
    let (code, out, err) = run_cmd(&db.url, &["queue", "limit", "q", "--rate", "none"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("concurrency 3, per key 1") && !out.contains("rate"),
        "{out}"
    );
    let (code, out, _) = run_cmd(&db.url, &["stats"]);
    assert_eq!(code, 0);
    assert!(out.contains("queue q: concurrency 3, per key 1"), "{out}");
    // The other way round: a rate, then --per-key alone keeps it; clearing both leaves the
    // queue with no limits and no row.
    let (code, out, err) = run_cmd(&db.url, &["queue", "limit", "r", "--rate", "3/1s"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("queue r: rate 3/1s"), "{out}");
    let (code, out, err) = run_cmd(&db.url, &["queue", "limit", "r", "--per-key", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("queue r: per key 2, rate 3/1s"), "{out}");
    let (code, out, err) = run_cmd(
        &db.url,
        &["queue", "limit", "r", "--per-key", "none", "--rate", "none"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("queue r: no limits"), "{out}");
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.queues WHERE queue = 'r'"
        )
        .await,
        0
    );

    // The SQL API refuses bad values with one line each.
    for sql in [
        "SELECT skiplock.set_queue_limit('q', 0)",
        "SELECT skiplock.set_queue_limit('', 1)",
        "SELECT skiplock.set_key_limit('q', rate => 1)",
        "SELECT skiplock.set_key_limit('q', rate => 0, period => '1s')",
        "SELECT skiplock.set_key_limit('q', rate => 1, period => '-1s')",
        "SELECT skiplock.change_key_limit('q', false, NULL, true, 1, NULL)",
        "SELECT skiplock.change_key_limit('', true, 1, false, NULL, NULL)",
        "SELECT skiplock.enqueue('noop', limit_key => '')",
    ] {
        let e = sqlx::query(sql).execute(&db.pool).await.unwrap_err();
        assert!(e.to_string().contains("skiplock:"), "{sql}: {e}");
    }
    // Old call forms still resolve (no overload ambiguity).
    sqlx::query("SELECT skiplock.enqueue('noop'), skiplock.enqueue('noop', '{}', 'default', now(), 0::smallint, 25, 'k', 'keep'), skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[2]))")
        .execute(&db.pool)
        .await
        .unwrap();
}

/// `--exit-when-idle` does not wait for a paused queue's jobs (nobody may claim them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_exiting_when_idle_does_not_wait_for_a_paused_queue() {
    let db = TestDb::new().await;
    let id = enqueue(&db.pool, &NewJob::new("noop", json!({})).queue("held"))
        .await
        .unwrap()
        .id;
    assert!(control::pause(&db.pool, "held").await.unwrap());
    let mut procs = Procs(vec![spawn_worker_process(
        &db.url,
        &["--exit-when-idle"],
        &[("SKIPLOCK_POLL_INTERVAL", "100ms")],
    )]);
    let status = wait_for("the idle worker to exit", LONG, || {
        let s = procs.0[0].try_wait().unwrap();
        async move { s }
    })
    .await;
    assert!(status.success(), "{status:?}");
    let r = skiplock::store::jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!(r.state.as_str(), "available");
}

/// The pack timer carries its host as limit_key (the pack queue's per-key concurrency 1,
/// set by workers at start, then runs one pack per host).
#[tokio::test]
async fn a_pack_timer_is_limited_by_its_host() {
    let db = TestDb::new().await;
    // pack_now packs only a host with fetched pages.
    sqlx::query(
        "INSERT INTO skiplock.pages (url, host, path, title, body, last_fetched, next_fetch)
         VALUES ('http://example.test/', 'example.test', '/', 't', 'b', now(), now())",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let id: i64 = sqlx::query_scalar("SELECT skiplock.pack_now('example.test')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let key: Option<String> =
        sqlx::query_scalar("SELECT limit_key FROM skiplock.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(key.as_deref(), Some("example.test"));
}

#[tokio::test]
async fn a_nul_in_a_queue_or_key_is_refused_with_a_clear_error() {
    let db = TestDb::new().await;
    for (queue, key) in [("q\0", "k"), ("q", "k\0")] {
        let e = control::next_key_start(&db.pool, queue, key)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("NUL character"), "{queue:?} {key:?}: {e}");
    }
    let e = control::pause(&db.pool, "q\0")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("NUL character"), "{e}");
    // The rest of the name rule is checked before any statement too.
    for queue in [String::new(), "q".repeat(201)] {
        let e = control::pause(&db.pool, &queue)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be 1 to 200 characters"), "{e}");
    }
}

/// The worker id of the live worker process `child` (its row in skiplock.workers).
async fn worker_id_of(pool: &sqlx::PgPool, child: &Child) -> String {
    wait_for("the worker process to register", LONG, || async {
        sqlx::query_scalar::<_, String>("SELECT id FROM skiplock.workers WHERE pid = $1")
            .bind(child.id() as i32)
            .fetch_optional(pool)
            .await
            .unwrap()
    })
    .await
}

/// A producer held back by a queue concurrency limit learns from the ack's NOTIFY that a job
/// of the queue finished in another process: with a poll interval of an hour, only the
/// wake-up can start the waiting jobs in the second process within the test's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_in_one_process_wakes_a_producer_held_back_in_another() {
    let db = TestDb::new().await;
    control::set_queue_limit(&db.pool, "relay", Some(1))
        .await
        .unwrap();
    let env = [("SKIPLOCK_POLL_INTERVAL", "1h")];
    // A long job in process A holds the only slot.
    let long = enqueue(
        &db.pool,
        &NewJob::new("sleep", json!({"ms": 600_000})).queue("relay"),
    )
    .await
    .unwrap()
    .id;
    let mut a = Procs::start(&db.url, 1, &["--queues", "relay=1"], &env);
    let a_id = worker_id_of(&db.pool, &a.0[0]).await;
    wait_job(&db.pool, long, "the long job running in A", |r| {
        r.state.as_str() == "running"
    })
    .await;
    let short: Vec<i64> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(
                enqueue(
                    &db.pool,
                    &NewJob::new("sleep", json!({"ms": 10})).queue("relay"),
                )
                .await
                .unwrap()
                .id,
            );
        }
        v
    };
    // Process B starts while the slot is taken: its claim gets nothing, and it would next
    // poll in an hour.
    let b = Procs::start(&db.url, 1, &["--queues", "relay=1"], &env);
    let b_id = worker_id_of(&db.pool, &b.0[0]).await;
    assert_ne!(a_id, b_id);
    assert_eq!(running_in(&db.pool, "relay").await, 1, "the limit holds");
    // A stops: its sleep job is given back (a snooze) and A exits without claiming again.
    sigterm(&a.0[0]);
    let _ = a.0[0].wait();
    drop(a);
    wait_completed(
        &db.pool,
        &short,
        "the short jobs to run in B, woken by A's ack",
    )
    .await;
    let by: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT attempted_by FROM skiplock.jobs WHERE id = ANY($1)")
            .bind(&short)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(by, vec![b_id], "B ran them");
    drop(b);
}

/// Jobs a worker claimed ahead into its buffer are `running` in the database; pausing the
/// queue must not let them start later. The pause's wake-up makes the producer ask (its poll
/// interval is an hour), and it puts them back (attempt given back, the reason in `errors`);
/// the started ones run on.
#[tokio::test]
async fn pausing_a_queue_puts_back_the_jobs_waiting_in_a_workers_buffer() {
    buffered_jobs_go_back(None, |p| async move {
        control::pause(&p, "default").await.unwrap();
    })
    .await;
}

/// The same in a queue with a concurrency limit that leaves room: the limited claim filled
/// the buffer too (within half the room; the jobs it took at the worker's start stay), and the
/// pause sends those jobs back.
#[tokio::test]
async fn pausing_a_limited_queue_puts_back_the_jobs_waiting_in_a_workers_buffer() {
    buffered_jobs_go_back(Some(100), |p| async move {
        control::pause(&p, "default").await.unwrap();
    })
    .await;
}

/// A concurrency limit lowered below the jobs running now (buffered ones included) sends the
/// buffered ones back; the started ones run on.
#[tokio::test]
async fn lowering_a_limit_puts_back_the_jobs_waiting_in_a_workers_buffer() {
    buffered_jobs_go_back(Some(100), |p| async move {
        control::set_queue_limit(&p, "default", Some(1))
            .await
            .unwrap();
    })
    .await;
}

/// Two jobs started and two buffered (of ten long ones), then `act`: the two buffered ones,
/// and only they, go back.
async fn buffered_jobs_go_back<F, Fut>(limit: Option<i32>, act: F)
where
    F: FnOnce(sqlx::PgPool) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let db = TestDb::new().await;
    if limit.is_some() {
        control::set_queue_limit(&db.pool, "default", limit)
            .await
            .unwrap();
    }
    for _ in 0..10 {
        enqueue(&db.pool, &NewJob::new("sleep", json!({"ms": 600000})))
            .await
            .unwrap();
    }
    let settings = skiplock::config::QueueSettings {
        queues: Some([("default".to_string(), 2)].into_iter().collect()),
        claim_ahead: 2,
        poll_interval: Duration::from_secs(3600),
        shutdown_grace: Duration::from_millis(200),
        ..fast_settings()
    };
    let w = start_builtin(&db.pool, settings);
    wait_for(
        "two started and two buffered",
        Duration::from_secs(60),
        || async { (count_state(&db.pool, "running").await == 4).then_some(()) },
    )
    .await;
    act(db.pool.pg().clone()).await;
    wait_for(
        "the buffered two put back",
        Duration::from_secs(60),
        || async { (count_state(&db.pool, "running").await == 2).then_some(()) },
    )
    .await;
    assert_eq!(count_state(&db.pool, "available").await, 8);
    let released = count(
        &db.pool,
        "SELECT count(*) FROM skiplock.jobs WHERE state = 'available' AND attempt = 0
         AND errors::text LIKE '%paused or limited while the job waited in the buffer%'",
    )
    .await;
    assert_eq!(released, 2);
    w.stop().await.unwrap();
}

/// The limited claim fills a worker's buffer only in a queue whose one limit is its
/// concurrency, and then with at most half the room the limit leaves after the worker's free
/// slots: a buffered job counts as running (the limit holds), and as the limit comes to bind
/// the buffer's share shrinks to nothing, so the room goes to slots that can start a job now.
#[tokio::test]
async fn a_limited_claim_buffers_only_half_the_room_its_limit_leaves() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let kinds = vec!["noop".to_string()];
    for q in ["capped", "keyed"] {
        enqueue_many(
            p,
            ManyJobs {
                limit_key: Some("k"),
                kind: "noop",
                args: &vec![json!({}); 30],
                queue: q,
                run_at: None,
                priority: 0,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
    control::set_queue_limit(p, "capped", Some(10))
        .await
        .unwrap();
    // (free slots, asked ahead) -> (claimed, the buffer's room reported), with the running
    // count growing claim by claim: 10 - 0 - 2 leaves 8, half for the buffer: 4 of 8 asked.
    let claim = |q: &'static str, free: usize, ahead: usize| {
        let kinds = kinds.clone();
        async move {
            let got = control::claim_limited(
                p,
                ClaimParams {
                    queue: q,
                    kinds: &kinds,
                    limit: free + ahead,
                    worker: "test",
                },
                ahead,
            )
            .await
            .unwrap();
            (got.jobs.len(), got.buffer_room, got.controlled)
        }
    };
    assert_eq!(claim("capped", 2, 8).await, (6, Some(4), true));
    // 6 running: 4 left, 2 for the slots, half of the other 2 for the buffer.
    assert_eq!(claim("capped", 2, 8).await, (3, Some(1), true));
    // 9 running: the last one goes to a free slot, none to the buffer.
    assert_eq!(claim("capped", 2, 8).await, (1, Some(0), true));
    assert_eq!(claim("capped", 2, 8).await, (0, Some(0), true));
    assert_eq!(running_in(p, "capped").await, 10, "the limit holds");

    // A key's limits: nothing ahead, whatever the room.
    control::set_key_limit(
        p,
        "keyed",
        KeyLimit {
            concurrency: Some(20),
            rate: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(claim("keyed", 2, 8).await, (2, Some(0), true));
    // Paused: nothing at all.
    control::set_key_limit(p, "keyed", KeyLimit::default())
        .await
        .unwrap();
    control::pause(p, "keyed").await.unwrap();
    assert_eq!(claim("keyed", 2, 8).await, (0, Some(0), true));
    // Resumed, no limit left: no longer controlled (the plain claim applies again).
    control::resume(p, "keyed").await.unwrap();
    assert_eq!(claim("keyed", 2, 8).await, (0, Some(0), false));
}

/// A key's rate in one claim (GCRA): a key never seen gets its first start recorded, the
/// burst's next starts advance it, the start past the burst is refused and named as the
/// claim's `wait_until` (one step after now), and another key gets its own burst. A second
/// claim right after finds both keys blocked.
#[tokio::test]
async fn a_keys_rate_allows_its_burst_in_one_claim_and_names_the_next_start() {
    let db = TestDb::new().await;
    let p = &db.pool;
    control::set_key_limit(
        p,
        "rated",
        KeyLimit {
            concurrency: None,
            rate: Some(Rate {
                count: 2,
                period: Duration::from_secs(600),
            }),
        },
    )
    .await
    .unwrap();
    for key in ["a", "b"] {
        enqueue_many(
            p,
            ManyJobs {
                limit_key: Some(key),
                kind: "noop",
                args: &vec![json!({}); 3],
                queue: "rated",
                run_at: None,
                priority: 0,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
    let kinds = vec!["noop".to_string()];
    let claim = || async {
        control::claim_limited(
            p,
            ClaimParams {
                queue: "rated",
                kinds: &kinds,
                limit: 10,
                worker: "test",
            },
            0,
        )
        .await
        .unwrap()
    };
    let before: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(p)
        .await
        .unwrap();
    let got = claim().await;
    let after: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(p)
        .await
        .unwrap();
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for id in got.jobs.iter().map(|j| j.id) {
        let key: String = sqlx::query_scalar("SELECT limit_key FROM skiplock.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(p)
            .await
            .unwrap();
        *per_key.entry(key).or_default() += 1;
    }
    assert_eq!(per_key, HashMap::from([("a".into(), 2), ("b".into(), 2)]));
    // The next start of each key: one step (300 s) after the claim's clock, which read it
    // between `before` and `after`.
    let next = got
        .wait_until
        .expect("a start was refused: its time is named");
    let step = chrono::TimeDelta::seconds(300);
    assert!(
        before + step <= next && next <= after + step,
        "{before} {next} {after}"
    );
    let again = claim().await;
    assert!(again.jobs.is_empty(), "{:?}", again.jobs);
    assert!(again.wait_until.is_some());
}

/// Waits until a producer of `queue` is registered as waiting for a wake-up.
async fn producer_waits_on(p: &sqlx::PgPool, queue: &str) {
    wait_for("a producer to wait on the queue", LONG, || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.waiting WHERE queue = $1")
            .bind(queue)
            .fetch_one(p)
            .await
            .unwrap();
        (n == 1).then_some(())
    })
    .await
}

/// Takes the only slot of queue `slot` (limit 1) with a job a dead worker holds, its last
/// heartbeat `hb_age_s` seconds ago, then enqueues a job that must wait: returns both ids.
async fn slot_held_by_a_dead_worker(p: &sqlx::PgPool, hb_age_s: i64) -> (i64, i64) {
    control::set_queue_limit(p, "slot", Some(1)).await.unwrap();
    let held: i64 = sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, args, queue, state, attempt, attempted_at, attempted_by, heartbeat_at)
         VALUES ('sleep', '{\"ms\": 1}', 'slot', 'running', 1, now(), 'gone', now() - make_interval(secs => $1))
         RETURNING id",
    )
    .bind(hb_age_s as f64)
    .fetch_one(p)
    .await
    .unwrap();
    let waiting = enqueue(p, &NewJob::new("sleep", json!({"ms": 1})).queue("slot"))
        .await
        .unwrap()
        .id;
    (held, waiting)
}

/// Cancels running job `id` as an operator would (`skiplock.cancel`).
async fn cancel_running(p: &sqlx::PgPool, id: i64) {
    let st: String = sqlx::query_scalar("SELECT skiplock.cancel($1)::text")
        .bind(id)
        .fetch_one(p)
        .await
        .unwrap();
    assert_eq!(st, "cancelled");
}

/// A worker serving queue `slot` with one slot that only a wake-up can make claim again
/// (poll interval an hour), and whose own rescuer leaves the dead worker's jobs to the test.
fn slot_settings() -> skiplock::config::QueueSettings {
    skiplock::config::QueueSettings {
        queues: Some([("slot".to_string(), 1)].into_iter().collect()),
        poll_interval: Duration::from_secs(3600),
        rescue_after: Duration::from_secs(3600),
        ..fast_settings()
    }
}

/// A running job that stops counting against a concurrency limit without an ack of this
/// worker's (cancelled by an operator, or rescued after its worker died) wakes a producer
/// held back by the limit: with a poll interval of an hour, only that wake-up can start the
/// waiting job within the test's deadline.
#[tokio::test]
async fn a_cancel_or_a_rescue_wakes_a_producer_held_back_by_the_limit() {
    let db = TestDb::new().await;
    let p = &db.pool;
    // A job a dead worker holds takes the only slot.
    let (first, waiting) = slot_held_by_a_dead_worker(p, 0).await;
    let w = start_builtin(p, slot_settings());
    // The producer tried, was held back, and now waits for a wake-up.
    producer_waits_on(p, "slot").await;
    // Registered producers claim once more right after registering; give that claim time to
    // be held back too, so what starts the job below is the wake-up (with the wake-up in
    // place the test passes either way; without it, this makes it fail reliably).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(state_of(&db, waiting).await, "available", "the limit holds");

    // 1. An operator cancels the dead worker's job.
    cancel_running(p, first).await;
    wait_completed(
        p,
        &[waiting],
        "the waiting job, started by the cancel's wake-up",
    )
    .await;

    // 2. Another dead worker's job holds the slot; the rescuer's statement returns it.
    let (second, next) = slot_held_by_a_dead_worker(p, 30).await;
    producer_waits_on(p, "slot").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(state_of(&db, next).await, "available", "the limit holds");
    let rescued = skiplock::store::rescue::rescue(p, Duration::from_secs(10), 100)
        .await
        .unwrap();
    assert_eq!(
        rescued.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![second]
    );
    wait_completed(
        p,
        &[second, next],
        "both jobs, started by the rescue's wake-up",
    )
    .await;
    w.stop().await.unwrap();
}

/// A wake-up that reaches a producer while its claim is in flight is not lost: that claim's
/// snapshot may predate what the wake-up announced (here a cancel freeing the only slot of a
/// limited queue, whose producer claims one statement at a time). The worker's claims are
/// held at a gate (a test-only fault point) once the database answered; the wake-up arrives
/// while a claim that saw the slot taken waits there. With a poll interval of an hour, only a
/// claim after that wake-up can start the waiting job.
#[tokio::test]
async fn a_wake_up_that_arrives_during_a_claim_is_not_lost() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let (first, waiting) = slot_held_by_a_dead_worker(p, 0).await;
    let mut b = skiplock::worker::Worker::builder(p.clone())
        .settings(slot_settings())
        .without_maintenance();
    skiplock::worker::builtin::register(b.registry_mut());
    let worker = b.build();
    let id = worker.id().to_string();
    let w = run_worker(worker);
    // Held back and registered; its claim right after registering has answered too.
    producer_waits_on(p, "slot").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let gate = skiplock::worker::faults::gate_claims(&id);
    // A wake-up of no consequence starts a claim, which sees the slot taken and waits at
    // the gate.
    sqlx::query("SELECT pg_notify(skiplock._wake_channel(), 'slot')")
        .execute(p)
        .await
        .unwrap();
    gate.arrived().await;
    gate.forget_wake_ups();
    cancel_running(p, first).await;
    // The cancel's wake-up reached the producer while its claim waits at the gate.
    gate.woken().await;
    assert_eq!(state_of(&db, waiting).await, "available");
    gate.open();
    wait_completed(
        p,
        &[waiting],
        "the waiting job, claimed again after the wake-up",
    )
    .await;
    w.stop().await.unwrap();
}

/// Two operators change different per-key limits of one queue at the same time: the second
/// change waits for the first and keeps what it set (a read of the current limits followed
/// by a separate write would put back the value it read).
#[tokio::test]
async fn concurrent_changes_to_different_key_limits_both_land() {
    let db = TestDb::new().await;
    let p = &db.pool;
    control::set_queue_limit(p, "both", Some(10)).await.unwrap();
    let mut first = p.begin().await.unwrap();
    control::change_key_limit(
        &mut *first,
        "both",
        control::KeyLimitChange {
            concurrency: Some(Some(5)),
            rate: None,
        },
    )
    .await
    .unwrap();
    let p2 = p.clone();
    let second = tokio::spawn(async move {
        control::change_key_limit(
            &p2,
            "both",
            control::KeyLimitChange {
                concurrency: None,
                rate: Some(Some(Rate {
                    count: 2,
                    period: Duration::from_secs(1),
                })),
            },
        )
        .await
    });
    wait_for("the second change to wait for the first", LONG, || async {
        (count(
            p,
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .await
            >= 1)
            .then_some(())
    })
    .await;
    first.commit().await.unwrap();
    second.await.unwrap().unwrap();
    let q = control::list(p)
        .await
        .unwrap()
        .into_iter()
        .find(|q| q.queue == "both")
        .unwrap();
    assert_eq!(q.concurrency, Some(10));
    assert_eq!(q.key_concurrency, Some(5), "the first change is kept");
    assert_eq!(
        control::rate_of(q.key_rate, q.key_period_secs),
        Some(Rate {
            count: 2,
            period: Duration::from_secs(1)
        })
    );
}

/// One limited claim of `limit` noop jobs from `queue` for worker "test".
async fn claim_noop(p: &sqlx::PgPool, queue: &str, limit: usize) -> control::LimitedClaim {
    let kinds = vec!["noop".to_string()];
    control::claim_limited(
        p,
        ClaimParams {
            queue,
            kinds: &kinds,
            limit,
            worker: "test",
        },
        0,
    )
    .await
    .unwrap()
}

async fn db_now(p: &sqlx::PgPool) -> chrono::DateTime<chrono::Utc> {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(p)
        .await
        .unwrap()
}

/// A frozen key-rate queue, with 10,000 keys: a queue with a per-key rate of one start an hour,
/// whose head (priority and `run_at` are the enqueuer's to choose) holds one job of each of
/// 10,000 keys that already used their start. A job without a key is not held back by any
/// key's limit: the next claim takes it. A job of a key never seen is taken too, once the
/// claims' walk over the keys reaches it: each claim examines at most
/// `claim_limited.max_keys` keys (here 100) and, while keys are left, names its own clock as
/// `wait_until` (the worker claims again at once); the claim that ends the walk names the
/// earliest start the blocked keys' rate allows. The work of one claim is bounded by the keys
/// it examines, not by the blocked jobs in front: counted in buffers, which are no timing.
#[tokio::test]
async fn blocked_keys_at_the_head_of_a_queue_hold_back_nothing_else() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let max_keys = 100i64;
    sqlx::query("UPDATE skiplock.settings SET value = $1 WHERE name = 'claim_limited.max_keys'")
        .bind(max_keys)
        .execute(p)
        .await
        .unwrap();
    control::set_key_limit(
        p,
        "tenants",
        KeyLimit {
            concurrency: None,
            rate: Some(Rate {
                count: 1,
                period: Duration::from_secs(3600),
            }),
        },
    )
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO skiplock.jobs (kind, args, queue, limit_key, priority, scheduled_at)
         SELECT 'noop', '{\"b\": 1}', 'tenants', 't' || lpad(g::text, 5, '0'), -100, '1970-01-02'
         FROM generate_series(1, 10000) g",
    )
    .execute(p)
    .await
    .unwrap();
    // Each key's one start of the hour is used (the state its first job's start left).
    sqlx::query(
        "INSERT INTO skiplock.key_rates (queue, limit_key, tat)
         SELECT 'tenants', 't' || lpad(g::text, 5, '0'), now() + interval '1 hour'
         FROM generate_series(1, 10000) g",
    )
    .execute(p)
    .await
    .unwrap();
    let victim = enqueue(
        p,
        &NewJob::new("noop", json!({"victim": true})).queue("tenants"),
    )
    .await
    .unwrap()
    .id;
    // Sorts after every blocked key: the last the walk reaches.
    let fresh = enqueue(
        p,
        &NewJob::new("noop", json!({}))
            .queue("tenants")
            .limit_key("zz-fresh"),
    )
    .await
    .unwrap()
    .id;
    sqlx::query("ANALYZE skiplock.jobs")
        .execute(p)
        .await
        .unwrap();

    let got = claim_noop(p, "tenants", 10).await;
    let ids: Vec<i64> = got.jobs.iter().map(|j| j.id).collect();
    assert_eq!(
        ids,
        vec![victim],
        "the next claim takes the job without a key"
    );
    let now = db_now(p).await;
    assert!(got.wait_until.is_some_and(|w| w <= now), "{got:?}");

    let most = 10_001 / max_keys + 1;
    let mut claims = 1;
    let last = loop {
        let got = claim_noop(p, "tenants", 10).await;
        claims += 1;
        let ids: Vec<i64> = got.jobs.iter().map(|j| j.id).collect();
        if !ids.is_empty() {
            assert_eq!(ids, vec![fresh]);
            break got;
        }
        let now = db_now(p).await;
        assert!(
            got.wait_until.is_some_and(|w| w <= now),
            "claim {claims} left keys unexamined: it must ask for the next claim now: {got:?}"
        );
        assert!(
            claims <= most,
            "the fresh key was not reached in {claims} claims"
        );
    };
    let soon = db_now(p).await + chrono::TimeDelta::minutes(50);
    assert!(
        last.wait_until.is_some_and(|w| w > soon),
        "the walk's end names the blocked keys' next start: {last:?}"
    );
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM skiplock.jobs WHERE state = 'running'"
        )
        .await,
        2,
        "no blocked key started"
    );

    // The buffers one claim touches (a warm one: the second on its connection).
    let mut c = p.acquire().await.unwrap();
    let mut buffers = 0;
    for _ in 0..2 {
        sqlx::query("BEGIN").execute(&mut *c).await.unwrap();
        let plan: serde_json::Value = sqlx::query_scalar(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
             SELECT * FROM skiplock._claim_limited('tenants', ARRAY['noop'], 10, 'test', 0)",
        )
        .fetch_one(&mut *c)
        .await
        .unwrap();
        sqlx::query("ROLLBACK").execute(&mut *c).await.unwrap();
        let top = &plan[0]["Plan"];
        buffers = top["Shared Hit Blocks"].as_i64().unwrap()
            + top["Shared Read Blocks"].as_i64().unwrap();
    }
    assert!(
        buffers <= 40 * max_keys + 1000,
        "one claim touched {buffers} buffers for {max_keys} keys examined"
    );
}

/// A row whose attempt counter is at the integer maximum (only a trusted role can write one)
/// at the head of a limited queue fails alone: discarded with the reason in its errors, while
/// the claim takes the job behind it. Under a concurrency limit and under a key's rate.
#[tokio::test]
async fn an_attempt_counter_at_its_maximum_fails_only_its_own_row_in_a_limited_claim() {
    let db = TestDb::new().await;
    let p = &db.pool;
    control::set_queue_limit(p, "capped", Some(5))
        .await
        .unwrap();
    control::set_key_limit(
        p,
        "keyed",
        KeyLimit {
            concurrency: Some(2),
            rate: Some(Rate {
                count: 5,
                period: Duration::from_secs(60),
            }),
        },
    )
    .await
    .unwrap();
    for q in ["capped", "keyed"] {
        let poison: i64 = sqlx::query_scalar(
            "INSERT INTO skiplock.jobs (kind, queue, limit_key, attempt, max_attempts, priority)
             VALUES ('noop', $1, 'k', 2147483647, 2147483647, -5) RETURNING id",
        )
        .bind(q)
        .fetch_one(p)
        .await
        .unwrap();
        let next = enqueue(p, &NewJob::new("noop", json!({})).queue(q).limit_key("k"))
            .await
            .unwrap()
            .id;
        let got = claim_noop(p, q, 10).await;
        let ids: Vec<i64> = got.jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, vec![next], "{q}");
        let (state, errors): (String, serde_json::Value) =
            sqlx::query_as("SELECT state::text, errors FROM skiplock.jobs WHERE id = $1")
                .bind(poison)
                .fetch_one(p)
                .await
                .unwrap();
        assert_eq!(state, "discarded", "{q}");
        assert!(
            errors
                .to_string()
                .contains("attempt counter is at its maximum"),
            "{q}: {errors}"
        );
    }
    // The discarded row spent none of the key's starts: one start recorded for the one job.
    let tat_steps: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM tat - now())::float8 FROM skiplock.key_rates
         WHERE queue = 'keyed' AND limit_key = 'k'",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert!(
        tat_steps <= 12.5,
        "{tat_steps} s: more than one start of 12 s counted"
    );
}

/// The worker follows a claim that left keys unexamined at once: with a poll interval of an
/// hour, only that makes it reach a key behind 1,000 blocked ones when one claim examines 100.
#[tokio::test]
async fn a_worker_claims_again_at_once_while_keys_are_left_unexamined() {
    let db = TestDb::new().await;
    let p = &db.pool;
    sqlx::query("UPDATE skiplock.settings SET value = 100 WHERE name = 'claim_limited.max_keys'")
        .execute(p)
        .await
        .unwrap();
    control::set_key_limit(
        p,
        "tenants",
        KeyLimit {
            concurrency: None,
            rate: Some(Rate {
                count: 1,
                period: Duration::from_secs(3600),
            }),
        },
    )
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO skiplock.jobs (kind, queue, limit_key, priority)
         SELECT 'noop', 'tenants', 't' || lpad(g::text, 4, '0'), -100 FROM generate_series(1, 1000) g",
    )
    .execute(p)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO skiplock.key_rates (queue, limit_key, tat)
         SELECT 'tenants', 't' || lpad(g::text, 4, '0'), now() + interval '1 hour'
         FROM generate_series(1, 1000) g",
    )
    .execute(p)
    .await
    .unwrap();
    let fresh = enqueue(
        p,
        &NewJob::new("noop", json!({}))
            .queue("tenants")
            .limit_key("zz-fresh"),
    )
    .await
    .unwrap()
    .id;
    let settings = skiplock::config::QueueSettings {
        queues: Some([("tenants".to_string(), 2)].into_iter().collect()),
        poll_interval: Duration::from_secs(3600),
        ..fast_settings()
    };
    let w = start_builtin(p, settings);
    wait_completed(
        p,
        &[fresh],
        "the fresh key's job, behind 1,000 blocked keys",
    )
    .await;
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM skiplock.jobs WHERE state <> 'available'"
        )
        .await,
        1,
        "no blocked key started"
    );
    w.stop().await.unwrap();
}

/// Calls of skiplock._claim_limited in this database so far, as its function statistics
/// report them (a backend reports its counts within about ten seconds of its last call).
async fn limited_claims(p: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_user_functions
         WHERE schemaname = 'skiplock' AND funcname = '_claim_limited'",
    )
    .fetch_one(p)
    .await
    .unwrap()
}

/// A key-rate queue (one start an hour per key) whose 300 keys each started their first job
/// and have a second one due: every due job waits for its key's rate, and one walk over the
/// keys takes two claims (one examines at most `claim_limited.max_keys`, 250). The worker then
/// sleeps until the earliest start a rate allows instead of claiming in a loop: over a window
/// of five seconds it makes a handful of claims at most. Its claims answer 20 ms late (a
/// test-only fault point), as on a loaded database. Counted in calls of
/// skiplock._claim_limited (the database's function statistics), not by timing. Before, a
/// claim that asked to be followed at once left its elapsed `wait_until` behind, which fired a
/// poll at each turn of the producer's loop while the next claim was in flight, each counting
/// as a wake-up that claim may have missed: about 150 claims a second, for as long as the
/// rates held the jobs.
#[tokio::test]
async fn a_worker_does_not_claim_in_a_loop_while_every_due_key_waits_for_its_rate() {
    let db = TestDb::new().await;
    let p = &db.pool;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE {} SET track_functions = 'pl'",
        db.name
    )))
    .execute(&**p)
    .await
    .unwrap();
    control::set_key_limit(
        p,
        "tenants",
        KeyLimit {
            concurrency: None,
            rate: Some(Rate {
                count: 1,
                period: Duration::from_secs(3600),
            }),
        },
    )
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO skiplock.jobs (kind, queue, limit_key, scheduled_at)
         SELECT 'noop', 'tenants', 'k' || lpad(g::text, 4, '0'), '1970-01-02'
         FROM generate_series(1, 300) g, generate_series(1, 2)",
    )
    .execute(&**p)
    .await
    .unwrap();
    // A pool opened after the setting, so the worker's sessions count their calls.
    let counted: skiplock::Pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&db.url)
        .await
        .unwrap()
        .into();
    let settings = skiplock::config::QueueSettings {
        queues: Some([("tenants".to_string(), 10)].into_iter().collect()),
        ..fast_settings()
    };
    let mut b = skiplock::worker::Worker::builder(counted)
        .settings(settings)
        .without_maintenance();
    skiplock::worker::builtin::register(b.registry_mut());
    let worker = b.build();
    skiplock::worker::faults::delay_claims(worker.id(), Duration::from_millis(20));
    let w = run_worker(worker);
    wait_for(
        "every key's first job to run",
        Duration::from_secs(120),
        || async { (count_state(p, "completed").await == 300).then_some(()) },
    )
    .await;
    // Every claim made so far reaches the statistics first.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let before = limited_claims(p).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = limited_claims(p).await - before;
    w.stop().await.unwrap();
    assert!(during <= 10, "{during} claims in five seconds");
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM skiplock.jobs WHERE state = 'available'"
        )
        .await,
        300,
        "no key started a second job"
    );
}

/// While every due job of a key-rate queue waits for its key's rate (an hour here), its
/// worker sleeps until the earliest start, but a job that becomes due meanwhile (a new key's,
/// enqueued with a `run_at` two seconds ahead) still runs when it is due: the claim that sent
/// the worker to sleep named that time too (skiplock._next_due), not only the rates' next start.
#[tokio::test]
async fn a_job_that_becomes_due_in_a_queue_held_by_its_rates_runs_when_due() {
    let db = TestDb::new().await;
    let p = &db.pool;
    control::set_key_limit(
        p,
        "tenants",
        KeyLimit {
            concurrency: None,
            rate: Some(Rate {
                count: 1,
                period: Duration::from_secs(3600),
            }),
        },
    )
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO skiplock.jobs (kind, queue, limit_key, scheduled_at)
         SELECT 'noop', 'tenants', 'k' || g, '1970-01-02'
         FROM generate_series(1, 3) g, generate_series(1, 2)",
    )
    .execute(&**p)
    .await
    .unwrap();
    let later = enqueue(
        p,
        &NewJob::new("noop", json!({}))
            .queue("tenants")
            .limit_key("fresh")
            .run_at(chrono::Utc::now() + chrono::Duration::seconds(2)),
    )
    .await
    .unwrap()
    .id;
    let settings = skiplock::config::QueueSettings {
        queues: Some([("tenants".to_string(), 10)].into_iter().collect()),
        ..fast_settings()
    };
    let w = start_builtin(p, settings);
    // Well within the worker's fallback nap of a minute (src/worker/producer/policy.rs, HELD_NAP).
    wait_for(
        "the job due two seconds later",
        Duration::from_secs(30),
        || async { (state_of(&db, later).await == "completed").then_some(()) },
    )
    .await;
    w.stop().await.unwrap();
    assert_eq!(count_state(p, "completed").await, 4);
}
