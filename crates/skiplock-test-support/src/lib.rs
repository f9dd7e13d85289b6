//! Shared fixtures for the integration tests: a fresh, migrated database per test (dropped
//! when the fixture is dropped), an in-process worker, a crate's binary ([`binary!`]), and
//! waiting on conditions with a generous deadline instead of fixed sleeps. Each test crate
//! takes them through its own `tests/support/mod.rs`.

pub mod cluster;
pub mod sql_names;

use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use skiplock::config::QueueSettings;
use skiplock::worker::{Registry, Worker, WorkerBuilder};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The server tests create their databases on (`SKIPLOCK_TEST_DATABASE_URL`).
pub fn admin_url() -> String {
    std::env::var("SKIPLOCK_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// The URL of database `name` on the test server.
pub fn db_url(name: &str) -> String {
    let mut u = url::Url::parse(&admin_url()).expect("SKIPLOCK_TEST_DATABASE_URL is a URL");
    u.set_path(&format!("/{name}"));
    u.to_string()
}

/// A database of its own for one test; dropped (WITH FORCE) when this is dropped.
pub struct TestDb {
    /// A small pool on the test database.
    pub pool: skiplock::Pool,
    /// The database URL (for child processes).
    pub url: String,
    /// The database name.
    pub name: String,
}

impl TestDb {
    /// Creates and migrates a fresh database: the core, and with the feature `workflows`
    /// (the crates whose tests drive the built-in workflows: the `skiplock` command's, the
    /// console's) every built-in workflow too, as `skiplock migrate` does.
    pub async fn new() -> TestDb {
        #[cfg(feature = "workflows")]
        let parts = skiplock_workflows::schemas();
        #[cfg(not(feature = "workflows"))]
        let parts = Vec::new();
        TestDb::with_parts(&parts).await
    }

    /// Creates a fresh database and migrates the core and `parts`.
    pub async fn with_parts(parts: &[&skiplock::store::schema::PartSchema]) -> TestDb {
        let db = TestDb::empty().await;
        skiplock::store::schema::migrate_parts(&db.pool, parts)
            .await
            .expect("migrate");
        db
    }

    /// Creates a fresh database without the skiplock schema.
    pub async fn empty() -> TestDb {
        let name = format!("skiplock_test_{:016x}", rand::random::<u64>());
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&admin_url())
            .await
            .expect("connect to the test Postgres (is it running? see scripts/dev-db)");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .expect("create test database");
        admin.close().await;
        let url = db_url(&name);
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(60))
            .connect(&url)
            .await
            .expect("connect to test database")
            .into();
        TestDb { pool, url, name }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // The pool's connections are driven by the test's runtime, which is blocked right
        // here, so never await them: DROP … WITH (FORCE) terminates them server-side.
        admin_exec_blocking(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

/// Runs one statement on the admin connection from a fresh runtime on another thread, for
/// use in `Drop` (where the test's own runtime cannot be awaited). Errors are ignored.
pub fn admin_exec_blocking(sql: String) {
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            if let Ok(admin) = PgPoolOptions::new()
                .max_connections(1)
                .connect(&admin_url())
                .await
            {
                let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&admin).await;
                admin.close().await;
            }
        });
    })
    .join();
}

/// Settings for in-process test workers: fast poll, short grace, small backoff. The rescue
/// window is long (a minute) so that a stall of the loaded test machine never lets a worker's
/// own rescuer take one of its live jobs; a test that needs a rescue sets its own window or
/// calls [`rescue_now`] at the moment it chooses.
pub fn fast_settings() -> QueueSettings {
    QueueSettings {
        poll_interval: Duration::from_millis(100),
        rescue_after: Duration::from_secs(60),
        shutdown_grace: Duration::from_secs(5),
        backoff_unit: Duration::from_millis(10),
        max_connections: 4,
        ..QueueSettings::default()
    }
}

