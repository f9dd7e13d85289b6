//! Claims read each lane (priority) of a queue from a bound, not from the head of the claim
//! index (`skiplock._claim_lanes`, `src/worker/cursor.rs`; docs/internals.md, "Claims when
//! Postgres cannot vacuum"): a claim from its bounds reads none of the index entries the jobs
//! claimed before it left behind while a session holds the vacuum horizon, and no job is left
//! behind by a bound: not one enqueued with a `run_at` long past, nor one in a priority with no
//! lane row, nor one in a lane the claim did not reach. A claim reads only the lanes a job may
//! be due in, at most `skiplock._claim_max_lanes` of them, so its work does not grow with the
//! number of lanes an enqueuer makes; the lanes' upkeep removes the ones no job needs, and never
//! one an enqueue in flight relies on.

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
    // The lanes' upkeep (a retention pass) registers the lane the UPDATE made.
    skiplock::store::maintenance::tidy_lanes(p, Duration::from_secs(30))
        .await
        .unwrap();
    wait_for("the three late jobs to finish", LONG, || async {
        (count_state(p, "completed").await == 103).then_some(())
    })
    .await;
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

/// What one claim read, from its transaction's own statistics: per index of `skiplock.jobs`
/// and `skiplock.lanes`, (scans, entries read), and the sequential scans of either table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Reads {
    indexes: BTreeMap<String, (i64, i64)>,
    seq_scans: i64,
}

impl Reads {
    async fn now(tx: &mut PgConnection) -> Reads {
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT c.relname::text, pg_stat_get_xact_numscans(c.oid),
                    pg_stat_get_xact_tuples_returned(c.oid)
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             WHERE i.indrelid IN ('skiplock.jobs'::regclass, 'skiplock.lanes'::regclass)",
        )
        .fetch_all(&mut *tx)
        .await
        .unwrap();
        let seq_scans: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(seq_scan), 0)::bigint FROM pg_stat_xact_user_tables
             WHERE schemaname = 'skiplock' AND relname IN ('jobs', 'lanes')",
        )
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        Reads {
            indexes: rows.into_iter().map(|(n, s, r)| (n, (s, r))).collect(),
            seq_scans,
        }
    }

    fn since(&self, before: &Reads) -> Reads {
        let mut indexes = BTreeMap::new();
        for (name, (s, r)) in &self.indexes {
            let (s0, r0) = before.indexes.get(name).copied().unwrap_or_default();
            if (s - s0, r - r0) != (0, 0) {
                indexes.insert(name.clone(), (s - s0, r - r0));
            }
        }
        Reads {
            indexes,
            seq_scans: self.seq_scans - before.seq_scans,
        }
    }

    /// Scans of jobs_claim_idx (one per lane the claim read).
    fn lane_probes(&self) -> i64 {
        self.indexes.get("jobs_claim_idx").map_or(0, |r| r.0)
    }
}

/// One claim of up to 10 noops of `queue` (lanes from their start, or from `bounds`; after
/// lane `after`), rolled back: what it read, the ids it got, where the next claim resumes.
async fn claim_reads(
    pool: &PgPool,
    queue: &str,
    bounds: Option<(&[i16], &[chrono::DateTime<chrono::Utc>])>,
    after: Option<i16>,
) -> (Reads, Vec<i64>, Option<i16>) {
    let mut tx = pool.begin().await.unwrap();
    let before = Reads::now(&mut tx).await;
    let (p, s) = match bounds {
        Some((p, s)) => (Some(p.to_vec()), Some(s.to_vec())),
        None => (None, None),
    };
    let rows: Vec<(Option<i64>, Option<i16>)> = sqlx::query_as(
        "SELECT id, lanes_after FROM skiplock._claim($1, ARRAY['noop'], 10, 'w', 0, $2, $3, $4)",
    )
    .bind(queue)
    .bind(p)
    .bind(s)
    .bind(after)
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    let read = Reads::now(&mut tx).await.since(&before);
    tx.rollback().await.unwrap();
    let ids = rows.iter().filter_map(|r| r.0).collect();
    let next = rows.iter().find(|r| r.0.is_none()).and_then(|r| r.1);
    (read, ids, next)
}

