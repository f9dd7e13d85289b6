//! The job model beyond a key, against a real Postgres: uniqueness by args (`unique_by`) and
//! by period (`unique_for`) from SQL and Rust, concurrent callers included; tags and meta
//! (stored, seen by the handler, kept through a retry, replaced by a replace, filtering the
//! job list and the bulk functions); and the bad input each refuses with nothing written.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use skiplock::queue::{EnqueueOutcome, NewJob, OnConflict, UniqueBy};
use skiplock::store::jobs::{self, JobFilter, ManyJobs, enqueue, enqueue_many};
use skiplock::worker::handler::Handler;
use skiplock::worker::{HandlerResult, JobContext, Outcome};
use support::*;

async fn jobs_count(db: &TestDb) -> i64 {
    count(&db.pool, "SELECT count(*) FROM skiplock.jobs").await
}

/// `n` callers at once, each on its own connection, enqueueing `job`: the ids they got.
async fn race(db: &TestDb, n: usize, job: NewJob) -> HashSet<i64> {
    let start = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (pool, job, start) = (db.pool.clone(), job.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = pool.acquire().await.unwrap();
            start.wait().await;
            enqueue(&mut *conn, &job)
                .await
                .expect("no unique violation may leak out")
                .id
        }));
    }
    let mut ids = HashSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_callers_with_the_same_args_make_one_job() {
    let db = TestDb::new().await;
    let job = NewJob::new("mail", json!({"to": "a@example.org", "n": 1}))
        .unique_by(UniqueBy::Args, OnConflict::Keep);
    let ids = race(&db, 8, job).await;
    assert_eq!(ids.len(), 1, "every caller got the same job: {ids:?}");
    assert_eq!(jobs_count(&db).await, 1);

    // The order of the keys in the caller's JSON does not matter; other args are another job.
    let same = enqueue(
        &db.pool,
        &NewJob::new("mail", json!({"n": 1, "to": "a@example.org"}))
            .unique_by(UniqueBy::Args, OnConflict::Keep),
    )
    .await
    .unwrap();
    assert_eq!(same.outcome, EnqueueOutcome::Deduplicated);
    assert!(ids.contains(&same.id));
    let other = enqueue(
        &db.pool,
        &NewJob::new("mail", json!({"n": 2, "to": "a@example.org"}))
            .unique_by(UniqueBy::Args, OnConflict::Keep),
    )
    .await
    .unwrap();
    assert_eq!(other.outcome, EnqueueOutcome::Inserted);
    // So is the same args in another queue or of another kind.
    for job in [
        NewJob::new("mail", json!({"to": "a@example.org", "n": 1})).queue("other"),
        NewJob::new("sms", json!({"to": "a@example.org", "n": 1})),
    ] {
        let got = enqueue(&db.pool, &job.unique_by(UniqueBy::Args, OnConflict::Keep))
            .await
            .unwrap();
        assert_eq!(got.outcome, EnqueueOutcome::Inserted);
    }
    assert_eq!(jobs_count(&db).await, 4);
}

