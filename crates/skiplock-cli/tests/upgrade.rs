//! Upgrades: a database exactly as release 0.1.0 left it (its migrations, run with a runtime
//! migrator, then its SQL API files in order: tests/fixtures/release-0.1.0/), filled with jobs
//! in every state, a keyed waiting job, a packet, pages, and the rows later releases refuse
//! (non-finite times, squatted and steered workflow keys), keeps working after today's
//! `migrate`: the rows are repaired, and a worker finishes every job.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use skiplock_workflows::pack::{self, PackSettings};
use skiplock_workflows::packets::processor::Processor;
use skiplock_workflows::packets::transitions::PacketState;
use skiplock_workflows::packets::{self, PacketSettings};
use sqlx::{AssertSqlSafe, PgPool};
use support::*;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-0.1.0");
/// The release of SQL API version 2 and the hash it recorded for its SQL API (its
/// `API_VERSIONS` entry 2); the ones below likewise.
const V2: Release = Release {
    fixture: concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-api-2"),
    api_version: 2,
    api_hash: "fba89b0989b1cbdcd4e20c1b05ff513f07824c0de34700d256a987121bc44721",
};
/// SQL API version 3.
const V3: Release = Release {
    fixture: concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-api-3"),
    api_version: 3,
    api_hash: "eae46b9dc1dd23138028a7c9585ba1eb5241b67efe4d0e0991e2c1e08e956787",
};

/// SQL API version 4.
const V4: Release = Release {
    fixture: concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-api-4"),
    api_version: 4,
    api_hash: "85add6e9e4ed61bed0bb9c50e8eaf5e6a16cf9c0d1d42379bc7073c3445b60b7",
};

/// SQL API version 5.
const V5: Release = Release {
    fixture: concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-api-5"),
    api_version: 5,
    api_hash: "a3aaf7dea943f65f01329514e69110028aa84d61d903033ea32c8c153b053d21",
};

/// SQL API version 6.
const V6: Release = Release {
    fixture: concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-api-6"),
    api_version: 6,
    api_hash: "1a2acf0cf4982b9563c7b0d1a9af4ab8b8a5a30d333a30bdccd66d86bcc7bc7a",
};

/// The previous release: SQL API version 7.
const V7: Release = Release {
    fixture: concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-api-7"),
    api_version: 7,
    api_hash: "0ceb2a0e2bed1cc9b9766aaef605e7be573e6a149b699fcca60f544f126bb7d6",
};

/// The released SQL API version 8 (commit 1371091): the schema in parts, each part's
/// migrations recorded in its own table, verbatim in its fixture.
const V8_FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-api-8");
/// What that release recorded: its SQL API version and hash (`API_VERSIONS` entry 8), and the
/// hash of each workflow part (`schema::part_hash` as that release computed it).
const V8_API_HASH: &str = "56e875999a1b8444ff9c9b32ecf0a1b705761667243702dcefa22ae713f478cd";
const V8_PART_HASHES: [(&str, &str); 3] = [
    (
        "fetch",
        "57cbd69d67fc791711c83cce57427fd433ffaadbde732121ca8e8c84d38995d7",
    ),
    (
        "pack",
        "ee1708480c4cebe687e4658f338f2180d5828b603ec893f6a9bfc5b1b6b592d9",
    ),
    (
        "packets",
        "8f940fe1a15724bdc2d1741fc0e92a15bc7dd21d8f25c410ee686d17907bb87e",
    ),
];

/// A release whose schema a fixture holds verbatim.
struct Release {
    fixture: &'static str,
    api_version: u32,
    api_hash: &'static str,
}
const LONG: Duration = Duration::from_secs(120);

/// Builds the schema exactly as release 0.1.0's `skiplock migrate` did.
async fn migrate_as_release_0_1_0(pool: &PgPool) {
    migrate_as(pool, FIXTURE, 6).await;
}

