//! Least privilege (sql/api/90_roles.sql): a login user holding only `skiplock_enqueuer` can
//! enqueue but not read, change or delete jobs; a user holding only `skiplock_worker` can run
//! a worker; and the password in DATABASE_URL never shows up in a worker's logs.

mod support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use skiplock_workflows::packets;
use sqlx::postgres::{PgListener, PgPoolOptions};
use support::*;

/// A LOGIN role on the test cluster (roles are cluster-wide: unique name, dropped at the end).
struct LoginRole {
    name: String,
    password: String,
}

impl LoginRole {
    async fn new(db: &TestDb, grant: &str) -> LoginRole {
        let name = format!("skiplock_t_{:012x}", rand::random::<u64>() >> 16);
        let password = format!("pw{:016x}secret", rand::random::<u64>());
        // No grant: a login with none of skiplock's roles.
        let member = if grant.is_empty() {
            String::new()
        } else {
            format!(" IN ROLE {grant}")
        };
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE ROLE {name} LOGIN PASSWORD '{password}'{member}"
        )))
        .execute(&db.pool)
        .await
        .expect("create login role");
        LoginRole { name, password }
    }

    /// A one-connection pool on `db`, logged in as this role.
    async fn pool(&self, db: &TestDb) -> sqlx::PgPool {
        PgPoolOptions::new()
            .max_connections(1)
            .connect(&self.url(db))
            .await
            .expect("the role logs in")
    }

    /// `db`'s URL, logging in as this role with its password.
    fn url(&self, db: &TestDb) -> String {
        let mut u = url::Url::parse(&db.url).unwrap();
        u.set_username(&self.name).unwrap();
        u.set_password(Some(&self.password)).unwrap();
        u.to_string()
    }
}

impl Drop for LoginRole {
    fn drop(&mut self) {
        admin_exec_blocking(format!("DROP ROLE IF EXISTS {}", self.name));
    }
}

fn assert_denied(r: Result<sqlx::postgres::PgQueryResult, sqlx::Error>, what: &str) {
    let e = r.expect_err(what).to_string();
    assert!(e.contains("permission denied"), "{what}: {e}");
}

