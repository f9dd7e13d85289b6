//! Maintenance through the `skiplock` command and its worker processes (the rest is the
//! core's tests/maintenance.rs): `skiplock reap`, `skiplock periodic`, schedules files.

#![allow(unused_imports)]

mod support;
use serde_json::json;
use skiplock::maintenance;
use skiplock::maintenance::periodic::{PeriodicJob, PeriodicJobs, Scheduler};
use skiplock::maintenance::reaper::{Reaper, ReaperSettings};
use skiplock::maintenance::retention::{Retention, RetentionSettings, run_retention};
use skiplock::queue::NewJob;
use skiplock::worker::{Handler, HandlerResult, JobContext, JobError, Outcome, WorkerBuilder};
use sqlx::PgPool;
use std::io::Read;
use std::process::Child;
use std::time::Duration;
use support::*;

/// The shortest period a periodic job may have.
const EVERY: Duration = Duration::from_secs(1);

fn reaper(pool: &skiplock::Pool, max_age: Duration) -> Reaper {
    Reaper::new(
        pool.clone(),
        ReaperSettings {
            max_age,
            interval: EVERY,
        },
    )
}

/// The results of the completed `reap` jobs, oldest first.
async fn reap_results(pool: &PgPool) -> Vec<serde_json::Value> {
    sqlx::query_scalar(
        "SELECT result FROM skiplock.jobs WHERE kind = 'reap' AND state = 'completed' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Every reap result says the guard held exactly while the process was younger than the
/// maximum age (whole seconds in both), and a guarded run discarded nothing.
fn assert_guard_consistent(results: &[serde_json::Value]) {
    for r in results {
        let (up, max) = (
            r["uptime_s"].as_u64().unwrap(),
            r["max_age_s"].as_u64().unwrap(),
        );
        assert_eq!(r["guarded"], json!(up < max), "{r}");
        if up < max {
            assert_eq!(r["discarded"], 0, "{r}");
        }
    }
}

async fn insert(pool: &PgPool, sql_values: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO skiplock.jobs (kind, args, state, scheduled_at, created_at, attempted_at, finalized_at) \
         VALUES {sql_values} RETURNING id"
    )))
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Whether job `id` is still waiting (its row there, `available`).
async fn waiting(pool: &PgPool, id: i64) -> bool {
    state_or_gone(pool, id).await.as_deref() == Some("available")
}

/// Whether job `id` was discarded (its row kept) by the reaper, with the reason in its errors.
async fn reaped(pool: &PgPool, id: i64) -> bool {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM skiplock.jobs WHERE id = $1 AND state = 'discarded' \
         AND finalized_at IS NOT NULL AND errors -> -1 ->> 'error' LIKE 'reaped: %')",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Reads a child's stderr on a thread so the pipe never fills up.
fn drain_stderr(child: &mut Child) -> std::thread::JoinHandle<String> {
    let mut err = child.stderr.take().expect("stderr piped");
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    })
}

async fn wait_exit(child: &mut Child) {
    wait_exit_within(child, Duration::from_secs(60)).await;
}

/// A worker row with a fresh heartbeat that handles `kinds` in every queue: for the reaper,
/// a job such a worker could claim is not held back for want of a worker. Calling it again
/// refreshes the heartbeat (a real worker sends one every few seconds).
async fn live_worker(pool: &PgPool, id: &str, kinds: &[&str]) {
    let kinds: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
    sqlx::query(
        "INSERT INTO skiplock.workers (id, host, pid, kinds) VALUES ($1, 'elsewhere', 1, $2) \
         ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), kinds = EXCLUDED.kinds",
    )
    .bind(id)
    .bind(kinds)
    .execute(pool)
    .await
    .unwrap();
}

