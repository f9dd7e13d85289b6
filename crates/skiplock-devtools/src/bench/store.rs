//! **Dev-tool statements**: only `skiplock-devtools bench` runs these, one function each, its text in
//! `sql/bench/<function name>.sql` (the two ceilings' statements start with the claim they
//! share, `ceiling_pick.sql`). They create and drop the benchmark's own database, reset
//! and vacuum the jobs table between runs, build the plain-SQL ceiling, read WAL positions and
//! commit counters. Nothing in the worker or the CLI proper calls them.

use skiplock::Pool as PgPool;
use sqlx::postgres::PgConnectOptions;

use skiplock::error::{Error, Result};

/// application_name of the monitor connection, which [`other_clients`] does not count.
pub(crate) const MONITOR_APP: &str = "skiplock-bench-monitor";

/// A pool of `n` connections to `url` (the dev tools' pool, [`skiplock::db::pool`], with sqlx's
/// default acquire timeout).
pub(crate) async fn pool(url: &str, n: u32) -> Result<PgPool> {
    skiplock::db::pool(url, n, std::time::Duration::from_secs(30)).await
}

/// The benchmark's one long-lived connection to its database (setup, fills, stats flushes),
/// named so that [`other_clients`] can leave it out, and never recycled by the pool.
pub(crate) async fn monitor(url: &str) -> Result<PgPool> {
    let opts: PgConnectOptions = url.parse()?;
    Ok(skiplock::db::pool_options()
        .max_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(opts.application_name(MONITOR_APP))
        .await?
        .into())
}

/// `{db}` of a database statement filled with a name the benchmark made; any other name is
/// refused (the statement cannot take it as a parameter).
fn with_db(sql: &str, db: &str) -> Result<String> {
    let ok = db.starts_with("skiplock_bench_")
        && db
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        return Err(Error::Invalid(format!(
            "not a benchmark database name: {db:?}"
        )));
    }
    Ok(sql.replace("{db}", db))
}

pub(crate) async fn create_database(admin: &PgPool, db: &str) -> Result<()> {
    let sql = with_db(sql!("bench", "create_database"), db)?;
    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(admin).await?;
    Ok(())
}

pub(crate) async fn drop_database(admin: &PgPool, db: &str) -> Result<()> {
    let sql = with_db(sql!("bench", "drop_database"), db)?;
    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(admin).await?;
    Ok(())
}

pub(crate) async fn truncate_jobs(p: &PgPool) -> Result<()> {
    sqlx::query(sql!("bench", "truncate_jobs"))
        .execute(p)
        .await?;
    Ok(())
}

pub(crate) async fn vacuum_jobs(p: &PgPool) -> Result<()> {
    sqlx::query(sql!("bench", "vacuum_jobs")).execute(p).await?;
    Ok(())
}

pub(crate) async fn analyze_jobs(p: &PgPool) -> Result<()> {
    sqlx::query(sql!("bench", "analyze_jobs"))
        .execute(p)
        .await?;
    Ok(())
}

pub(crate) async fn count_running(p: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("bench", "count_running"))
        .fetch_one(p)
        .await?)
}

pub(crate) async fn latency_ms(p: &PgPool, ids: &[i64]) -> Result<Vec<f64>> {
    Ok(sqlx::query_scalar(sql!("bench", "latency_ms"))
        .bind(ids)
        .fetch_all(p)
        .await?)
}

/// The channel of the latency floor (`skiplock-devtools bench`'s own; no worker listens to it), as
/// written in `sql/bench/floor_enqueue.sql`.
pub(crate) const FLOOR_CHANNEL: &str = "skiplock_bench_floor";

/// A connection listening on [`FLOOR_CHANNEL`].
pub(crate) async fn floor_listener(p: &PgPool) -> Result<sqlx::postgres::PgListener> {
    let mut l = sqlx::postgres::PgListener::connect_with(p).await?;
    l.listen(FLOOR_CHANNEL).await?;
    Ok(l)
}

/// One plain insert with its NOTIFY, committed; its start in ms on the database clock.
pub(crate) async fn floor_enqueue(c: &mut sqlx::PgConnection) -> Result<f64> {
    Ok(sqlx::query_scalar(sql!("bench", "floor_enqueue"))
        .fetch_one(c)
        .await?)
}