/// An enqueuer's 65,536 jobs due in 9999, one in each priority, make 65,536 lanes; a claim of
/// that queue (from the lanes' start, or from a worker's bounds) then reads exactly what a
/// claim of a queue with one lane reads: the lanes whose jobs are all due later are not read
/// at all. Measured by the transaction's own scan counts, not by time. Without the bound every
/// claim probed every lane (65,536 scans of jobs_claim_idx, about half a second each).
#[tokio::test]
async fn a_claim_of_a_queue_with_65536_lanes_of_later_jobs_reads_what_a_claim_of_one_lane_does() {
    let db = TestDb::new().await;
    let p = &db.pool;
    sqlx::query(
        "INSERT INTO skiplock.jobs (kind, queue, priority, scheduled_at)
         SELECT 'ghost', 'crowded', g::smallint, '9999-01-01' FROM generate_series(-32768, 32767) g",
    )
    .execute(&**p)
    .await
    .unwrap();
    assert_eq!(
        count(
            p,
            "SELECT count(DISTINCT priority) FROM skiplock.lanes WHERE queue = 'crowded'"
        )
        .await,
        65536
    );
    sqlx::raw_sql(
        "SELECT skiplock.enqueue('noop', queue => 'crowded');
         SELECT skiplock.enqueue('noop', queue => 'alone');
         ANALYZE skiplock.lanes;",
    )
    .execute(&**p)
    .await
    .unwrap();
    let an_hour_ago: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT now() - interval '1 hour'")
            .fetch_one(&**p)
            .await
            .unwrap();
    for bounds in [None, Some((&[0i16][..], &[an_hour_ago][..]))] {
        let (crowded, got, after) = claim_reads(p, "crowded", bounds, None).await;
        assert_eq!((got.len(), after), (1, None));
        let (alone, got, _) = claim_reads(p, "alone", bounds, None).await;
        assert_eq!(got.len(), 1);
        assert_eq!(crowded, alone, "{bounds:?}");
        assert_eq!(crowded.seq_scans, 0);
        assert_eq!(crowded.lane_probes(), 1, "{crowded:?}");
    }
}

/// Lanes whose jobs are gone (run, or deleted) stay awake until the lanes' upkeep (a retention
/// pass) removes them; meanwhile each claim reads at most `skiplock._claim_max_lanes` of them
/// and says where the next one resumes, so claims reach a job in the last lane, each bounded,
/// and after the upkeep one claim finds it at once. Without the bound (and the upkeep) every
/// claim probed every lane, for good.
#[tokio::test]
async fn lanes_whose_jobs_are_gone_cost_a_claim_at_most_its_lane_limit_until_the_upkeep_removes_them()
 {
    let db = TestDb::new().await;
    let p = &db.pool;
    sqlx::raw_sql(
        "INSERT INTO skiplock.jobs (kind, queue, priority)
         SELECT 'ghost', 'crowded', g::smallint FROM generate_series(-4096, -1) g;
         DELETE FROM skiplock.jobs WHERE kind = 'ghost';",
    )
    .execute(&**p)
    .await
    .unwrap();
    let job: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('noop', queue => 'crowded', priority => 32767::smallint)",
    )
    .fetch_one(&**p)
    .await
    .unwrap();
    let max_lanes: i32 = sqlx::query_scalar("SELECT skiplock._claim_max_lanes()")
        .fetch_one(&**p)
        .await
        .unwrap();
    let (mut after, mut claims) = (None, 0);
    let got = loop {
        let (read, got, next) = claim_reads(p, "crowded", None, after).await;
        claims += 1;
        assert!(read.lane_probes() <= max_lanes as i64, "{read:?}");
        assert_eq!(read.seq_scans, 0);
        if !got.is_empty() {
            break got;
        }
        after = Some(next.expect("a claim that read its most lanes says where to resume"));
        assert!(claims <= 4096 / max_lanes + 1, "{claims} claims");
    };
    assert_eq!(got, vec![job]);
    assert_eq!(claims, 4096 / max_lanes + 1);

    let removed = skiplock::store::maintenance::tidy_lanes(p, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(removed, Some(4096));
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM skiplock.lanes WHERE queue = 'crowded'"
        )
        .await,
        1
    );
    let (read, got, after) = claim_reads(p, "crowded", None, None).await;
    assert_eq!((got, after), (vec![job], None));
    assert_eq!(read.lane_probes(), 1, "{read:?}");
}

/// A worker whose claim read as many lanes as one claim may without finding a job claims
/// again at once from the lane it stopped at, rather than at its next poll (an hour here), so
/// a job beyond the first claim's lanes is run at once.
#[tokio::test]
async fn a_worker_reads_on_from_where_its_claim_stopped_at_once() {
    let db = TestDb::new().await;
    let p = &db.pool;
    sqlx::raw_sql(
        "INSERT INTO skiplock.jobs (kind, queue, priority)
         SELECT 'ghost', 'default', g::smallint FROM generate_series(-1024, -1) g;
         DELETE FROM skiplock.jobs WHERE kind = 'ghost';",
    )
    .execute(&**p)
    .await
    .unwrap();
    let job: i64 = sqlx::query_scalar("SELECT skiplock.enqueue('noop')")
        .fetch_one(&**p)
        .await
        .unwrap();
    let mut s = noop_settings(&[("default", 2)]);
    s.poll_interval = Duration::from_secs(3600);
    let worker = start_worker(p, s, |mut b| {
        builtin::register(b.registry_mut());
        b
    });
    wait_job(
        p,
        job,
        "the job beyond the first claim's lanes to run",
        |r| r.state.as_str() == "completed",
    )
    .await;
    worker.stop().await.unwrap();
}