/// A job's state, or `None` when its row is gone.
async fn state_or_gone(pool: &PgPool, id: i64) -> Option<String> {
    sqlx::query_scalar("SELECT state::text FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
        .unwrap()
}

const REFUSE_KEY: &str = "CREATE FUNCTION public.refuse_periodic_key() RETURNS trigger LANGUAGE plpgsql AS $$ \
     BEGIN RAISE EXCEPTION 'unique_key nightly:example is refused by a trigger'; END $$; \
     CREATE TRIGGER refuse_periodic_key BEFORE INSERT ON skiplock.jobs FOR EACH ROW \
     WHEN (NEW.unique_key = 'nightly:example') EXECUTE FUNCTION public.refuse_periodic_key()";

#[tokio::test]
async fn periodic_job_is_enqueued_once_per_period_by_two_worker_processes() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("periodic.toml");
    std::fs::write(
        &file,
        "[[job]]\nname = \"tick\"\nevery = \"1s\"\nkind = \"noop\"\nargs = { from = \"file\" }\n\
         [[job]]\nname = \"zoned\"\ncron = \"* * * * * *\"\ntz = \"Asia/Kathmandu\"\n\
         kind = \"noop\"\nargs = { from = \"zone\" }\n",
    )
    .unwrap();
    let envs = [
        ("SKIPLOCK_PERIODIC_FILE", file.to_str().unwrap()),
        (
            "RUST_LOG",
            "info,sqlx::postgres::notice=warn,skiplock::worker::maintenance::periodic=debug",
        ),
    ];
    let mut a = spawn_worker_process(&db.url, &[], &envs);
    let mut b = spawn_worker_process(&db.url, &[], &envs);
    let (ea, eb) = (drain_stderr(&mut a), drain_stderr(&mut b));

    // Both processes up (a slow start of one must not leave the other alone for the periods
    // counted below), then four periods.
    wait_for(
        "both worker processes up",
        Duration::from_secs(60),
        || async {
            (count(&db.pool, "SELECT count(*) FROM skiplock.workers").await == 2).then_some(())
        },
    )
    .await;
    let before = count(
        &db.pool,
        "SELECT count(*) FROM skiplock.periodic_runs WHERE name = 'tick'",
    )
    .await;
    wait_for("four periods enqueued", Duration::from_secs(60), || async {
        let n = count(
            &db.pool,
            "SELECT count(*) FROM skiplock.periodic_runs WHERE name = 'tick'",
        )
        .await;
        (n >= before + 4).then_some(())
    })
    .await;
    sigterm(&a);
    sigterm(&b);
    wait_exit(&mut a).await;
    wait_exit(&mut b).await;
    let (ea, eb) = (ea.join().unwrap(), eb.join().unwrap());

    let runs: i64 =
        sqlx::query_scalar("SELECT count(*) FROM skiplock.periodic_runs WHERE name = 'tick'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let jobs: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM skiplock.jobs WHERE kind = 'noop' AND args = '{\"from\": \"file\"}'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let linked: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT j.id) FROM skiplock.periodic_runs r JOIN skiplock.jobs j ON j.id = r.job_id \
         WHERE r.name = 'tick' AND j.kind = 'noop'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(jobs, runs, "one job per period");
    assert_eq!(linked, runs, "every period points at its own job");
    // Periods are whole seconds, one apart: no period enqueued twice under two starts.
    let (distinct_seconds, span): (i64, f64) = sqlx::query_as(
        "SELECT count(DISTINCT date_trunc('second', period_start)), \
                extract(epoch FROM max(period_start) - min(period_start))::float8 \
         FROM skiplock.periodic_runs WHERE name = 'tick'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(distinct_seconds, runs);
    assert!(span >= (runs - 1) as f64);
    // A cron in a time zone (UTC+05:45): its periods are instants too, one job each.
    let (zoned_runs, zoned_jobs): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM skiplock.periodic_runs WHERE name = 'zoned'), \
                (SELECT count(*) FROM skiplock.jobs WHERE args = '{\"from\": \"zone\"}')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(zoned_runs >= 1);
    assert_eq!(
        zoned_jobs, zoned_runs,
        "one job per period of the zoned cron"
    );

    // Both processes tried each period; exactly one enqueue per period was logged (the
    // built-in `reap` and `retain` jobs log the same lines: count tick's only).
    let count = |s: &str, what: &str| {
        s.lines()
            .filter(|l| l.contains(what) && l.contains("periodic=tick"))
            .count() as i64
    };
    let enq = count(&ea, "enqueued periodic job") + count(&eb, "enqueued periodic job");
    let taken = count(&ea, "already enqueued") + count(&eb, "already enqueued");
    assert_eq!(enq, runs, "stderr a:\n{ea}\nstderr b:\n{eb}");
    assert!(taken >= 1, "the two processes never competed for a period");
    for (name, s) in [("a", &ea), ("b", &eb)] {
        assert!(
            count(s, "enqueued periodic job") + count(s, "already enqueued") >= 1,
            "process {name} never scheduled:\n{s}"
        );
    }

    let (code, out, err) = run_cmd(&db.url, &["periodic"]);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("tick"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("every 1s") && line.contains("noop") && line.contains("job "),
        "{line}"
    );
    assert!(out.contains("cron * * * * * * in Asia/Kathmandu"), "{out}");
}

#[tokio::test]
async fn reap_cli_dry_run_lists_and_reap_waits_for_a_worker_up_long_enough() {
    let db = TestDb::new().await;
    let stale = insert(
        &db.pool,
        "('abandoned', '{\"marker\": \"cli\"}', 'available', now() - interval '3 days', now() - interval '3 days', NULL, NULL)",
    )
    .await;
    let fresh = insert(
        &db.pool,
        "('abandoned', '{}', 'available', now() - interval '1 day', now() - interval '1 day', NULL, NULL)",
    )
    .await;
    // Held: no live worker handles its kind. Never listed, never taken.
    let unhandled = insert(
        &db.pool,
        "('nobody-handles', '{}', 'available', now() - interval '3 days', now() - interval '3 days', NULL, NULL)",
    )
    .await;

    // A live worker that handles the kind, just started: the uptime guard holds.
    sqlx::query(
        "INSERT INTO skiplock.workers (id, host, pid, started_at, heartbeat_at, kinds) \
         VALUES ('new-timer', 'h', 1, now(), now(), '{abandoned}')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let (code, out, err) = run_cmd(&db.url, &["reap", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines().any(|l| l.starts_with(&format!("{stale} "))),
        "{out}"
    );
    for id in [fresh, unhandled] {
        assert!(
            !out.lines().any(|l| l.starts_with(&format!("{id} "))),
            "{out}"
        );
    }
    assert!(
        out.contains("1 job(s) past the maximum age of 2days")
            && out.contains("the uptime guard holds"),
        "{out}"
    );
    assert!(waiting(&db.pool, stale).await);

    // No worker has been up for 48 h: nothing is discarded.
    let (code, out, err) = run_cmd(&db.url, &["reap"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("discarded nothing"), "{out}");
    assert!(waiting(&db.pool, stale).await);

    // A live worker up for three days lifts the guard.
    sqlx::query(
        "UPDATE skiplock.workers SET started_at = now() - interval '3 days', heartbeat_at = now() \
         WHERE id = 'new-timer'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let (code, out, err) = run_cmd(&db.url, &["reap"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("discarded 1 job"), "{out}");
    assert!(
        err.contains("reaper discarded a job") && !err.contains("marker"),
        "the log names the job, not its args: {err}"
    );
    assert!(reaped(&db.pool, stale).await);
    assert!(waiting(&db.pool, fresh).await);
    assert!(waiting(&db.pool, unhandled).await);

    let (code, _, err) = run_cmd(&db.url, &["reap", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    let bad = support::cmd(&db.url)
        .args(["reap"])
        .env("SKIPLOCK_REAPER_MAX_AGE", "soon")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("SKIPLOCK_REAPER_MAX_AGE"));
}

#[tokio::test]
async fn worker_process_reaps_with_a_warn_log_free_of_the_password() {
    let db = TestDb::new().await;
    live_worker(&db.pool, "elsewhere", &["abandoned"]).await;
    let stale = insert(
        &db.pool,
        "('abandoned', '{\"marker\": \"stale-args\"}', 'available', now() - interval '2 days', now() - interval '2 days', NULL, NULL)",
    )
    .await;
    // A key period longer than the maximum age: warned about (once), its jobs left alone.
    sqlx::query("SELECT skiplock.set_key_limit('slow', NULL, 1, '30 days')")
        .execute(&db.pool)
        .await
        .unwrap();
    // Trust auth ignores the password, so the URL still connects.
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_password(Some("s3cr3tpw")).unwrap();
    let mut child = spawn_worker_process(
        url.as_str(),
        &["--log-format", "json"],
        &[
            ("SKIPLOCK_REAPER_MAX_AGE", "3s"),
            ("SKIPLOCK_REAPER_INTERVAL", "1s"),
        ],
    );
    let err = drain_stderr(&mut child);
    wait_for(
        "the worker process to reap",
        Duration::from_secs(60),
        || async {
            live_worker(&db.pool, "elsewhere", &["abandoned"]).await;
            reaped(&db.pool, stale).await.then_some(())
        },
    )
    .await;
    sigterm(&child);
    wait_exit(&mut child).await;
    let err = err.join().unwrap();
    assert!(
        !err.contains("s3cr3tpw"),
        "the password leaked into the logs:\n{err}"
    );
    let warn: serde_json::Value = err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| {
            v["fields"]["message"] == "reaper discarded a job left unfinished past the maximum age"
        })
        .unwrap_or_else(|| panic!("no reaper line:\n{err}"));
    assert_eq!(warn["level"], "WARN", "{warn}");
    let f = &warn["fields"];
    assert_eq!(f["job.id"], json!(stale), "{warn}");
    assert_eq!(f["job.kind"], "abandoned", "{warn}");
    assert_eq!(f["job.queue"], "default", "{warn}");
    assert_eq!(f["job.state"], "available", "{warn}");
    // The args stay in the kept row, not in the log.
    assert!(!err.contains("stale-args"), "{warn}");
    let periods: Vec<serde_json::Value> = err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("a queue's key rate period is longer"))
        })
        .collect();
    assert_eq!(periods.len(), 1, "warned once: {periods:?}");
    assert_eq!(periods[0]["level"], "WARN");
    assert_eq!(
        (
            &periods[0]["fields"]["queue"],
            &periods[0]["fields"]["key_period"]
        ),
        (&json!("slow"), &json!("30days"))
    );
    for ts in ["job.created_at", "job.scheduled_at"] {
        let t = f[ts]
            .as_str()
            .unwrap_or_else(|| panic!("{ts} missing in {warn}"));
        assert!(chrono::DateTime::parse_from_rfc3339(t).is_ok(), "{ts}={t}");
    }
    // The run that discarded it is a `reap` job row with its result.
    let results = reap_results(&db.pool).await;
    let deleting: Vec<_> = results.iter().filter(|r| r["discarded"] == 1).collect();
    assert_eq!(deleting.len(), 1, "{results:?}");
    assert_eq!(deleting[0]["guarded"], false);
    assert_guard_consistent(&results);
}

