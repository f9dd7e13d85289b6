//! What a connection's server says of the connection itself (used while connecting, by
//! [`crate::db::nodelay`] and [`crate::db::session`]).

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