/// The lanes' upkeep never removes a lane an enqueue still in flight relies on: it waits for
/// every transaction that was writing jobs when it marked the lane (here one left open: it
/// gives up for this pass), then decides again on what it sees, and keeps the lane whose job
/// that enqueue committed.
#[tokio::test]
async fn the_lanes_upkeep_waits_for_an_enqueue_in_flight_and_keeps_the_lane_it_relies_on() {
    use skiplock::store::maintenance::tidy_lanes;
    let db = TestDb::new().await;
    let p = &db.pool;
    // Lane 3 of queue `q` has its row and no job.
    sqlx::raw_sql(
        "INSERT INTO skiplock.jobs (kind, queue, priority) VALUES ('noop', 'q', 3);
         DELETE FROM skiplock.jobs;",
    )
    .execute(&**p)
    .await
    .unwrap();
    let lane =
        "SELECT count(*) FROM skiplock.lanes WHERE queue = 'q' AND priority = 3 AND due_at IS NULL";
    assert_eq!(count(p, lane).await, 1);
    // An enqueue relies on that row (it adds none) and stays open.
    let mut enq = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut enq).await.unwrap();
    let id: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('noop', queue => 'q', priority => 3::smallint)",
    )
    .fetch_one(&mut enq)
    .await
    .unwrap();
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.lanes WHERE queue = 'q'").await,
        1
    );
    assert_eq!(
        tidy_lanes(p, Duration::from_millis(300)).await.unwrap(),
        None
    );
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM skiplock.lanes WHERE queue = 'q' AND pending"
        )
        .await,
        1
    );
    sqlx::query("COMMIT").execute(&mut enq).await.unwrap();
    assert_eq!(
        tidy_lanes(p, Duration::from_secs(30)).await.unwrap(),
        Some(0)
    );
    assert_eq!(count(p, lane).await, 1);
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.lanes WHERE pending").await,
        0
    );
    let (_, got, _) = claim_reads(p, "q", None, None).await;
    assert_eq!(got, vec![id]);
}

/// An enqueue into a priority no job had before adds that lane's row, and never waits for
/// another enqueuer's open transaction that added the same lane first (a lane's row used to
/// have a primary key, and the second insert waited for the first one's commit).
#[tokio::test]
async fn an_enqueue_into_a_new_lane_never_waits_for_another_enqueuers_open_transaction() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let mut first = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut first).await.unwrap();
    sqlx::query("SELECT skiplock.enqueue('noop', queue => 'q', priority => 5::smallint)")
        .execute(&mut first)
        .await
        .unwrap();
    let mut second = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("SET statement_timeout = '5s'")
        .execute(&mut second)
        .await
        .unwrap();
    let id: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('noop', queue => 'q', priority => 5::smallint)",
    )
    .fetch_one(&mut second)
    .await
    .expect("the second enqueue waited for the first one's transaction");
    sqlx::query("ROLLBACK").execute(&mut first).await.unwrap();
    let (_, got, _) = claim_reads(p, "q", None, None).await;
    assert_eq!(got, vec![id]);
}

/// A row written past the API with an empty `limit_key` (the API refuses it) in a fair queue
/// fails no statement that registers lanes: the insert of it and of its neighbours lands, and
/// so does an ack batch sending it back with another job (one bad row never fails the rows
/// written with it).
#[tokio::test]
async fn a_row_with_an_empty_key_fails_no_statement_that_registers_lanes() {
    let db = TestDb::new().await;
    let p = &db.pool;
    skiplock::admin::set_queue_fairness(p, "fq", true)
        .await
        .unwrap();
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO skiplock.jobs (kind, queue, limit_key)
         VALUES ('noop', 'fq', ''), ('noop', 'fq', 'a') RETURNING id",
    )
    .fetch_all(&**p)
    .await
    .unwrap();
    sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = ANY($1)")
        .bind(&ids)
        .execute(&**p)
        .await
        .unwrap();
    let back: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM skiplock._ack($1, ARRAY[1, 1], ARRAY['available', 'available']::skiplock.job_state[],
                                    ARRAY[now(), now()], ARRAY[false, false], ARRAY['again', 'again'],
                                    ARRAY[NULL, NULL]::jsonb[], ARRAY[NULL, NULL]::timestamptz[])",
    )
    .bind(&ids)
    .fetch_all(&**p)
    .await
    .unwrap();
    assert_eq!(back.len(), 2);
    assert_eq!(count_state(p, "available").await, 2);
}