#[tokio::test]
async fn an_enqueuer_can_enqueue_but_not_read_change_or_delete_jobs() {
    let db = TestDb::new().await;
    // Someone else's job with a secret in its args.
    let secret_id: i64 =
        sqlx::query_scalar("SELECT skiplock.enqueue('noop', '{\"token\": \"s3cr3t\"}')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let role = LoginRole::new(&db, "skiplock_enqueuer").await;
    let pool = role.pool(&db).await;

    // The NOTIFY trigger still fires for a SECURITY DEFINER insert, for a queue a worker
    // waits on (skiplock.waiting, which the enqueuer cannot read).
    sqlx::raw_sql(
        "INSERT INTO skiplock.workers (id, host, pid) VALUES ('w', 'h', 1);
         INSERT INTO skiplock.waiting (queue, worker) VALUES ('mine', 'w')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut listener = PgListener::connect_with(&db.pool).await.unwrap();
    let channel = skiplock::store::notify::wake_channel(&db.pool)
        .await
        .unwrap();
    listener.listen(&channel).await.unwrap();

    let id: i64 = sqlx::query_scalar("SELECT skiplock.enqueue('noop', $1, queue => 'mine')")
        .bind(json!({"n": 1}))
        .fetch_one(&pool)
        .await
        .expect("enqueue as the enqueuer");
    assert!(id > secret_id);
    let n = tokio::time::timeout(Duration::from_secs(30), listener.recv())
        .await
        .expect("a wake-up within 30 s")
        .unwrap();
    assert_eq!(n.payload(), "mine");

    let ids: Vec<i64> =
        sqlx::query_scalar("SELECT skiplock.enqueue_many('noop', ARRAY['{}'::jsonb, '{}'])")
            .fetch_one(&pool)
            .await
            .expect("enqueue_many as the enqueuer");
    assert_eq!(ids.len(), 2);
    // unique keys work too (the function reads the table with the owner's rights).
    let k1: i64 = sqlx::query_scalar("SELECT skiplock.enqueue('noop', unique_key => 'k')")
        .fetch_one(&pool)
        .await
        .unwrap();
    let k2: i64 = sqlx::query_scalar("SELECT skiplock.enqueue('noop', unique_key => 'k')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(k1, k2);
    // A waiting job of another kind cannot be taken over (or even found) through its key:
    // keys are per kind and queue, so the same key in another kind is another job.
    let victim: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('report', '{\"day\": 19}', 'reports', unique_key => 'report:19')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    for mode in ["replace", "keep"] {
        let other: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT skiplock.enqueue('evil', '{{\"pwned\": true}}', 'reports', now() + interval '1 year', \
             0::smallint, 1, 'report:19', '{mode}')"
        )))
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_ne!(other, victim, "{mode}");
    }
    let (args, kind): (serde_json::Value, String) =
        sqlx::query_as("SELECT args, kind FROM skiplock.jobs WHERE id = $1")
            .bind(victim)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((args, kind.as_str()), (json!({"day": 19}), "report"));
    sqlx::query("DELETE FROM skiplock.jobs WHERE unique_key = 'report:19'")
        .execute(&db.pool)
        .await
        .unwrap();

    // Bad input still gets the clear error, not a permission error.
    let e = sqlx::query("SELECT skiplock.enqueue('')")
        .execute(&pool)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("kind must not be empty"), "{e}");

    // The CLI works for the enqueuer too (it checks the migrations first).
    let (code, out, err) = run_cmd(&role.url(&db), &["enqueue", "noop", "--queue", "cli"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.trim().parse::<i64>().is_ok(), "{out}");
    sqlx::query("DELETE FROM skiplock.jobs WHERE queue = 'cli'")
        .execute(&db.pool)
        .await
        .unwrap();

    // The stats view is readable.
    let total: i64 = sqlx::query_scalar("SELECT sum(count)::bigint FROM skiplock.queue_stats")
        .fetch_one(&pool)
        .await
        .expect("read queue_stats");
    assert_eq!(total, 5);

    // Nothing else.
    assert_denied(
        sqlx::query("SELECT args FROM skiplock.jobs")
            .execute(&pool)
            .await,
        "read args",
    );
    assert_denied(
        sqlx::query("SELECT count(*) FROM skiplock.workers")
            .execute(&pool)
            .await,
        "read workers",
    );
    assert_denied(
        sqlx::query("UPDATE skiplock.jobs SET args = '{}' WHERE id = $1")
            .bind(secret_id)
            .execute(&pool)
            .await,
        "update",
    );
    assert_denied(
        sqlx::query("DELETE FROM skiplock.jobs")
            .execute(&pool)
            .await,
        "delete",
    );
    assert_denied(
        sqlx::query("INSERT INTO skiplock.jobs (kind) VALUES ('noop')")
            .execute(&pool)
            .await,
        "insert directly",
    );
    assert_denied(
        sqlx::query("SELECT skiplock.cancel($1)")
            .bind(secret_id)
            .execute(&pool)
            .await,
        "cancel",
    );
    assert_denied(
        sqlx::query("SELECT skiplock.retry($1)")
            .bind(secret_id)
            .execute(&pool)
            .await,
        "retry",
    );
    assert_denied(
        sqlx::query("SELECT skiplock._check_job('x', '{}', 'q', 0::smallint, 1)")
            .execute(&pool)
            .await,
        "internal helper",
    );
    pool.close().await;

    // The secret is untouched and nothing was deleted.
    let (args, n): (serde_json::Value, i64) = sqlx::query_as(
        "SELECT (SELECT args FROM skiplock.jobs WHERE id = $1), (SELECT count(*) FROM skiplock.jobs)",
    )
    .bind(secret_id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(args, json!({"token": "s3cr3t"}));
    assert_eq!(n, 5);
}

#[tokio::test]
async fn migrate_is_idempotent_with_the_roles_and_revokes_public_execute() {
    let db = TestDb::new().await;
    skiplock::store::schema::migrate_parts(&db.pool, &skiplock_workflows::schemas())
        .await
        .unwrap();
    skiplock::store::schema::migrate_parts(&db.pool, &skiplock_workflows::schemas())
        .await
        .unwrap();
    let public_exec: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'skiplock' AND has_function_privilege('public', p.oid, 'EXECUTE')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        public_exec, 0,
        "PUBLIC may still execute skiplock functions"
    );
    let enq_exec: Vec<String> = sqlx::query_scalar(
        "SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'skiplock' AND has_function_privilege('skiplock_enqueuer', p.oid, 'EXECUTE')
         ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for name in &enq_exec {
        assert!(
            [
                "enqueue",
                "enqueue_result",
                "enqueue_many",
                "enqueue_flow",
                "enqueue_batch",
                "wait",
                "watch",
                "flow_progress",
                "finished_channel",
                "signal",
                "request_fetch",
                "timer_reset",
                "pack_now",
                "submit_packet"
            ]
            .contains(&name.as_str()),
            "the enqueuer may execute {name}"
        );
    }
    assert!(enq_exec.contains(&"enqueue".to_string()));
}

#[tokio::test]
async fn a_worker_role_runs_jobs_and_its_password_never_reaches_the_logs() {
    let db = TestDb::new().await;
    for i in 0..10 {
        skiplock::store::jobs::enqueue(
            &db.pool,
            &skiplock::queue::NewJob::new("noop", json!({ "i": i })),
        )
        .await
        .unwrap();
    }
    skiplock::store::jobs::enqueue(
        &db.pool,
        &skiplock::queue::NewJob::new("sleep", json!({"ms": "not a number"})),
    )
    .await
    .unwrap();
    let role = LoginRole::new(&db, "skiplock_worker").await;
    let url = role.url(&db);
    assert!(url.contains(&role.password));

    // A worker logged in as the worker role, logging at debug level.
    let out = cmd(&url)
        .args(["worker", "--exit-when-idle", "--queues", "default=4"])
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(count_state(&db.pool, "completed").await, 10);
    assert_eq!(count_state(&db.pool, "discarded").await, 1);
    assert!(
        !err.contains(&role.password),
        "password in the worker's log"
    );

    // The same worker against a database that does not exist: a clear error, no password.
    let mut bad = url::Url::parse(&url).unwrap();
    bad.set_path("/skiplock_no_such_database");
    let out = cmd(bad.as_str())
        .args(["worker", "--queues", "default=1"])
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot connect to the database"), "{err}");
    assert!(
        !err.contains(&role.password),
        "password in the error: {err}"
    );
}

#[tokio::test]
async fn an_enqueuer_can_call_every_workflow_entry_point() {
    let db = TestDb::new().await;
    let role = LoginRole::new(&db, "skiplock_enqueuer").await;
    let pool = role.pool(&db).await;
    let dir = tempfile::tempdir().unwrap();
    // pack_now packs a host with fetched pages only (a made-up host is refused).
    sqlx::query(
        "INSERT INTO skiplock.pages (url, host, path, title, body, last_fetched, next_fetch)
         VALUES ('http://example.com/', 'example.com', '/', 't', 'b', now(), now())",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let calls = [
        "SELECT skiplock.request_fetch('http://example.com/a')".to_string(),
        "SELECT skiplock.request_fetch('http://example.com/', force => true, full => true)"
            .to_string(),
        "SELECT skiplock.timer_reset('example.com')".to_string(),
        "SELECT skiplock.pack_now('example.com')".to_string(),
        format!(
            "SELECT skiplock.submit_packet('{}', 'p')",
            dir.path().display()
        ),
    ];
    let mut ids = Vec::new();
    for sql in &calls {
        let id: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.clone()))
            .fetch_one(&pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        ids.push(id);
    }
    pool.close().await;
    // Each call made what it promises (checked as the owner): a fetch job per URL, the
    // host's timer-reset, its pack timer (brought to now), and a packet with its job.
    let job = |id: i64| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (String, String, serde_json::Value)>(
                "SELECT kind, queue, args FROM skiplock.jobs WHERE id = $1",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap_or_else(|e| panic!("job {id}: {e}"))
        }
    };
    let (kind, _, args) = job(ids[0]).await;
    assert_eq!(
        (kind.as_str(), &args["url"]),
        ("fetch", &json!("http://example.com/a"))
    );
    let (kind, _, args) = job(ids[1]).await;
    assert_eq!(
        (kind.as_str(), &args["url"]),
        ("fetch", &json!("http://example.com/"))
    );
    assert_eq!(
        (args["force"].clone(), args["full"].clone()),
        (json!(true), json!(true))
    );
    let (kind, queue, args) = job(ids[2]).await;
    assert_eq!((kind.as_str(), queue.as_str()), ("timer-reset", "pack"));
    assert_eq!(args["host"], "example.com");
    let (kind, queue, args) = job(ids[3]).await;
    assert_eq!((kind.as_str(), queue.as_str()), ("do-the-packing", "pack"));
    assert_eq!(
        (args["host"].clone(), args["now"].clone()),
        (json!("example.com"), json!(true))
    );
    let packet = packets::get(&db.pool, ids[4]).await.unwrap();
    assert_eq!(packet.name.as_deref(), Some("p"));
    let (kind, _, args) = job(packet.job_id.unwrap()).await;
    assert_eq!(
        (kind.as_str(), &args["packet_id"]),
        ("process-packet", &json!(ids[4]))
    );
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        n, 5,
        "two fetches, a timer-reset, a pack timer, a packet's job"
    );
}