/// Applies a fixture's migrations (a runtime migrator, so `_sqlx_migrations` holds their
/// checksums as that release's binary recorded them), then its `api_files` SQL API files.
async fn migrate_as(pool: &PgPool, fixture: &str, api_files: usize) {
    let m = sqlx::migrate::Migrator::new(Path::new(&format!("{fixture}/migrations")))
        .await
        .expect("the fixture's migrations");
    m.run(pool).await.expect("the fixture's migrations");
    let mut files: Vec<_> = std::fs::read_dir(format!("{fixture}/api"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), api_files);
    let mut tx = pool.begin().await.unwrap();
    for f in files {
        let sql = std::fs::read_to_string(&f).unwrap();
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
    tx.commit().await.unwrap();
}

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn one<T>(pool: &PgPool, sql: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    sqlx::query_scalar(AssertSqlSafe(sql.to_string()))
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

#[tokio::test]
async fn a_release_0_1_0_database_keeps_working_after_migrate() {
    let db = TestDb::empty().await;
    let p = &db.pool;
    migrate_as_release_0_1_0(p).await;
    let dir = tempfile::tempdir().unwrap();
    let frames = dir.path().join("frames");
    std::fs::create_dir_all(&frames).unwrap();
    std::fs::write(frames.join("f1.tif"), "frame").unwrap();
    let store = tempfile::tempdir().unwrap();

    // Jobs in every state, through the 0.1.0 API and plain SQL.
    exec(
        p,
        "SELECT skiplock.enqueue('noop');
         SELECT skiplock.enqueue('noop', queue => 'later', run_at => now() + interval '1 second');
         SELECT skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[20]));
         SELECT skiplock.enqueue('noop', '{\"v\": 1}', unique_key => 'report:2026', on_conflict => 'replace');
         INSERT INTO skiplock.jobs (kind, state, attempt, attempted_at, attempted_by, heartbeat_at)
             VALUES ('noop', 'running', 1, now() - interval '1 hour', 'dead-worker', now() - interval '1 hour');
         INSERT INTO skiplock.jobs (kind, state, attempt, finalized_at) VALUES
             ('noop', 'completed', 1, now()), ('fail', 'discarded', 25, now()), ('noop', 'cancelled', 0, now());",
    )
    .await;
    let packet: i64 = one(
        p,
        &format!(
            "SELECT skiplock.submit_packet('{}', 'upgrade', 'alice')",
            frames.display()
        ),
    )
    .await;
    exec(
        p,
        "INSERT INTO skiplock.pages (url, host, path, title, body, last_fetched, next_fetch)
             VALUES ('http://up.example/', 'up.example', '/', 'Up', 'packed after the upgrade', now(), 'infinity');
         INSERT INTO skiplock.hosts (host) VALUES ('up.example');",
    )
    .await;
    // What 0.1.0 let callers write and this release refuses (docs/errors.md):
    exec(
        p,
        // a job at -infinity in queue fetch (killed the producer), at infinity, and before 1970;
        "SELECT skiplock.enqueue('noop', '{}', queue => 'fetch', run_at => '-infinity');
         SELECT skiplock.enqueue('noop', '{\"parked\": true}', queue => 'parked', run_at => 'infinity');
         SELECT skiplock.enqueue('noop', '{}', run_at => '1900-01-01');
         -- a pending fetch steered to another URL at infinity through its key,
         SELECT skiplock.request_fetch('http://a.example/');
         SELECT skiplock.enqueue('fetch', '{\"url\": \"http://evil.example/\"}', 'fetch', 'infinity',
                                 0::smallint, 25, 'fetch:http://a.example/', 'replace');
         -- a pack timer pushed to infinity,
         SELECT skiplock.pack_arm('up.example', interval '1 hour', interval '2 hours');
         SELECT skiplock.enqueue('do-the-packing', '{\"host\": \"up.example\"}', 'pack', 'infinity',
                                 0::smallint, 25, 'pack:up.example', 'replace');
         -- a squatter on the next packet's key,
         SELECT skiplock.enqueue('evil', '{}', 'elsewhere', now() + interval '1 year', 0::smallint, 1,
                                 'packet:' || (SELECT max(id) + 1 FROM skiplock.packets), 'keep');
         -- and bookkeeping rows at the end of time.
         INSERT INTO skiplock.periodic_runs (name, period_start) VALUES ('nightly', 'infinity');",
    )
    .await;
    let squatted_next = packet + 1;

    // Today's migrate.
    skiplock::store::schema::migrate_parts(p, &skiplock_workflows::schemas())
        .await
        .expect("migrate after 0.1.0");
    skiplock::store::schema::ensure_ready(p).await.unwrap();
    assert_eq!(
        one::<i64>(
            p,
            "SELECT count(*) FROM _sqlx_migrations WHERE version = 6 AND success"
        )
        .await,
        1
    );
    // Repaired: times clamped (or made due, for a workflow's own keyed job), squatters and
    // steered jobs cancelled with the reason, bookkeeping at the end of time dropped.
    assert_eq!(
        one::<i64>(
            p,
            "SELECT count(*) FROM skiplock.jobs
             WHERE NOT (skiplock._time_ok(scheduled_at) AND skiplock._time_ok(created_at))"
        )
        .await,
        0
    );
    let parked: DateTime<Utc> = one(
        p,
        "SELECT scheduled_at FROM skiplock.jobs WHERE queue = 'parked'",
    )
    .await;
    assert_eq!(parked, skiplock::time::latest());
    let early: DateTime<Utc> = one(
        p,
        "SELECT scheduled_at FROM skiplock.jobs WHERE queue = 'fetch' AND kind = 'noop'",
    )
    .await;
    assert_eq!(early, skiplock::time::earliest());
    let cancelled: Vec<String> = sqlx::query_scalar(
        "SELECT kind || ' ' || unique_key FROM skiplock.jobs
         WHERE state = 'cancelled' AND errors::text LIKE '%reserved for a built-in workflow%' ORDER BY 1",
    )
    .fetch_all(p)
    .await
    .unwrap();
    assert_eq!(
        cancelled,
        vec![
            format!("evil packet:{squatted_next}"),
            "fetch fetch:http://a.example/".to_string()
        ]
    );
    let timer_due: bool = one(
        p,
        "SELECT scheduled_at <= now() FROM skiplock.jobs
         WHERE unique_key = 'pack:up.example' AND state = 'available'",
    )
    .await;
    assert!(timer_due, "the pack timer steered to infinity is due again");
    assert!(
        one::<bool>(
            p,
            "SELECT next_slot_at = 'epoch' AND busy_until = 'epoch' FROM skiplock.hosts WHERE host = 'up.example'"
        )
        .await
    );
    assert_eq!(
        one::<DateTime<Utc>>(p, "SELECT next_fetch FROM skiplock.pages").await,
        skiplock::time::latest()
    );
    assert_eq!(
        one::<i64>(p, "SELECT count(*) FROM skiplock.periodic_runs").await,
        0
    );
    assert_eq!(
        one::<String>(
            p,
            "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'skiplock'"
        )
        .await,
        "skiplock_owner"
    );
    // The history kept 0.1.0's rows; new ones are appended.
    assert_eq!(
        one::<String>(
            p,
            &format!("SELECT actor FROM skiplock.packet_events WHERE packet_id = {packet}")
        )
        .await,
        "alice"
    );

    // A worker finishes every job that is due (the parked one stays, as it did).
    let mut qs = fast_settings();
    qs.queues = Some(BTreeMap::from([
        ("default".to_string(), 4),
        ("later".to_string(), 1),
        ("fetch".to_string(), 1),
        ("pack".to_string(), 1),
        ("packets".to_string(), 1),
    ]));
    let store_path = store.path().to_str().unwrap().to_string();
    let worker = start_worker(p, qs, move |mut b| {
        skiplock::worker::builtin::register(b.registry_mut());
        let b = packets::register_with(
            b,
            PacketSettings {
                concurrency: 1,
                processor: Processor::Manifest,
                timeout: Duration::from_secs(30),
                recovery: true,
                roots: skiplock_workflows::packets::roots::PacketRoots::new(&[packet_root()]),
            },
        );
        pack::register_with(
            b,
            PackSettings {
                quiet: Duration::from_secs(1),
                max_wait: Duration::from_secs(60),
                store: store_path,
            },
        )
        .unwrap()
    });
    wait_for("every job but the parked one to finish", LONG, || async {
        let n: i64 = count(
            p,
            "SELECT count(*) FROM skiplock.jobs
             WHERE state IN ('available', 'running') AND queue <> 'parked'",
        )
        .await;
        (n == 0).then_some(())
    })
    .await;
    wait_for("the packet to be processed", LONG, || async {
        (packets::get(p, packet).await.unwrap().state == PacketState::ReadyForReview).then_some(())
    })
    .await;
    assert_eq!(
        one::<i64>(
            p,
            "SELECT count(*) FROM skiplock.packs WHERE host = 'up.example'"
        )
        .await,
        1
    );
    // New work and new packets go through the new API (the squatted key is free again).
    let next = packets::submit(p, frames.to_str().unwrap(), None, None)
        .await
        .unwrap();
    assert_eq!(next, squatted_next);
    wait_for("the new packet to be processed", LONG, || async {
        (packets::get(p, next).await.unwrap().state == PacketState::ReadyForReview).then_some(())
    })
    .await;
    worker.stop().await.unwrap();
    assert_eq!(count_state(p, "discarded").await, 1);
    // Migrating again is a no-op.
    skiplock::store::schema::migrate_parts(p, &skiplock_workflows::schemas())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_release_0_1_0_database_is_refused_until_migrated() {
    let db = TestDb::empty().await;
    migrate_as_release_0_1_0(&db.pool).await;
    let want = format!(
        "error: schema is at API version 0, this binary needs {}: run `skiplock migrate`",
        skiplock::store::schema::API_VERSION
    );
    let (code, out, err) = run_cmd(&db.url, &["stats"]);
    assert_eq!((code, out.as_str(), err.trim()), (1, "", want.as_str()));
    let e = skiplock::store::schema::ensure_ready(&db.pool)
        .await
        .unwrap_err();
    assert_eq!(format!("error: {e}"), want);
    skiplock::store::schema::migrate_parts(&db.pool, &skiplock_workflows::schemas())
        .await
        .unwrap();
    skiplock::store::schema::ensure_ready(&db.pool)
        .await
        .unwrap();
    let (code, _, err) = run_cmd(&db.url, &["stats"]);
    assert_eq!(code, 0, "{err}");
}

/// Builds the schema exactly as `r`'s `skiplock migrate` did: its migrations, its SQL API,
/// and its record of its API version.
async fn migrate_as_release(pool: &PgPool, r: &Release) {
    migrate_as(pool, r.fixture, 7).await;
    exec(
        pool,
        &format!(
            "INSERT INTO skiplock.schema_info (id, api_version, api_hash, migrated_by, migrated_at)
             VALUES (true, {}, '{}', '0.1.0', now())",
            r.api_version, r.api_hash
        ),
    )
    .await;
}

/// Builds the schema exactly as release API 8's `skiplock migrate` did on a new database (a
/// program with every workflow, src/store/schema.rs at that release): each part's migrations
/// run by a migrator that records them in `skiplock.migrations_<part>` (with their checksums,
/// as that binary recorded them), its SQL API files in name order (that release's order) in
/// one transaction, then its records: `skiplock.schema_info` (version 8 and its hash) and
/// `skiplock.schema_parts` (each workflow part's hash).
async fn migrate_as_release_8(pool: &PgPool) {
    for part in ["core", "fetch", "pack", "packets"] {
        let mut m =
            sqlx::migrate::Migrator::new(Path::new(&format!("{V8_FIXTURE}/migrations/{part}")))
                .await
                .unwrap_or_else(|e| panic!("the fixture's {part} migrations: {e}"));
        m.dangerous_set_table_name(format!("skiplock.migrations_{part}"));
        m.create_schema("skiplock");
        m.run(pool)
            .await
            .unwrap_or_else(|e| panic!("the fixture's {part} migrations: {e}"));
    }
    let mut files: Vec<_> = std::fs::read_dir(format!("{V8_FIXTURE}/api"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 12);
    let mut tx = pool.begin().await.unwrap();
    for f in files {
        let sql = std::fs::read_to_string(&f).unwrap();
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
    sqlx::query(
        "INSERT INTO skiplock.schema_info (id, api_version, api_hash, migrated_by, migrated_at)
         VALUES (true, 8, $1, '0.1.0', now())",
    )
    .bind(V8_API_HASH)
    .execute(&mut *tx)
    .await
    .unwrap();
    for (part, hash) in V8_PART_HASHES {
        sqlx::query(
            "INSERT INTO skiplock.schema_parts (part, api_hash, migrated_by, migrated_at)
             VALUES ($1, $2, '0.1.0', now())",
        )
        .bind(part)
        .bind(hash)
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
}

/// A database as release API 8 left it, filled through that release's API (jobs in every
/// state and in several lanes, keyed jobs: a key, a key derived from args and a window, a
/// flow half done, a packet and a pending fetch), is refused until migrated, then keeps
/// working after today's `migrate`: nothing is lost, its keys and its window still hold
/// against the same enqueuer, the flow finishes, and a worker runs every due job.
#[tokio::test]
async fn a_release_api_8_database_keeps_working_after_migrate() {
    use skiplock::store::schema;
    let db = TestDb::empty().await;
    let p = &db.pool;
    migrate_as_release_8(p).await;
    let (code, out, err) = run_cmd(&db.url, &["stats"]);
    if schema::API_VERSIONS.last() == Some(&(8, V8_API_HASH)) {
        assert_eq!(code, 0, "{err}");
    } else {
        let want = format!(
            "error: schema is at API version 8, this binary needs {}: run `skiplock migrate`",
            schema::API_VERSION
        );
        assert_eq!((code, out.as_str(), err.trim()), (1, "", want.as_str()));
    }
    let dir = tempfile::tempdir().unwrap();
    let frames = dir.path().join("frames");
    std::fs::create_dir_all(&frames).unwrap();
    std::fs::write(frames.join("f1.tif"), "frame").unwrap();

    // Through release 8's API: due jobs, jobs in several lanes (one due a day ago, one due in
    // two seconds), keyed jobs due in an hour, a window spent by a job due now, a flow whose
    // second job waits for its first, and a job a dead worker of that release had claimed.
    exec(
        p,
        "SELECT skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[20]));
         SELECT skiplock.enqueue('noop', queue => 'lanes', priority => (-5)::smallint,
                                 tags => ARRAY['old'], meta => '{\"tenant\": \"t1\"}');
         SELECT skiplock.enqueue('noop', queue => 'lanes', priority => 3::smallint);
         SELECT skiplock.enqueue('noop', queue => 'lanes', run_at => now() - interval '1 day');
         SELECT skiplock.enqueue('noop', queue => 'lanes', run_at => now() + interval '2 seconds');
         SELECT skiplock.enqueue('noop', '{\"v\": 1}', queue => 'keyed', run_at => now() + interval '1 hour',
                                 unique_key => 'report:2026');
         SELECT skiplock.enqueue('noop', '{\"email\": \"a@example.com\", \"n\": 1}', queue => 'keyed',
                                 run_at => now() + interval '1 hour', unique_by => 'args:email');
         SELECT skiplock.enqueue('noop', queue => 'windowed', unique_key => 'digest',
                                 unique_for => interval '100 years');
         SELECT skiplock.enqueue_flow('[{\"name\": \"a\", \"kind\": \"noop\", \"queue\": \"flows\"},
                                        {\"name\": \"b\", \"kind\": \"noop\", \"queue\": \"flows\",
                                         \"depends_on\": [\"a\"]}]');
         INSERT INTO skiplock.workers (id, host, pid) VALUES ('old-worker', 'gone', 1);
         SELECT skiplock.enqueue('noop', queue => 'crashed');
         UPDATE skiplock.jobs SET state = 'running', attempt = 1, attempted_by = 'old-worker',
                attempted_at = now() - interval '1 hour', heartbeat_at = now() - interval '1 hour'
         WHERE queue = 'crashed';
         SELECT skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[3]), queue => 'finished',
                                      priority => 7::smallint);
         UPDATE skiplock.jobs SET state = (ARRAY['completed', 'discarded', 'cancelled'])
                    [row_number]::skiplock.job_state, finalized_at = now(), attempt = 1
         FROM (SELECT id, row_number() OVER (ORDER BY id) FROM skiplock.jobs
               WHERE queue = 'finished') f
         WHERE skiplock.jobs.id = f.id;",
    )
    .await;
    let packet: i64 = one(
        p,
        &format!(
            "SELECT skiplock.submit_packet('{}', 'upgrade', 'alice')",
            frames.display()
        ),
    )
    .await;
    let fetch: i64 = one(p, "SELECT skiplock.request_fetch('http://up.example/')").await;
    let id_of = |queue: &str, key: &str| {
        format!("SELECT id FROM skiplock.jobs WHERE queue = '{queue}' AND unique_key LIKE '{key}'")
    };
    let report: i64 = one(p, &id_of("keyed", "report:2026")).await;
    let by_email: i64 = one(p, &id_of("keyed", "args:%")).await;
    let digest: i64 = one(p, &id_of("windowed", "digest")).await;
    let crashed: i64 = one(p, "SELECT id FROM skiplock.jobs WHERE queue = 'crashed'").await;
    let discarded: i64 = one(
        p,
        "SELECT id FROM skiplock.jobs WHERE queue = 'finished' AND state = 'discarded'",
    )
    .await;
    assert_eq!(count_state(p, "waiting").await, 1);
    let jobs_before = count(p, "SELECT count(*) FROM skiplock.jobs").await;

    schema::migrate_parts(p, &skiplock_workflows::schemas())
        .await
        .unwrap();
    schema::ensure_ready(p).await.unwrap();
    for part in skiplock_workflows::schemas() {
        schema::ensure_part(p, part).await.unwrap();
    }
    let (code, _, err) = run_cmd(&db.url, &["stats"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        one::<i32>(p, "SELECT api_version FROM skiplock.schema_info").await as u32,
        schema::API_VERSION
    );
    // Nothing lost: every job and every migration record of that release is still there.
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.jobs").await,
        jobs_before
    );
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM skiplock.migrations_core WHERE version <= 9 AND success"
        )
        .await,
        9
    );
    assert_eq!(
        one::<String>(
            p,
            "SELECT tags[1] || ' ' || (meta ->> 'tenant') FROM skiplock.jobs
             WHERE queue = 'lanes' AND priority = -5"
        )
        .await,
        "old t1"
    );
    // The keys, the key derived from args and the window that release's enqueues took still
    // hold against the same enqueuer, and so does the fetch's own key.
    let again = |sql: &str| {
        let sql = sql.to_string();
        async move {
            sqlx::query_as::<_, (i64, String)>(AssertSqlSafe(format!(
                "SELECT id, outcome::text FROM {sql}"
            )))
            .fetch_one(p)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
        }
    };
    assert_eq!(
        again(
            "skiplock.enqueue_result('noop', '{\"v\": 2}', 'keyed', unique_key => 'report:2026')"
        )
        .await,
        (report, "deduplicated".to_string())
    );
    assert_eq!(
        again(
            "skiplock.enqueue_result('noop', '{\"email\": \"a@example.com\", \"n\": 2}', 'keyed',
                                     unique_by => 'args:email')"
        )
        .await,
        (by_email, "deduplicated".to_string())
    );
    assert_eq!(
        again(
            "skiplock.enqueue_result('noop', '{}', 'windowed', unique_key => 'digest',
                                     unique_for => interval '100 years')"
        )
        .await,
        (digest, "deduplicated".to_string())
    );
    assert_eq!(
        one::<i64>(p, "SELECT skiplock.request_fetch('http://up.example/')").await,
        fetch
    );

    // The dead worker's job goes back, the discarded one is retried, and a worker of this
    // release runs every due job: every lane, the window's job, both jobs of the flow, the
    // packet; the keyed jobs due in an hour and the fetch (no fetch worker here) wait.
    rescue_now(p, crashed).await;
    exec(p, &format!("SELECT skiplock.retry({discarded})")).await;
    let mut qs = fast_settings();
    qs.queues = Some(BTreeMap::from([
        ("default".to_string(), 4),
        ("lanes".to_string(), 2),
        ("windowed".to_string(), 1),
        ("flows".to_string(), 1),
        ("crashed".to_string(), 1),
        ("finished".to_string(), 1),
        ("packets".to_string(), 1),
    ]));
    let worker = start_worker(p, qs, move |mut b| {
        skiplock::worker::builtin::register(b.registry_mut());
        packets::register_with(
            b,
            PacketSettings {
                concurrency: 1,
                processor: Processor::Manifest,
                timeout: Duration::from_secs(30),
                recovery: true,
                roots: skiplock_workflows::packets::roots::PacketRoots::new(&[packet_root()]),
            },
        )
    });
    wait_for("every due job to finish", LONG, || async {
        let n: i64 = count(
            p,
            "SELECT count(*) FROM skiplock.jobs
             WHERE state IN ('available', 'running', 'waiting') AND queue NOT IN ('keyed', 'fetch')",
        )
        .await;
        (n == 0).then_some(())
    })
    .await;
    wait_for("the packet to be processed", LONG, || async {
        (packets::get(p, packet).await.unwrap().state == PacketState::ReadyForReview).then_some(())
    })
    .await;
    worker.stop().await.unwrap();
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM skiplock.jobs WHERE queue = 'flows' AND state = 'completed'"
        )
        .await,
        2
    );
    assert_eq!(
        one::<i32>(
            p,
            &format!("SELECT attempt FROM skiplock.jobs WHERE id = {crashed}")
        )
        .await,
        2
    );
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM skiplock.jobs WHERE state = 'available' AND queue IN ('keyed', 'fetch')"
        )
        .await,
        3
    );
    // Migrating again is a no-op.
    schema::migrate_parts(p, &skiplock_workflows::schemas())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_previous_release_database_keeps_working_after_migrate() {
    keeps_working_after_migrate(&V7).await;
}