#[tokio::test]
async fn reap_and_retain_run_once_per_period_across_two_worker_processes() {
    let db = TestDb::new().await;
    let stale = insert(
        &db.pool,
        "('nobody-handles', '{}', 'available', now() - interval '3 days', now() - interval '3 days', NULL, NULL)",
    )
    .await;
    // Young for the whole test (an hour's maximum age): every run is guarded.
    let envs = [
        ("SKIPLOCK_REAPER_MAX_AGE", "1h"),
        ("SKIPLOCK_REAPER_INTERVAL", "1s"),
    ];
    // One serves every queue, the other only `default`: it serves the maintenance queue too.
    let mut a = spawn_worker_process(&db.url, &[], &envs);
    let mut b = spawn_worker_process(&db.url, &["--queues", "default=2"], &envs);
    let (ea, eb) = (drain_stderr(&mut a), drain_stderr(&mut b));
    wait_for(
        "both worker processes up",
        Duration::from_secs(60),
        || async {
            (count(&db.pool, "SELECT count(*) FROM skiplock.workers").await == 2).then_some(())
        },
    )
    .await;
    let runs = "SELECT count(*) FROM skiplock.periodic_runs WHERE name = 'reap'";
    let done = "SELECT count(*) FILTER (WHERE kind = 'reap'), count(*) FILTER (WHERE kind = 'retain') \
                FROM skiplock.jobs WHERE state = 'completed'";
    let before = count(&db.pool, runs).await;
    wait_for(
        "four reap periods with both processes up, three reap runs and a retain run done",
        Duration::from_secs(90),
        || async {
            let (reaped, retained): (i64, i64) =
                sqlx::query_as(done).fetch_one(&db.pool).await.unwrap();
            (count(&db.pool, runs).await >= before + 4 && reaped >= 3 && retained >= 1)
                .then_some(())
        },
    )
    .await;
    let served: Vec<String> = sqlx::query_scalar(
        "SELECT array_to_string(queues, ',') FROM skiplock.workers ORDER BY array_length(queues, 1) NULLS FIRST",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    sigterm(&a);
    sigterm(&b);
    wait_exit(&mut a).await;
    wait_exit(&mut b).await;
    let (ea, eb) = (ea.join().unwrap(), eb.join().unwrap());
    assert_eq!(
        served,
        vec!["".to_string(), format!("default,{}", maintenance::QUEUE)],
        "stderr a:\n{ea}\nstderr b:\n{eb}"
    );

    for kind in ["reap", "retain"] {
        // One job per period, each period once, every period pointing at its own job.
        let (periods, distinct, jobs, linked): (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM skiplock.periodic_runs WHERE name = $1),                     (SELECT count(DISTINCT period_start) FROM skiplock.periodic_runs WHERE name = $1),                     (SELECT count(*) FROM skiplock.jobs WHERE kind = $1),                     (SELECT count(DISTINCT j.id) FROM skiplock.periodic_runs r                      JOIN skiplock.jobs j ON j.id = r.job_id AND j.kind = $1 WHERE r.name = $1)",
        )
        .bind(kind)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(periods >= 3, "{kind}: {periods} periods");
        assert_eq!(
            (distinct, jobs, linked),
            (periods, periods, periods),
            "{kind}"
        );
        let queues: Vec<String> =
            sqlx::query_scalar("SELECT DISTINCT queue FROM skiplock.jobs WHERE kind = $1")
                .bind(kind)
                .fetch_all(&db.pool)
                .await
                .unwrap();
        assert_eq!(queues, vec![maintenance::QUEUE.to_string()], "{kind}");
    }
    // Every reaper run was guarded (both processes far younger than an hour), on record.
    let results = reap_results(&db.pool).await;
    assert!(results.len() >= 3, "{results:?}");
    for r in &results {
        assert_eq!(
            (&r["guarded"], &r["discarded"], &r["max_age_s"]),
            (&json!(true), &json!(0), &json!(3600)),
            "{r}"
        );
        assert!(r["uptime_s"].as_u64().unwrap() < 3600, "{r}");
    }
    assert!(waiting(&db.pool, stale).await, "discarded while young");
    let retained: Vec<serde_json::Value> = sqlx::query_scalar(
        "SELECT result FROM skiplock.jobs WHERE kind = 'retain' AND state = 'completed'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(!retained.is_empty());
    for r in &retained {
        assert_eq!(r["deleted"], 0, "{r}");
    }

    // `skiplock periodic` lists both, as declared by the workers.
    let (code, out, err) = run_cmd(&db.url, &["periodic"]);
    assert_eq!(code, 0, "{err}");
    for kind in ["reap", "retain"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{kind} ")))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(
            line.contains("every 1s") && line.contains(maintenance::QUEUE) && line.contains("job "),
            "{line}"
        );
    }
}

