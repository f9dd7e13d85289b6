//! What a connection's server says of the connection itself (used while connecting, by
//! [`crate::db::nodelay`] and [`crate::db::session`]).

use std::time::Duration;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::QueryAs;
use sqlx::{Connection, FromRow, PgConnection, Postgres};

/// Runs a statement of a connection's set-up. Once statements are unnamed (a pool of this
/// process runs behind a transaction-pooling PgBouncer: `super::pool`), inside a transaction of
/// its own, so that its prepare and its execute reach the same server connection.
async fn fetch_one<'q, O>(
    conn: &mut PgConnection,
    q: QueryAs<'q, Postgres, O, PgArguments>,
) -> sqlx::Result<O>
where
    O: for<'r> FromRow<'r, PgRow> + Send + Unpin,
{
    if !super::pool::unnamed() {
        return q.fetch_one(conn).await;
    }
    let mut tx = conn.begin().await?;
    let out = q.fetch_one(&mut *tx).await?;
    tx.commit().await?;
    Ok(out)
}

/// The connection's TCP ports as the server sees them: the client's (the local port of this
/// process's socket) and the server's; both None over a Unix socket.
pub async fn client_port(conn: &mut PgConnection) -> sqlx::Result<(Option<i32>, Option<i32>)> {
    fetch_one(conn, super::query_as(super::sql!("session", "client_port"))).await
}

/// Whether the server is a standby in recovery, and whether the session's transactions
/// default to read-only: either means a worker must not use this connection.
pub async fn read_only(conn: &mut PgConnection) -> sqlx::Result<(bool, bool)> {
    fetch_one(conn, super::query_as(super::sql!("session", "read_only"))).await
}

/// A worker session's first statement: sets its statement and lock timeouts (zero: none) and
/// returns whether it cannot write, as [`read_only`] does.
pub async fn open(
    conn: &mut PgConnection,
    limits: crate::config::SessionLimits,
) -> sqlx::Result<(bool, bool)> {
    let q = super::query_as(super::sql!("session", "open"))
        .bind(millis(limits.statement_timeout))
        .bind(millis(limits.lock_timeout));
    fetch_one(conn, q).await
}

/// A console session's first statement: its statement and lock timeouts (zero: none), plans
/// made per call and no JIT (crates/skiplock-console/src/db/console.rs).
pub async fn open_console(
    conn: &mut PgConnection,
    statement_timeout: Duration,
    lock_timeout: Duration,
) -> sqlx::Result<()> {
    super::query(super::sql!("session", "console"))
        .bind(millis(statement_timeout))
        .bind(millis(lock_timeout))
        .execute(conn)
        .await
        .map(|_| ())
}

/// Teaches a new connection the database's own types (`sql/session/type_casts.sql`), for a
/// transaction-pooling PgBouncer. sqlx looks up a type it meets in a statement's description
/// with a simple query between the prepare and the execute, and a simple query drops the
/// unnamed statement: the execute would then fail ("unnamed prepared statement does not
/// exist"). Described here once, in a transaction that is rolled back (the statement's own
/// execute may fail that way: it has done its work by then), the types are known to this
/// connection from then on.
pub async fn learn_types(conn: &mut PgConnection) -> sqlx::Result<()> {
    let mut tx = conn.begin().await?;
    let casts: Option<String> = super::query_scalar(super::sql!("session", "type_casts"))
        .fetch_one(&mut *tx)
        .await?;
    if let Some(casts) = casts {
        let describe = super::query(sqlx::AssertSqlSafe(format!("SELECT {casts}")));
        let _ = describe.fetch_optional(&mut *tx).await;
    }
    tx.rollback().await
}

/// A duration as the milliseconds `set_config` takes for a time setting.
fn millis(d: Duration) -> String {
    d.as_millis().to_string()
}
