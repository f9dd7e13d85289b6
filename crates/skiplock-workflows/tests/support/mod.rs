//! The shared fixtures (crates/skiplock-test-support), with a database that has the
//! workflows' schema.
#![allow(dead_code, unused_imports)]

pub use skiplock_test_support::*;

/// A fresh database migrated with the core and every workflow of this build.
pub async fn workflows_db() -> TestDb {
    TestDb::with_parts(&skiplock_workflows::schemas()).await
}