#[tokio::test]
async fn the_release_before_it_keeps_working_after_migrate_too() {
    keeps_working_after_migrate(&V6).await;
}

#[tokio::test]
async fn a_release_api_5_database_keeps_working_after_migrate_too() {
    keeps_working_after_migrate(&V5).await;
}

#[tokio::test]
async fn a_release_api_4_database_keeps_working_after_migrate_too() {
    keeps_working_after_migrate(&V4).await;
}

#[tokio::test]
async fn a_release_api_3_database_keeps_working_after_migrate_too() {
    keeps_working_after_migrate(&V3).await;
}

#[tokio::test]
async fn a_release_api_2_database_keeps_working_after_migrate_too() {
    keeps_working_after_migrate(&V2).await;
}

/// A database as `r` left it, filled through `r`'s API, refused until migrated, then migrated
/// and worked by this release's worker.
async fn keeps_working_after_migrate(r: &Release) {
    let db = TestDb::empty().await;
    let p = &db.pool;
    migrate_as_release(p, r).await;
    let (code, out, err) = run_cmd(&db.url, &["stats"]);
    let versions = skiplock::store::schema::API_VERSIONS;
    if versions.last() == Some(&(r.api_version, r.api_hash)) {
        // The release installed the SQL API this binary has: it is used as it is.
        assert_eq!(code, 0, "{err}");
    } else {
        // This binary refuses it in one line until it is migrated.
        let want = format!(
            "error: schema is at API version {}, this binary needs {}: run `skiplock migrate`",
            r.api_version,
            skiplock::store::schema::API_VERSION
        );
        assert_eq!((code, out.as_str(), err.trim()), (1, "", want.as_str()));
    }

    // Work and queue control through the previous release's API: due jobs, a keyed job in a
    // queue with a per-key limit, a paused queue, and a job a worker of that release had
    // claimed when it died (running, stale heartbeat).
    exec(
        p,
        "SELECT skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[30]));
         SELECT skiplock.set_key_limit('keyed', concurrency => 1);
         SELECT skiplock.enqueue('noop', queue => 'keyed', limit_key => 'k1');
         SELECT skiplock.enqueue('noop', queue => 'keyed', limit_key => 'k1');
         SELECT skiplock.pause_queue('held');
         SELECT skiplock.enqueue('noop', queue => 'held');
         INSERT INTO skiplock.workers (id, host, pid) VALUES ('old-worker', 'gone', 1);
         SELECT skiplock.enqueue('noop', queue => 'crashed');
         UPDATE skiplock.jobs SET state = 'running', attempt = 1, attempted_by = 'old-worker',
                attempted_at = now() - interval '1 hour', heartbeat_at = now() - interval '1 hour'
         WHERE queue = 'crashed';",
    )
    .await;
    let crashed: i64 = one(p, "SELECT id FROM skiplock.jobs WHERE queue = 'crashed'").await;
    // Jobs in every other state, in several priorities (the claim reads a queue priority by
    // priority since API 8: each must still be found): waiting at priorities -5 and 3, one
    // due a day ago, one due in two seconds; finished ones at priority 7 (completed,
    // discarded, cancelled), the discarded one retried after the upgrade.
    exec(
        p,
        "SELECT skiplock.enqueue('noop', queue => 'lanes', priority => (-5)::smallint);
         SELECT skiplock.enqueue('noop', queue => 'lanes', priority => 3::smallint);
         SELECT skiplock.enqueue('noop', queue => 'lanes', run_at => now() - interval '1 day');
         SELECT skiplock.enqueue('noop', queue => 'lanes', run_at => now() + interval '2 seconds');
         SELECT skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[3]), queue => 'finished',
                                      priority => 7::smallint);
         UPDATE skiplock.jobs SET state = (ARRAY['completed', 'discarded', 'cancelled'])
                    [row_number]::skiplock.job_state, finalized_at = now(), attempt = 1
         FROM (SELECT id, row_number() OVER (ORDER BY id) FROM skiplock.jobs
               WHERE queue = 'finished') f
         WHERE skiplock.jobs.id = f.id;",
    )
    .await;
    let discarded: i64 = one(
        p,
        "SELECT id FROM skiplock.jobs WHERE queue = 'finished' AND state = 'discarded'",
    )
    .await;

    skiplock::store::schema::migrate_parts(p, &skiplock_workflows::schemas())
        .await
        .unwrap();
    skiplock::store::schema::ensure_ready(p).await.unwrap();
    let (code, _, err) = run_cmd(&db.url, &["stats"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        one::<i32>(p, "SELECT api_version FROM skiplock.schema_info").await as u32,
        skiplock::store::schema::API_VERSION
    );
    // A job enqueued through this release's API joins the old ones; so does a flow (two
    // jobs in one call) and a job waiting for one of the old jobs.
    exec(p, "SELECT skiplock.enqueue('noop', '{\"after\": true}')").await;
    exec(
        p,
        "SELECT skiplock.enqueue_flow('[{\"name\": \"a\", \"kind\": \"noop\"},
                                        {\"name\": \"b\", \"kind\": \"noop\", \"depends_on\": [\"a\"]}]');
         SELECT skiplock.enqueue('noop', depends_on => ARRAY[(SELECT min(id) FROM skiplock.jobs
                                                              WHERE queue = 'default')]);",
    )
    .await;
    assert_eq!(count_state(p, "waiting").await, 2);
    // The claim path lost its second running index; the limits kept theirs.
    assert_eq!(
        one::<i64>(
            p,
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'skiplock'
             AND indexname IN ('jobs_running_idx', 'jobs_running_key_idx')"
        )
        .await,
        1
    );
    // The row trigger that locked every updated job (API 4 and before) is gone.
    assert_eq!(
        one::<i64>(
            p,
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'skiplock.jobs'::regclass
             AND tgname = 'jobs_requeue_unique'"
        )
        .await,
        0
    );
    // The limits and the pause survive the upgrade.
    assert!(one::<bool>(p, "SELECT paused FROM skiplock.queues WHERE queue = 'held'").await);
    assert_eq!(
        one::<i32>(
            p,
            "SELECT key_concurrency FROM skiplock.queues WHERE queue = 'keyed'"
        )
        .await,
        1
    );

    // The dead worker's job goes back (the rescuer's statement, run now), the discarded job
    // is retried, then a worker of this release finishes every job of the unpaused queues,
    // and none of the held one.
    rescue_now(p, crashed).await;
    exec(p, &format!("SELECT skiplock.retry({discarded})")).await;
    let mut qs = fast_settings();
    qs.queues = Some(BTreeMap::from([
        ("default".to_string(), 4),
        ("keyed".to_string(), 2),
        ("held".to_string(), 1),
        ("crashed".to_string(), 1),
        ("lanes".to_string(), 2),
        ("finished".to_string(), 1),
    ]));
    let worker = start_worker(p, qs, |mut b| {
        skiplock::worker::builtin::register(b.registry_mut());
        b
    });
    wait_for(
        "every job of the unpaused queues to finish",
        LONG,
        || async {
            let n: i64 = count(
                p,
                "SELECT count(*) FROM skiplock.jobs
                 WHERE state NOT IN ('completed', 'cancelled') AND queue <> 'held'",
            )
            .await;
            (n == 0).then_some(())
        },
    )
    .await;
    worker.stop().await.unwrap();
    // 34 of the queues above, 4 waiting in lanes, the one completed before, the retried one
    // and the three of the flows.
    assert_eq!(count_state(p, "completed").await, 43);
    assert_eq!(count_state(p, "cancelled").await, 1);
    assert_eq!(
        one::<String>(
            p,
            "SELECT state::text FROM skiplock.jobs WHERE queue = 'held'"
        )
        .await,
        "available"
    );
    assert_eq!(
        one::<i32>(
            p,
            &format!("SELECT attempt FROM skiplock.jobs WHERE id = {crashed}")
        )
        .await,
        2
    );
    // Migrating again is a no-op.
    skiplock::store::schema::migrate_parts(p, &skiplock_workflows::schemas())
        .await
        .unwrap();
}

/// Waits for a heartbeat of the (one) worker written after `after`; returns its time.
async fn beat_after(p: &PgPool, after: DateTime<Utc>) -> DateTime<Utc> {
    wait_for("a heartbeat of the worker", LONG, || async {
        let t: Option<DateTime<Utc>> =
            sqlx::query_scalar("SELECT max(heartbeat_at) FROM skiplock.workers")
                .fetch_one(p)
                .await
                .unwrap();
        t.filter(|t| *t > after)
    })
    .await
}

/// A worker checks the schema's SQL API at start and again at every heartbeat: a `skiplock
/// migrate` of its own release changes nothing, one of a newer release (its record, written
/// here by hand) makes it stop as if asked to and exit 1 with the one-line refusal, rather
/// than go on running its own release's statements against another schema.
#[tokio::test]
async fn a_running_worker_stops_when_another_release_migrates_the_schema() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let mut child = KillOnDrop(spawn_worker_process(
        &db.url,
        &[],
        &[("SKIPLOCK_RESCUE_AFTER", "2s")],
    ));
    let child = &mut child.0;
    let id: i64 = one(p, "SELECT skiplock.enqueue('noop', '{}')").await;
    wait_job(p, id, "completed", |r| r.state.as_str() == "completed").await;

    skiplock::store::schema::migrate_parts(p, &skiplock_workflows::schemas())
        .await
        .unwrap();
    let mut after: DateTime<Utc> = one(p, "SELECT now()").await;
    // Three beats after it (each checks the schema after writing its heartbeat).
    for _ in 0..3 {
        after = beat_after(p, after).await;
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the worker exited after a migrate of its own release"
    );

    let newer: i32 = one(
        p,
        "UPDATE skiplock.schema_info SET api_version = api_version + 1 RETURNING api_version",
    )
    .await;
    let status = wait_exit_within(child, LONG).await;
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    let want = format!(
        "error: schema was migrated by a newer skiplock (API version {newer}); this binary knows {}: use that skiplock or a newer one (no downgrades)",
        skiplock::store::schema::API_VERSION
    );
    assert_eq!(err.lines().last(), Some(want.as_str()), "{err}");
    assert_eq!(
        err.matches("the schema was migrated while this worker ran")
            .count(),
        1,
        "{err}"
    );
    // It stopped gracefully: its row is gone.
    assert_eq!(count(p, "SELECT count(*) FROM skiplock.workers").await, 0);
}