/// A worker running in this process; stop it with [`RunningWorker::stop`].
pub struct RunningWorker {
    pub stop: CancellationToken,
    pub handle: JoinHandle<skiplock::Result<()>>,
}

impl RunningWorker {
    /// Asks for a graceful shutdown and waits for it.
    pub async fn stop(self) -> skiplock::Result<()> {
        self.stop.cancel();
        self.handle.await.expect("worker task panicked")
    }
}

/// Starts a worker built by `build` (given a builder on `pool` with `settings`, without the
/// default maintenance, so a test sees only its own jobs; `maintenance_parts` or
/// `maintenance` turns it back on).
pub fn start_worker(
    pool: &(impl Clone + Into<skiplock::Pool>),
    settings: QueueSettings,
    build: impl FnOnce(WorkerBuilder) -> WorkerBuilder,
) -> RunningWorker {
    run_worker(
        build(
            Worker::builder(pool.clone())
                .settings(settings)
                .without_maintenance(),
        )
        .build(),
    )
}

/// Runs a built `worker` on this runtime (for a test that needs its id before it starts).
pub fn run_worker(worker: Worker) -> RunningWorker {
    let stop = CancellationToken::new();
    let s = stop.clone();
    let handle = tokio::spawn(async move { worker.run(async move { s.cancelled().await }).await });
    RunningWorker { stop, handle }
}

/// Starts a worker with the handlers of `registry_fn` and the fast settings.
pub fn start_with(
    pool: &(impl Clone + Into<skiplock::Pool>),
    register: impl FnOnce(&mut Registry),
) -> RunningWorker {
    start_worker(pool, fast_settings(), |mut b| {
        register(b.registry_mut());
        b
    })
}

/// Polls `check` every 20 ms until it returns `Some`, or panics after `limit` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The single `bigint` a query returns (counts in assertions and waits).
pub async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// Count of the test's own jobs in `state`: the built-in maintenance jobs (`reap`, `retain`
/// in queue `skiplock.maintenance`, which every worker process declares and may run before
/// it exits) are not counted.
pub async fn count_state(pool: &PgPool, state: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM skiplock.jobs WHERE state::text = $1 AND queue <> $2")
        .bind(state)
        .bind(skiplock::maintenance::QUEUE)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Waits until no job is available or running (everything finished).
pub async fn wait_all_finished(pool: &PgPool, limit: Duration) {
    wait_for("all jobs finished", limit, || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM skiplock.jobs WHERE state IN ('available', 'running')",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        (n == 0).then_some(())
    })
    .await
}

/// The packet root of the tests (`SKIPLOCK_PACKET_ROOTS`): the real path of the system's
/// temporary directory, where tests make their packet folders (`tempfile::tempdir()`).
pub fn packet_root() -> std::path::PathBuf {
    std::fs::canonicalize(std::env::temp_dir()).expect("the temporary directory")
}

/// The binary-driving fixtures of a test crate (`bin`, `cmd`, `run_cmd`,
/// `spawn_worker_process`) for the binary `$name` of the crate the tests belong to: Cargo
/// names a binary's path (`CARGO_BIN_EXE_<name>`) only while it compiles that crate's tests,
/// so the path is read where the macro expands (each crate's `tests/support/mod.rs`).
#[macro_export]
macro_rules! binary {
    ($name:literal) => {
        /// The binary built for these tests.
        pub fn bin() -> &'static str {
            env!(concat!("CARGO_BIN_EXE_", $name))
        }

        /// A command of [`bin`] against `url`, with a clean settings environment.
        pub fn cmd(url: &str) -> std::process::Command {
            $crate::command(bin(), url)
        }

        /// Runs a command of [`bin`] to completion: (exit code, stdout, stderr).
        pub fn run_cmd(url: &str, args: &[&str]) -> (i32, String, String) {
            $crate::run_command(bin(), url, args)
        }

        /// Starts `worker` of [`bin`] as a child process with extra env vars.
        pub fn spawn_worker_process(
            url: &str,
            args: &[&str],
            envs: &[(&str, &str)],
        ) -> std::process::Child {
            $crate::spawn_worker(bin(), url, args, envs)
        }
    };
}