/// Moves job `id` (attempt 1) to `state` through the worker's ack (skiplock._ack), as a worker
/// finishing it does.
async fn ack_as(pool: &PgPool, id: i64, state: &str) {
    sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
    let acked: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM skiplock._ack(ARRAY[$1], ARRAY[1], ARRAY[$2]::skiplock.job_state[], ARRAY[now()],
                                    ARRAY[false], ARRAY[NULL], ARRAY[NULL]::jsonb[], ARRAY[NULL]::timestamptz[])",
    )
    .bind(id)
    .bind(state)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(acked, [id]);
}

/// The ids a claim of queue `q` from the start of every lane takes.
async fn claim_all(pool: &PgPool, q: &str) -> Vec<i64> {
    let mut ids: Vec<i64> = sqlx::query_scalar::<_, Option<i64>>(
        "SELECT id FROM skiplock._claim($1, ARRAY['noop'], 10, 'w', 0, NULL, NULL)",
    )
    .bind(q)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .flatten()
    .collect();
    ids.sort();
    ids
}

/// Every statement of the flows that makes a job available registers its lane
/// (skiplock._lanes_need; a job inserted `waiting` registers none, and the claim reads only
/// lanes with a row): the release of a job whose only dependency finished
/// (skiplock._settle_edges), of one whose last edge of several was resolved
/// (skiplock._cancel_or_release), of one whose dependencies had all finished when it was
/// enqueued, and a retry that brings back the failed dependency of a flow (skiplock._revive).
/// Each job is in a priority of its own, with no lane row until its release, and the first
/// claim after it takes it.
#[tokio::test]
async fn every_release_of_a_flow_registers_its_lane_and_the_next_claim_takes_its_job() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let enqueue = |sql: &'static str, deps: Vec<i64>| async move {
        sqlx::query_scalar::<_, i64>(sql)
            .bind(deps)
            .fetch_one(&**p)
            .await
            .unwrap()
    };
    let root = enqueue(
        "SELECT skiplock.enqueue('noop', queue => 'f', depends_on => $1)",
        vec![],
    )
    .await;
    let earlier = enqueue(
        "SELECT skiplock.enqueue('noop', queue => 'f', depends_on => $1)",
        vec![],
    )
    .await;
    ack_as(p, earlier, "completed").await;
    let sole = enqueue(
        "SELECT skiplock.enqueue('noop', queue => 'f', priority => 1::smallint, depends_on => $1)",
        vec![root],
    )
    .await;
    let last_of_two = enqueue(
        "SELECT skiplock.enqueue('noop', queue => 'f', priority => 2::smallint, depends_on => $1)",
        vec![root, earlier],
    )
    .await;
    let at_once = enqueue(
        "SELECT skiplock.enqueue('noop', queue => 'f', priority => 3::smallint, depends_on => $1)",
        vec![earlier],
    )
    .await;
    let lanes = "SELECT count(*) FROM skiplock.lanes WHERE queue = 'f' AND priority > 0";
    assert_eq!(
        count(p, lanes).await,
        1,
        "only the lane of the job released at its enqueue"
    );
    ack_as(p, root, "completed").await;
    assert_eq!(count(p, lanes).await, 3);
    let mut want = vec![sole, last_of_two, at_once];
    want.sort();
    assert_eq!(claim_all(p, "f").await, want);

    // A failed dependency cancels its dependent; once retention has removed the lane no job
    // needed any more, retrying the dependent brings the dependency back in its lane.
    let failing = enqueue(
        "SELECT skiplock.enqueue('noop', queue => 'r', priority => 5::smallint, depends_on => $1)",
        vec![],
    )
    .await;
    let dependent = enqueue(
        "SELECT skiplock.enqueue('noop', queue => 'r', depends_on => $1)",
        vec![failing],
    )
    .await;
    ack_as(p, failing, "discarded").await;
    assert_eq!(count_state(p, "cancelled").await, 1);
    skiplock::store::maintenance::tidy_lanes(p, LONG)
        .await
        .unwrap();
    assert_eq!(
        count(p, "SELECT count(*) FROM skiplock.lanes WHERE queue = 'r'").await,
        0
    );
    sqlx::query("SELECT skiplock.retry($1)")
        .bind(dependent)
        .execute(&**p)
        .await
        .unwrap();
    assert_eq!(claim_all(p, "r").await, [failing]);
}