/// The schema of a database as a sorted list of lines, one per column, constraint, index,
/// trigger, function, type and table option of schema `skiplock` (the migrations' own records
/// left out: a database of an earlier release has its history besides them).
async fn schema_lines(p: &PgPool) -> Vec<String> {
    let mut lines: Vec<String> = sqlx::query_scalar(
        "SELECT format('column %s.%s %s %s %s', c.relname, a.attname,
                       format_type(a.atttypid, a.atttypmod), a.attnotnull,
                       pg_get_expr(d.adbin, d.adrelid))
         FROM pg_attribute a
         JOIN pg_class c ON c.oid = a.attrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE n.nspname = 'skiplock' AND c.relkind IN ('r', 'v') AND a.attnum > 0
           AND NOT a.attisdropped AND c.relname NOT LIKE 'migrations\\_%'
         UNION ALL
         SELECT format('constraint %s.%s %s', c.relname, k.conname, pg_get_constraintdef(k.oid))
         FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'skiplock' AND c.relname NOT LIKE 'migrations\\_%'
         UNION ALL
         SELECT format('index %s', i.indexdef) FROM pg_indexes i
         WHERE i.schemaname = 'skiplock' AND i.tablename NOT LIKE 'migrations\\_%'
         UNION ALL
         SELECT format('options %s %s', c.relname, c.reloptions) FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'skiplock' AND c.reloptions IS NOT NULL
         UNION ALL
         SELECT format('trigger %s %s', c.relname, pg_get_triggerdef(t.oid))
         FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'skiplock' AND NOT t.tgisinternal
         UNION ALL
         SELECT format('function %s %s', p.oid::regprocedure, md5(pg_get_functiondef(p.oid)))
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'skiplock' AND p.prokind IN ('f', 'p')
         UNION ALL
         SELECT format('type %s %s', t.typname,
                       (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                        FROM pg_enum e WHERE e.enumtypid = t.oid))
         FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
         WHERE n.nspname = 'skiplock' AND t.typtype IN ('e', 'c') AND t.typrelid = 0
            OR n.nspname = 'skiplock' AND t.typtype = 'c'
               AND (SELECT c.relkind FROM pg_class c WHERE c.oid = t.typrelid) = 'c'
         UNION ALL
         SELECT format('setting %s %s', s.name, s.value) FROM skiplock.settings s
         UNION ALL
         SELECT format('lock %s', l.name) FROM skiplock.locks l
         UNION ALL
         SELECT format('reserved %s %s %s %s', r.part, r.what, r.name, r.use_instead)
         FROM skiplock.reserved_names r",
    )
    .fetch_all(p)
    .await
    .unwrap();
    lines.sort();
    lines
}