#[tokio::test]
async fn periodic_lists_the_builtin_jobs_before_any_worker_declared_them() {
    let db = TestDb::new().await;
    let (code, out, err) = run_cmd(&db.url, &["periodic"]);
    assert_eq!(code, 0, "{err}");
    for kind in ["reap", "retain"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{kind} ")))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(
            line.contains("every 30s") && line.contains("(built in; no worker yet)"),
            "{line}"
        );
    }
    let bad = support::cmd(&db.url)
        .args(["periodic"])
        .env("SKIPLOCK_REAPER_INTERVAL", "500ms")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("SKIPLOCK_REAPER_INTERVAL") && err.contains("at least 1s"),
        "{err}"
    );
}

/// A periodic job the database refuses to enqueue stops no other periodic job: the scheduler
/// records the failure and enqueues every other periodic job, `reap` and `retain` included,
/// then enqueues it on a later tick once the cause is gone. Unique keys are per kind and queue
/// (tests/hardening_sql.rs), so another tenant can no longer squat a periodic job's key; the
/// refusal here comes from a trusted role's trigger (`refuse_periodic_key`), standing in for
/// any error an enqueue can meet.
#[tokio::test]
async fn a_squatted_unique_key_stops_no_other_periodic_job() {
    let db = TestDb::new().await;
    let p = &db.pool;
    sqlx::raw_sql(REFUSE_KEY).execute(p).await.unwrap();
    let jobs = PeriodicJobs::from_toml(
        "[[job]]\nname = \"nightly-pack\"\nevery = \"1s\"\nkind = \"noop\"\nqueue = \"per\"\nunique_key = \"nightly:example\"\n\n\
         [[job]]\nname = \"other\"\nevery = \"1s\"\nkind = \"noop\"\nqueue = \"per\"\n",
    )
    .unwrap();
    let retention = Retention {
        settings: RetentionSettings {
            interval: EVERY,
            ..RetentionSettings::default()
        },
    };
    let parts =
        maintenance::parts_from(reaper(p, Duration::from_secs(3600)), retention, jobs).unwrap();
    let s = parts.scheduler;
    let names = || async {
        let n: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT name FROM skiplock.periodic_runs WHERE job_id IS NOT NULL ORDER BY 1",
        )
        .fetch_all(p)
        .await
        .unwrap();
        n
    };
    wait_for(
        "reap, retain and the other periodic job enqueued",
        Duration::from_secs(60),
        || async {
            let _ = s.tick_once(p).await;
            (names().await == ["other", "reap", "retain"]).then_some(())
        },
    )
    .await;
    // The failure is on record, for `skiplock periodic` to show.
    let error: Option<String> = sqlx::query_scalar(
        "SELECT last_error FROM skiplock.periodic_jobs WHERE name = 'nightly-pack'",
    )
    .fetch_one(p)
    .await
    .unwrap();
    let error = error.expect("the failed enqueue is recorded");
    assert!(error.contains("nightly:example"), "{error}");
    let (code, out, err) = run_cmd(&db.url, &["periodic"]);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("nightly-pack"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("failed") && line.contains("nightly:example"),
        "{line}"
    );

    // The cause gone, a later tick enqueues it and clears the record.
    sqlx::query("DROP TRIGGER refuse_periodic_key ON skiplock.jobs")
        .execute(p)
        .await
        .unwrap();
    wait_for(
        "the freed periodic job enqueued",
        Duration::from_secs(60),
        || async {
            let _ = s.tick_once(p).await;
            names()
                .await
                .contains(&"nightly-pack".to_string())
                .then_some(())
        },
    )
    .await;
    let error: Option<String> = sqlx::query_scalar(
        "SELECT last_error FROM skiplock.periodic_jobs WHERE name = 'nightly-pack'",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(error, None);
}