/// The woken side's first statement; its start in ms on the database clock.
pub(crate) async fn floor_start(c: &mut sqlx::PgConnection) -> Result<f64> {
    Ok(sqlx::query_scalar(sql!("bench", "floor_start"))
        .fetch_one(c)
        .await?)
}

/// The single-enqueue baseline's statement (one row into the ceiling's table).
pub(crate) async fn plain_insert(
    p: &PgPool,
    kind: &str,
    args: &serde_json::Value,
    queue: &str,
) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("bench", "plain_insert"))
        .bind(kind)
        .bind(args)
        .bind(queue)
        .fetch_one(p)
        .await?)
}

/// The enqueue_many baseline's statement (the rows into the ceiling's table).
pub(crate) async fn plain_insert_many(
    p: &PgPool,
    kind: &str,
    args: &[serde_json::Value],
    queue: &str,
) -> Result<Vec<i64>> {
    Ok(sqlx::query_scalar(sql!("bench", "plain_insert_many"))
        .bind(kind)
        .bind(queue)
        .bind(args)
        .fetch_all(p)
        .await?)
}

pub(crate) async fn ceiling_table(p: &PgPool) -> Result<()> {
    sqlx::raw_sql(sql!("bench", "ceiling_table"))
        .execute(p)
        .await?;
    Ok(())
}

pub(crate) async fn ceiling_fill(p: &PgPool, n: usize) -> Result<()> {
    sqlx::query(sql!("bench", "ceiling_fill"))
        .bind(n as i64)
        .execute(p)
        .await?;
    Ok(())
}

pub(crate) async fn ceiling_vacuum(p: &PgPool) -> Result<()> {
    sqlx::query(sql!("bench", "ceiling_vacuum"))
        .execute(p)
        .await?;
    Ok(())
}

/// One claim-and-complete step of the ceiling loop; the rows it finished.
pub(crate) async fn ceiling_step(p: &PgPool) -> Result<u64> {
    Ok(sqlx::query(concat!(
        sql!("bench", "ceiling_pick"),
        sql!("bench", "ceiling_step")
    ))
    .execute(p)
    .await?
    .rows_affected())
}

/// The two-commit ceiling's claim: up to 100 rows marked running, as (id, attempt).
pub(crate) async fn ceiling_claim(p: &PgPool) -> Result<Vec<(i64, i32)>> {
    Ok(sqlx::query_as(concat!(
        sql!("bench", "ceiling_pick"),
        sql!("bench", "ceiling_claim")
    ))
    .fetch_all(p)
    .await?)
}

/// The two-commit ceiling's completion of what [`ceiling_claim`] returned; the rows written.
pub(crate) async fn ceiling_complete(p: &PgPool, ids: &[i64], attempts: &[i32]) -> Result<u64> {
    Ok(sqlx::query(sql!("bench", "ceiling_complete"))
        .bind(ids)
        .bind(attempts)
        .execute(p)
        .await?
        .rows_affected())
}

pub(crate) async fn ceiling_drop(p: &PgPool) -> Result<()> {
    sqlx::query(sql!("bench", "ceiling_drop"))
        .execute(p)
        .await?;
    Ok(())
}

pub(crate) async fn setting(p: &PgPool, name: &str) -> Result<String> {
    Ok(sqlx::query_scalar(sql!("bench", "setting"))
        .bind(name)
        .fetch_one(p)
        .await?)
}

pub(crate) async fn server_version_num(p: &PgPool) -> Result<i32> {
    Ok(sqlx::query_scalar(sql!("bench", "server_version_num"))
        .fetch_one(p)
        .await?)
}

pub(crate) async fn scale_fill(p: &PgPool, n: usize) -> Result<()> {
    sqlx::query(sql!("bench", "scale_fill"))
        .bind(n as i64)
        .execute(p)
        .await?;
    Ok(())
}

pub(crate) async fn scale_future(p: &PgPool, n: usize) -> Result<()> {
    sqlx::query(sql!("bench", "scale_future"))
        .bind(n as i64)
        .execute(p)
        .await?;
    Ok(())
}

