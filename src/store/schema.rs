//! Installing and checking the schema, and the version of the SQL API.
//!
//! The schema comes in parts ([`PartSchema`]; docs/internals.md, "The schema in parts"): the
//! core (the queue) and each optional part a program includes (a crate of its own, such as
//! the built-in workflows of skiplock-workflows, through `skiplock::part::Part`). A part has
//! its migrations (tables, types and indexes, append-only, recorded in
//! `skiplock.migrations_<part>`; the core's in `migrations/core/`) and its SQL API files
//! (functions, views, triggers, `CREATE OR REPLACE`, so those files are the single source of
//! truth; the core's in `sql/api/`). `skiplock migrate` ([`migrate_parts`]) runs the
//! migrations of the core and of every part the program has, re-applies their SQL API in
//! order, and records what it installed: the core's [`API_VERSION`] and hash ([`api_hash`]) in
//! `skiplock.schema_info`, each part's hash ([`part_hash`]) and grants in
//! `skiplock.schema_parts`. A part the program lacks is left as it is, so a core-only program
//! and one with the workflows can share a database. Every worker
//! and CLI command that needs the schema checks the core's record first ([`ensure_ready`]),
//! and a workflow checks its part's ([`ensure_part`]); each refuses, in one line, to run
//! against an older API ("run `skiplock migrate`") or a newer one; `migrate` refuses to
//! downgrade.
//!
//! Releases up to SQL API 7 kept one migration history for every table (`_sqlx_migrations`,
//! `migrations/history/`). On a database one of them migrated, `migrate` first finishes that
//! history, which left every part as its baseline (`migrations/<part>/0001_baseline.sql`) is,
//! then records each part's baseline as applied instead of running it.
//!
//! **Changing the SQL API** (a core file in `sql/api/` or `migrations/`): append a line to
//! [`API_VERSIONS`] with the next version number and the new hash, in the same commit. The
//! unit test `the_recorded_hash_is_the_hash_of_the_api_files` fails until you do, and prints
//! the hash to record. A version is frozen once a release carries it; until then (the last
//! line, during development of the next release) its hash is updated in place instead, and a
//! development database migrated with the earlier hash is refused as "another build" until
//! `skiplock migrate` runs again.

use sha2::{Digest, Sha256};
use sqlx::migrate::Migrator;

use super::{Executor, Pool, sql};
use crate::error::{Error, Result, SchemaMismatch};

/// The migrations of releases up to SQL API 7 (one history for every table): run only on a
/// database one of them migrated ([`migrate`]). Read through [`history`].
static HISTORY: Migrator = sqlx::migrate!("./migrations/history");

/// History files whose comments were reworded after the releases that applied them (their
/// statements are unchanged; `history_rewording_changed_only_comments` checks it): the version,
/// the sqlx checksum (SHA-384) of the text those releases applied, and the SHA-256 of that
/// text's statements (every line that is not a `--` comment).
const REWORDED_HISTORY: &[(i64, &str, &str)] = &[
    (4, "ff5ae408365421039084ec4c71de7e1471bcae527185c8f55dfcc0896bed8c1b5ef9289df216ab209b821fc9f3667ace", "cfc312aa44f76b5b23b6237e14822db42ede2a846dd7eaa5ae787750d92276dd"),
    (6, "6301bd47f963035a817a964f6b3edae1488068b35078991973aede55d4b1678a76f7d9191eb89ab5640b243b52422450", "77fbb36acc1ad6d727674c642b93ef65de8e5cab5defb1c36037e41896ca8fc9"),
    (7, "a6b14fa62914675ee435ed321e31d7f5aaeb110243c5e062d1b6adef99b9bd757c6e52cf27bd29c2e82958578f4230ae", "8dce1d6a18aaed5553ab6335e6122dbe037e98e74aaf731dec16f98c66c21d01"),
    (8, "2972896a0b6635abbbe6ec6d80939fdbbe9442d5674c69e830516d3cfc31630cb27464cb635eef0423939f564ceb4641", "ce16a0420bd12630e23e0ef2426ee9bd1715c58442f1a2330b343b9fbc610e98"),
    (9, "6582e54e7d2c67b4306add6208964c4a223de0bc463194788ce54b5fb90abf68aa2db3bd15efcf7493c24ab841306c4c", "75a941d3ae12dbbf1a58fa77c92a74b95601b2ecbce30f3b3f8319fee528dbcb"),
    (10, "21d5b8f772ac0b4627d99f89d3d24c077488ae18a41ef3e14048fb31761499a91e421dcd9b52a22d53245bef95cbb676", "28a9f2b79cb4ade6477d5405b63c12fdd63c1456abb4a71865760ed2148a7e72"),
    (11, "d26960acb74c9f7dac46a9a891112bcae920e36469dba9dfc8ec3c695d88b80384234bfac3a12e94581e59ead7f150a6", "0f98c648f6890768c2ff186c7df50538be36d8128e481dbfb25bc6cb44fcb2f5"),
];

