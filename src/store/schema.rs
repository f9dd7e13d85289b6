//! Installing and checking the schema, and the version of the SQL API.
//!
//! `skiplock migrate` ([`migrate`]) runs the sqlx migrations (tables, append-only:
//! `migrations/`), then re-applies the SQL API (`sql/api/*.sql`: functions, views, triggers,
//! `CREATE OR REPLACE`, so those files are the single source of truth) and records in
//! `skiplock.schema_info` which API it installed: [`API_VERSION`] and a hash of the API
//! files and migrations ([`api_hash`]). Every worker and CLI command that needs the schema
//! checks that record first ([`ensure_ready`]) and refuses, in one line, to run against an
//! older API ("run `skiplock migrate`") or a newer one; `migrate` refuses to downgrade.
//!
//! **Changing the SQL API** (any file in `sql/api/` or `migrations/`): append a line to
//! [`API_VERSIONS`] with the next version number and the new hash, in the same commit. The
//! unit test `the_recorded_hash_is_the_hash_of_the_api_files` fails until you do, and prints
//! the hash to record. A version is frozen once a release carries it; until then (the last
//! line, during development of the next release) its hash is updated in place instead, and a
//! development database migrated with the earlier hash is refused as "another build" until
//! `skiplock migrate` runs again.

use sha2::{Digest, Sha256};

use super::{Executor, Pool, sql};
use crate::error::{Error, Result, SchemaMismatch};

/// The embedded table migrations (`migrations/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Every version of the SQL API and the hash of its files, oldest first; append only. A
/// database migrated before versions were recorded (release 0.1.0 and its successors up to
/// version 1) counts as version 0.
pub const API_VERSIONS: &[(u32, &str)] = &[
    // The store layer's API (the previous round's main, 710013a).
    (
        1,
        "8d526bbb2c14f484a3b8296210216f22e136e5169c18d5e8c31078ac0b9ea8c8",
    ),
    // Limits and pause, claim-ahead and the waiting registry, fetch politeness as a limit.
    (
        2,
        "fba89b0989b1cbdcd4e20c1b05ff513f07824c0de34700d256a987121bc44721",
    ),
    // One running index fewer on the claim path (migration 0011).
    (
        3,
        "eae46b9dc1dd23138028a7c9585ba1eb5241b67efe4d0e0991e2c1e08e956787",
    ),
    // skiplock._enqueue runs its checks' queries only when one of their rules fails, and
    // skiplock.enqueue the reserved-prefix query only for a key (issue 13); cancelling a
    // running job wakes its queue's producers; skiplock.change_key_limit changes one per-key
    // limit and keeps the other under the queue row's lock.
    (
        4,
        "85add6e9e4ed61bed0bb9c50e8eaf5e6a16cf9c0d1d42379bc7073c3445b60b7",
    ),
    // No BEFORE UPDATE row trigger on skiplock.jobs (it locked and WAL-logged every row of every
    // claim, ack and heartbeat; issue 13): the statements that send keyed jobs back supersede
    // them themselves. Stop workers of version 4 before migrating (README, Upgrading): their ack
    // statement relied on the trigger.
    (
        5,
        "a3aaf7dea943f65f01329514e69110028aa84d61d903033ea32c8c153b053d21",
    ),
    // skiplock._claim_limited claims ahead into a worker's buffer in a queue whose one limit is
    // its concurrency (half the room the limit leaves) and reports that room (issue 14's
    // "limits cost nothing while they do not bind"); pausing a queue wakes its workers (to
    // put such jobs back); a key's rate is advanced with one UPDATE when it allows the start.
    // The 4-argument form is dropped: workers of version 5 stop on the schema change (their
    // claim of a controlled queue would fail).
    (
        6,
        "1a2acf0cf4982b9563c7b0d1a9af4ab8b8a5a30d333a30bdccd66d86bcc7bc7a",
    ),
    // Hardening: enqueue refuses args a worker could not read (skiplock._unreadable_args) and
    // jobs in skiplock's own and the workflows' queues and kinds (skiplock._reserved_job);
    // unique keys are per kind and queue, and a replace records the args it overwrote
    // (migration 0013); the limited claim is set-based and bounded by keys examined
    // (migration 0012); a periodic job's latest failed enqueue is recorded in
    // skiplock.periodic_jobs (migration 0014); wake-ups go to a channel whose name only the
    // owner and the worker role can read (migration 0015).
    (
        7,
        "0ceb2a0e2bed1cc9b9766aaef605e7be573e6a149b699fcca60f544f126bb7d6",
    ),
    // Claims that stay fast while Postgres cannot vacuum: skiplock._claim reads each lane of a
    // queue (skiplock.lanes, migration 0016; one per priority) from where the worker's last
    // claims left it, and is the one claim statement (it calls skiplock._claim_limited for a
    // controlled queue). Workers of version 7 stop on the schema change.
    (
        8,
        "14ff60c97c6245acedfbbf8f7a45050fed3ca73d1e01a3e089d0d5e2b86af909",
    ),
];