#[tokio::test]
async fn unique_by_fields_looks_only_at_those_fields_and_replace_updates_the_waiting_job() {
    let db = TestDb::new().await;
    let by = || UniqueBy::Fields(vec!["user".into(), "day".into()]);
    let first = enqueue(
        &db.pool,
        &NewJob::new(
            "digest",
            json!({"user": 7, "day": "2026-12-04", "items": [1]}),
        )
        .unique_by(by(), OnConflict::Keep)
        .tag("first"),
    )
    .await
    .unwrap();
    let kept = enqueue(
        &db.pool,
        &NewJob::new(
            "digest",
            json!({"user": 7, "day": "2026-12-04", "items": [1, 2]}),
        )
        .unique_by(by(), OnConflict::Keep),
    )
    .await
    .unwrap();
    assert_eq!(
        (kept.id, kept.outcome),
        (first.id, EnqueueOutcome::Deduplicated)
    );
    let replaced = enqueue(
        &db.pool,
        &NewJob::new(
            "digest",
            json!({"user": 7, "day": "2026-12-04", "items": [1, 2, 3]}),
        )
        .unique_by(by(), OnConflict::Replace)
        .tag("second")
        .meta(json!({"by": "replace"})),
    )
    .await
    .unwrap();
    assert_eq!(
        (replaced.id, replaced.outcome),
        (first.id, EnqueueOutcome::Replaced)
    );
    let row = jobs::get_job(&db.pool, first.id).await.unwrap();
    assert_eq!(row.args.to_value().unwrap()["items"], json!([1, 2, 3]));
    // A replace takes the caller's tags and meta, as it takes the args.
    assert_eq!(row.tags, ["second"]);
    assert_eq!(row.meta, json!({"by": "replace"}));
    // Another user (a named field) is another job; a field missing counts as null.
    let other = enqueue(
        &db.pool,
        &NewJob::new("digest", json!({"user": 8, "day": "2026-12-04"}))
            .unique_by(by(), OnConflict::Keep),
    )
    .await
    .unwrap();
    assert_eq!(other.outcome, EnqueueOutcome::Inserted);
    let (id, outcome): (i64, String) = sqlx::query_as(
        "SELECT id, outcome::text FROM skiplock.enqueue_result('digest', '{\"user\": 8}', unique_by => 'args: day ,user')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(outcome, "inserted", "day missing is not day given");
    let (again, outcome): (i64, String) = sqlx::query_as(
        "SELECT id, outcome::text FROM skiplock.enqueue_result('digest', '{\"user\": 8, \"day\": null}', unique_by => 'args:user,day')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((again, outcome.as_str()), (id, "deduplicated"));
}

/// Moves every uniqueness window `by` (an interval) into the past, as the clock would.
async fn move_windows_back(db: &TestDb, by: &str) {
    sqlx::query(
        "UPDATE skiplock.unique_windows SET window_start = window_start - $1::interval, \
         window_end = window_end - $1::interval",
    )
    .bind(by)
    .execute(&db.pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_for_creates_one_job_per_window_whatever_became_of_it() {
    let db = TestDb::new().await;
    // A window of ten years (the current one runs 2019-12 to 2029-12): no test run
    // straddles two of them.
    let decade = Duration::from_secs(3650 * 86_400);
    let job = || {
        NewJob::new("report", json!({"team": "a"}))
            .unique_by(UniqueBy::Args, OnConflict::Keep)
            .unique_for(decade)
    };
    let ids = race(&db, 8, job()).await;
    assert_eq!(ids.len(), 1, "one job for 8 concurrent callers: {ids:?}");
    let first = *ids.iter().next().unwrap();
    // The job runs and completes: a unique key alone would now accept another; the window
    // does not.
    sqlx::query("UPDATE skiplock.jobs SET state = 'completed', finalized_at = now() WHERE id = $1")
        .bind(first)
        .execute(&db.pool)
        .await
        .unwrap();
    let again = enqueue(&db.pool, &job()).await.unwrap();
    assert_eq!(
        (again.id, again.outcome),
        (first, EnqueueOutcome::Deduplicated)
    );
    // 'replace' in a spent window changes nothing either.
    let replaced = enqueue(
        &db.pool,
        &job().unique_by(UniqueBy::Args, OnConflict::Replace),
    )
    .await
    .unwrap();
    assert_eq!(
        (replaced.id, replaced.outcome),
        (first, EnqueueOutcome::Deduplicated)
    );
    assert_eq!(jobs_count(&db).await, 1);

    // The window ends (moved into the past, as time would): the next enqueue makes a job.
    move_windows_back(&db, "20 years").await;
    let next = enqueue(&db.pool, &job()).await.unwrap();
    assert_eq!(next.outcome, EnqueueOutcome::Inserted);
    assert_ne!(next.id, first);
    // Retention forgets the ended window, and only it.
    skiplock::store::maintenance::retention_unique_windows(&db.pool, 100)
        .await
        .unwrap();
    let windows: Vec<i64> = sqlx::query_scalar("SELECT job_id FROM skiplock.unique_windows")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(windows, [next.id]);

    // From SQL, without a key: one job of the kind and queue per window; 'replace' needs a
    // key to know which job it would replace.
    let sql_once = "SELECT skiplock.enqueue('tick', '{}', unique_for => interval '36500 days')";
    let a: i64 = sqlx::query_scalar(sql_once)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let b: i64 = sqlx::query_scalar(sql_once)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(a, b);
    let e = sqlx::query(
        "SELECT skiplock.enqueue('tick', '{}', on_conflict => 'replace', unique_for => interval '1 hour')",
    )
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(
        e.to_string().contains("needs unique_key or unique_by"),
        "{e}"
    );
}

/// `unique_for => '1 minute'`: a second job inside the minute is refused (the first one's id
/// comes back), one after it is a new job. The first two are enqueued in one transaction,
/// whose clock does not move, so they cannot straddle two windows; the minute's end is brought
/// about by moving the window into the past, as the clock would.
#[tokio::test]
async fn unique_for_a_minute_keeps_one_job_inside_the_minute_and_takes_one_after_it() {
    let db = TestDb::new().await;
    let once = "SELECT skiplock.enqueue('digest', '{\"team\": \"a\"}', unique_by => 'args', \
                unique_for => interval '1 minute')";
    let mut tx = db.pool.begin().await.unwrap();
    let first: i64 = sqlx::query_scalar(once).fetch_one(&mut *tx).await.unwrap();
    let second: i64 = sqlx::query_scalar(once).fetch_one(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        first, second,
        "the second job inside the minute is the first one"
    );
    let window: (bool, bool) = sqlx::query_as(
        "SELECT window_end - window_start = interval '1 minute', \
                now() >= window_start AND now() < window_end + interval '1 minute' \
         FROM skiplock.unique_windows",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(window, (true, true), "one window of a minute, around now");
    // The job ran (a pending job's args key alone would keep a second one).
    sqlx::query("UPDATE skiplock.jobs SET state = 'completed', finalized_at = now() WHERE id = $1")
        .bind(first)
        .execute(&db.pool)
        .await
        .unwrap();
    move_windows_back(&db, "1 minute").await;
    let after: i64 = sqlx::query_scalar(once).fetch_one(&db.pool).await.unwrap();
    assert_ne!(after, first, "after the minute, a new job");
    assert_eq!(jobs_count(&db).await, 2);
}

#[tokio::test]
async fn a_waiting_job_in_its_window_is_replaced_and_a_second_window_key_is_another_job() {
    let db = TestDb::new().await;
    let century = Duration::from_secs(100 * 365 * 86_400);
    let first = enqueue(
        &db.pool,
        &NewJob::new("sync", json!({"n": 1}))
            .unique_key("acct-1", OnConflict::Keep)
            .unique_for(century),
    )
    .await
    .unwrap();
    let replaced = enqueue(
        &db.pool,
        &NewJob::new("sync", json!({"n": 2}))
            .unique_key("acct-1", OnConflict::Replace)
            .unique_for(century),
    )
    .await
    .unwrap();
    assert_eq!(
        (replaced.id, replaced.outcome),
        (first.id, EnqueueOutcome::Replaced)
    );
    let row = jobs::get_job(&db.pool, first.id).await.unwrap();
    assert_eq!(row.args.to_value().unwrap(), json!({"n": 2}));
    let other = enqueue(
        &db.pool,
        &NewJob::new("sync", json!({"n": 1}))
            .unique_key("acct-2", OnConflict::Keep)
            .unique_for(century),
    )
    .await
    .unwrap();
    assert_eq!(other.outcome, EnqueueOutcome::Inserted);
}

#[tokio::test]
async fn enqueue_many_with_unique_by_folds_duplicates_and_tags_every_job() {
    let db = TestDb::new().await;
    let args = vec![json!({"a": 1}), json!({"a": 2}), json!({"a": 1})];
    let tags = vec!["batch".to_string(), "eu".to_string()];
    let meta = json!({"tenant": "t1"});
    let ids = enqueue_many(
        &db.pool,
        ManyJobs {
            kind: "m",
            args: &args,
            queue: "default",
            tags: &tags,
            meta: Some(&meta),
            unique_by: Some(&UniqueBy::Args),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(ids.len(), 3);
    assert_eq!(
        ids[0], ids[2],
        "the duplicate within the call got the first's id"
    );
    assert_ne!(ids[0], ids[1]);
    assert_eq!(jobs_count(&db).await, 2);
    // Without uniqueness: one INSERT, the tags and meta on every row.
    let plain = enqueue_many(
        &db.pool,
        ManyJobs {
            kind: "m",
            args: &args,
            queue: "default",
            tags: &tags,
            meta: Some(&meta),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(plain.len(), 3);
    let tagged = count(
        &db.pool,
        "SELECT count(*) FROM skiplock.jobs WHERE tags = '{batch,eu}' AND meta = '{\"tenant\": \"t1\"}'",
    )
    .await;
    assert_eq!(tagged, 5);
}

/// A job's tags and meta, as its handler saw them.
type TagsAndMeta = (Vec<String>, serde_json::Value);

/// Writes down the tags and meta its jobs carry.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<TagsAndMeta>>>);
impl Handler for Seen {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "seen"
    }
    async fn run(&self, ctx: JobContext, _args: serde_json::Value) -> HandlerResult {
        self.0.lock().unwrap().push((ctx.tags, ctx.meta));
        Ok(Outcome::Complete)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_and_meta_reach_the_handler_and_filter_lists_and_bulk_retry() {
    let db = TestDb::new().await;
    let tagged = enqueue(
        &db.pool,
        &NewJob::new("seen", json!({}))
            .tag("eu")
            .tag("billing")
            .tag("eu")
            .meta(json!({"tenant": "acme", "request": "r-1"})),
    )
    .await
    .unwrap()
    .id;
    let plain = enqueue(&db.pool, &NewJob::new("seen", json!({})))
        .await
        .unwrap()
        .id;
    let seen = Seen::default();
    let w = start_worker(&db.pool, fast_settings(), |b| b.register(seen.clone()));
    wait_for("both completed", Duration::from_secs(60), || async {
        (count_state(&db.pool, "completed").await == 2).then_some(())
    })
    .await;
    w.stop().await.unwrap();
    let mut got = seen.0.lock().unwrap().clone();
    got.sort_by_key(|(t, _)| t.len());
    assert_eq!(
        got,
        [
            (vec![], json!({})),
            (
                vec!["billing".to_string(), "eu".to_string()],
                json!({"tenant": "acme", "request": "r-1"})
            ),
        ],
        "tags sorted and once each; meta as given, {{}} when none"
    );

    // The job list by tag and by meta.
    let by = |tag: Option<&str>, meta: Option<serde_json::Value>| JobFilter {
        tag: tag.map(String::from),
        meta,
        limit: 10,
        ..Default::default()
    };
    let ids = |rows: Vec<skiplock::queue::JobRow>| rows.iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(jobs::list_jobs(&db.pool, &by(Some("eu"), None))
            .await
            .unwrap()),
        [tagged]
    );
    assert_eq!(
        ids(
            jobs::list_jobs(&db.pool, &by(None, Some(json!({"tenant": "acme"}))))
                .await
                .unwrap()
        ),
        [tagged]
    );
    assert_eq!(
        ids(jobs::list_jobs(&db.pool, &by(Some("us"), None))
            .await
            .unwrap()),
        Vec::<i64>::new()
    );

    // retry_jobs by tag retries only the tagged job, and the retry keeps its tags and meta.
    let n: i64 = sqlx::query_scalar("SELECT skiplock.retry_jobs(tag => 'billing')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(state_of(&db, tagged).await, "available");
    assert_eq!(state_of(&db, plain).await, "completed");
    let row = jobs::get_job(&db.pool, tagged).await.unwrap();
    assert_eq!(row.tags, ["billing", "eu"]);
    assert_eq!(row.meta["tenant"], "acme");
    // cancel_jobs by meta, through the Rust admin functions the console uses.
    let cancelled = skiplock::admin::cancel_jobs(
        &db.pool,
        &skiplock::admin::BulkFilter {
            meta: Some(json!({"tenant": "other"})),
            ..Default::default()
        },
        100,
    )
    .await
    .unwrap();
    assert_eq!(cancelled, 0);
    let cancelled = skiplock::admin::cancel_jobs(
        &db.pool,
        &skiplock::admin::BulkFilter {
            tag: Some("eu".into()),
            meta: Some(json!({"tenant": "acme"})),
            ..Default::default()
        },
        100,
    )
    .await
    .unwrap();
    assert_eq!(cancelled, 1);
    assert_eq!(state_of(&db, tagged).await, "cancelled");
}

#[tokio::test]
async fn bad_tags_meta_and_uniqueness_are_refused_naming_the_problem_with_nothing_written() {
    let db = TestDb::new().await;
    for (sql, want) in [
        (
            "SELECT skiplock.enqueue('k', '{}', tags => array_fill('t'::text, ARRAY[33]))",
            "at most 32 tags",
        ),
        (
            "SELECT skiplock.enqueue('k', '{}', tags => ARRAY[''])",
            "1 to 100 characters",
        ),
        (
            "SELECT skiplock.enqueue('k', '{}', tags => ARRAY['a', NULL])",
            "tag NULL must be",
        ),
        (
            "SELECT skiplock.enqueue('k', '{}', tags => ARRAY[repeat('x', 101)])",
            "1 to 100 characters",
        ),
        (
            "SELECT skiplock.enqueue('k', '{}', meta => '[1]')",
            "meta must be a JSON object",
        ),
        (
            "SELECT skiplock.enqueue('k', '{}', meta => jsonb_build_object('x', repeat('y', 70000)))",
            "at most 65536",
        ),
        (
            "SELECT skiplock.enqueue('k', '{}', unique_by => 'kind')",
            "unique_by must be",
        ),
        (
            "SELECT skiplock.enqueue('k', '{}', unique_by => 'args:')",
            "unique_by must be",
        ),
        (
            "SELECT skiplock.enqueue('k', '{}', unique_by => 'args:a,,b')",
            "unique_by must be",
        ),
        (
            "SELECT skiplock.enqueue('k', '{}', unique_key => 'x', unique_by => 'args')",
            "not both",
        ),
        (
            "SELECT skiplock.enqueue('k', '{}', unique_for => interval '-1 minute')",
            "positive interval",
        ),
        (
            "SELECT skiplock.enqueue('k', '{}', unique_for => interval '1001 years')",
            "at most 1000 years",
        ),
        (
            "SELECT skiplock.enqueue_many('k', ARRAY['{}'::jsonb], tags => ARRAY[''])",
            "1 to 100 characters",
        ),
        (
            "SELECT skiplock.enqueue_many('k', ARRAY['{}'::jsonb], meta => '\"x\"')",
            "meta must be a JSON object",
        ),
        (
            "SELECT skiplock.enqueue_many('k', ARRAY['{}'::jsonb], unique_by => 'args', on_conflict => 'drop')",
            "on_conflict must be",
        ),
    ] {
        let e = sqlx::query(sql).execute(&db.pool).await.unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(want), "{sql}: {msg}");
        assert_eq!(
            e.as_database_error().and_then(|d| d.code()).as_deref(),
            Some("22023"),
            "{sql}"
        );
    }
    assert_eq!(jobs_count(&db).await, 0);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.unique_windows").await,
        0
    );
    // Rust refuses a NUL before the round trip, as in args.
    let e = enqueue(&db.pool, &NewJob::new("k", json!({})).tag("a\0b"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("NUL"), "{e}");
    let e = enqueue(
        &db.pool,
        &NewJob::new("k", json!({})).meta(json!({"x": "a\u{0}"})),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("NUL"), "{e}");
    assert!("args:".parse::<UniqueBy>().is_err());
    assert!("argsx".parse::<UniqueBy>().is_err());
    assert_eq!(
        "args: a, b".parse::<UniqueBy>().unwrap(),
        UniqueBy::Fields(vec!["a".into(), "b".into()])
    );
    assert_eq!(jobs_count(&db).await, 0);
}

/// Writes down the order its jobs run in; a `{"gate": true}` job waits for `gate` first.
#[derive(Clone)]
struct InOrder {
    ran: Arc<Mutex<Vec<i64>>>,
    gate: Arc<tokio::sync::Semaphore>,
}
impl Handler for InOrder {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "in-order"
    }
    async fn run(&self, ctx: JobContext, args: serde_json::Value) -> HandlerResult {
        if args["gate"] == true {
            let _ = self.gate.acquire().await;
        }
        self.ran.lock().unwrap().push(ctx.id);
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(Outcome::Complete)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempted_at_is_when_the_handler_started_and_a_buffered_job_shows_none() {
    let db = TestDb::new().await;
    // Later jobs first (priority), so the order they run in is not the order of their ids;
    // the first to run waits at the gate.
    for n in 0..40i16 {
        enqueue(
            &db.pool,
            &NewJob::new("in-order", json!({"gate": n == 39}))
                .queue("solo")
                .priority(-n),
        )
        .await
        .unwrap();
    }
    let h = InOrder {
        ran: Default::default(),
        gate: Arc::new(tokio::sync::Semaphore::new(0)),
    };
    let w = start_worker(&db.pool, fast_settings(), |b| {
        b.queue("solo", 1).register(h.clone())
    });
    // While job 0 holds the one slot, the job claimed ahead with it is running in psql's eyes
    // but has no attempted_at: it has not started.
    wait_for("one started, one buffered", Duration::from_secs(60), || async {
        let (started, buffered): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE attempted_at IS NOT NULL), count(*) FILTER (WHERE attempted_at IS NULL) \
             FROM skiplock.jobs WHERE state = 'running'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        (started == 1 && buffered >= 1).then_some(())
    })
    .await;
    h.gate.add_permits(1);
    wait_for("all completed", Duration::from_secs(120), || async {
        (count_state(&db.pool, "completed").await == 40).then_some(())
    })
    .await;
    w.stop().await.unwrap();
    let ran = h.ran.lock().unwrap().clone();
    // Jobs claimed ahead waited in the buffer and started one after the other: attempted_at
    // orders them as they ran, with no two alike (the claim's clock alone would give a whole
    // batch one time).
    let by_start: Vec<(i64, bool)> = sqlx::query_as(
        "SELECT id, attempted_at IS NOT NULL AND (lag(attempted_at) OVER w IS NULL OR attempted_at > lag(attempted_at) OVER w) \
         FROM skiplock.jobs WINDOW w AS (ORDER BY attempted_at, id) ORDER BY attempted_at, id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(ran.len(), 40);
    assert_eq!(by_start.iter().map(|r| r.0).collect::<Vec<_>>(), ran);
    assert!(
        by_start.iter().all(|r| r.1),
        "starts set and strictly increasing: {by_start:?}"
    );
    let late = count(
        &db.pool,
        "SELECT count(*) FROM skiplock.jobs WHERE attempted_at > finalized_at OR attempted_at < created_at",
    )
    .await;
    assert_eq!(late, 0, "every start lies between the enqueue and the ack");
}

#[tokio::test]
async fn the_heartbeat_and_the_ack_write_a_buffered_jobs_start() {
    use skiplock::store::ack::{Ack, ack_many};
    use skiplock::store::claim::{ClaimParams, LaneReads, claim_from};
    use skiplock::store::heartbeat::{HeldJob, heartbeat_many};
    let db = TestDb::new().await;
    let args = vec![json!({}), json!({}), json!({})];
    enqueue_many(
        &db.pool,
        ManyJobs {
            kind: "k",
            args: &args,
            queue: "default",
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // One free slot, two more ahead.
    let kinds = vec!["k".to_string()];
    let claimed = claim_from(
        db.pool.pg(),
        ClaimParams {
            queue: "default",
            kinds: &kinds,
            limit: 3,
            worker: "w:1:x",
        },
        1,
        LaneReads::default(),
    )
    .await
    .unwrap();
    let ids: Vec<i64> = claimed.jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids.len(), 3);
    let started: Vec<Option<chrono::DateTime<chrono::Utc>>> =
        sqlx::query_scalar("SELECT attempted_at FROM skiplock.jobs ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(started[0].is_some());
    assert_eq!(&started[1..], [None, None]);
    // The second starts: the next heartbeat writes its start; the third stays unstarted.
    let t1: chrono::DateTime<chrono::Utc> = "2026-12-04T10:00:01Z".parse().unwrap();
    let held: Vec<HeldJob> = claimed
        .jobs
        .iter()
        .map(|j| HeldJob {
            id: j.id,
            attempt: j.attempt,
            started_at: (j.id == ids[1]).then_some(t1),
        })
        .collect();
    assert_eq!(heartbeat_many(&db.pool, &held).await.unwrap().len(), 3);
    let started: Vec<Option<chrono::DateTime<chrono::Utc>>> =
        sqlx::query_scalar("SELECT attempted_at FROM skiplock.jobs ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(started[1], Some(t1));
    assert_eq!(started[2], None);
    // The ack writes the start it carries.
    let t2: chrono::DateTime<chrono::Utc> = "2026-12-04T10:00:02Z".parse().unwrap();
    let acks: Vec<Ack> = claimed
        .jobs
        .iter()
        .map(|j| Ack {
            id: j.id,
            attempt: j.attempt,
            state: skiplock::queue::JobState::Completed,
            scheduled_at: None,
            give_back: false,
            error: None,
            result: None,
            started_at: Some(t2),
        })
        .collect();
    assert_eq!(ack_many(&db.pool, &acks).await.unwrap().ids.len(), 3);
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE attempted_at = '2026-12-04T10:00:02Z'"
        )
        .await,
        3
    );
}

/// Answers "slow down" for jobs of tenant `a` (as a remote's 429 would), completes the others;
/// writes down every run.
#[derive(Clone, Default)]
struct RateLimited(Arc<Mutex<Vec<i64>>>);
impl Handler for RateLimited {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "call"
    }
    async fn run(&self, ctx: JobContext, args: serde_json::Value) -> HandlerResult {
        self.0.lock().unwrap().push(ctx.id);
        if args["tenant"] == "a" {
            return Ok(Outcome::SnoozeKey(Duration::from_secs(3600)));
        }
        Ok(Outcome::Complete)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snooze_key_holds_every_worker_off_that_key_and_not_others() {
    let db = TestDb::new().await;
    let mut a = Vec::new();
    let mut b = Vec::new();
    for i in 0..20 {
        for (tenant, ids) in [("a", &mut a), ("b", &mut b)] {
            ids.push(
                enqueue(
                    &db.pool,
                    &NewJob::new("call", json!({"tenant": tenant, "i": i}))
                        .queue("api")
                        .limit_key(tenant),
                )
                .await
                .unwrap()
                .id,
            );
        }
    }
    let runs = RateLimited::default();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            start_worker(&db.pool, fast_settings(), |b| {
                b.queue("api", 4).register(runs.clone())
            })
        })
        .collect();
    wait_for(
        "tenant b's jobs completed",
        Duration::from_secs(120),
        || async { (count_state(&db.pool, "completed").await == 20).then_some(()) },
    )
    .await;
    // Every job of tenant a is back waiting (the ones that ran, and the ones the hold moved),
    // due at the hold's end, with no attempt spent; none is running.
    wait_for("tenant a's jobs all waiting", Duration::from_secs(60), || async {
        (count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs j, skiplock.key_holds h \
             WHERE j.limit_key = 'a' AND j.state = 'available' AND j.attempt = 0 \
               AND h.queue = 'api' AND h.limit_key = 'a' AND j.scheduled_at >= h.until - interval '1 second' \
               AND h.until > now() + interval '50 minutes'",
        )
        .await
            == 20)
            .then_some(())
    })
    .await;
    // A job of the held key enqueued now waits for the hold too, in SQL as in Rust; another
    // key's does not.
    let late: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('call', '{\"tenant\": \"a\"}', queue => 'api', limit_key => 'a')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let other = enqueue(
        &db.pool,
        &NewJob::new("call", json!({"tenant": "b"}))
            .queue("api")
            .limit_key("b"),
    )
    .await
    .unwrap()
    .id;
    wait_for(
        "the other key's new job completed",
        Duration::from_secs(60),
        || async { (state_of(&db, other).await == "completed").then_some(()) },
    )
    .await;
    for w in workers {
        w.stop().await.unwrap();
    }
    assert_eq!(state_of(&db, late).await, "available");
    let late_held: bool = sqlx::query_scalar(
        "SELECT j.scheduled_at >= h.until FROM skiplock.jobs j, skiplock.key_holds h \
         WHERE j.id = $1 AND h.queue = 'api' AND h.limit_key = 'a'",
    )
    .bind(late)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        late_held,
        "a job enqueued during the hold is due at its end"
    );
    // No job of the key ran twice: once a hold was set, no worker started one again.
    let ran = runs.0.lock().unwrap().clone();
    let a_runs: Vec<i64> = ran.iter().copied().filter(|id| a.contains(id)).collect();
    let distinct: HashSet<i64> = a_runs.iter().copied().collect();
    assert_eq!(
        a_runs.len(),
        distinct.len(),
        "tenant a's jobs ran at most once each: {a_runs:?}"
    );
    assert!(!ran.contains(&late));
    assert_eq!(ran.iter().filter(|id| b.contains(id)).count(), 20);
}

#[tokio::test]
async fn hold_key_from_sql_moves_only_that_keys_waiting_jobs_and_extends_never_shortens() {
    let db = TestDb::new().await;
    for key in ["x", "x", "y"] {
        enqueue(&db.pool, &NewJob::new("k", json!({})).limit_key(key))
            .await
            .unwrap();
    }
    let moved: i64 = sqlx::query_scalar(
        "SELECT skiplock.hold_key('default', 'x', now() + interval '10 minutes')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(moved, 2);
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE scheduled_at <= now()"
        )
        .await,
        1,
        "only key y's job is still due"
    );
    // A hold within a second of the current one moves nothing again.
    let moved: i64 = sqlx::query_scalar(
        "SELECT skiplock.hold_key('default', 'x', until + interval '500 milliseconds') FROM skiplock.key_holds",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(moved, 0);
    // An earlier hold changes nothing; a later one extends it.
    let moved: i64 =
        sqlx::query_scalar("SELECT skiplock.hold_key('default', 'x', now() + interval '1 minute')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(moved, 0);
    let until = chrono::Utc::now() + chrono::Duration::hours(2);
    assert_eq!(
        skiplock::admin::hold_key(&db.pool, "default", "x", until)
            .await
            .unwrap(),
        2
    );
    let ends: Vec<bool> =
        sqlx::query_scalar("SELECT until > now() + interval '1 hour' FROM skiplock.key_holds")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(ends, [true]);
    for (sql, want) in [
        (
            "SELECT skiplock.hold_key('default', NULL, now())",
            "needs a queue",
        ),
        (
            "SELECT skiplock.hold_key('default', '', now())",
            "limit_key must not be empty",
        ),
        (
            "SELECT skiplock.hold_key('default', 'x', 'infinity')",
            "until must be a finite time",
        ),
    ] {
        let e = sqlx::query(sql).execute(&db.pool).await.unwrap_err();
        assert!(e.to_string().contains(want), "{sql}: {e}");
    }
}

/// A job of a held key that goes back by its own retry or snooze (the worker's ack) is due
/// no earlier than the hold's end: the remote said "slow down" for the whole key. A job of
/// another key, and one without a key, keep the time their ack asked for; a completed one is
/// finished as usual.
#[tokio::test]
async fn a_retry_or_snooze_of_a_held_keys_job_waits_for_the_hold() {
    use skiplock::store::ack::{Ack, ack_many};
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for key in [Some("x"), Some("x"), Some("y"), None, Some("x")] {
        let mut job = NewJob::new("k", json!({}));
        if let Some(key) = key {
            job = job.limit_key(key);
        }
        ids.push(enqueue(&db.pool, &job).await.unwrap().id);
    }
    sqlx::query("UPDATE skiplock.jobs SET state = 'running', attempt = 1, attempted_at = now()")
        .execute(&db.pool)
        .await
        .unwrap();
    let until = chrono::Utc::now() + chrono::Duration::hours(1);
    skiplock::admin::hold_key(&db.pool, "default", "x", until)
        .await
        .unwrap();
    let soon = chrono::Utc::now() + chrono::Duration::seconds(5);
    let back = |id: i64, give_back: bool| Ack {
        id,
        attempt: 1,
        state: skiplock::queue::JobState::Available,
        scheduled_at: Some(soon),
        give_back,
        error: (!give_back).then(|| "boom".to_string()),
        result: None,
        started_at: None,
    };
    let done = Ack {
        state: skiplock::queue::JobState::Completed,
        scheduled_at: None,
        error: None,
        ..back(ids[4], false)
    };
    let acks = [
        back(ids[0], false),
        back(ids[1], true),
        back(ids[2], false),
        back(ids[3], false),
        done,
    ];
    assert_eq!(ack_many(&db.pool, &acks).await.unwrap().ids.len(), 5);
    let rows: Vec<(String, bool)> = sqlx::query_as(
        "SELECT state::text, scheduled_at >= $1 - interval '1 millisecond' FROM skiplock.jobs ORDER BY id",
    )
    .bind(until)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            ("available".to_string(), true),
            ("available".to_string(), true),
            ("available".to_string(), false),
            ("available".to_string(), false),
            ("completed".to_string(), false),
        ],
        "the retry and the snooze of key x wait for its hold; key y, no key and the completed job do not"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_queue_starts_another_keys_first_job_within_one_claim_of_a_100000_job_backlog() {
    let db = TestDb::new().await;
    skiplock::admin::set_queue_fairness(&db.pool, "tenants", true)
        .await
        .unwrap();
    let args = vec![json!({}); 50_000];
    for _ in 0..2 {
        enqueue_many(
            &db.pool,
            ManyJobs {
                kind: "noop",
                args: &args,
                queue: "tenants",
                limit_key: Some("a"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
    let b = enqueue(
        &db.pool,
        &NewJob::new("noop", json!({}))
            .queue("tenants")
            .limit_key("b"),
    )
    .await
    .unwrap()
    .id;
    let unkeyed = enqueue(&db.pool, &NewJob::new("noop", json!({})).queue("tenants"))
        .await
        .unwrap()
        .id;
    let settings = fast_settings();
    // One claim takes at most the free slots and the buffer.
    let batch = 10 + settings.claim_ahead as i64;
    let w = start_worker(&db.pool, settings, |mut b| {
        skiplock::worker::builtin::register(b.registry_mut());
        b.queue("tenants", 10)
    });
    for id in [b, unkeyed] {
        wait_for(
            "the other keys' jobs ran",
            Duration::from_secs(120),
            || async { (state_of(&db, id).await == "completed").then_some(()) },
        )
        .await;
    }
    w.stop().await.unwrap();
    for id in [b, unkeyed] {
        let before: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM skiplock.jobs WHERE limit_key = 'a' \
             AND attempted_at < (SELECT attempted_at FROM skiplock.jobs WHERE id = $1)",
        )
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(
            before < batch,
            "{before} of key a's jobs started before job {id} (one claim: at most {batch})"
        );
    }
    // Without fair mode the same queue serves key a's backlog first: its first claim holds
    // no job of b.
    sqlx::query("UPDATE skiplock.jobs SET state = 'available', attempt = 0, attempted_at = NULL")
        .execute(&db.pool)
        .await
        .unwrap();
    skiplock::admin::set_queue_fairness(&db.pool, "tenants", false)
        .await
        .unwrap();
    let claimed = claim_tenants(&db, 100).await;
    assert!(claimed.iter().all(|j| j.id != b && j.id != unkeyed));
    let fair_rows = count(&db.pool, "SELECT count(*) FROM skiplock.queues").await;
    assert_eq!(
        fair_rows, 0,
        "fair mode off and nothing else set: the queue's row is gone"
    );
}

#[tokio::test]
async fn a_fair_claim_walks_past_keys_with_nothing_due_and_leaves_the_starts_to_the_worker() {
    let db = TestDb::new().await;
    skiplock::admin::set_queue_fairness(&db.pool, "tenants", true)
        .await
        .unwrap();
    // Fifty keys whose jobs are all held for an hour, then one with due jobs.
    for k in 0..50 {
        enqueue(
            &db.pool,
            &NewJob::new("noop", json!({}))
                .queue("tenants")
                .limit_key(format!("held-{k:02}"))
                .run_at(chrono::Utc::now() + chrono::Duration::hours(1)),
        )
        .await
        .unwrap();
    }
    for _ in 0..3 {
        enqueue(
            &db.pool,
            &NewJob::new("noop", json!({}))
                .queue("tenants")
                .limit_key("ready"),
        )
        .await
        .unwrap();
    }
    // A claim of two reads one key at a time: it goes on past the fifty.
    let claimed = claim_tenants(&db, 2).await;
    assert_eq!(claimed.len(), 2, "the ready key's jobs, in one claim");
    let started = count(
        &db.pool,
        "SELECT count(*) FROM skiplock.jobs WHERE state = 'running' AND attempted_at IS NULL AND limit_key = 'ready'",
    )
    .await;
    assert_eq!(started, 2, "a fair pick writes no start: the worker does");
}

/// An enqueuer's 50,000 keys whose jobs are due in 9999 cost a fair queue's claims nothing:
/// the walk reads only the keys that may have due jobs (skiplock.key_lanes), so another
/// tenant's keyed job and a job without a key are both taken by the first claim (the promise
/// of docs/concepts.md, "Fair queues"), whether the keys came before fair mode was turned on or
/// after. Without it the walk read every one of those keys, a few hundred per claim, and the
/// keyed job waited minutes.
#[tokio::test]
async fn a_fair_queues_first_claim_takes_a_keyed_job_past_50000_keys_due_later() {
    let db = TestDb::new().await;
    let p = &db.pool;
    skiplock::admin::set_queue_fairness(p, "tenants", true)
        .await
        .unwrap();
    let ghosts = |from: i32| {
        format!(
            "INSERT INTO skiplock.jobs (kind, queue, limit_key, scheduled_at)
             SELECT 'ghost', 'tenants', 'a' || lpad(g::text, 6, '0'), '9999-01-01'
             FROM generate_series({from}, {from} + 49999) g"
        )
    };
    sqlx::query(sqlx::AssertSqlSafe(ghosts(1)))
        .execute(&**p)
        .await
        .unwrap();
    let victim = |key: &'static str| async move {
        enqueue(
            p,
            &NewJob::new("noop", json!({}))
                .queue("tenants")
                .limit_key(key),
        )
        .await
        .unwrap()
        .id
    };
    let keyed = victim("tenant-victim").await;
    let unkeyed = enqueue(p, &NewJob::new("noop", json!({})).queue("tenants"))
        .await
        .unwrap()
        .id;
    let mut claimed: Vec<i64> = claim_tenants(&db, 10).await.iter().map(|j| j.id).collect();
    claimed.sort();
    assert_eq!(claimed, vec![keyed, unkeyed]);

    // Fair mode turned on after the keys came: the same.
    skiplock::admin::set_queue_fairness(p, "tenants", false)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(ghosts(50_001)))
        .execute(&**p)
        .await
        .unwrap();
    let keyed = victim("tenant-victim-2").await;
    skiplock::admin::set_queue_fairness(p, "tenants", true)
        .await
        .unwrap();
    let claimed: Vec<i64> = claim_tenants(&db, 10).await.iter().map(|j| j.id).collect();
    assert_eq!(claimed, vec![keyed]);
}

/// One claim of up to `limit` `noop` jobs of queue `tenants`, as a worker's producer makes it.
async fn claim_tenants(db: &TestDb, limit: usize) -> Vec<skiplock::queue::Job> {
    skiplock::store::claim::claim(
        db.pool.pg(),
        skiplock::store::claim::ClaimParams {
            queue: "tenants",
            kinds: &["noop".to_string()],
            limit,
            worker: "w:1:x",
        },
    )
    .await
    .unwrap()
}
