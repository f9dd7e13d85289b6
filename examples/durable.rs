//! Durable steps (docs/steps.md): a month-end export that takes a snapshot once (a step), walks
//! its rows saving a cursor as it goes (its first attempt fails half-way and the retry resumes
//! after the last checkpoint), then waits for an operator's approval (a signal, sent here from
//! the program; `skiplock signal ID approved --payload …` or `SELECT skiplock.signal(…)` send
//! the same) before it publishes (a step again). Builds with the core alone:
//!
//! ```sh
//! DATABASE_URL=postgres://root@127.0.0.1:5432/skiplock cargo run --example durable
//! ```
//!
//! Expected output:
//!
//! ```text
//! attempt 1: snapshot of 1000 rows taken
//! attempt 1: failed after row 600: the warehouse timed out
//! attempt 2: resumes at row 600
//! the export waits for approval, holding no worker
//! signal "approved" sent
//! export: completed, {"approved_by":"ops","published":"exports/2026-11.csv","rows":1000,"total":499500}
//! snapshot steps run: 1, rows exported: 1000
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use skiplock::config::QueueSettings;
use skiplock::prelude::*;
use skiplock::queue::JobState;

#[derive(Serialize, Deserialize)]
struct Export {
    month: String,
}
impl JobArgs for Export {
    const KIND: &'static str = "export";
}

/// What the snapshot step returns: recorded once, read back by every later attempt.
#[derive(Serialize, Deserialize)]
struct Snapshot {
    rows: u64,
}

#[derive(Serialize, Deserialize)]
struct Approval {
    by: String,
}

/// The cursor: where the walk is, and what it has added up so far.
#[derive(Serialize, Deserialize, Default)]
struct Progress {
    next_row: u64,
    total: u64,
}

/// Rows written to the export file (each row exactly once: the cursor is saved with each
/// batch; in a real export the batch and its checkpoint would share the file's own
/// bookkeeping).
static EXPORTED: AtomicU64 = AtomicU64::new(0);
static SNAPSHOTS: AtomicU64 = AtomicU64::new(0);
/// The warehouse times out once, half-way through the first attempt.
static FAILED_ONCE: AtomicBool = AtomicBool::new(false);

async fn export(ctx: JobContext, job: Export) -> anyhow::Result<Outcome> {
    let snapshot: Snapshot = ctx
        .step("snapshot", || async {
            SNAPSHOTS.fetch_add(1, Ordering::SeqCst);
            Ok::<_, JobError>(Snapshot { rows: 1000 })
        })
        .await?;
    let mut at: Progress = ctx.cursor().await?.unwrap_or_default();
    if at.next_row == 0 {
        println!(
            "attempt {}: snapshot of {} rows taken",
            ctx.attempt, snapshot.rows
        );
    } else if at.next_row < snapshot.rows {
        println!("attempt {}: resumes at row {}", ctx.attempt, at.next_row);
    }
    while at.next_row < snapshot.rows {
        // A batch of 200 rows, then its checkpoint (docs/steps.md, "Cost": a checkpoint per
        // few hundred items).
        let end = (at.next_row + 200).min(snapshot.rows);
        if end > 600 && !FAILED_ONCE.swap(true, Ordering::SeqCst) {
            println!(
                "attempt {}: failed after row {}: the warehouse timed out",
                ctx.attempt, at.next_row
            );
            anyhow::bail!("the warehouse timed out");
        }
        for row in at.next_row..end {
            at.total += row;
            EXPORTED.fetch_add(1, Ordering::SeqCst);
        }
        at.next_row = end;
        ctx.checkpoint(&at).await?;
    }
    // Ends this attempt until the signal comes (or a day passes); the attempt that runs then
    // replays the snapshot, reads the cursor at its end and gets the signal here.
    let Some(approval) = ctx
        .wait_for::<Approval>("approved", Duration::from_secs(86400))
        .await?
    else {
        return Ok(Outcome::Cancel("not approved within a day".into()));
    };
    let published: String = ctx
        .step("publish", || async {
            Ok::<_, JobError>(format!("exports/{}.csv", job.month))
        })
        .await?;
    Ok(Outcome::CompleteWith(serde_json::json!({
        "rows": at.next_row,
        "total": at.total,
        "approved_by": approval.payload.by,
        "published": published,
    })))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = skiplock::connect(&std::env::var("DATABASE_URL")?, 10).await?;
    skiplock::migrate(&pool).await?;
    let id = skiplock::enqueue(
        &pool,
        Export {
            month: "2026-11".into(),
        },
    )
    .await?
    .id;

    // A short backoff, so the failed attempt's retry comes at once.
    let settings = QueueSettings {
        backoff_unit: Duration::from_millis(10),
        ..QueueSettings::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(
        Worker::builder(pool.clone())
            .settings(settings)
            .queue("default", 4)
            .register_typed(export)
            .without_maintenance()
            .build()
            .run(async move {
                let _ = stopped.await;
            }),
    );

    // The job's records say when it waits: a `wait` with no outcome yet (docs/steps.md,
    // "Inspecting"); the job is `available` again once its attempt is acknowledged.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let steps = skiplock::admin::job_steps(&pool, id).await?;
        let waiting = steps.iter().any(|s| {
            s.kind == "wait"
                && s.result
                    .as_ref()
                    .and_then(|r| r.value())
                    .is_some_and(|r| r.get("outcome").is_none())
        });
        if waiting && skiplock::admin::get_job(&pool, id).await?.state == JobState::Available {
            println!("the export waits for approval, holding no worker");
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the export never waited for its approval"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The operator's approval: the job is made due at once.
    if skiplock::signal(&pool, id, "approved", &Approval { by: "ops".into() }).await? {
        println!("signal \"approved\" sent");
    }
    let done = skiplock::wait_for(&pool, id, Duration::from_secs(30)).await?;
    let result = done.result.map(|r| r.to_string()).unwrap_or_default();
    println!("export: {}, {result}", done.state);
    println!(
        "snapshot steps run: {}, rows exported: {}",
        SNAPSHOTS.load(Ordering::SeqCst),
        EXPORTED.load(Ordering::SeqCst)
    );
    let _ = stop.send(());
    worker.await??;
    Ok(())
}
