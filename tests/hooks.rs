//! Job hooks (src/worker/hooks.rs) against a real Postgres: a hook sees each job before and
//! after it runs with what the worker writes for it, and each job the worker's rescuer
//! returns; a hook that panics loses no acknowledgement and stops no other hook.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use skiplock::queue::NewJob;
use skiplock::store::jobs::enqueue;
use skiplock::worker::handler::Handler;
use skiplock::worker::hooks::{JobEvent, JobInfo, Rescued};
use skiplock::worker::{HandlerResult, Hook, JobContext, JobError, Outcome};
use support::*;

/// Completes `{"ok": true}` jobs, fails the others with "no good".
struct Judge;
impl Handler for Judge {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "judge"
    }
    async fn run(&self, _ctx: JobContext, args: serde_json::Value) -> HandlerResult {
        if args["ok"] == json!(true) {
            Ok(Outcome::Complete)
        } else {
            Err(JobError::retry("no good"))
        }
    }
}

/// Writes down what it is told.
#[derive(Clone, Default)]
struct Notes(Arc<Mutex<Vec<String>>>);
impl Hook for Notes {
    fn before(&self, job: &JobInfo) {
        self.0
            .lock()
            .unwrap()
            .push(format!("before {} attempt {}", job.id, job.attempt));
    }
    fn after(&self, e: &JobEvent) {
        self.0.lock().unwrap().push(format!(
            "after {} {} {}",
            e.job.id,
            e.state,
            e.error.as_deref().unwrap_or("-")
        ));
    }
    fn rescued(&self, job: &Rescued) {
        self.0
            .lock()
            .unwrap()
            .push(format!("rescued {} {}", job.id, job.state));
    }
}

/// Panics whenever it is called.
struct Broken;
impl Hook for Broken {
    fn before(&self, _job: &JobInfo) {
        panic!("hook broken before");
    }
    fn after(&self, _e: &JobEvent) {
        panic!("hook broken after");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_see_each_job_and_a_panicking_one_loses_no_ack() {
    let db = TestDb::new().await;
    let ok = enqueue(&db.pool, &NewJob::new("judge", json!({"ok": true})))
        .await
        .unwrap()
        .id;
    let bad = enqueue(
        &db.pool,
        &NewJob::new("judge", json!({"ok": false})).max_attempts(1),
    )
    .await
    .unwrap()
    .id;
    // One that fails with attempts left: its retry is scheduled.
    let retried = enqueue(&db.pool, &NewJob::new("judge", json!({"ok": false})))
        .await
        .unwrap()
        .id;
    // A job whose worker died: running, its heartbeat an hour old.
    let orphan = enqueue(
        &db.pool,
        &NewJob::new("judge", json!({"ok": true})).queue("late"),
    )
    .await
    .unwrap()
    .id;
    sqlx::query(
        "UPDATE skiplock.jobs SET state = 'running', attempt = 1, attempted_at = now() - interval '1 hour', \
         heartbeat_at = now() - interval '1 hour', attempted_by = 'gone:1:dead' WHERE id = $1",
    )
    .bind(orphan)
    .execute(&db.pool)
    .await
    .unwrap();

    let notes = Notes::default();
    let settings = skiplock::config::QueueSettings {
        rescue_after: Duration::from_secs(1),
        ..fast_settings()
    };
    let w = start_worker(&db.pool, settings, |b| {
        b.register(Judge).hook(Broken).hook(notes.clone())
    });
    wait_for(
        "every job finished, and the retry scheduled",
        Duration::from_secs(120),
        || async {
            let finished = count(
                &db.pool,
                "SELECT count(*) FROM skiplock.jobs WHERE state IN ('completed', 'discarded')",
            )
            .await;
            let failed_once: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM skiplock.jobs WHERE id = $1 AND jsonb_array_length(errors) > 0",
        )
        .bind(retried)
        .fetch_one(&db.pool)
        .await
        .unwrap();
            (finished == 3 && failed_once == 1).then_some(())
        },
    )
    .await;
    w.stop().await.unwrap();

    // Every ack was written, the panicking hook notwithstanding.
    let states: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, state::text FROM skiplock.jobs ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        states.iter().filter(|s| s.0 != retried).collect::<Vec<_>>(),
        [
            &(ok, "completed".to_string()),
            &(bad, "discarded".to_string()),
            &(orphan, "completed".to_string()),
        ]
    );
    // The hook after the broken one heard everything, in order for each job.
    let notes = notes.0.lock().unwrap().clone();
    let of = |id: i64| -> Vec<String> {
        notes
            .iter()
            .filter(|n| n.split(' ').nth(1) == Some(id.to_string().as_str()))
            .cloned()
            .collect()
    };
    assert_eq!(
        of(ok),
        [
            format!("before {ok} attempt 1"),
            format!("after {ok} completed -")
        ]
    );
    assert_eq!(
        of(bad),
        [
            format!("before {bad} attempt 1"),
            format!("after {bad} discarded no good")
        ]
    );
    // Its first attempt's end: a retry scheduled (a later attempt may have begun meanwhile).
    assert_eq!(
        of(retried)[..2],
        [
            format!("before {retried} attempt 1"),
            format!("after {retried} available no good")
        ]
    );
    assert_eq!(
        of(orphan),
        [
            format!("rescued {orphan} available"),
            format!("before {orphan} attempt 2"),
            format!("after {orphan} completed -")
        ]
    );
}