/// Wake-ups name queues only to skiplock's roles (docs/security.md, "Wake-ups"). Postgres lets
/// any login LISTEN on any channel; the channel's name is a secret of the owner and the worker
/// role. A login without grants that listens on the fixed name earlier releases used hears
/// nothing, and neither it nor the operator can read the name, while a worker-role listener on
/// the real channel gets the queue name of an enqueue, a pause and a resume.
#[tokio::test]
async fn a_login_without_grants_hears_no_queue_names() {
    let db = TestDb::new().await;
    // A producer waiting on every queue, so an enqueue notifies.
    sqlx::raw_sql(
        "INSERT INTO skiplock.workers (id, host, pid) VALUES ('w', 'h', 1);
         INSERT INTO skiplock.waiting (queue, worker) VALUES ('', 'w')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let nobody = LoginRole::new(&db, "").await;
    let worker = LoginRole::new(&db, "skiplock_worker").await;
    let enqueuer = LoginRole::new(&db, "skiplock_enqueuer").await;
    let operator = LoginRole::new(&db, "skiplock_operator").await;
    let nobody_pool = nobody.pool(&db).await;
    let worker_pool = worker.pool(&db).await;
    let enqueuer_pool = enqueuer.pool(&db).await;
    let operator_pool = operator.pool(&db).await;
    for (pool, who) in [(&nobody_pool, "no grants"), (&operator_pool, "operator")] {
        let e = sqlx::query_scalar::<_, String>("SELECT channel FROM skiplock.wake_channel")
            .fetch_one(pool)
            .await
            .expect_err(who)
            .to_string();
        assert!(e.contains("permission denied"), "{who}: {e}");
    }
    let mut eavesdropper = PgListener::connect(&nobody.url(&db)).await.unwrap();
    eavesdropper.listen("skiplock_wake").await.unwrap();
    let channel = skiplock::store::notify::wake_channel(&worker_pool)
        .await
        .unwrap();
    assert!(channel.starts_with("skiplock_wake_"), "{channel}");
    let mut listener = PgListener::connect(&worker.url(&db)).await.unwrap();
    listener.listen(&channel).await.unwrap();

    let secret = "payroll-secret-tenant";
    sqlx::query("SELECT skiplock.enqueue('noop', '{}', $1)")
        .bind(secret)
        .execute(&enqueuer_pool)
        .await
        .expect("enqueue as the enqueuer");
    for f in ["pause_queue", "resume_queue"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("SELECT skiplock.{f}($1)")))
            .bind(secret)
            .execute(&operator_pool)
            .await
            .expect(f);
    }
    // The positive control: all three reached the worker role's listener.
    for what in ["enqueue", "pause", "resume"] {
        let n = tokio::time::timeout(Duration::from_secs(30), listener.recv())
            .await
            .unwrap_or_else(|_| panic!("the {what} wake-up within 30 s"))
            .unwrap();
        assert_eq!(n.payload(), secret, "{what}");
    }
    // Sent at the same commits, so anything meant for the old name would be here by now.
    let heard = tokio::time::timeout(Duration::from_secs(2), eavesdropper.recv()).await;
    assert!(heard.is_err(), "a login without grants heard {heard:?}");
}

