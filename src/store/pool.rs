//! [`Pool`]: the pool handlers, services and the CLI run their statements on. It is a
//! `sqlx::PgPool` (it derefs to one) that also knows how the database is reached:
//!
//! - **Session pooling** (a direct connection, or PgBouncer in session mode): statements run
//!   exactly as on the `PgPool`, prepared once per connection and reused.
//! - **Transaction pooling** (PgBouncer in transaction mode, `SKIPLOCK_POOL_MODE=transaction`):
//!   the server connection belongs to the client only for one transaction. sqlx runs a
//!   statement as two protocol exchanges (prepare, then bind and execute); outside a transaction
//!   the pooler may send the second to another server connection, where the prepared statement
//!   is missing — or is another client's. So every statement run on the pool is wrapped in its
//!   own transaction, which also carries the session limits (`SET LOCAL`, as no session
//!   setting survives the transaction), and every statement skiplock prepares is unnamed, never
//!   cached across transactions ([`unnamed`]). docs/operations.md, "Behind PgBouncer".

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, TryFutureExt, TryStreamExt, future::BoxFuture};
use sqlx::postgres::{PgArguments, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::query::{Query, QueryAs, QueryScalar};
use sqlx::{Either, Execute, FromRow, PgPool, Postgres, SqlSafeStr, SqlStr};

pub use crate::config::PoolMode;
use crate::config::SessionLimits;

/// Set once any pool of this process runs in transaction mode: from then on every statement
/// the store builds is unnamed, whatever it runs on (a transaction begun on such a pool is a
/// plain `sqlx` transaction, which cannot tell). Never cleared: an unnamed statement is only
/// slower (one more exchange) on a session.
static UNNAMED: AtomicBool = AtomicBool::new(false);

/// Makes every statement of this process unnamed from now on ([`UNNAMED`]): called before a
/// transaction-mode pool opens its first connection, whose set-up statements must be unnamed
/// already.
pub fn expect_transaction_pooling() {
    UNNAMED.store(true, Ordering::Relaxed);
}

/// Whether the store's statements must be unnamed ([`UNNAMED`]).
pub(crate) fn unnamed() -> bool {
    UNNAMED.load(Ordering::Relaxed)
}

/// `sqlx::query`, as every store statement is built: unnamed once a pool of this process runs
/// in transaction mode ([`unnamed`]).
pub fn query<'q>(sql: impl SqlSafeStr) -> Query<'q, Postgres, PgArguments> {
    sqlx::query(sql).persistent(!unnamed())
}

/// `sqlx::query_as`, as [`query`].
pub fn query_as<'q, O>(sql: impl SqlSafeStr) -> QueryAs<'q, Postgres, O, PgArguments>
where
    O: for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_as(sql).persistent(!unnamed())
}

/// `sqlx::query_scalar`, as [`query`].
pub fn query_scalar<'q, O>(
    sql: impl SqlSafeStr,
) -> QueryScalar<'q, Postgres, O, PgArguments>
where
    (O,): for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_scalar(sql).persistent(!unnamed())
}

/// A pool of connections to the skiplock database; see the module documentation.
#[derive(Clone, Debug)]
pub struct Pool {
    inner: PgPool,
    /// In transaction mode, the statement that begins each transaction (`BEGIN` and the
    /// session limits as `SET LOCAL`); `None` in session mode.
    begin: Option<Arc<str>>,
}

impl Pool {
    /// `pool` in session mode: statements run as on the `PgPool` itself.
    pub fn new(pool: PgPool) -> Self {
        Pool {
            inner: pool,
            begin: None,
        }
    }

    /// `pool` in `mode`; in transaction mode each transaction sets `limits` (zero: none) with
    /// `SET LOCAL`, since a session setting would stay on whichever server connection ran it.
    pub fn with_mode(pool: PgPool, mode: PoolMode, limits: SessionLimits) -> Self {
        match mode {
            PoolMode::Session => Pool::new(pool),
            PoolMode::Transaction => {
                expect_transaction_pooling();
                Pool {
                    inner: pool,
                    begin: Some(begin_statement(limits).into()),
                }
            }
        }
    }