/// A database an earlier release migrated ends, after `skiplock migrate`, with exactly the
/// schema a new database gets: the history's last state is each part's baseline, so nothing
/// differs between the two paths (a column, a constraint's name, an index, a function).
#[tokio::test]
async fn a_migrated_database_of_an_earlier_release_has_the_schema_of_a_new_one() {
    let old = TestDb::empty().await;
    migrate_as_release(&old.pool, &V7).await;
    same_schema_as_a_new_database(&old).await;
}

/// So does one release API 8 migrated (each part's migrations recorded in a table of its own).
#[tokio::test]
async fn a_migrated_release_api_8_database_has_the_schema_of_a_new_one() {
    let old = TestDb::empty().await;
    migrate_as_release_8(&old.pool).await;
    same_schema_as_a_new_database(&old).await;
}

/// `old`, migrated now, has the schema of a database this release migrates new.
async fn same_schema_as_a_new_database(old: &TestDb) {
    let fresh = TestDb::new().await;
    skiplock::store::schema::migrate_parts(&old.pool, &skiplock_workflows::schemas())
        .await
        .unwrap();
    let (a, b) = (
        schema_lines(&fresh.pool).await,
        schema_lines(&old.pool).await,
    );
    let only_fresh: Vec<&String> = a.iter().filter(|l| !b.contains(l)).collect();
    let only_old: Vec<&String> = b.iter().filter(|l| !a.contains(l)).collect();
    assert!(
        only_fresh.is_empty() && only_old.is_empty(),
        "a new database has {only_fresh:#?}\nan upgraded one has {only_old:#?}"
    );
    assert!(
        a.len() > 300,
        "{} lines: the query read the schema",
        a.len()
    );
}

