//! `skiplock doctor` against a real server (docs/operations.md, "Keeping the database
//! healthy"): each test starts a private cluster of its own (`wal_level=logical`,
//! `max_prepared_transactions`, ports 55500…), since what the doctor reads is cluster-wide
//! (sessions, slots, prepared transactions) and the shared server's other sessions would be
//! findings too. Each test creates the condition, runs the binary and checks the finding, its
//! evidence and the exit status.

mod support;

use std::time::Duration;

use serde_json::Value;
use skiplock_test_support::cluster::PrivateCluster;
use sqlx::Connection;
use sqlx::PgPool;
use sqlx::postgres::{PgConnection, PgPoolOptions};
use support::*;

/// A private cluster on `port` whose database `doctor` is migrated, with
/// idle_in_transaction_session_timeout set (unset, it is a finding of its own).
async fn cluster(port: u16) -> (PrivateCluster, String, PgPool) {
    cluster_with(port, "").await
}

/// [`cluster`] with more server options (`-c name=value …`).
async fn cluster_with(port: u16, more: &'static str) -> (PrivateCluster, String, PgPool) {
    let cluster = tokio::task::spawn_blocking(move || {
        PrivateCluster::start_with(
            port,
            &format!("-c wal_level=logical -c max_prepared_transactions=5 -c max_wal_senders=5 -c max_replication_slots=5 {more}"),
        )
    })
    .await
    .unwrap()
    .expect("start a private Postgres cluster (initdb + pg_ctl)");
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&cluster.url("postgres"))
        .await
        .unwrap();
    for sql in [
        "CREATE DATABASE doctor",
        "ALTER DATABASE doctor SET idle_in_transaction_session_timeout = '10min'",
    ] {
        sqlx::query(sql).execute(&admin).await.unwrap();
    }
    admin.close().await;
    let url = cluster.url("doctor");
    let pool: skiplock::Pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap()
        .into();
    skiplock::store::schema::migrate_parts(&pool, &skiplock_workflows::schemas())
        .await
        .expect("migrate");
    let pg: PgPool = (*pool).clone();
    (cluster, url, pg)
}

/// `skiplock doctor --json ARGS` as `url`'s login: (exit status, report).
fn doctor_json(url: &str, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["doctor", "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = run_cmd(url, &all);
    let report: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("doctor printed no JSON ({e}): {out}\nstderr: {err}"));
    (code, report)
}

/// The findings of `check`.
fn findings<'a>(report: &'a Value, check: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .collect()
}

/// A finding's evidence `name`, as text.
fn evidence(f: &Value, name: &str) -> Option<String> {
    f["evidence"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].as_str().unwrap().to_string())
}

