//! Claims read each lane (priority) of a queue from a bound, not from the head of the claim
//! index (`skiplock._claim_lanes`, `src/worker/cursor.rs`; docs/internals.md, "Claims when
//! Postgres cannot vacuum"): a claim from its bounds reads none of the index entries the jobs
//! claimed before it left behind while a session holds the vacuum horizon, and no job is left
//! behind by a bound: not one enqueued with a `run_at` long past, nor one in a priority with no
//! lane row, nor one in a lane the claim did not reach.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use skiplock::worker::builtin;
use sqlx::{Connection, PgConnection, PgPool};
use support::*;

const LONG: Duration = Duration::from_secs(60);

/// id (None: the claim's status row), priority, and the lanes it read to their end.
type ClaimRow = (Option<i64>, Option<i16>, Option<Vec<i16>>);

/// Index entries of `jobs_claim_idx` one call of `skiplock._claim` read (the transaction's own
/// statistics counter, so nothing else on the server counts).
async fn entries_read_by_claim(
    pool: &PgPool,
    lanes: Option<(&[i16], &[chrono::DateTime<chrono::Utc>])>,
    n: i32,
) -> (i64, usize) {
    let mut tx = pool.begin().await.unwrap();
    let (p, s) = match lanes {
        Some((p, s)) => (Some(p.to_vec()), Some(s.to_vec())),
        None => (None, None),
    };
    let claimed: Vec<Option<i64>> = sqlx::query_scalar(
        "SELECT id FROM skiplock._claim('default', ARRAY['noop'], $1, 'test', 0, $2, $3)",
    )
    .bind(n)
    .bind(p)
    .bind(s)
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    let read: i64 = sqlx::query_scalar(
        "SELECT pg_stat_get_xact_tuples_returned('skiplock.jobs_claim_idx'::regclass)",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    (read, claimed.iter().flatten().count())
}

#[tokio::test]
async fn a_claim_from_its_bounds_reads_none_of_the_entries_a_held_horizon_keeps() {
    let db = TestDb::new().await;
    let p = &db.pool;
    // A session holding a transaction id: from now on vacuum can remove nothing, and no scan
    // can mark an index entry dead.
    let mut holder = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT txid_current()")
        .execute(&mut holder)
        .await
        .unwrap();

    // 3,000 jobs enqueued and claimed: 3,000 index entries left at the head of the lane.
    sqlx::query("SELECT skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[3000]))")
        .execute(p)
        .await
        .unwrap();
    let claimed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM skiplock._claim('default', ARRAY['noop'], 3000, 'w', 0, NULL, NULL)
         WHERE id IS NOT NULL",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(claimed, 3000);
    // Then ten due jobs, a second later than the bound a worker would now hold.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let bound: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT now() - interval '1 second'")
            .fetch_one(p)
            .await
            .unwrap();
    sqlx::query("SELECT skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[10]))")
        .execute(p)
        .await
        .unwrap();

    // From the start of the lane: every entry the horizon keeps is read.
    let (from_start, got) = entries_read_by_claim(p, None, 10).await;
    assert_eq!(got, 10);
    assert!(
        from_start >= 3000,
        "from the start: {from_start} entries read"
    );
    // From the bound: only the ten.
    let (bounded, got) = entries_read_by_claim(p, Some((&[0], &[bound])), 10).await;
    assert_eq!(got, 10);
    assert!(bounded <= 20, "from the bound: {bounded} entries read");

    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
}

fn noop_settings(queues: &[(&str, usize)]) -> skiplock::config::QueueSettings {
    let mut s = fast_settings();
    s.queues = Some(
        queues
            .iter()
            .map(|(q, n)| (q.to_string(), *n))
            .collect::<BTreeMap<_, _>>(),
    );
    s
}

#[tokio::test]
async fn jobs_below_a_lanes_bound_or_without_a_lane_row_are_still_run() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let worker = start_worker(p, noop_settings(&[("default", 4)]), |mut b| {
        builtin::register(b.registry_mut());
        b
    });
    // The worker's bound moves on with its claims.
    for _ in 0..5 {
        sqlx::query("SELECT skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[20]))")
            .execute(p)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_for("the first jobs to finish", LONG, || async {
        (count_state(p, "completed").await == 100).then_some(())
    })
    .await;
    // A job due a day ago (below every bound), one in a new priority, and one whose
    // priority a plain UPDATE moved to a priority with no lane row.
    sqlx::raw_sql(
        "SELECT skiplock.enqueue('noop', run_at => now() - interval '1 day');
         SELECT skiplock.enqueue('noop', priority => (-3)::smallint);",
    )
    .execute(p)
    .await
    .unwrap();
    let moved: i64 =
        sqlx::query_scalar("SELECT skiplock.enqueue('noop', run_at => now() + interval '1 hour')")
            .fetch_one(p)
            .await
            .unwrap();
    sqlx::query("UPDATE skiplock.jobs SET priority = 17, scheduled_at = now() - interval '1 hour' WHERE id = $1")
        .bind(moved)
        .execute(p)
        .await
        .unwrap();
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.lanes WHERE priority = 17").await,
        0
    );
    wait_for("the three late jobs to finish", LONG, || async {
        (count_state(p, "completed").await == 103).then_some(())
    })
    .await;
    // The claim from the start registered the lane the UPDATE made.
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.lanes WHERE priority = 17").await,
        1
    );
    worker.stop().await.unwrap();
}

#[tokio::test]
async fn a_lane_a_full_claim_did_not_reach_is_read_from_its_start_when_one_does() {
    let db = TestDb::new().await;
    let p = &db.pool;
    // Two lanes; a claim of 5 fills from the better one and never reaches the other.
    sqlx::raw_sql(
        "SELECT skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[5]), priority => (-1)::smallint);
         SELECT skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[3]), run_at => now() - interval '1 hour');",
    )
    .execute(p)
    .await
    .unwrap();
    let rows: Vec<ClaimRow> = sqlx::query_as(
        "SELECT id, priority, exhausted FROM skiplock._claim('default', ARRAY['noop'], 5, 'w', 0, NULL, NULL)",
    )
    .fetch_all(p)
    .await
    .unwrap();
    let jobs: Vec<i16> = rows
        .iter()
        .filter(|r| r.0.is_some())
        .filter_map(|r| r.1)
        .collect();
    assert_eq!(jobs, vec![-1; 5]);
    // The better lane filled the claim: neither lane is reported read to its end.
    let status = rows.iter().find(|r| r.0.is_none()).unwrap();
    assert_eq!(status.2.as_deref(), Some(&[][..]));
    // The next claim, with a bound for lane -1 only, reads lane 0 from its start and finds
    // the three jobs due an hour ago.
    let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(p)
        .await
        .unwrap();
    let rows: Vec<ClaimRow> = sqlx::query_as(
        "SELECT id, priority, exhausted FROM skiplock._claim('default', ARRAY['noop'], 10, 'w', 0, ARRAY[-1]::smallint[], ARRAY[$1]::timestamptz[])",
    )
    .bind(now)
    .fetch_all(p)
    .await
    .unwrap();
    let jobs: Vec<i16> = rows
        .iter()
        .filter(|r| r.0.is_some())
        .filter_map(|r| r.1)
        .collect();
    assert_eq!(jobs, vec![0; 3]);
    let status = rows.iter().find(|r| r.0.is_none()).unwrap();
    assert_eq!(status.2.as_deref(), Some(&[-1, 0][..]));
}