/// An enqueuer builds flows and batches, waits for a job, reads a flow's progress (docs/
/// roles.md, "Flows"), and still reads no job's args or another job's dependency results.
#[tokio::test]
async fn an_enqueuer_builds_flows_and_waits_but_reads_no_dependency_results() {
    let db = TestDb::new().await;
    let role = LoginRole::new(&db, "skiplock_enqueuer").await;
    let pool = role.pool(&db).await;
    let flow: serde_json::Value = sqlx::query_scalar(
        "SELECT skiplock.enqueue_flow('[{\"name\": \"a\", \"kind\": \"noop\"},
                                        {\"name\": \"b\", \"kind\": \"noop\", \"depends_on\": [\"a\"]}]')",
    )
    .fetch_one(&pool)
    .await
    .expect("enqueue_flow");
    let b = flow["jobs"]["b"].as_i64().unwrap();
    let batch: serde_json::Value = sqlx::query_scalar(
        "SELECT skiplock.enqueue_batch('[{\"kind\": \"noop\"}]', '{\"kind\": \"noop\"}')",
    )
    .fetch_one(&pool)
    .await
    .expect("enqueue_batch");
    assert!(batch["jobs"]["callback"].is_i64());
    let (state, finished): (String, bool) =
        sqlx::query_as("SELECT state::text, finished FROM skiplock.wait($1, '0 seconds')")
            .bind(b)
            .fetch_one(&pool)
            .await
            .expect("wait");
    assert_eq!((state.as_str(), finished), ("waiting", false));
    let total: i64 = sqlx::query_scalar("SELECT total FROM skiplock.flow_progress($1)")
        .bind(flow["flow"].as_i64().unwrap())
        .fetch_one(&pool)
        .await
        .expect("flow_progress");
    assert_eq!(total, 2);
    assert_denied(
        sqlx::query("SELECT * FROM skiplock.dependency_results($1)")
            .bind(b)
            .execute(&pool)
            .await,
        "dependency_results",
    );
    assert_denied(
        sqlx::query("SELECT * FROM skiplock.job_dependencies")
            .execute(&pool)
            .await,
        "read the edges",
    );
}

/// A watched job's end is announced on a channel whose name only those who may read the jobs
/// can read (the enqueuer, operator and worker roles; docs/roles.md): a waiter of the enqueuer
/// role hears its job, while a login without grants can read neither the name nor the
/// table, and LISTENing on the old fixed name `skiplock_finished` hears nothing of it (it
/// heard every watched job's id as it finished).
#[tokio::test]
async fn a_login_without_grants_hears_no_job_finish() {
    let db = TestDb::new().await;
    let nobody = LoginRole::new(&db, "").await;
    let nobody_pool = nobody.pool(&db).await;
    for sql in [
        "SELECT skiplock.finished_channel()",
        "SELECT channel FROM skiplock.finished_channel",
    ] {
        assert_denied(sqlx::query(sql).execute(&nobody_pool).await, sql);
    }
    let mut channels = Vec::new();
    let mut waiter = None;
    for grant in ["skiplock_enqueuer", "skiplock_operator", "skiplock_worker"] {
        let role = LoginRole::new(&db, grant).await;
        let pool = role.pool(&db).await;
        channels.push(
            skiplock::store::flows::finished_channel(&pool)
                .await
                .unwrap_or_else(|e| panic!("{grant}: {e}")),
        );
        if grant == "skiplock_enqueuer" {
            waiter = Some((role, pool));
        }
    }
    let channel = channels[0].clone();
    assert!(
        channel.starts_with("skiplock_finished_") && channel.len() == 50,
        "{channel}"
    );
    assert!(channels.iter().all(|c| *c == channel), "{channels:?}");
    let (role, pool) = waiter.unwrap();
    let mut eavesdropper = PgListener::connect(&nobody.url(&db)).await.unwrap();
    eavesdropper.listen("skiplock_finished").await.unwrap();
    // On a pool of its own: the listener keeps its connection.
    let mut listener = skiplock::store::flows::finished_listener(&role.pool(&db).await.into())
        .await
        .unwrap();

    let id: i64 = sqlx::query_scalar("SELECT skiplock.enqueue('noop', '{}')")
        .fetch_one(&pool)
        .await
        .unwrap();
    sqlx::query("SELECT * FROM skiplock.watch($1)")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    skiplock::store::ack::ack_many(&db.pool, &[completed_ack(id, 1)])
        .await
        .unwrap();
    // Notifications arrive in the order their transactions committed: anything the ack sent
    // on the old name would come before this.
    sqlx::query("SELECT pg_notify('skiplock_finished', 'marker')")
        .execute(&db.pool)
        .await
        .unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(30), eavesdropper.recv())
        .await
        .expect("the marker within 30 s")
        .unwrap();
    assert_eq!(
        heard.payload(),
        "marker",
        "a login without grants heard a job end"
    );
    let n = tokio::time::timeout(Duration::from_secs(30), listener.recv())
        .await
        .expect("the job's end within 30 s")
        .unwrap();
    assert_eq!(n.payload(), id.to_string());
}

/// A login without the role its statements need is told, in one line, which role to grant
/// to it (docs/roles.md): a worker run as an enqueuer's login, and an enqueue through the
/// Rust API by a login holding no role.
#[tokio::test]
async fn a_login_without_its_role_is_told_the_grant_to_give() {
    let db = TestDb::new().await;
    let enqueuer = LoginRole::new(&db, "skiplock_enqueuer").await;
    let out = cmd(&enqueuer.url(&db))
        .args(["worker", "--exit-when-idle"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let named: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(&format!("GRANT skiplock_worker TO {};", enqueuer.name)))
        .collect();
    assert_eq!(named.len(), 1, "{err}");
    assert!(named[0].contains("permission denied"), "{err}");

    let nobody = LoginRole::new(&db, "").await;
    let pool: skiplock::Pool = nobody.pool(&db).await.into();
    let e = skiplock::enqueue_job(&pool, &skiplock::queue::NewJob::new("noop", json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, skiplock::Error::MissingGrant { role, .. } if role == "skiplock_enqueuer"),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("GRANT skiplock_enqueuer TO <login>;"),
        "{e}"
    );
}