    /// How this pool reaches the database.
    pub fn mode(&self) -> PoolMode {
        match self.begin {
            None => PoolMode::Session,
            Some(_) => PoolMode::Transaction,
        }
    }

    /// The `sqlx` pool underneath (for what needs one: LISTEN, pool statistics).
    pub fn pg(&self) -> &PgPool {
        &self.inner
    }

    /// Begins a transaction; in transaction mode with the pool's `SET LOCAL` limits.
    pub async fn begin(&self) -> sqlx::Result<super::Transaction<'static>> {
        match &self.begin {
            None => self.inner.begin().await,
            Some(begin) => {
                self.inner
                    .begin_with(sqlx::AssertSqlSafe(begin.to_string()))
                    .await
            }
        }
    }
}

impl Deref for Pool {
    type Target = PgPool;
    fn deref(&self) -> &PgPool {
        &self.inner
    }
}

impl From<PgPool> for Pool {
    fn from(pool: PgPool) -> Self {
        Pool::new(pool)
    }
}

/// `BEGIN` followed by the limits as `SET LOCAL`, one simple-protocol round trip. The values
/// are integers (milliseconds), never text from outside.
fn begin_statement(limits: SessionLimits) -> String {
    format!(
        "BEGIN; SET LOCAL statement_timeout = {}; SET LOCAL lock_timeout = {}",
        limits.statement_timeout.as_millis(),
        limits.lock_timeout.as_millis()
    )
}

/// A query that prepares its statement unnamed (dropped at the end of its exchange), for a
/// connection the next transaction may not get again.
struct Unnamed<E>(E);

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(self) -> SqlStr {
        self.0.sql()
    }
    fn statement(&self) -> Option<&PgStatement> {
        self.0.statement()
    }
    fn take_arguments(
        &mut self,
    ) -> Result<Option<sqlx::postgres::PgArguments>, sqlx::error::BoxDynError> {
        self.0.take_arguments()
    }
    fn persistent(&self) -> bool {
        false
    }
}

/// Runs `query` in a transaction of its own ([`Pool::begin`]), unnamed, and hands back
/// everything it returned once the transaction has committed: a caller never sees a result
/// the database could still roll back.
async fn in_transaction<'q, E>(
    pool: Pool,
    query: E,
) -> sqlx::Result<Vec<Either<PgQueryResult, PgRow>>>
where
    E: 'q + Execute<'q, Postgres>,
{
    let mut tx = pool.begin().await?;
    let out: Vec<_> = sqlx::Executor::fetch_many(&mut *tx, Unnamed(query))
        .try_collect()
        .await?;
    tx.commit().await?;
    Ok(out)
}

impl<'p> sqlx::Executor<'p> for &'p Pool {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, sqlx::Result<Either<PgQueryResult, PgRow>>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.begin {
            None => self.inner.fetch_many(query),
            Some(_) => in_transaction(self.clone(), query)
                .map_ok(|rows| futures::stream::iter(rows.into_iter().map(Ok)))
                .try_flatten_stream()
                .boxed(),
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, sqlx::Result<Option<PgRow>>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.begin {
            None => self.inner.fetch_optional(query),
            Some(_) => in_transaction(self.clone(), query)
                .map_ok(|rows| {
                    rows.into_iter().find_map(|r| match r {
                        Either::Right(row) => Some(row),
                        Either::Left(_) => None,
                    })
                })
                .boxed(),
        }
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, sqlx::Result<PgStatement>>
    where
        'p: 'e,
    {
        self.inner.prepare_with(sql, parameters)
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, sqlx::Result<sqlx::Describe<Postgres>>>
    where
        'p: 'e,
    {
        self.inner.describe(sql)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn each_transaction_sets_the_limits_as_integers() {
        let s = begin_statement(SessionLimits {
            statement_timeout: Duration::from_secs(60),
            lock_timeout: Duration::ZERO,
        });
        assert_eq!(
            s,
            "BEGIN; SET LOCAL statement_timeout = 60000; SET LOCAL lock_timeout = 0"
        );
    }
}
