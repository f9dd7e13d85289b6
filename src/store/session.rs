//! What a connection's server says of the connection itself (used while connecting, by
//! [`crate::db::nodelay`] and [`crate::db::session`]).

use std::time::Duration;

use sqlx::PgConnection;

/// The connection's TCP ports as the server sees them: the client's (the local port of this
/// process's socket) and the server's; both None over a Unix socket.
pub async fn client_port(conn: &mut PgConnection) -> sqlx::Result<(Option<i32>, Option<i32>)> {
    sqlx::query_as(super::sql!("session", "client_port"))
        .fetch_one(conn)
        .await
}

/// Whether the server is a standby in recovery, and whether the session's transactions
/// default to read-only: either means a worker must not use this connection.
pub async fn read_only(conn: &mut PgConnection) -> sqlx::Result<(bool, bool)> {
    sqlx::query_as(super::sql!("session", "read_only"))
        .fetch_one(conn)
        .await
}

/// A worker session's first statement: sets its statement and lock timeouts (zero: none) and
/// returns whether it cannot write, as [`read_only`] does.
pub async fn open(
    conn: &mut PgConnection,
    limits: crate::config::SessionLimits,
) -> sqlx::Result<(bool, bool)> {
    sqlx::query_as(super::sql!("session", "open"))
        .bind(millis(limits.statement_timeout))
        .bind(millis(limits.lock_timeout))
        .fetch_one(conn)
        .await
}

/// A console session's first statement: its statement and lock timeouts (zero: none), plans
/// made per call and no JIT (src/db/console.rs).
pub async fn open_console(
    conn: &mut PgConnection,
    statement_timeout: Duration,
    lock_timeout: Duration,
) -> sqlx::Result<()> {
    sqlx::query(super::sql!("session", "console"))
        .bind(millis(statement_timeout))
        .bind(millis(lock_timeout))
        .execute(conn)
        .await
        .map(|_| ())
}

/// A duration as the milliseconds `set_config` takes for a time setting.
fn millis(d: Duration) -> String {
    d.as_millis().to_string()
}