/// The SQL API version this binary installs and needs (the last of [`API_VERSIONS`]).
pub const API_VERSION: u32 = API_VERSIONS[API_VERSIONS.len() - 1].0;

/// The SQL API files, applied in this order after the migrations.
pub const API_FILES: &[(&str, &str)] = &[
    ("sql/api/10_core.sql", sql!("api", "10_core")),
    ("sql/api/15_limits.sql", sql!("api", "15_limits")),
    ("sql/api/20_fetch.sql", sql!("api", "20_fetch")),
    ("sql/api/30_pack.sql", sql!("api", "30_pack")),
    ("sql/api/40_packets.sql", sql!("api", "40_packets")),
    ("sql/api/50_maintenance.sql", sql!("api", "50_maintenance")),
    ("sql/api/90_roles.sql", sql!("api", "90_roles")),
];

/// The hash of the schema this binary installs: SHA-256 over the SQL API files (names and
/// text, line endings normalised) and the migrations (versions and sqlx checksums), hex.
pub fn api_hash() -> String {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(compute_api_hash).clone()
}

fn compute_api_hash() -> String {
    let mut h = Sha256::new();
    for (name, sql) in API_FILES {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(sql.replace("\r\n", "\n").as_bytes());
        h.update([0]);
    }
    for m in MIGRATOR.iter() {
        h.update(m.version.to_be_bytes());
        h.update(&m.checksum);
    }
    hex::encode(h.finalize())
}

/// What `skiplock.schema_info` records.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SchemaInfo {
    /// The SQL API version installed.
    pub api_version: i32,
    /// Its [`api_hash`].
    pub api_hash: String,
    /// The skiplock release that installed it.
    pub migrated_by: String,
}

/// What the database holds of skiplock's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
struct Installed {
    /// `skiplock.jobs` and the migrations table exist.
    schema: bool,
    /// `skiplock.schema_info` exists (migration 7).
    versioned: bool,
}

/// The recorded API, if the database has the table and the row.
async fn recorded(pool: &Pool) -> Result<Option<SchemaInfo>> {
    let i: Installed = sqlx::query_as(sql!("schema", "installed"))
        .fetch_one(pool)
        .await?;
    if !i.versioned {
        return Ok(None);
    }
    Ok(sqlx::query_as(sql!("schema", "schema_info"))
        .fetch_optional(pool)
        .await?)
}

/// The version a record says, 0 when there is none.
fn version_of(info: &Option<SchemaInfo>) -> u32 {
    info.as_ref()
        .map(|i| u32::try_from(i.api_version).unwrap_or(0))
        .unwrap_or(0)
}