/// A command of the binary `bin` against `url`, with a clean settings environment.
pub fn command(bin: &str, url: &str) -> Command {
    let mut c = Command::new(bin);
    c.env("DATABASE_URL", url)
        .env("RUST_LOG", "info,sqlx::postgres::notice=warn")
        .env("SKIPLOCK_MAX_CONNECTIONS", "4")
        .env("SKIPLOCK_PACKET_ROOTS", packet_root())
        .env_remove("SKIPLOCK_QUEUES")
        .current_dir(std::env::temp_dir());
    c
}

/// Runs a command of the binary `bin` to completion: (exit code, stdout, stderr).
pub fn run_command(bin: &str, url: &str, args: &[&str]) -> (i32, String, String) {
    let out = command(bin, url)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run skiplock");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Starts `bin worker` as a child process with extra env vars.
pub fn spawn_worker(bin: &str, url: &str, args: &[&str], envs: &[(&str, &str)]) -> Child {
    let mut c = command(bin, url);
    c.arg("worker")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.spawn().expect("spawn skiplock worker")
}

/// Sends SIGTERM to a child.
pub fn sigterm(child: &Child) {
    unsafe_kill(child.id(), "TERM");
}

/// Sends SIGKILL to a child.
pub fn sigkill(child: &Child) {
    unsafe_kill(child.id(), "KILL");
}

fn unsafe_kill(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// Starts a worker with the built-in kinds (`noop`, `sleep`, `fail`) and `settings`.
pub fn start_builtin(
    pool: &(impl Clone + Into<skiplock::Pool>),
    settings: QueueSettings,
) -> RunningWorker {
    start_worker(pool, settings, |mut b| {
        skiplock::worker::builtin::register(b.registry_mut());
        b
    })
}

/// Waits until job `id` satisfies `pred`, and returns its row.
pub async fn wait_job(
    pool: &PgPool,
    id: i64,
    what: &str,
    pred: impl Fn(&skiplock::queue::JobRow) -> bool,
) -> skiplock::queue::JobRow {
    wait_for(what, Duration::from_secs(60), || async {
        let r = skiplock::store::jobs::get_job(pool, id).await.unwrap();
        pred(&r).then_some(r)
    })
    .await
}

/// Takes running job `id` back at a moment the test chooses: runs the rescuer with a zero
/// window (every running job whose last heartbeat is in the past) until `id` is no longer
/// running. Only for tests in which no other job is running that must be kept (the process
/// that ran `id` was killed, or the test means to take it away from a live worker).
pub async fn rescue_now(pool: &PgPool, id: i64) {
    wait_for(
        &format!("the rescuer to take job {id} back"),
        Duration::from_secs(60),
        || async {
            skiplock::maintenance::rescuer::rescue(&pool.clone().into(), Duration::ZERO)
                .await
                .expect("rescue");
            let state: String =
                sqlx::query_scalar("SELECT state::text FROM skiplock.jobs WHERE id = $1")
                    .bind(id)
                    .fetch_one(pool)
                    .await
                    .unwrap();
            (state != "running").then_some(())
        },
    )
    .await
}

/// Sets a limit of `max` waiting jobs on `queue` (`None`: no limit), as the owner does
/// (`skiplock.set_queue_admission`, docs/operations.md "Admission control").
pub async fn set_queue_admission(db: &TestDb, queue: &str, max: Option<i32>) {
    sqlx::query("SELECT skiplock.set_queue_admission($1, $2)")
        .bind(queue)
        .bind(max)
        .execute(&*db.pool)
        .await
        .unwrap();
}

/// A LOGIN role holding only `skiplock_operator` (cluster-wide: unique name, dropped at the
/// end), the login the console and the metrics endpoint are meant to run as.
pub struct Operator {
    pub name: String,
    pub url: String,
}

impl Operator {
    pub async fn new(db: &TestDb) -> Operator {
        let name = format!("skiplock_op_{:012x}", rand::random::<u64>() >> 16);
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE ROLE {name} LOGIN PASSWORD 'op-secret' IN ROLE skiplock_operator"
        )))
        .execute(&db.pool)
        .await
        .expect("create the operator login");
        let mut u = url::Url::parse(&db.url).unwrap();
        u.set_username(&name).unwrap();
        u.set_password(Some("op-secret")).unwrap();
        Operator {
            name,
            url: u.to_string(),
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        admin_exec_blocking(format!("DROP ROLE IF EXISTS {}", self.name));
    }
}

