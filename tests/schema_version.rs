//! The versioned SQL API (src/store/schema.rs) as `migrate` records it. A worker and a CLI
//! command refusing a schema at another version: crates/skiplock-cli/tests/schema_version.rs.

mod support;

use skiplock::store::schema::{self, API_VERSION};
use support::*;

async fn recorded(db: &TestDb) -> (i32, String, String) {
    sqlx::query_as("SELECT api_version, api_hash, migrated_by FROM skiplock.schema_info")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn migrate_records_the_api_version_and_hash() {
    let db = TestDb::new().await;
    assert_eq!(
        recorded(&db).await,
        (
            API_VERSION as i32,
            schema::api_hash(),
            env!("CARGO_PKG_VERSION").to_string()
        )
    );
    schema::ensure_ready(&db.pool).await.unwrap();
    // The worker role may read the record, not change it.
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.role_table_grants
         WHERE grantee = 'skiplock_worker' AND table_name = 'schema_info'
           AND privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(n, 0);
}
