//! What a pooled connection goes through when a statement takes it from a pool skiplock
//! built: a ping only if it sat idle for more than [`PING_IF_IDLE_FOR`].
//!
//! sqlx pings every connection before handing it out (`test_before_acquire`), a round trip
//! in front of every pooled statement: a single enqueue or an idle worker's claim after a
//! wake-up paid two round trips where one does. The ping is what finds a connection a server
//! restart or a terminated backend broke while it sat in the pool, and such a connection is
//! one that has been idle: pgx's pool (River's driver) pings only connections idle for more
//! than a second, and so does this. A connection that breaks within that second fails its
//! next statement instead, which the worker retries like any statement that met an outage;
//! sqlx closes it, and the next checkout opens a new one.

use std::time::Duration;

use sqlx::pool::PoolConnectionMetadata;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};

use super::outage::RecycleMark;

/// Marks connections to be replaced after a statement met a read-only server or the URL's
/// hosts were re-pointed (`super::hosts::point`); every pool skiplock builds honours it here,
/// at checkout ([`check`]).
pub static RECYCLE: RecycleMark = RecycleMark::new();

/// How long a connection may have sat in the pool before it is pinged at checkout.
pub const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// Whether a connection idle for `idle_for` is pinged before use.
pub fn should_ping(idle_for: Duration) -> bool {
    idle_for > PING_IF_IDLE_FOR
}

/// The check at checkout: refuses a connection opened before the last
/// [`RECYCLE`] mark (its server turned read-only, or the URL's hosts were
/// re-pointed), and pings one that sat idle long enough ([`should_ping`]). A refusal or an
/// error makes the pool close it and take or open another.
pub async fn check(conn: &mut PgConnection, meta: &PoolConnectionMetadata) -> sqlx::Result<bool> {
    if !RECYCLE.accepts(meta.age) {
        return Ok(false);
    }
    if should_ping(meta.idle_for) {
        conn.ping().await?;
    }
    Ok(true)
}

/// Pool options with the checkout of this module instead of sqlx's ping before every use, and
/// `TCP_NODELAY` on new connections (`super::nodelay`). A pool that needs its own
/// `before_acquire` or `after_connect` (the worker sessions') replaces them and calls
/// `check` and `super::nodelay::set` in its own.
pub fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new()
        .test_before_acquire(false)
        .before_acquire(|conn, meta| Box::pin(async move { check(conn, &meta).await }))
        .after_connect(|conn, _meta| {
            Box::pin(async move { super::nodelay::set(conn).await.map(|_| ()) })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_idle_for_more_than_a_second_is_pinged() {
        assert!(!should_ping(Duration::ZERO));
        assert!(!should_ping(Duration::from_millis(999)));
        assert!(!should_ping(PING_IF_IDLE_FOR));
        assert!(should_ping(Duration::from_millis(1001)));
        assert!(should_ping(Duration::from_secs(3600)));
    }
}