/// A `skiplock web` or `skiplock worker` child that prints `... http://ADDR/...` as its
/// first stdout line (the console, the metrics endpoint); killed when dropped.
pub struct Served {
    pub child: Child,
    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub base: String,
}

impl Served {
    /// Spawns `c` and waits (up to `limit`) for the address it prints. The rest of its
    /// stdout is drained on a thread so the child never blocks on a full pipe.
    pub fn start(mut c: Command, limit: Duration) -> Served {
        use std::io::{BufRead, BufReader};
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = c.spawn().expect("spawn skiplock");
        let out = child.stdout.take().expect("the child's stdout is piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let first = rx
            .recv_timeout(limit)
            .expect("the process prints its address");
        let port = first
            .split("http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .and_then(|addr| addr.rsplit(':').next())
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_string();
        Served {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The full URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The state of job `id`, as text.
pub async fn state_of(db: &TestDb, id: i64) -> String {
    sqlx::query_scalar("SELECT state::text FROM skiplock.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// A child process killed (if it still runs) and reaped when dropped: a failing test leaves
/// nothing running.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (up to `limit`) for `child` to exit; returns its status.
pub async fn wait_exit_within(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    wait_for("the process to exit", limit, || {
        let status = child.try_wait().unwrap();
        async move { status }
    })
    .await
}

/// Whether the server at `addr` closes a connection that sent `partial` (a request head
/// that never ends) within `limit`: read until end of stream (a 408 may come first).
pub async fn closes_a_slow_connection(addr: &str, partial: &str, limit: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(partial.as_bytes()).await.unwrap();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(limit, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// Job `id` was discarded at its first attempt with an error containing `want` (read as SQL,
/// not through `get_job`, so that a row `get_job` could not read is checked too).
pub async fn assert_discarded_at_first_attempt(pool: &PgPool, id: i64, want: &str) {
    let (state, attempt, errors): (String, i32, serde_json::Value) =
        sqlx::query_as("SELECT state::text, attempt, errors FROM skiplock.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!((state.as_str(), attempt), ("discarded", 1), "{want}");
    let msg = errors[0]["error"].as_str().unwrap_or_default();
    assert!(msg.contains(want), "{msg}");
}

/// Enqueues `n` jobs of the built-in kind `noop` (empty args) in the `default` queue.
pub async fn enqueue_noops(pool: &skiplock::Pool, n: usize) {
    let args = vec![serde_json::json!({}); n];
    skiplock::store::jobs::enqueue_many(
        pool,
        skiplock::store::jobs::ManyJobs {
            kind: "noop",
            args: &args,
            queue: "default",
            run_at: None,
            priority: 0,
            limit_key: None,
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

/// A TCP port free on 127.0.0.1 now (for a server a test starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether the tests run as root (servers that refuse root are started as `postgres`).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The completion of attempt `attempt` of job `id`, as the worker's ack writer sends it.
pub fn completed_ack(id: i64, attempt: i32) -> skiplock::store::ack::Ack {
    skiplock::store::ack::Ack {
        id,
        attempt,
        state: skiplock::queue::JobState::Completed,
        scheduled_at: None,
        give_back: false,
        error: None,
        result: None,
        started_at: None,
    }
}
