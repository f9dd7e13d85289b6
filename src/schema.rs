//! Installing and checking the schema: sqlx migrations for tables (append-only), then the
//! SQL API from `sql/api/*.sql` (functions, views, triggers), re-applied on every `migrate`
//! with `CREATE OR REPLACE` so the files in `sql/api/` are the single source of truth.

use sqlx::PgPool;

use crate::error::{Error, Result};

/// The embedded table migrations (`migrations/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The SQL API files, applied in this order after the migrations.
pub const API_FILES: &[(&str, &str)] = &[
    (
        "sql/api/10_core.sql",
        include_str!("../sql/api/10_core.sql"),
    ),
    (
        "sql/api/20_fetch.sql",
        include_str!("../sql/api/20_fetch.sql"),
    ),
    (
        "sql/api/30_pack.sql",
        include_str!("../sql/api/30_pack.sql"),
    ),
    (
        "sql/api/40_packets.sql",
        include_str!("../sql/api/40_packets.sql"),
    ),
    (
        "sql/api/50_maintenance.sql",
        include_str!("../sql/api/50_maintenance.sql"),
    ),
    (
        "sql/api/90_roles.sql",
        include_str!("../sql/api/90_roles.sql"),
    ),
];

/// Applies the migrations and (re)installs the SQL API, under an advisory lock so several
/// processes may migrate at once.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    MIGRATOR.run(pool).await?;
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('skiplock.api'))")
        .execute(&mut *tx)
        .await?;
    for (name, sql) in API_FILES {
        sqlx::raw_sql(*sql)
            .execute(&mut *tx)
            .await
            .map_err(|e| Error::Other(format!("installing {name}: {e}")))?;
    }
    tx.commit().await?;
    Ok(())
}

/// Fails with [`Error::NotMigrated`] unless every embedded migration has been applied.
pub async fn ensure_migrated(pool: &PgPool) -> Result<()> {
    let exists: bool = sqlx::query_scalar(
        "SELECT to_regclass('_sqlx_migrations') IS NOT NULL AND to_regclass('skiplock.jobs') IS NOT NULL",
    )
    .fetch_one(pool)
    .await?;
    if !exists {
        return Err(Error::NotMigrated("no skiplock schema".into()));
    }
    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(pool)
            .await?;
    for m in MIGRATOR.iter() {
        if !applied.contains(&m.version) {
            return Err(Error::NotMigrated(format!(
                "migration {} ({}) is missing",
                m.version, m.description
            )));
        }
    }
    Ok(())
}