/// The history as the releases applied it: a reworded file keeps the checksum those releases
/// recorded, so sqlx still validates the databases they migrated.
fn history() -> Migrator {
    let migrations = HISTORY
        .migrations
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some((_, applied, _)) = REWORDED_HISTORY.iter().find(|r| r.0 == m.version)
                && let Ok(sum) = hex::decode(applied)
            {
                m.checksum = sum.into();
            }
            m
        })
        .collect();
    Migrator::with_migrations(migrations)
}

static CORE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/core");

/// One SQL API file of a part: its name (as the hash records it) and its text.
pub type ApiFile = (&'static str, &'static str);

/// A part of skiplock's schema: its name, its migrations, where they are recorded, its SQL
/// API files and its grants. The core is [`CORE`]; an optional part (a crate of its own, such
/// as skiplock-workflows) declares its own and hands it to [`migrate_parts`], usually through
/// `skiplock::part::Part`.
#[derive(Debug)]
pub struct PartSchema {
    /// `core`, or the optional part's (lower-case letters: it names its migrations table, and
    /// `skiplock.schema_parts` allows no other).
    pub name: &'static str,
    /// Its migrations (`sqlx::migrate!` of its own folder): tables, types, indexes,
    /// append-only.
    pub migrations: &'static Migrator,
    /// Where its migrations are recorded: `skiplock.migrations_<name>`.
    pub table: &'static str,
    /// Its SQL API files, applied in this order after the core's own (functions, views,
    /// triggers; `CREATE OR REPLACE`). A file writes the part's rows of
    /// `skiplock.reserved_names` (sql/api/80_reserved.sql builds the checks from them).
    pub api: &'static [ApiFile],
    /// Its grants to skiplock's roles (None: none beyond the core's). `migrate` records them
    /// in `skiplock.schema_parts`, and every program's migrate applies the recorded grants
    /// after the core's roles file (sql/api/95_part_grants.sql), so a program without the
    /// part keeps them: the core's file re-grants the worker role every table.
    pub grants: Option<ApiFile>,
}

/// The core: the queue, its limits and maintenance.
pub static CORE: PartSchema = PartSchema {
    name: "core",
    migrations: &CORE_MIGRATIONS,
    table: "skiplock.migrations_core",
    api: &[],
    grants: None,
};

impl PartSchema {
    /// Its migrations, recorded in its own table in schema `skiplock`.
    fn migrator(&self) -> Migrator {
        let mut m = Migrator::with_migrations(self.migrations.migrations.to_vec());
        m.dangerous_set_table_name(self.table);
        m.create_schema("skiplock");
        m
    }