/// Whether this binary may run against a database whose record is `info` (the decision
/// alone: [`ensure_ready`] adds the migrations check).
pub fn check_version(info: Option<&SchemaInfo>, binary: u32, hash: &str) -> Result<()> {
    let db = info.map_or(0, |i| u32::try_from(i.api_version).unwrap_or(0));
    if db > binary {
        return Err(Error::Schema(SchemaMismatch::Newer { db, binary }));
    }
    if db < binary {
        return Err(Error::Schema(SchemaMismatch::Older { db, binary }));
    }
    if info.is_some_and(|i| i.api_hash != hash) {
        return Err(Error::Schema(SchemaMismatch::Changed { version: db }));
    }
    Ok(())
}

/// Applies the migrations and (re)installs the SQL API, under an advisory lock so several
/// processes may migrate at once, then records [`API_VERSION`]. Refuses (before changing
/// anything) a database migrated by a newer skiplock.
pub async fn migrate(pool: &Pool) -> Result<()> {
    refuse_downgrade(&recorded(pool).await?)?;
    MIGRATOR.run(pool).await?;
    let mut tx = pool.begin().await?;
    sqlx::query(sql!("schema", "api_lock"))
        .execute(&mut *tx)
        .await?;
    // Another process may have migrated meanwhile: look again under the lock.
    let info: Option<SchemaInfo> = sqlx::query_as(sql!("schema", "schema_info"))
        .fetch_optional(&mut *tx)
        .await?;
    refuse_downgrade(&info)?;
    for (name, sql) in API_FILES {
        sqlx::raw_sql(*sql)
            .execute(&mut *tx)
            .await
            .map_err(|e| Error::Other(format!("installing {name}: {e}")))?;
    }
    record(&mut *tx).await?;
    tx.commit().await?;
    Ok(())
}

fn refuse_downgrade(info: &Option<SchemaInfo>) -> Result<()> {
    let db = version_of(info);
    if db > API_VERSION {
        return Err(Error::Schema(SchemaMismatch::Newer {
            db,
            binary: API_VERSION,
        }));
    }
    Ok(())
}

async fn record<'e, E: Executor<'e>>(exec: E) -> Result<()> {
    sqlx::query(sql!("schema", "record_api"))
        .bind(API_VERSION as i32)
        .bind(api_hash())
        .bind(env!("CARGO_PKG_VERSION"))
        .execute(exec)
        .await?;
    Ok(())
}

/// Fails unless the database holds exactly the schema this binary needs: every embedded
/// migration applied ([`Error::NotMigrated`] otherwise) and the SQL API at [`API_VERSION`]
/// with this binary's hash ([`Error::Schema`] otherwise). Workers and CLI commands call it
/// before anything else.
pub async fn ensure_ready(pool: &Pool) -> Result<()> {
    // The usual case in one round trip (a worker's start-up is on the clock): the record of
    // exactly this API. `migrate` writes it only after every migration of the same binary
    // ran, and the hash covers the migrations, so it vouches for them too.
    match sqlx::query_as::<_, SchemaInfo>(sql!("schema", "schema_info"))
        .fetch_optional(pool)
        .await
    {
        Ok(Some(i)) if i.api_version == API_VERSION as i32 && i.api_hash == api_hash() => {
            return Ok(());
        }
        Ok(_) => {}
        // No schema, or one from before versions were recorded: the full check says which.
        Err(sqlx::Error::Database(d)) if matches!(d.code().as_deref(), Some("42P01" | "3F000")) => {
        }
        Err(e) => return Err(e.into()),
    }
    let i: Installed = sqlx::query_as(sql!("schema", "installed"))
        .fetch_one(pool)
        .await?;
    if !i.schema {
        return Err(Error::NotMigrated("no skiplock schema".into()));
    }
    let info = recorded(pool).await?;
    // A newer database first: its migrations may be ones this binary has never heard of.
    refuse_downgrade(&info)?;
    let applied: Vec<i64> = sqlx::query_scalar(sql!("schema", "applied_migrations"))
        .fetch_all(pool)
        .await?;
    if MIGRATOR.iter().any(|m| !applied.contains(&m.version)) {
        return Err(Error::Schema(SchemaMismatch::Older {
            db: version_of(&info),
            binary: API_VERSION,
        }));
    }
    check_version(info.as_ref(), API_VERSION, &api_hash())
}