/// A program built without the workflows installs no workflow table, type or reserved name;
/// a program with them, migrating the same database later, adds its parts, and a workflow
/// refuses to start until it has. A core-only program migrating again keeps the parts and
/// their grants (the worker role may still not delete a packet).
#[tokio::test]
async fn a_core_only_database_has_no_workflow_part_until_a_program_with_one_migrates_it() {
    use skiplock::store::schema;
    let db = TestDb::empty().await;
    let p = &db.pool;
    schema::migrate(p).await.unwrap();
    let workflow_tables =
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                           WHERE n.nspname = 'skiplock'
                             AND c.relname IN ('pages', 'hosts', 'crawls', 'crawl_pages', 'packs',
                                               'packets', 'packet_events')";
    assert_eq!(count(p, workflow_tables).await, 0);
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM pg_type WHERE typname = 'packet_state'"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM skiplock.reserved_names WHERE part <> 'core'"
        )
        .await,
        0
    );
    // The core works: a job in what would be a workflow's queue is anybody's here.
    exec(
        p,
        "SELECT skiplock.enqueue('noop', queue => 'fetch', unique_key => 'fetch:x')",
    )
    .await;
    let packets = &skiplock_workflows::parts::PACKETS;
    let e = schema::ensure_part(p, packets)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the packets part's schema is not installed"),
        "{e}"
    );

    schema::migrate_parts(p, &skiplock_workflows::schemas())
        .await
        .unwrap();
    assert_eq!(count(p, workflow_tables).await, 7);
    schema::ensure_part(p, packets).await.unwrap();
    schema::ensure_part(p, &skiplock_workflows::parts::FETCH)
        .await
        .unwrap();
    // The workflows' names are reserved from now on; the job enqueued before stays.
    let e = sqlx::query("SELECT skiplock.enqueue('noop', queue => 'fetch')")
        .execute(p)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("reserved for skiplock's own functions: use skiplock.request_fetch"),
        "{e}"
    );
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM skiplock.jobs WHERE queue = 'fetch'"
        )
        .await,
        1
    );
    // A core-only program migrating again leaves the workflows in place, with their grants:
    // the core's roles file re-grants the worker role every table, and the packets part's
    // recorded grants take DELETE on packets back (sql/api/95_part_grants.sql).
    schema::migrate(p).await.unwrap();
    assert_eq!(count(p, workflow_tables).await, 7);
    schema::ensure_part(p, packets).await.unwrap();
    let worker_may = "SELECT (has_table_privilege('skiplock_worker', 'skiplock.packets', 'DELETE')::int
                           + has_table_privilege('skiplock_worker', 'skiplock.packet_events', 'INSERT')::int)::int8";
    assert_eq!(count(p, worker_may).await, 0);
}