    /// Refuses a part whose name or migrations table could reach a statement as anything but
    /// a plain name (the table is written into `sql/schema/applied_migrations.sql`).
    fn check(&self) -> Result<()> {
        let plain = !self.name.is_empty() && self.name.bytes().all(|b| b.is_ascii_lowercase());
        if !plain || self.table != format!("skiplock.migrations_{}", self.name) {
            return Err(Error::Invalid(format!(
                "part {:?}: its name must be lower-case letters, and its migrations table skiplock.migrations_<name> (got {:?})",
                self.name, self.table
            )));
        }
        Ok(())
    }
}

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
    // skiplock.enqueue the reserved-prefix query only for a key (docs/internals.md); cancelling a
    // running job wakes its queue's producers; skiplock.change_key_limit changes one per-key
    // limit and keeps the other under the queue row's lock.
    (
        4,
        "85add6e9e4ed61bed0bb9c50e8eaf5e6a16cf9c0d1d42379bc7073c3445b60b7",
    ),
    // No BEFORE UPDATE row trigger on skiplock.jobs (it locked and WAL-logged every row of every
    // claim, ack and heartbeat; docs/internals.md): the statements that send keyed jobs back supersede
    // them themselves. Stop workers of version 4 before migrating (docs/operations.md, "Upgrading"): their ack
    // statement relied on the trigger.
    (
        5,
        "a3aaf7dea943f65f01329514e69110028aa84d61d903033ea32c8c153b053d21",
    ),
    // skiplock._claim_limited claims ahead into a worker's buffer in a queue whose one limit is
    // its concurrency (half the room the limit leaves) and reports that room (docs/internals.md's
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
    // controlled queue). Workers of version 7 stop on the schema change. Also
    // skiplock.cancel_by_key, skiplock.reschedule, skiplock.hold_key; tags, meta, unique_by and
    // unique_for on the enqueue functions (core migration 0006); the claim returns tags and
    // meta, and the heartbeat and the ack take each job's start.
    (
        8,
        "56e875999a1b8444ff9c9b32ecf0a1b705761667243702dcefa22ae713f478cd",
    ),
    // Flows against a hostile enqueuer (docs/security.md, "Flows between tenants"):
    // depends_on locks its jobs FOR KEY SHARE and the claim, cancel, retry, reschedule and the
    // rescuer lock FOR NO KEY UPDATE (an enqueuer's open transaction blocks no worker), with
    // settle hints on a channel of their own for edges an ack could not see; dependency edges
    // per call bounded (depends_on.max_edges); every settling statement, the ack's and the
    // sweep's included, bounded in edges however deep a cancel cascade (skiplock._settle_edges
    // returns what it settled); enqueue_flow linear, its flow id never a deduplicated job's;
    // flow_members' walk bounded (flow_members.max_jobs) and flow_progress says so
    // (`truncated`); dependency_results and dependents take a bound and dependency_counts
    // counts; wait() checks its timeout in seconds; the finished channel's name is a secret
    // (migration 0010); retention keeps a dependency for one more period at most.
    // The third hardening: the enqueue check at serde_json's float edge (args and meta), a
    // job's replace entries bounded to the latest ten; lanes that sleep (core migration 0011):
    // skiplock._claim reads at most skiplock._claim_max_lanes lanes a job may be due in and
    // says where the next claim resumes (`lanes_after`), an enqueue never waits for another's
    // lane row, and fair queues walk only their keys with due jobs (skiplock.key_lanes).
    // A key-rate queue's claim that sends the worker to sleep names the next job due too
    // (skiplock._next_due). Key scopes (core migration 0012): the keys unique_by derives and
    // the unique_for windows belong to the enqueuing login's scope (skiplock.set_key_scope),
    // `args:` is a reserved key prefix, a cancelled window job frees its window. Workers of
    // version 8 stop on the schema change (the claim's arguments changed). Admission control
    // (core migration 0015): skiplock.set_queue_admission limits a queue's waiting jobs, and
    // the insert trigger refuses a statement that would pass it (SQLSTATE SK429), counting the
    // queue only when its bound of the available jobs (core migration 0017) leaves no room or
    // is a second old. Durable steps
    // (core migration 0016, sql/api/16_steps.sql): skiplock.job_steps, skiplock.job_signals.
    // The built-in workflows are optional parts of their own (crate skiplock-workflows): the
    // core's files no longer include their grants; each part's grants are recorded in
    // skiplock.schema_parts (core migration 0018) and re-applied by every program's migrate
    // (sql/api/95_part_grants.sql).
    (
        9,
        "8c9d0369cb939d7d0bdd35741fb4e1e788ab6840ddd433405099828562c6cff2",
    ),
];

/// The SQL API version this binary installs and needs (the last of [`API_VERSIONS`]).
pub const API_VERSION: u32 = API_VERSIONS[API_VERSIONS.len() - 1].0;

/// The core's SQL API files applied before every part's: the queue's functions.
const CORE_API: &[ApiFile] = &[
    ("sql/api/10_jobs.sql", sql!("api", "10_jobs")),
    ("sql/api/11_enqueue.sql", sql!("api", "11_enqueue")),
    ("sql/api/12_flows.sql", sql!("api", "12_flows")),
    ("sql/api/13_claim.sql", sql!("api", "13_claim")),
    ("sql/api/14_ack.sql", sql!("api", "14_ack")),
    ("sql/api/15_control.sql", sql!("api", "15_control")),
    ("sql/api/16_steps.sql", sql!("api", "16_steps")),
    ("sql/api/17_admin.sql", sql!("api", "17_admin")),
];

/// The core's files applied after every part's: maintenance, the reserved-name checks (built
/// from every part's rows), the roles (granted on what every part made).
const CORE_API_AFTER_PARTS: &[ApiFile] = &[
    ("sql/api/50_maintenance.sql", sql!("api", "50_maintenance")),
    ("sql/api/80_reserved.sql", sql!("api", "80_reserved")),
    ("sql/api/90_roles.sql", sql!("api", "90_roles")),
];