pub(crate) async fn scale_trim(p: &PgPool, n: usize) -> Result<()> {
    sqlx::query(sql!("bench", "scale_trim"))
        .bind(n as i64)
        .execute(p)
        .await?;
    Ok(())
}

pub(crate) async fn wal_position(p: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("bench", "wal_position"))
        .fetch_one(p)
        .await?)
}

pub(crate) async fn backend_pid(p: &PgPool) -> Result<i32> {
    Ok(sqlx::query_scalar(sql!("bench", "backend_pid"))
        .fetch_one(p)
        .await?)
}

pub(crate) async fn database_commits(p: &PgPool, db: &str) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("bench", "database_commits"))
        .bind(db)
        .fetch_optional(p)
        .await?
        .unwrap_or(0))
}

pub(crate) async fn other_clients(p: &PgPool, db: &str) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("bench", "other_clients"))
        .bind(db)
        .bind(MONITOR_APP)
        .fetch_one(p)
        .await?)
}

pub(crate) async fn flush_stats(p: &PgPool) -> Result<()> {
    sqlx::query(sql!("bench", "flush_stats")).execute(p).await?;
    Ok(())
}

pub(crate) async fn clock(p: &PgPool) -> Result<f64> {
    Ok(sqlx::query_scalar(sql!("bench", "clock"))
        .fetch_one(p)
        .await?)
}

/// Epoch seconds of the first claim of a drain's jobs.
pub(crate) async fn first_claim(p: &PgPool) -> Result<Option<f64>> {
    Ok(sqlx::query_scalar(sql!("bench", "first_claim"))
        .fetch_one(p)
        .await?)
}

/// (completed jobs, epoch seconds of the last ack) after a multi-process drain.
pub(crate) async fn drain_end(p: &PgPool) -> Result<(i64, Option<f64>)> {
    Ok(sqlx::query_as(sql!("bench", "drain_end"))
        .fetch_one(p)
        .await?)
}

/// `n` due noop jobs in queue `default` spread over `keys` limit keys.
pub(crate) async fn fill_keyed(p: &PgPool, n: usize, keys: usize) -> Result<()> {
    sqlx::query(sql!("bench", "fill_keyed"))
        .bind(n as i64)
        .bind(keys.max(1) as i64)
        .execute(p)
        .await?;
    Ok(())
}

/// Empties the fetch workflow's tables and the key rates (before a crawl run).
pub(crate) async fn truncate_fetch(p: &PgPool) -> Result<()> {
    sqlx::query(sql!("bench", "truncate_fetch"))
        .execute(p)
        .await?;
    Ok(())
}

/// Pages stored with HTTP 200.
pub(crate) async fn pages_fetched(p: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("bench", "pages_fetched"))
        .fetch_one(p)
        .await?)
}

/// Pickup latencies (ms) of the jobs completed with finalized_at in (`from`, `to`] (epoch s).
pub(crate) async fn pressure_completed(p: &PgPool, from: f64, to: f64) -> Result<Vec<f64>> {
    Ok(sqlx::query_scalar(sql!("bench", "pressure_completed"))
        .bind(from)
        .bind(to)
        .fetch_all(p)
        .await?)
}

/// Dead tuples of the tables of `schema` (the statistics' figure).
pub(crate) async fn pressure_dead_tuples(p: &PgPool, schema: &str) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("bench", "pressure_dead_tuples"))
        .bind(schema)
        .fetch_one(p)
        .await?)
}

/// Sets (or with None removes) the admission phase's limit on the bench queue.
pub(crate) async fn admission_limit(p: &PgPool, max_waiting: Option<i32>) -> Result<()> {
    sqlx::query(sql!("bench", "admission_limit"))
        .bind(max_waiting)
        .execute(p)
        .await?;
    Ok(())
}

/// `n` no-op jobs waiting in the bench queue (the admission phase's backlog), one statement.
pub(crate) async fn admission_backlog(p: &PgPool, n: i32) -> Result<()> {
    sqlx::query(sql!("bench", "admission_backlog"))
        .bind(n)
        .execute(p)
        .await?;
    Ok(())
}