async fn sleep(d: Duration) {
    tokio::time::sleep(d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_database_exits_0_with_nothing_to_say() {
    let (_cluster, url, _pg) = cluster(55500).await;
    let (code, report) = doctor_json(&url, &[]);
    assert_eq!(report["findings"], Value::Array(vec![]), "{report:#}");
    assert_eq!((code, report["exit_code"].as_i64()), (0, Some(0)));
    assert!(
        report["tables"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["table"] == "jobs"),
        "{report:#}"
    );
    let (code, out, _) = run_cmd(&url, &["doctor"]);
    assert_eq!(code, 0);
    assert!(out.contains("all well"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_transaction_a_prepared_transaction_and_a_forgotten_slot_are_named() {
    let (_cluster, url, pg) = cluster(55501).await;
    // A logical replication slot nobody consumes (created first: its creation waits for every
    // transaction with an id to end).
    sqlx::query("SELECT pg_create_logical_replication_slot('forgotten_slot', 'pgoutput')")
        .execute(&pg)
        .await
        .unwrap();
    // A session idle in transaction, holding a snapshot and a transaction id.
    let mut holder = PgConnection::connect(&format!("{url}?application_name=forgotten-report"))
        .await
        .unwrap();
    let holder_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut holder)
        .await
        .unwrap();
    sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut holder)
        .await
        .unwrap();
    sqlx::query("SELECT count(*), txid_current() FROM skiplock.jobs\n-- the report's second line")
        .execute(&mut holder)
        .await
        .unwrap();
    // A prepared transaction nobody commits.
    let mut two_pc = PgConnection::connect(&url).await.unwrap();
    for sql in [
        "BEGIN",
        "SELECT txid_current()",
        "PREPARE TRANSACTION 'coordinator-gone'",
    ] {
        sqlx::query(sql).execute(&mut two_pc).await.unwrap();
    }
    // Dead tuples in skiplock's tables that the holders keep.
    enqueue_noops(&(pg.clone().into()), 50).await;
    sqlx::query("DELETE FROM skiplock.jobs")
        .execute(&pg)
        .await
        .unwrap();

    // With the default ages (5m, 1h) only the inactive slot is a finding: exit 1.
    let (code, report) = doctor_json(&url, &[]);
    let slots = findings(&report, "replication_slot");
    assert_eq!(slots.len(), 1, "{report:#}");
    assert_eq!(slots[0]["severity"], "warning");
    assert_eq!(
        evidence(slots[0], "slot").as_deref(),
        Some("forgotten_slot")
    );
    assert_eq!(evidence(slots[0], "active").as_deref(), Some("false"));
    assert!(evidence(slots[0], "catalog_xmin").is_some(), "{report:#}");
    assert!(
        findings(&report, "idle_in_transaction").is_empty(),
        "{report:#}"
    );
    assert_eq!(code, 1, "{report:#}");

    // Once both transactions are older than --action-age: exit 2, each named.
    sleep(Duration::from_millis(2100)).await;
    let (code, report) = doctor_json(&url, &["--warn-age", "1s", "--action-age", "2s"]);
    assert_eq!(code, 2, "{report:#}");
    let idle = findings(&report, "idle_in_transaction");
    assert_eq!(idle.len(), 1, "{report:#}");
    let idle = idle[0];
    assert_eq!(idle["severity"], "action");
    assert_eq!(idle["area"], "horizon");
    assert_eq!(evidence(idle, "pid"), Some(holder_pid.to_string()));
    assert_eq!(evidence(idle, "user").as_deref(), Some("postgres"));
    assert_eq!(
        evidence(idle, "application").as_deref(),
        Some("forgotten-report")
    );
    assert_eq!(evidence(idle, "client").as_deref(), Some("127.0.0.1"));
    assert_eq!(
        evidence(idle, "state").as_deref(),
        Some("idle in transaction")
    );
    assert_eq!(
        evidence(idle, "query").as_deref(),
        Some("SELECT count(*), txid_current() FROM skiplock.jobs")
    );
    assert!(evidence(idle, "xmin").is_some() && evidence(idle, "xid").is_some());
    assert!(
        idle["fix"]
            .as_str()
            .unwrap()
            .contains(&format!("pg_terminate_backend({holder_pid})")),
        "{idle:#}"
    );
    let prepared = findings(&report, "prepared_transaction");
    assert_eq!(prepared.len(), 1, "{report:#}");
    assert_eq!(prepared[0]["severity"], "action");
    assert_eq!(
        evidence(prepared[0], "gid").as_deref(),
        Some("coordinator-gone")
    );
    assert_eq!(evidence(prepared[0], "database").as_deref(), Some("doctor"));
    assert!(
        prepared[0]["fix"]
            .as_str()
            .unwrap()
            .contains("ROLLBACK PREPARED 'coordinator-gone'")
    );
    // The worst first.
    assert_eq!(report["findings"][0]["severity"], "action");
    assert!(
        report["horizon_seconds"].as_f64().unwrap() >= 2.0,
        "{report:#}"
    );

    // For people: grouped worst first, the pid and its fix on the lines.
    let (code, out, _) = run_cmd(&url, &["doctor", "--warn-age", "1s", "--action-age", "2s"]);
    assert_eq!(code, 2);
    let action = out.find("[ACTION] vacuum horizon").expect(&out);
    let warning = out.find("[warning] vacuum horizon").expect(&out);
    assert!(action < warning, "{out}");
    assert!(
        out.contains(&format!("pid {holder_pid} is idle in transaction")),
        "{out}"
    );
    assert!(out.contains("exit 2: action needed"), "{out}");

    // The operator role with pg_monitor sees the same; without it, the sessions are hidden
    // (and said to be).
    let op = OperatorLogin::new(&pg, &url, true).await;
    let (code, report) = doctor_json(&op.url, &["--warn-age", "1s", "--action-age", "2s"]);
    assert_eq!(code, 2, "{report:#}");
    let idle = findings(&report, "idle_in_transaction");
    assert_eq!(
        evidence(idle[0], "pid"),
        Some(holder_pid.to_string()),
        "{report:#}"
    );
    assert!(findings(&report, "check_failed").is_empty(), "{report:#}");
    let bare = OperatorLogin::new(&pg, &url, false).await;
    let (_, report) = doctor_json(&bare.url, &["--warn-age", "1s", "--action-age", "2s"]);
    assert!(
        findings(&report, "idle_in_transaction").is_empty(),
        "{report:#}"
    );
    assert_eq!(findings(&report, "hidden_sessions").len(), 1, "{report:#}");
    assert!(findings(&report, "check_failed").is_empty(), "{report:#}");

    // Ended, the findings go.
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    sqlx::query("ROLLBACK PREPARED 'coordinator-gone'")
        .execute(&pg)
        .await
        .unwrap();
    sqlx::query("SELECT pg_drop_replication_slot('forgotten_slot')")
        .execute(&pg)
        .await
        .unwrap();
    let (code, report) = doctor_json(&url, &["--warn-age", "1s", "--action-age", "2s"]);
    assert_eq!(
        findings(&report, "idle_in_transaction").len(),
        0,
        "{report:#}"
    );
    assert_eq!(
        findings(&report, "prepared_transaction").len(),
        0,
        "{report:#}"
    );
    assert_eq!(findings(&report, "replication_slot").len(), 0, "{report:#}");
    assert_eq!(code, 0, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_job_an_unhandled_kind_and_a_paused_queue_are_named() {
    let (_cluster, url, pg) = cluster(55502).await;
    let pool: skiplock::Pool = pg.clone().into();
    // A job of a kind no worker handles, in a paused queue, and a job running for an hour
    // whose worker stopped sending heartbeats 10 minutes ago.
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT skiplock.enqueue('nobody.handles', '{}', 'held_back')
         UNION ALL SELECT skiplock.enqueue('report.build', '{}', 'default')",
    )
    .fetch_all(&pg)
    .await
    .unwrap();
    sqlx::query("SELECT skiplock.set_queue_admission('held_back', 1)")
        .execute(&pg)
        .await
        .unwrap();
    sqlx::query("SELECT skiplock.pause_queue('held_back')")
        .execute(&pg)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE skiplock.jobs SET state = 'running', attempt = 1, attempted_by = 'host-7:gone',
                attempted_at = now() - interval '1 hour', heartbeat_at = now() - interval '10 minutes'
         WHERE id = $1",
    )
    .bind(ids[1])
    .execute(&pg)
    .await
    .unwrap();
    drop(pool);

    let (code, report) = doctor_json(&url, &[]);
    assert_eq!(code, 2, "{report:#}");
    let stuck = findings(&report, "stuck_job");
    assert_eq!(stuck.len(), 1, "{report:#}");
    assert_eq!(stuck[0]["severity"], "action");
    assert_eq!(evidence(stuck[0], "job"), Some(ids[1].to_string()));
    assert_eq!(evidence(stuck[0], "worker").as_deref(), Some("host-7:gone"));
    assert_eq!(
        evidence(stuck[0], "rescue window").as_deref(),
        Some("1m 0s")
    );
    let unhandled = findings(&report, "unhandled_kind");
    assert_eq!(unhandled.len(), 1, "{report:#}");
    assert_eq!(
        evidence(unhandled[0], "kind").as_deref(),
        Some("nobody.handles")
    );
    assert_eq!(unhandled[0]["severity"], "warning");
    let paused = findings(&report, "paused_queue");
    assert_eq!(paused.len(), 1, "{report:#}");
    assert_eq!(evidence(paused[0], "queue").as_deref(), Some("held_back"));
    assert_eq!(evidence(paused[0], "waiting").as_deref(), Some("1"));
    let full = findings(&report, "queue_full");
    assert_eq!(full.len(), 1, "{report:#}");
    assert_eq!(evidence(full[0], "max_waiting").as_deref(), Some("1"));

    // The rescue window is the workers' setting: with a longer one the job is not stuck yet.
    let (code, out, _) = {
        let o = cmd(&url)
            .args(["doctor", "--json"])
            .env("SKIPLOCK_RESCUE_AFTER", "15m")
            .output()
            .unwrap();
        (
            o.status.code().unwrap(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            (),
        )
    };
    let report: Value = serde_json::from_str(&out).unwrap();
    assert!(findings(&report, "stuck_job").is_empty(), "{report:#}");
    assert_eq!(code, 1, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_exits_2() {
    let (code, _, err) = run_cmd("postgres://postgres@127.0.0.1:55509/doctor", &["doctor"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot check the database"), "{err}");
}

/// A login holding `skiplock_operator` (and `pg_monitor` if asked): the role `doctor` is meant
/// to run as (docs/roles.md).
struct OperatorLogin {
    url: String,
}

impl OperatorLogin {
    async fn new(pg: &PgPool, url: &str, monitor: bool) -> OperatorLogin {
        let name = format!("doctor_op_{}", if monitor { "monitor" } else { "bare" });
        let grants = if monitor { ", pg_monitor" } else { "" };
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE ROLE {name} LOGIN IN ROLE skiplock_operator{grants}"
        )))
        .execute(pg)
        .await
        .unwrap();
        let mut u = url::Url::parse(url).unwrap();
        u.set_username(&name).unwrap();
        OperatorLogin { url: u.to_string() }
    }
}

// The checks below read only the test's own database's rows (jobs, flows, tables), so they
// run on the shared test server: its other sessions may add findings of their own, and the
// tests look only at the checks they are about.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_the_reaper_will_discard_although_its_worker_is_live_is_named() {
    let db = TestDb::new().await;
    let pg: &PgPool = &db.pool;
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT skiplock.enqueue('report.build', '{}')
         UNION ALL SELECT skiplock.enqueue('report.quick', '{}')",
    )
    .fetch_all(pg)
    .await
    .unwrap();
    // Both running with a fresh heartbeat; one started 30 hours ago, the other a minute ago.
    sqlx::query(
        "UPDATE skiplock.jobs SET state = 'running', attempt = 1, attempted_by = 'host-1:live',
                attempted_at = now() - CASE WHEN id = $1 THEN interval '30 hours' ELSE interval '1 minute' END,
                heartbeat_at = now()",
    )
    .bind(ids[0])
    .execute(pg)
    .await
    .unwrap();

    // The reaper's default age is 48h: past half of it, a warning.
    let (_, report) = doctor_json(&db.url, &[]);
    let long = findings(&report, "long_running_job");
    assert_eq!(long.len(), 1, "{report:#}");
    assert_eq!(long[0]["severity"], "warning");
    assert_eq!(evidence(long[0], "job"), Some(ids[0].to_string()));
    assert_eq!(evidence(long[0], "worker").as_deref(), Some("host-1:live"));
    assert_eq!(
        evidence(long[0], "SKIPLOCK_REAPER_MAX_AGE").as_deref(),
        Some("2d 0h")
    );
    assert!(findings(&report, "stuck_job").is_empty(), "{report:#}");

    // With the workers' SKIPLOCK_REAPER_MAX_AGE of 24h the reaper takes it at its next run.
    let o = cmd(&db.url)
        .args(["doctor", "--json"])
        .env("SKIPLOCK_REAPER_MAX_AGE", "24h")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let long = findings(&report, "long_running_job");
    assert_eq!(long.len(), 1, "{report:#}");
    assert_eq!(long[0]["severity"], "action");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        long[0]["fix"]
            .as_str()
            .unwrap()
            .contains("SKIPLOCK_REAPER_MAX_AGE")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependent_left_waiting_after_its_dependencies_finished_is_named() {
    let db = TestDb::new().await;
    let pg: &PgPool = &db.pool;
    let parents: Vec<i64> = sqlx::query_scalar(
        "SELECT skiplock.enqueue('flow.parent', '{}') FROM generate_series(1, 3)",
    )
    .fetch_all(pg)
    .await
    .unwrap();
    let stranded: i64 =
        sqlx::query_scalar("SELECT skiplock.enqueue('flow.child', '{}', depends_on => $1)")
            .bind(&parents[..2])
            .fetch_one(pg)
            .await
            .unwrap();
    let still: i64 =
        sqlx::query_scalar("SELECT skiplock.enqueue('flow.child', '{}', depends_on => $1)")
            .bind(&parents[1..])
            .fetch_one(pg)
            .await
            .unwrap();
    // The first two parents finished ten minutes ago by a plain UPDATE (as from psql: no ack
    // settled their edges), and no worker runs the sweep. The third still waits to run.
    sqlx::query(
        "UPDATE skiplock.jobs SET state = 'completed', finalized_at = now() - interval '10 minutes'
         WHERE id = ANY($1)",
    )
    .bind(&parents[..2])
    .execute(pg)
    .await
    .unwrap();

    let (_, report) = doctor_json(&db.url, &[]);
    let found = findings(&report, "stranded_dependent");
    assert_eq!(found.len(), 1, "{report:#}");
    assert_eq!(evidence(found[0], "job"), Some(stranded.to_string()));
    assert_eq!(evidence(found[0], "dependencies").as_deref(), Some("2"));
    assert_eq!(found[0]["severity"], "warning");
    assert!(
        found[0]["fix"]
            .as_str()
            .unwrap()
            .contains("skiplock.settle_dependencies()")
    );
    let _ = still;

    // The fix it names releases the job, and the finding goes.
    sqlx::query("SELECT skiplock.settle_dependencies()")
        .execute(pg)
        .await
        .unwrap();
    assert_eq!(state_of(&db, stranded).await, "available");
    let (_, report) = doctor_json(&db.url, &[]);
    assert!(
        findings(&report, "stranded_dependent").is_empty(),
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_autovacuum_does_not_vacuum_is_named_with_its_setting() {
    let db = TestDb::new().await;
    let pg: &PgPool = &db.pool;
    sqlx::query("ALTER TABLE skiplock.jobs SET (autovacuum_enabled = false)")
        .execute(pg)
        .await
        .unwrap();
    enqueue_noops(&db.pool, 300).await;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("DELETE FROM skiplock.jobs")
        .execute(&mut conn)
        .await
        .unwrap();
    // The deleting session reports its counts when it is next idle; made now.
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut conn)
        .await
        .unwrap();
    wait_for(
        "the dead tuples counted",
        Duration::from_secs(60),
        || async {
            let dead: i64 = sqlx::query_scalar(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'skiplock.jobs'::regclass",
        )
        .fetch_one(pg)
        .await
        .unwrap();
            (dead >= 300).then_some(())
        },
    )
    .await;

    let (code, report) = doctor_json(&db.url, &[]);
    let off: Vec<_> = findings(&report, "autovacuum_off")
        .into_iter()
        .filter(|f| evidence(f, "table").as_deref() == Some("skiplock.jobs"))
        .collect();
    assert_eq!(off.len(), 1, "{report:#}");
    assert_eq!(off[0]["severity"], "action");
    assert_eq!(code, 2);
    let dead: i64 = evidence(off[0], "dead tuples").unwrap().parse().unwrap();
    let threshold: i64 = evidence(off[0], "autovacuum threshold")
        .unwrap()
        .parse()
        .unwrap();
    assert!(dead >= 300 && threshold < dead, "{report:#}");
    // The setting in force is named: the server's (`autovacuum = off`, as on some test
    // servers) or else the table's own.
    let setting = evidence(off[0], "setting").unwrap();
    let server_on: bool = sqlx::query_scalar("SELECT current_setting('autovacuum')::bool")
        .fetch_one(pg)
        .await
        .unwrap();
    if server_on {
        assert_eq!(setting, "autovacuum_enabled = false on skiplock.jobs");
        assert!(
            off[0]["fix"]
                .as_str()
                .unwrap()
                .contains("ALTER TABLE skiplock.jobs RESET (autovacuum_enabled)")
        );
    } else {
        assert_eq!(setting, "autovacuum = off");
    }
}

/// Dead tuples of skiplock.jobs as the statistics count them, once at least `n`.
async fn dead_tuples_counted(pg: &PgPool, n: i64) {
    wait_for(
        "the dead tuples counted",
        Duration::from_secs(60),
        || async {
            let dead: i64 = sqlx::query_scalar(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'skiplock.jobs'::regclass",
        )
        .fetch_one(pg)
        .await
        .unwrap();
            (dead >= n).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_autovacuum_is_late_for_is_named_with_its_last_vacuum() {
    // Autovacuum on (initdb's default), as the lagging check needs, but it does not come
    // during the test, as when its workers are busy elsewhere: its launcher starts the first
    // worker after min(autovacuum_naptime, 5 min) and then visits each database once per
    // naptime, 20 days here.
    let (_cluster, url, pg) =
        cluster_with(55503, "-c autovacuum=on -c autovacuum_naptime=20d").await;
    let pool: skiplock::Pool = pg.clone().into();
    enqueue_noops(&pool, 300).await;
    // A vacuum now (the table's last one), then 300 dead tuples, past autovacuum's threshold
    // (50 + 0.2 × the rows that vacuum counted, at most 300: at most 110).
    sqlx::query("VACUUM skiplock.jobs")
        .execute(&pg)
        .await
        .unwrap();
    let mut conn = PgConnection::connect(&url).await.unwrap();
    sqlx::query("DELETE FROM skiplock.jobs")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut conn)
        .await
        .unwrap();
    dead_tuples_counted(&pg, 300).await;

    // A vacuum younger than --warn-age is normal: autovacuum has not been due long.
    let (_, report) = doctor_json(&url, &["--warn-age", "1h", "--action-age", "2h"]);
    assert_eq!(
        findings(&report, "autovacuum_lagging"),
        Vec::<&Value>::new(),
        "{report:#}"
    );

    // Past --warn-age (the vacuum is at least 2 s old), a warning naming the table, its dead
    // tuples, the threshold and the last vacuum.
    sleep(Duration::from_secs(2)).await;
    let (code, report) = doctor_json(&url, &["--warn-age", "1s", "--action-age", "1h"]);
    let lagging: Vec<_> = findings(&report, "autovacuum_lagging")
        .into_iter()
        .filter(|f| evidence(f, "table").as_deref() == Some("skiplock.jobs"))
        .collect();
    assert_eq!(lagging.len(), 1, "{report:#}");
    assert_eq!(lagging[0]["severity"], "warning");
    assert_eq!(code, 1, "{report:#}");
    let dead: i64 = evidence(lagging[0], "dead tuples")
        .unwrap()
        .parse()
        .unwrap();
    let threshold: i64 = evidence(lagging[0], "autovacuum threshold")
        .unwrap()
        .parse()
        .unwrap();
    assert!(dead >= 300 && (50..=110).contains(&threshold), "{report:#}");
    assert!(
        evidence(lagging[0], "last vacuum")
            .unwrap()
            .ends_with(" ago"),
        "{report:#}"
    );
    assert_eq!(
        findings(&report, "autovacuum_off"),
        Vec::<&Value>::new(),
        "{report:#}"
    );
    conn.close().await.unwrap();
}

/// `skiplock doctor --json` as `url`'s login with `envs` set: (exit status, report).
fn doctor_json_env(url: &str, envs: &[(&str, &str)]) -> (i32, Value) {
    let mut c = command(bin(), url);
    c.args(["doctor", "--json"])
        .stdin(std::process::Stdio::null());
    for (k, v) in envs {
        c.env(k, v);
    }
    let out = c.output().expect("run skiplock doctor");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_without_the_workers_grants_is_named_with_the_grant_to_run() {
    let db = TestDb::new().await;
    let name = format!("dr_{:012x}", rand::random::<u64>() >> 16);
    admin_exec_blocking(format!("CREATE ROLE {name} LOGIN"));
    let mut u = url::Url::parse(&db.url).unwrap();
    u.set_username(&name).unwrap();
    let (code, report) = doctor_json(u.as_str(), &[]);
    let missing = findings(&report, "missing_grant");
    assert_eq!(missing.len(), 1, "{report:#}");
    assert_eq!(missing[0]["severity"], "action");
    assert_eq!(code, 2);
    assert_eq!(
        evidence(missing[0], "login").as_deref(),
        Some(name.as_str())
    );
    let what = evidence(missing[0], "missing").unwrap();
    assert!(what.contains("USAGE on schema skiplock"), "{what}");
    assert!(
        what.contains("EXECUTE on function skiplock._claim("),
        "{what}"
    );
    assert!(
        missing[0]["fix"]
            .as_str()
            .unwrap()
            .contains(&format!("GRANT skiplock_worker TO {name};")),
        "{report:#}"
    );
    // Granted, nothing to say; nor for an operator's login, which is never a worker's.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "GRANT skiplock_worker TO {name}"
    )))
    .execute(&*db.pool)
    .await
    .unwrap();
    let (_, report) = doctor_json(u.as_str(), &[]);
    assert_eq!(
        findings(&report, "missing_grant"),
        Vec::<&Value>::new(),
        "{report:#}"
    );
    let op = Operator::new(&db).await;
    let (_, report) = doctor_json(&op.url, &[]);
    assert_eq!(
        findings(&report, "missing_grant"),
        Vec::<&Value>::new(),
        "{report:#}"
    );
    admin_exec_blocking(format!("DROP ROLE IF EXISTS {name}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_url_through_the_transaction_pooler_is_named() {
    let db = TestDb::new().await;
    // SKIPLOCK_POOL_MODE=transaction says DATABASE_URL is a pooler in transaction mode; a
    // SKIPLOCK_LISTEN_URL with its address and database is that pooler.
    let (_, report) = doctor_json_env(
        &db.url,
        &[
            ("SKIPLOCK_POOL_MODE", "transaction"),
            ("SKIPLOCK_LISTEN_URL", &db.url),
        ],
    );
    let f = findings(&report, "listen_url");
    assert_eq!(f.len(), 1, "{report:#}");
    assert_eq!(f[0]["severity"], "warning");
    assert_eq!(
        evidence(f[0], "setting").as_deref(),
        Some("SKIPLOCK_LISTEN_URL")
    );
    assert!(
        f[0]["summary"]
            .as_str()
            .unwrap()
            .contains("same address and database as DATABASE_URL"),
        "{report:#}"
    );
    // A LISTEN URL that reaches the server itself (another database name would be another
    // pool; here: the postgres database, answered by one process per connection) is fine,
    // and so is none, and so is session mode (the worker LISTENs on its own pool).
    let mut direct = url::Url::parse(&db.url).unwrap();
    direct.set_path("/postgres");
    for envs in [
        vec![
            ("SKIPLOCK_POOL_MODE", "transaction"),
            ("SKIPLOCK_LISTEN_URL", direct.as_str()),
        ],
        vec![("SKIPLOCK_POOL_MODE", "transaction")],
        vec![("SKIPLOCK_LISTEN_URL", db.url.as_str())],
    ] {
        let (_, report) = doctor_json_env(&db.url, &envs);
        assert_eq!(
            findings(&report, "listen_url"),
            Vec::<&Value>::new(),
            "{envs:?}: {report:#}"
        );
    }
}