/// The core's last file, applied after the parts are recorded: every recorded part's grants
/// ([`PartSchema::grants`]).
const CORE_API_PART_GRANTS: ApiFile = (
    "sql/api/95_part_grants.sql",
    sql!("api", "95_part_grants"),
);

/// The core's SQL API files in the order they are applied after the migrations (every
/// part's files go between the first eight and `50_maintenance.sql`).
pub fn api_files() -> Vec<ApiFile> {
    let mut v = CORE_API.to_vec();
    v.extend_from_slice(CORE_API_AFTER_PARTS);
    v.push(CORE_API_PART_GRANTS);
    v
}

/// The hash of the core schema this binary installs: SHA-256 over the core's SQL API files
/// (names and text, line endings normalised), the history's and the core's migrations
/// (versions and sqlx checksums), hex.
pub fn api_hash() -> String {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| hash_of(&api_files(), &[&history(), &CORE_MIGRATIONS]))
        .clone()
}

/// The hash of an optional part as this binary installs it: the same over its SQL API files,
/// its grants and its migrations.
pub fn part_hash(part: &PartSchema) -> String {
    let mut files = part.api.to_vec();
    files.extend(part.grants);
    hash_of(&files, &[part.migrations])
}

fn hash_of(files: &[ApiFile], migrators: &[&Migrator]) -> String {
    let mut h = Sha256::new();
    for (name, sql) in files {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(sql.replace("\r\n", "\n").as_bytes());
        h.update([0]);
    }
    for m in migrators.iter().flat_map(|m| m.iter()) {
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
    let i: Installed = super::query_as(sql!("schema", "installed"))
        .fetch_one(pool)
        .await?;
    if !i.versioned {
        return Ok(None);
    }
    Ok(super::query_as(sql!("schema", "schema_info"))
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

/// Applies the core's migrations and (re)installs its SQL API, under an advisory lock so
/// several processes may migrate at once, and records the core's `API_VERSION`. Refuses
/// (before changing anything) a database migrated by a newer skiplock. An optional part's
/// tables are left as they are: [`migrate_parts`] installs parts too.
pub async fn migrate(pool: &Pool) -> Result<()> {
    migrate_parts(pool, &[]).await
}

/// [`migrate`] with the optional `parts` (each the core's peer: its migrations, its SQL API
/// files after the core's, its hash and grants recorded in `skiplock.schema_parts`). A part
/// the list lacks is left as it is, so programs built with different parts can share a
/// database (crates/skiplock-cli/tests/upgrade.rs migrates a database with the core alone).
pub async fn migrate_parts(pool: &Pool, parts: &[&PartSchema]) -> Result<()> {
    for p in parts {
        p.check()?;
        if p.name == CORE.name {
            return Err(Error::Invalid(
                "migrate: the core is always migrated; list only the optional parts".into(),
            ));
        }
    }
    if pool.mode() == super::PoolMode::Transaction {
        // The migrations' lock is a session's advisory lock, which a transaction-pooling
        // PgBouncer would leave on whichever server connection took it.
        return Err(Error::Invalid(
            "migrate needs a session of its own: run it with SKIPLOCK_POOL_MODE=session on a \
             URL that reaches the server (or a session-mode pool), not through a \
             transaction-mode PgBouncer"
                .into(),
        ));
    }
    refuse_downgrade(&recorded(pool).await?)?;
    // A database of a release up to SQL API 7: its history first (development databases of
    // this release may hold one later entry of it, which is now the core's own migration).
    let history: bool = super::query_scalar(sql!("schema", "has_history"))
        .fetch_one(pool)
        .await?;
    if history {
        let mut h = self::history();
        h.set_ignore_missing(true);
        h.run(pool.pg()).await?;
    }
    for part in std::iter::once(&CORE).chain(parts.iter().copied()) {
        let m = part.migrator();
        let started: bool = super::query_scalar(sql!("schema", "part_started"))
            .bind(part.table)
            .fetch_one(pool)
            .await?;
        if history && !started {
            // The history made this part's baseline already (it held every table of the
            // releases up to SQL API 7, the built-in workflows' too): record it, do not run it.
            m.skip(pool.pg(), Some(1)).await?;
        }
        m.run(pool.pg()).await?;
    }
    let mut tx = pool.begin().await?;
    super::query(sql!("schema", "api_lock"))
        .execute(&mut *tx)
        .await?;
    // Another process may have migrated meanwhile: look again under the lock.
    let info: Option<SchemaInfo> = super::query_as(sql!("schema", "schema_info"))
        .fetch_optional(&mut *tx)
        .await?;
    refuse_downgrade(&info)?;
    let files = CORE_API
        .iter()
        .chain(parts.iter().flat_map(|p| p.api.iter()))
        .chain(CORE_API_AFTER_PARTS);
    for (name, sql) in files {
        install(&mut tx, name, sql).await?;
    }
    record(&mut *tx).await?;
    for part in parts {
        super::query(sql!("schema", "record_part"))
            .bind(part.name)
            .bind(part_hash(part))
            .bind(env!("CARGO_PKG_VERSION"))
            .bind(part.grants.map(|(_, sql)| sql))
            .execute(&mut *tx)
            .await?;
    }
    let (name, sql) = CORE_API_PART_GRANTS;
    install(&mut tx, name, sql).await?;
    tx.commit().await?;
    Ok(())
}

/// Applies one SQL API file, naming it in the error.
async fn install(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    name: &str,
    sql: &'static str,
) -> Result<()> {
    sqlx::raw_sql(sql)
        .execute(&mut **tx)
        .await
        .map_err(|e| Error::Other(format!("installing {name}: {e}")))?;
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
    super::query(sql!("schema", "record_api"))
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
    match super::query_as::<SchemaInfo>(sql!("schema", "schema_info"))
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
    let i: Installed = super::query_as(sql!("schema", "installed"))
        .fetch_one(pool)
        .await?;
    if !i.schema {
        return Err(Error::NotMigrated("no skiplock schema".into()));
    }
    let info = recorded(pool).await?;
    // A newer database first: its migrations may be ones this binary has never heard of.
    refuse_downgrade(&info)?;
    let applied: Vec<i64> = applied(pool, &CORE).await?;
    if CORE_MIGRATIONS
        .iter()
        .any(|m| !applied.contains(&m.version))
    {
        // Missing migrations under this very version: an earlier build of it migrated the
        // database ("schema is at API version 8, this binary needs 8" would say nothing).
        let db = version_of(&info);
        return Err(Error::Schema(if db == API_VERSION {
            SchemaMismatch::Changed { version: db }
        } else {
            SchemaMismatch::Older {
                db,
                binary: API_VERSION,
            }
        }));
    }
    check_version(info.as_ref(), API_VERSION, &api_hash())
}

/// The migrations of `part` applied successfully (none when its record does not exist yet).
async fn applied(pool: &Pool, part: &PartSchema) -> Result<Vec<i64>> {
    let started: bool = super::query_scalar(sql!("schema", "part_started"))
        .bind(part.table)
        .fetch_one(pool)
        .await?;
    if !started {
        return Ok(Vec::new());
    }
    let q = sql!("schema", "applied_migrations").replace("{table}", part.table);
    Ok(super::query_scalar(sqlx::AssertSqlSafe(q))
        .fetch_all(pool)
        .await?)
}

/// Fails unless optional part `part` is installed as this binary installs it (its hash
/// recorded by `skiplock migrate`): a part's start-up check, so a worker of a program built
/// with a part refuses, in one line, a database migrated without it or by another build.
pub async fn ensure_part(pool: &Pool, part: &PartSchema) -> Result<()> {
    let name = part.name;
    let want = part_hash(part);
    let got: Option<(String, String)> = super::query_as(sql!("schema", "part_info"))
        .bind(name)
        .fetch_optional(pool)
        .await?;
    match got {
        Some((hash, _)) if hash == want => Ok(()),
        Some((_, by)) => Err(Error::Other(format!(
            "the {name} part's schema was installed by another build (skiplock {by}): run `skiplock migrate`"
        ))),
        None => Err(Error::Other(format!(
            "the {name} part's schema is not installed: run `skiplock migrate` with a program that includes it"
        ))),
    }
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
    let info: Option<SchemaInfo> = super::query_as(sql!("schema", "schema_info"))
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
    fn history_rewording_changed_only_comments() {
        for m in HISTORY.migrations.iter() {
            let Some((_, _, statements)) = REWORDED_HISTORY.iter().find(|r| r.0 == m.version)
            else {
                continue;
            };
            let text: Vec<&str> = m
                .sql
                .as_str()
                .split('\n')
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect();
            let actual = hex::encode(Sha256::digest(text.join("\n").as_bytes()));
            assert_eq!(&actual, statements, "history migration {} changed", m.version);
        }
        assert_eq!(
            history().iter().filter(|m| REWORDED_HISTORY.iter().any(|r| r.0 == m.version)).count(),
            REWORDED_HISTORY.len()
        );
    }

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