/// `n` no-op jobs in one `enqueue_many` call.
pub(crate) async fn pressure_enqueue(p: &PgPool, n: i32) -> Result<()> {
    sqlx::query(sql!("bench", "pressure_enqueue"))
        .bind(n)
        .execute(p)
        .await?;
    Ok(())
}

/// `n` no-op Graphile Worker jobs carrying the producer's clock `t_ms`.
pub(crate) async fn pressure_enqueue_graphile(p: &PgPool, n: i32, t_ms: f64) -> Result<()> {
    sqlx::query(sql!("bench", "pressure_enqueue_graphile"))
        .bind(n)
        .bind(t_ms)
        .execute(p)
        .await?;
    Ok(())
}

/// Registered worker processes.
pub(crate) async fn pressure_workers(p: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(sql!("bench", "pressure_workers"))
        .fetch_one(p)
        .await?)
}

/// A session holding a transaction id (the vacuum horizon) until [`Holder::end`].
pub(crate) struct Holder(sqlx::PgConnection);

/// Opens the holder's transaction and takes its transaction id.
pub(crate) async fn pressure_holder(url: &str) -> Result<Holder> {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(url).await?;
    sqlx::query("BEGIN").execute(&mut c).await?;
    sqlx::query(sql!("bench", "pressure_hold"))
        .execute(&mut c)
        .await?;
    Ok(Holder(c))
}

impl Holder {
    /// Rolls the transaction back and closes the session.
    pub(crate) async fn end(mut self) {
        use sqlx::Connection;
        let _ = sqlx::query("ROLLBACK").execute(&mut self.0).await;
        let _ = self.0.close().await;
    }
}

/// A session in one long `REPEATABLE READ` transaction that counts a queue's table.
pub(crate) struct Reader {
    conn: sqlx::PgConnection,
    graphile: bool,
}

/// Opens a reader's transaction on the table of `schema` (skiplock or graphile_worker).
pub(crate) async fn pressure_reader(url: &str, schema: &str) -> Result<Reader> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut conn)
        .await?;
    Ok(Reader {
        conn,
        graphile: schema == "graphile_worker",
    })
}

impl Reader {
    /// One count of the table (the first one takes the transaction's snapshot).
    pub(crate) async fn count(&mut self) -> Result<i64> {
        let q = if self.graphile {
            sql!("bench", "pressure_read_graphile")
        } else {
            sql!("bench", "pressure_read_skiplock")
        };
        Ok(sqlx::query_scalar(q).fetch_one(&mut self.conn).await?)
    }

    /// Ends the transaction and closes the session.
    pub(crate) async fn end(mut self) {
        use sqlx::Connection;
        let _ = sqlx::query("COMMIT").execute(&mut self.conn).await;
        let _ = self.conn.close().await;
    }
}

/// Makes every job but the first wait (the release ceiling, src/bench/flows.rs): the first
/// id and the last.
pub(crate) async fn hold_back_all_but_first(p: &PgPool) -> Result<(i64, i64)> {
    let (first, last): (Option<i64>, Option<i64>) =
        sqlx::query_as(sql!("bench", "hold_back_all_but_first"))
            .fetch_one(p)
            .await?;
    first
        .zip(last)
        .ok_or_else(|| Error::Other("bench: the release ceiling needs at least two jobs".into()))
}

/// Releases the waiting jobs with ids `from..=to` (one slice of the release ceiling).
pub(crate) async fn release_slice(p: &PgPool, from: i64, to: i64) -> Result<()> {
    sqlx::query(sql!("bench", "release_slice"))
        .bind(from)
        .bind(to)
        .execute(p)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_statements_take_only_benchmark_names() {
        assert_eq!(
            with_db("DROP DATABASE {db}", "skiplock_bench_0a1b2c3d").unwrap(),
            "DROP DATABASE skiplock_bench_0a1b2c3d"
        );
        for bad in ["postgres", "skiplock_bench_x; DROP", "skiplock_bench_A", ""] {
            assert!(with_db("DROP DATABASE {db}", bad).is_err(), "{bad}");
        }
    }
}