/// How a schema's record differs from what this binary installs (`None`: it is the same), for
/// a process that checked it at start and keeps running: a `skiplock migrate` of another
/// release since then gives the mismatch. `info`: the record (as the worker's heartbeat reads
/// it with its row, `store::heartbeat::worker_upsert`), `None` if there is none.
pub fn mismatch_of(info: Option<&SchemaInfo>) -> Option<SchemaMismatch> {
    match check_version(info, API_VERSION, &api_hash()) {
        Err(Error::Schema(m)) => Some(m),
        _ => None,
    }
}

/// [`mismatch_of`] the record read now (one query), for a beat whose own statements failed.
pub async fn mismatch_since_start(pool: &Pool) -> Result<Option<SchemaMismatch>> {
    let info: Option<SchemaInfo> = sqlx::query_as(sql!("schema", "schema_info"))
        .fetch_optional(pool)
        .await?;
    Ok(mismatch_of(info.as_ref()))
}

/// After a heartbeat (a worker's or an apalis storage's): whether another release migrated
/// the schema since this process checked it. `recorded`: the record the beat's worker upsert
/// read with its row (`None`: that statement failed or did not run); `outage`: a statement of
/// the beat failed because the database is unavailable, so nothing is checked (the next beat
/// will). A beat that failed for another reason reads the record (the new schema may be what
/// failed it).
pub async fn moved_after_beat(
    pool: &Pool,
    recorded: Option<Option<SchemaInfo>>,
    outage: bool,
) -> Result<Option<SchemaMismatch>> {
    match recorded {
        Some(info) => Ok(mismatch_of(info.as_ref())),
        None if outage => Ok(None),
        None => mismatch_since_start(pool).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_hash_is_the_hash_of_the_api_files() {
        let actual = api_hash();
        let (version, recorded) = API_VERSIONS[API_VERSIONS.len() - 1];
        assert_eq!(
            recorded,
            actual,
            "sql/api/ or migrations/ changed: append ({}, \"{actual}\") to API_VERSIONS in \
             src/store/schema.rs (the next API version), in the same commit",
            version + 1
        );
    }

    #[test]
    fn versions_only_go_up_and_every_hash_is_new() {
        for (i, (v, h)) in API_VERSIONS.iter().enumerate() {
            assert_eq!(*v as usize, i + 1, "versions are 1, 2, 3, … in order");
            assert_eq!(h.len(), 64, "a SHA-256 in hex");
            assert!(
                API_VERSIONS[..i].iter().all(|(_, old)| old != h),
                "version {v} repeats an older hash: a changed API needs a new hash"
            );
        }
    }

    fn info(v: i32, hash: &str) -> SchemaInfo {
        SchemaInfo {
            api_version: v,
            api_hash: hash.into(),
            migrated_by: "test".into(),
        }
    }

    #[test]
    fn older_newer_and_other_builds_are_refused_with_one_clear_line() {
        assert!(check_version(Some(&info(3, "h")), 3, "h").is_ok());
        let e = check_version(None, 3, "h").unwrap_err().to_string();
        assert_eq!(
            e,
            "schema is at API version 0, this binary needs 3: run `skiplock migrate`"
        );
        let e = check_version(Some(&info(2, "h")), 3, "h")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "schema is at API version 2, this binary needs 3: run `skiplock migrate`"
        );
        let e = check_version(Some(&info(4, "h")), 3, "h")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "schema was migrated by a newer skiplock (API version 4); this binary knows 3"
            ),
            "{e}"
        );
        let e = check_version(Some(&info(3, "other")), 3, "h")
            .unwrap_err()
            .to_string();
        assert!(e.contains("run `skiplock migrate`"), "{e}");
        // A negative version (someone wrote the row by hand) is no version.
        assert!(check_version(Some(&info(-1, "h")), 3, "h").is_err());
    }
}