/// The same refusal against a worker process: reap, retain and the file's other job run period
/// after period, and the refused job is logged at WARN once, not on every tick of every
/// period.
#[tokio::test]
async fn a_worker_process_warns_once_about_a_squatted_periodic_job_and_runs_the_rest() {
    let db = TestDb::new().await;
    sqlx::raw_sql(REFUSE_KEY).execute(&db.pool).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("periodic3.toml");
    std::fs::write(
        &file,
        "[[job]]\nname = \"nightly-pack\"\nevery = \"1s\"\nkind = \"noop\"\nqueue = \"per\"\nunique_key = \"nightly:example\"\n\n\
         [[job]]\nname = \"other\"\nevery = \"1s\"\nkind = \"noop\"\nqueue = \"per\"\n",
    )
    .unwrap();
    let mut child = spawn_worker_process(
        &db.url,
        &["--queues", "per=2", "--log-format", "json"],
        &[
            ("SKIPLOCK_PERIODIC_FILE", file.to_str().unwrap()),
            ("SKIPLOCK_REAPER_INTERVAL", "1s"),
        ],
    );
    let err = drain_stderr(&mut child);
    wait_for(
        "three periods each of reap, retain and the other job",
        Duration::from_secs(90),
        || async {
            let n = count(
                &db.pool,
                "SELECT coalesce(min(c), 0) FROM (SELECT name, count(*) AS c FROM skiplock.periodic_runs \
                 WHERE name IN ('reap', 'retain', 'other') GROUP BY name HAVING count(*) > 0) r \
                 WHERE (SELECT count(DISTINCT name) FROM skiplock.periodic_runs WHERE name IN ('reap', 'retain', 'other')) = 3",
            )
            .await;
            (n >= 3).then_some(())
        },
    )
    .await;
    sigterm(&child);
    wait_exit(&mut child).await;
    let err = err.join().unwrap();
    let warns: Vec<serde_json::Value> = err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["level"] == "WARN" && v["fields"]["periodic"] == "nightly-pack")
        .collect();
    assert_eq!(warns.len(), 1, "{warns:?}");
    let msg = warns[0]["fields"]["error"].as_str().unwrap();
    assert!(msg.contains("nightly:example"), "{msg}");
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.periodic_runs WHERE name = 'nightly-pack'"
        )
        .await,
        0
    );
}
