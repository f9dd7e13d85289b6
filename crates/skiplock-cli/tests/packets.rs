//! The packet pipeline against a real Postgres: lifecycle, the transition table enforced
//! from Rust and from plain SQL, the cross-process concurrency limit, recovery after a
//! SIGKILL, recovery switched off, processor failure and operator retries.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use skiplock_workflows::packets::processor::Processor;
use skiplock_workflows::packets::roots::PacketRoots;
use skiplock_workflows::packets::transitions::{Mover, PacketState, Refused, mover};
use skiplock_workflows::packets::{self, PacketSettings};
use sqlx::PgPool;
use support::*;

const LIMIT: Duration = Duration::from_secs(60);

/// An executable shell script in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A folder with `n` small files.
fn frames(dir: &Path, name: &str, n: usize) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    for i in 0..n {
        std::fs::write(d.join(format!("frame{i:03}.tif")), format!("frame {i}")).unwrap();
    }
    d
}

fn settings(processor: Processor, recovery: bool) -> PacketSettings {
    PacketSettings {
        concurrency: 1,
        processor,
        timeout: Duration::from_secs(30),
        recovery,
        roots: PacketRoots::new(&[packet_root()]),
    }
}

fn start_packets(pool: &skiplock::Pool, s: PacketSettings) -> RunningWorker {
    start_worker(pool, fast_settings(), |b| packets::register_with(b, s))
}

async fn state_of(pool: &skiplock::Pool, id: i64) -> PacketState {
    packets::get(pool, id).await.unwrap().state
}

async fn wait_state(pool: &skiplock::Pool, id: i64, want: PacketState) {
    wait_for(&format!("packet {id} to be {want}"), LIMIT, || async {
        (state_of(pool, id).await == want).then_some(())
    })
    .await
}

/// (from, to, actor, note) of a packet's history.
async fn history(
    pool: &skiplock::Pool,
    id: i64,
) -> Vec<(Option<PacketState>, PacketState, String, Option<String>)> {
    packets::events(pool, id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.from, e.to, e.actor, e.note))
        .collect()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test]
async fn full_lifecycle_with_the_builtin_manifest() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let src = frames(dir.path(), "p1", 3);

    // Submit through the CLI: the packet and its job exist as soon as the command returns.
    let (code, out, err) = run_cmd(
        &db.url,
        &["packet", "submit", path_str(&src), "--name", "reel 1"],
    );
    assert_eq!(code, 0, "{err}");
    let id: i64 = out.trim().parse().unwrap();
    let p = packets::get(&db.pool, id).await.unwrap();
    assert_eq!(
        (p.state, p.name.as_deref()),
        (PacketState::Queued, Some("reel 1"))
    );
    let (kind, queue, args): (String, String, serde_json::Value) =
        sqlx::query_as("SELECT kind, queue, args FROM skiplock.jobs WHERE id = $1")
            .bind(p.job_id.unwrap())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (kind.as_str(), queue.as_str()),
        ("process-packet", "packets")
    );
    assert_eq!(args["packet_id"], id);

    // Empty and missing folders fail with a clear error.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let empty_id = packets::submit(&db.pool, path_str(&empty), None, None)
        .await
        .unwrap();
    let missing_id = packets::submit(&db.pool, path_str(&dir.path().join("gone")), None, None)
        .await
        .unwrap();

    let w = start_packets(&db.pool, settings(Processor::Manifest, true));
    wait_state(&db.pool, id, PacketState::ReadyForReview).await;
    let p = packets::get(&db.pool, id).await.unwrap();
    let r = p.result.unwrap();
    assert_eq!(r["file_count"], 3);
    assert_eq!(r["files"][0]["name"], "frame000.tif");
    assert_eq!(r["files"][0]["size"], 7);
    assert_eq!(r["files"][0]["sha256"].as_str().unwrap().len(), 64);
    wait_state(&db.pool, empty_id, PacketState::Error).await;
    wait_state(&db.pool, missing_id, PacketState::Error).await;
    let e = packets::get(&db.pool, empty_id)
        .await
        .unwrap()
        .error
        .unwrap();
    assert!(e.contains("is empty: no files"), "{e}");
    let e = packets::get(&db.pool, missing_id)
        .await
        .unwrap()
        .error
        .unwrap();
    assert!(e.contains("does not exist"), "{e}");

    // The summary line: 1 ready_for_review + 2 error on people, nothing on the machine.
    let (code, out, err) = run_cmd(&db.url, &["packet", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("whose move: machine 0 (queued 0, processing 0) · people 3 (ready_for_review 1, in_review 0, error 2) · done 0"),
        "{out}"
    );
    let (code, _, err) = run_cmd(&db.url, &["packet", "list", "--state", "finished"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("invalid --state") && err.contains("one of: queued"),
        "{err}"
    );
    let (_, out, _) = run_cmd(&db.url, &["packet", "list", "--state", "error"]);
    assert!(
        out.contains(&empty_id.to_string()) && !out.contains("reel 1"),
        "{out}"
    );

    // Operators: take, complete.
    let (code, _, err) = run_cmd(&db.url, &["packet", "take", &id.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(state_of(&db.pool, id).await, PacketState::InReview);
    // A second operator cannot take it again.
    let (code, _, err) = run_cmd(&db.url, &["packet", "take", &id.to_string()]);
    assert_eq!(code, 1, "taking twice is refused");
    assert!(
        err.contains(&format!(
            "packet {id} cannot go from in_review to in_review"
        )),
        "{err}"
    );
    let (code, _, err) = run_cmd(&db.url, &["packet", "complete", &id.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(state_of(&db.pool, id).await, PacketState::Done);
    let (code, _, err) = run_cmd(&db.url, &["packet", "complete", &id.to_string()]);
    assert_eq!(code, 1, "completing twice is refused: {err}");

    // A stale duplicate job for a packet that is no longer queued does nothing (a trusted
    // role's: skiplock.enqueue refuses the packets queue).
    let dup: i64 = sqlx::query_scalar("SELECT skiplock._enqueue('process-packet', jsonb_build_object('packet_id', $1::bigint), 'packets', now(), 0::smallint, 25, NULL, 'keep')")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let result: serde_json::Value = wait_for("the duplicate job to finish", LIMIT, || async {
        let (state, result, errors): (String, Option<serde_json::Value>, serde_json::Value) =
            sqlx::query_as("SELECT state::text, result, errors FROM skiplock.jobs WHERE id = $1")
                .bind(dup)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        (state == "completed")
            .then(|| result.unwrap_or_else(|| panic!("no result; errors {errors}")))
    })
    .await;
    assert_eq!(
        result["skipped"],
        format!("packet {id} is done, not queued")
    );
    w.stop().await.unwrap();
    assert_eq!(state_of(&db.pool, id).await, PacketState::Done);

    use PacketState::*;
    let h: Vec<(Option<PacketState>, PacketState)> = history(&db.pool, id)
        .await
        .into_iter()
        .map(|e| (e.0, e.1))
        .collect();
    assert_eq!(
        h,
        [
            (None, Queued),
            (Some(Queued), Processing),
            (Some(Processing), ReadyForReview),
            (Some(ReadyForReview), InReview),
            (Some(InReview), Done)
        ]
    );
    let (code, out, err) = run_cmd(&db.url, &["packet", "show", &id.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("state:    done") && out.contains("(submit)"),
        "{out}"
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.iter().any(
            |r| r.len() >= 5 && r[2..5] == ["in_review", "done", "postgres"]
                || r.len() >= 4 && r[2..4] == ["in_review", "done"]
        ),
        "{out}"
    );
    let (code, _, err) = run_cmd(&db.url, &["packet", "show", "999999"]);
    assert_eq!(code, 1);
    assert!(err.contains("packet 999999 not found"), "{err}");
}

/// Walks a new packet to `state` with legal plain UPDATEs (no worker runs in this test).
async fn packet_in(pool: &skiplock::Pool, state: PacketState) -> i64 {
    use PacketState::*;
    let id = packets::submit(pool, "/nowhere", None, Some("test"))
        .await
        .unwrap();
    let path: &[PacketState] = match state {
        Queued => &[],
        Processing => &[Processing],
        ReadyForReview => &[Processing, ReadyForReview],
        InReview => &[Processing, ReadyForReview, InReview],
        Done => &[Processing, ReadyForReview, InReview, Done],
        Error => &[Processing, Error],
    };
    for s in path {
        sqlx::query(
            "UPDATE skiplock.packets SET state = $2::text::skiplock.packet_state WHERE id = $1",
        )
        .bind(id)
        .bind(s.as_str())
        .execute(pool)
        .await
        .unwrap();
    }
    assert_eq!(state_of(pool, id).await, state);
    id
}

async fn event_count(pool: &PgPool, id: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM skiplock.packet_events WHERE packet_id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn every_illegal_transition_is_refused_from_rust_and_from_sql() {
    let db = TestDb::new().await;
    let pool = &db.pool;

    // The SQL table and the Rust function agree on all 36 pairs.
    for from in PacketState::ALL {
        for to in PacketState::ALL {
            let sql: Option<String> = sqlx::query_scalar(
                "SELECT skiplock._packet_mover($1::text::skiplock.packet_state, $2::text::skiplock.packet_state)",
            )
            .bind(from.as_str())
            .bind(to.as_str())
            .fetch_one(pool)
            .await
            .unwrap();
            let rust = mover(from, to).map(|m| match m {
                Mover::Worker => "worker",
                Mover::Operator => "operator",
                Mover::Recovery => "recovery",
            });
            assert_eq!(sql.as_deref(), rust, "{from} -> {to}");
        }
    }

    let mut refused_rust = 0;
    let mut refused_sql = 0;
    let mut allowed = 0;
    for from in PacketState::ALL {
        for to in PacketState::ALL {
            let legal = matches!(mover(from, to), Some(Mover::Worker | Mover::Operator));
            let id = packet_in(pool, from).await;
            let before = event_count(pool, id).await;
            if legal {
                packets::transition(pool, id, to, "tester", Some("legal"))
                    .await
                    .unwrap();
                assert_eq!(state_of(pool, id).await, to);
                let last = history(pool, id).await.pop().unwrap();
                assert_eq!(
                    last,
                    (
                        Some(from),
                        to,
                        "tester".to_string(),
                        Some("legal".to_string())
                    )
                );
                allowed += 1;
                continue;
            }
            // From Rust: refused before the database is asked, with the same wording.
            let e = packets::transition(pool, id, to, "tester", None)
                .await
                .unwrap_err();
            let want = Refused { id, from, to }.to_string();
            assert!(
                matches!(&e, skiplock::Error::Invalid(m) if *m == want),
                "{from} -> {to}: {e}"
            );
            refused_rust += 1;
            // From plain SQL (as from psql): the trigger refuses.
            if from != to {
                let e = sqlx::query("UPDATE skiplock.packets SET state = $2::text::skiplock.packet_state WHERE id = $1")
                    .bind(id)
                    .bind(to.as_str())
                    .execute(pool)
                    .await
                    .unwrap_err();
                let msg = skiplock::Error::from(e).db_message().unwrap().to_string();
                let named = format!("packet {id} cannot go from {from} to {to}");
                assert!(
                    msg.starts_with(&format!("skiplock: {named}")),
                    "{from} -> {to}: {msg}"
                );
                if mover(from, to).is_none() {
                    assert_eq!(msg, format!("skiplock: {want}"));
                }
                refused_sql += 1;
            }
            assert_eq!(
                state_of(pool, id).await,
                from,
                "{from} -> {to} changed the state"
            );
            assert_eq!(
                event_count(pool, id).await,
                before,
                "{from} -> {to} wrote history"
            );
        }
    }
    // 36 pairs: 7 legal for workers/operators; processing -> queued is recovery's alone.
    assert_eq!((allowed, refused_rust, refused_sql), (7, 29, 23));

    // A packet is born queued, even from psql.
    let e = sqlx::query("INSERT INTO skiplock.packets (source, state) VALUES ('/x', 'done')")
        .execute(pool)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("a new packet starts queued"), "{e}");

    // Operator functions refuse with the same message, and the CLI prints it on one line.
    let id = packet_in(pool, PacketState::Processing).await;
    let e = packets::retry(pool, id, None, None).await.unwrap_err();
    assert!(
        e.db_message()
            .unwrap()
            .contains(&format!("packet {id} cannot go from processing to queued"))
    );
    let (code, out, err) = run_cmd(&db.url, &["packet", "take", &id.to_string()]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "packet {id} cannot go from processing to in_review"
        )),
        "{err}"
    );
    let (code, _, err) = run_cmd(&db.url, &["packet", "complete", "424242"]);
    assert_eq!(code, 1);
    assert!(err.contains("packet 424242 does not exist"), "{err}");
}

#[tokio::test]
async fn submit_commits_packet_and_job_together() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let id: i64 = sqlx::query_scalar("SELECT skiplock.submit_packet('/a', 'rolled back')")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let jobs: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM skiplock.jobs WHERE args->>'packet_id' = $1::text",
    )
    .bind(id)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(jobs, 1);
    tx.rollback().await.unwrap();
    let (packets_n, jobs_n): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM skiplock.packets), (SELECT count(*) FROM skiplock.jobs)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((packets_n, jobs_n), (0, 0));
    // The SQL API is re-applied by every `migrate`: doing it again must work.
    skiplock::store::schema::migrate_parts(&db.pool, &skiplock_workflows::schemas())
        .await
        .unwrap();
    let e = sqlx::query("SELECT skiplock.submit_packet('  ')")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("needs a source directory"), "{e}");
}

/// The job `skiplock.submit_packet` makes is the one the Rust side expects: the shared kind,
/// queue and key prefix (src/names.rs), and the attempts of `packets::JOB_MAX_ATTEMPTS`.
#[tokio::test]
async fn the_packet_job_uses_the_shared_names_and_attempts() {
    let db = TestDb::new().await;
    let id = packets::submit(&db.pool, "/frames/x", None, None)
        .await
        .unwrap();
    let job = packets::get(&db.pool, id).await.unwrap().job_id.unwrap();
    let row = skiplock::store::jobs::get_job(&db.pool, job).await.unwrap();
    assert_eq!(
        (row.kind.as_str(), row.queue.as_str(), row.max_attempts),
        (packets::KIND, packets::QUEUE, packets::JOB_MAX_ATTEMPTS)
    );
    assert_eq!(
        row.unique_key,
        Some(format!(
            "{}{id}",
            skiplock_workflows::names::PACKET_KEY_PREFIX
        ))
    );
}

/// Many simultaneous starts (as from many workers at once) never exceed the limit.
#[tokio::test]
async fn simultaneous_starts_never_exceed_the_limit() {
    let db = TestDb::new().await;
    for limit in [1, 3] {
        let mut ids = Vec::new();
        for i in 0..12 {
            ids.push(
                packets::submit(&db.pool, &format!("/race/{limit}/{i}"), None, None)
                    .await
                    .unwrap(),
            );
        }
        // Their jobs are claimed (as if each ran on some worker).
        sqlx::query(
            "UPDATE skiplock.jobs SET state = 'running', attempt = 1 WHERE state = 'available'",
        )
        .execute(&db.pool)
        .await
        .unwrap();
        // A start that finds the gate row held by another start answers 'busy' at once (it
        // never waits in the database), like one that finds no room. Like the handler, the
        // packets not yet started ask again, round after round: the number started never
        // exceeds the limit, it reaches it, and then one more round starts nobody.
        let start_round = |pending: Vec<i64>| {
            let pool = db.pool.clone();
            async move {
                let starts = pending.into_iter().map(|id| {
                    let pool = pool.clone();
                    tokio::spawn(async move {
                        let job: i64 =
                            sqlx::query_scalar("SELECT job_id FROM skiplock.packets WHERE id = $1")
                                .bind(id)
                                .fetch_one(&pool)
                                .await
                                .unwrap();
                        let r: String = sqlx::query_scalar(
                            "SELECT outcome::text FROM skiplock._packet_start($1, $2, $3, 'racer')",
                        )
                        .bind(id)
                        .bind(job)
                        .bind(limit)
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                        (id, r)
                    })
                });
                futures::future::join_all(starts)
                    .await
                    .into_iter()
                    .map(|r| r.unwrap())
                    .collect::<Vec<(i64, String)>>()
            }
        };
        let mut started_ids: Vec<i64> = Vec::new();
        let mut rounds = 0;
        while started_ids.len() < limit as usize {
            rounds += 1;
            assert!(
                rounds < 1000,
                "the limit was never reached: {started_ids:?}"
            );
            let pending = ids
                .iter()
                .copied()
                .filter(|i| !started_ids.contains(i))
                .collect();
            let round = start_round(pending).await;
            started_ids.extend(
                round
                    .iter()
                    .filter(|(_, r)| r == "started")
                    .map(|(id, _)| *id),
            );
            assert!(started_ids.len() <= limit as usize, "{round:?}");
        }
        let pending = ids
            .iter()
            .copied()
            .filter(|i| !started_ids.contains(i))
            .collect();
        let results: Vec<String> = started_ids
            .iter()
            .map(|_| "started".to_string())
            .chain(start_round(pending).await.into_iter().map(|(_, r)| r))
            .collect();
        let started = results.iter().filter(|r| *r == "started").count();
        let busy = results.iter().filter(|r| *r == "busy").count();
        assert_eq!(
            (started, busy),
            (limit as usize, 12 - limit as usize),
            "{results:?}"
        );
        // Finish them so the next round starts from an empty pipeline.
        sqlx::query("UPDATE skiplock.packets SET state = 'error' WHERE state = 'processing'")
            .execute(&db.pool)
            .await
            .unwrap();
        sqlx::query("UPDATE skiplock.jobs SET state = 'completed' WHERE state = 'running'")
            .execute(&db.pool)
            .await
            .unwrap();
    }
}

/// Processing intervals (start, end) per packet, from the history.
async fn processing_intervals(pool: &PgPool) -> Vec<(i64, DateTime<Utc>, DateTime<Utc>, String)> {
    sqlx::query_as(
        "SELECT s.packet_id, s.at, e.at, s.actor
         FROM skiplock.packet_events s
         JOIN LATERAL (SELECT x.at FROM skiplock.packet_events x
                       WHERE x.packet_id = s.packet_id AND x.id > s.id AND x.from_state = 'processing'
                       ORDER BY x.id LIMIT 1) e ON true
         WHERE s.to_state = 'processing'
         ORDER BY s.at",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The worker id (`host:pid:random`) of the actor `worker:<id>` of a history row.
fn worker_pid(actor: &str) -> u32 {
    actor
        .strip_prefix("worker:")
        .and_then(|id| id.rsplit(':').nth(1))
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("not a worker actor: {actor}"))
}

#[tokio::test]
async fn concurrency_one_holds_across_two_worker_processes() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let gates = dir.path().join("gates");
    std::fs::create_dir(&gates).unwrap();
    // Each packet's processor waits until the test opens its gate (a file named after the
    // packet, or "all").
    let proc_ = script(
        dir.path(),
        "gated.sh",
        &format!(
            "while [ ! -e {g}/$SKIPLOCK_PACKET_ID ] && [ ! -e {g}/all ]; do sleep 0.05; done\n\
             echo \"{{\\\"packet\\\": $SKIPLOCK_PACKET_ID}}\"",
            g = gates.display()
        ),
    );
    let env = [
        ("SKIPLOCK_PACKET_PROCESSOR", path_str(&proc_)),
        ("SKIPLOCK_PACKET_CONCURRENCY", "1"),
        ("SKIPLOCK_POLL_INTERVAL", "100ms"),
    ];
    let mut procs = vec![
        spawn_worker_process(&db.url, &[], &env),
        spawn_worker_process(&db.url, &[], &env),
    ];
    wait_for("both worker processes up", LIMIT, || async {
        (count(&db.pool, "SELECT count(*) FROM skiplock.workers").await == 2).then_some(())
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(
            packets::submit(
                &db.pool,
                path_str(&frames(dir.path(), &format!("f{i}"), 1)),
                None,
                None,
            )
            .await
            .unwrap(),
        );
    }

    // One packet is processing, held there by its gate, in process P.
    let (first, actor): (i64, String) = wait_for("a packet processing", LIMIT, || async {
        sqlx::query_as(
            "SELECT packet_id, actor FROM skiplock.packet_events WHERE to_state = 'processing'",
        )
        .fetch_optional(&db.pool)
        .await
        .unwrap()
    })
    .await;
    let p = worker_pid(&actor);
    let pi = procs
        .iter()
        .position(|c| c.id() == p)
        .expect("processing in one of the two processes");
    let q = procs[1 - pi].id();
    // SKIPLOCK_PACKET_CONCURRENCY is the packets queue's limit (set by each worker at
    // start): while one packet processes, no claim hands out another packet's job; the
    // waiting jobs stay available without an attempt spent.
    let limit: Option<i32> =
        sqlx::query_scalar("SELECT concurrency FROM skiplock.queues WHERE queue = 'packets'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(limit, Some(1));
    let kinds = vec![packets::KIND.to_string()];
    let got = skiplock::store::control::claim_limited(
        &db.pool,
        skiplock::store::claim::ClaimParams {
            queue: packets::QUEUE,
            kinds: &kinds,
            limit: 10,
            worker: "test",
        },
        0,
    )
    .await
    .unwrap();
    assert!(
        got.jobs.is_empty(),
        "claimed past the limit: {:?}",
        got.jobs
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE kind = 'process-packet' AND state = 'available' AND attempt = 0"
        )
        .await,
        3
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.packets WHERE state = 'processing'"
        )
        .await,
        1
    );

    // P finishes its packet and stops; Q processes the rest.
    std::fs::write(gates.join(first.to_string()), "").unwrap();
    wait_state(&db.pool, first, PacketState::ReadyForReview).await;
    let mut stopped = procs.remove(pi);
    sigterm(&stopped);
    assert!(stopped.wait().unwrap().success());
    std::fs::write(gates.join("all"), "").unwrap();
    for id in &ids {
        wait_state(&db.pool, *id, PacketState::ReadyForReview).await;
        let r = packets::get(&db.pool, *id).await.unwrap().result.unwrap();
        assert_eq!(r["packet"], *id);
    }
    let mut other = procs.remove(0);
    sigterm(&other);
    assert!(other.wait().unwrap().success());

    // Never two packets in processing at once, across both processes ...
    let spans = processing_intervals(&db.pool).await;
    assert!(spans.len() >= 4, "{spans:?}");
    for w in spans.windows(2) {
        assert!(
            w[1].1 >= w[0].2,
            "packets {} and {} overlap in processing: {spans:?}",
            w[0].0,
            w[1].0
        );
    }
    // ... and both processed packets: P the first, Q the others.
    let done: Vec<(i64, String)> = sqlx::query_as(
        "SELECT packet_id, actor FROM skiplock.packet_events WHERE to_state = 'ready_for_review'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(done.len(), 4, "{done:?}");
    for (packet, actor) in &done {
        let want = if *packet == first { p } else { q };
        assert_eq!(worker_pid(actor), want, "packet {packet}: {done:?}");
    }
}

#[tokio::test]
async fn a_worker_killed_mid_processing_leaves_nothing_stuck() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("first-run");
    // The first run hangs (until killed); the second succeeds.
    let proc_ = script(
        dir.path(),
        "once.sh",
        &format!(
            "if [ ! -e {m} ]; then touch {m}; exec sleep 60; fi\necho '{{\"second\": true}}'",
            m = mark.display()
        ),
    );
    let env = [
        ("SKIPLOCK_PACKET_PROCESSOR", path_str(&proc_)),
        ("SKIPLOCK_POLL_INTERVAL", "100ms"),
    ];
    let id = packets::submit(&db.pool, path_str(&frames(dir.path(), "k", 1)), None, None)
        .await
        .unwrap();
    let mut first = spawn_worker_process(&db.url, &[], &env);
    wait_state(&db.pool, id, PacketState::Processing).await;
    wait_for("the processor to start", LIMIT, || async {
        mark.exists().then_some(())
    })
    .await;
    sigkill(&first);
    let _ = first.wait();
    assert_eq!(state_of(&db.pool, id).await, PacketState::Processing);
    // The rescuer returns the dead process's job to the queue (called here, at a moment the
    // test controls; the second worker's own window is the default minute, so it never
    // rescues its live job and the history below is exact).
    let job = packets::get(&db.pool, id).await.unwrap().job_id.unwrap();
    rescue_now(&db.pool, job).await;

    let mut second = spawn_worker_process(&db.url, &[], &env);
    wait_state(&db.pool, id, PacketState::ReadyForReview).await;
    sigterm(&second);
    assert!(second.wait().unwrap().success());
    let p = packets::get(&db.pool, id).await.unwrap();
    assert_eq!(p.result.unwrap()["second"], true);

    use PacketState::*;
    let h = history(&db.pool, id).await;
    let moves: Vec<(Option<PacketState>, PacketState)> = h.iter().map(|e| (e.0, e.1)).collect();
    assert_eq!(
        moves,
        [
            (None, Queued),
            (Some(Queued), Processing),
            (Some(Processing), Queued),
            (Some(Queued), Processing),
            (Some(Processing), ReadyForReview)
        ]
    );
    assert_eq!(h[2].2, "recovery");
    assert!(h[2].3.as_deref().unwrap().contains("interrupted"), "{h:?}");
}

#[tokio::test]
async fn a_worker_stopped_mid_processing_puts_the_packet_back() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("first-run");
    let proc_ = script(
        dir.path(),
        "once.sh",
        &format!(
            "if [ ! -e {m} ]; then touch {m}; exec sleep 60; fi\necho second",
            m = mark.display()
        ),
    );
    let env = [
        ("SKIPLOCK_PACKET_PROCESSOR", path_str(&proc_)),
        ("SKIPLOCK_POLL_INTERVAL", "100ms"),
    ];
    let id = packets::submit(&db.pool, path_str(&frames(dir.path(), "t", 1)), None, None)
        .await
        .unwrap();
    let mut first = spawn_worker_process(&db.url, &[], &env);
    wait_state(&db.pool, id, PacketState::Processing).await;
    wait_for("the processor to start", LIMIT, || async {
        mark.exists().then_some(())
    })
    .await;
    sigterm(&first);
    assert!(first.wait().unwrap().success());
    // Back in the queue with its job available, not stuck in processing.
    let p = packets::get(&db.pool, id).await.unwrap();
    assert_eq!(p.state, PacketState::Queued);
    let job_state: String =
        sqlx::query_scalar("SELECT state::text FROM skiplock.jobs WHERE id = $1")
            .bind(p.job_id.unwrap())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(job_state, "available");

    let mut second = spawn_worker_process(&db.url, &[], &env);
    wait_state(&db.pool, id, PacketState::ReadyForReview).await;
    sigterm(&second);
    assert!(second.wait().unwrap().success());
    assert_eq!(
        packets::get(&db.pool, id).await.unwrap().result,
        Some(serde_json::json!("second"))
    );
    let h = history(&db.pool, id).await;
    assert_eq!(
        (h[2].0, h[2].1, h[2].2.as_str()),
        (
            Some(PacketState::Processing),
            PacketState::Queued,
            "recovery"
        )
    );
    assert!(
        h[2].3.as_deref().unwrap().contains("shutting down"),
        "{h:?}"
    );
    assert_eq!(h.len(), 5, "{h:?}");
}

/// Leaves packets without a live job: one queued, one processing, one ready_for_review.
async fn orphans(pool: &skiplock::Pool, dir: &Path) -> [i64; 3] {
    let mut out = [0; 3];
    for (i, state) in [
        PacketState::Queued,
        PacketState::Processing,
        PacketState::ReadyForReview,
    ]
    .into_iter()
    .enumerate()
    {
        let src = frames(dir, &format!("orphan{i}"), 1);
        let id = packets::submit(pool, path_str(&src), None, None)
            .await
            .unwrap();
        let job = packets::get(pool, id).await.unwrap().job_id.unwrap();
        sqlx::query("SELECT skiplock.cancel($1)")
            .bind(job)
            .execute(pool)
            .await
            .unwrap();
        if state != PacketState::Queued {
            sqlx::query("UPDATE skiplock.packets SET state = 'processing' WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await
                .unwrap();
        }
        if state == PacketState::ReadyForReview {
            sqlx::query("UPDATE skiplock.packets SET state = 'ready_for_review' WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await
                .unwrap();
        }
        out[i] = id;
    }
    out
}

async fn snapshot(pool: &skiplock::Pool, ids: &[i64]) -> Vec<(PacketState, Option<i64>, i64)> {
    let mut v = Vec::new();
    for id in ids {
        let p = packets::get(pool, *id).await.unwrap();
        v.push((p.state, p.job_id, event_count(pool, *id).await));
    }
    v
}

#[tokio::test]
async fn recovery_off_requeues_nothing_and_recovery_on_requeues_orphans() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let ids = orphans(&db.pool, dir.path()).await;
    let before = snapshot(&db.pool, &ids).await;
    let jobs_before = count_state(&db.pool, "available").await;

    // Off: a sentinel packet with a live job is processed (so the worker has run its start-up
    // hooks and claimed work), and the orphans are untouched.
    let sentinel = packets::submit(
        &db.pool,
        path_str(&frames(dir.path(), "sentinel", 1)),
        None,
        None,
    )
    .await
    .unwrap();
    let w = start_packets(&db.pool, settings(Processor::Manifest, false));
    wait_state(&db.pool, sentinel, PacketState::ReadyForReview).await;
    w.stop().await.unwrap();
    assert_eq!(snapshot(&db.pool, &ids).await, before);
    assert_eq!(count_state(&db.pool, "available").await, jobs_before);

    // On: the queued and processing orphans get new jobs and are processed; the packet in
    // ready_for_review is never touched.
    let done = packets::recovery::recover(&db.pool).await.unwrap();
    let found: Vec<(i64, PacketState)> = done.iter().map(|r| (r.packet_id, r.was)).collect();
    assert_eq!(
        found,
        [
            (ids[0], PacketState::Queued),
            (ids[1], PacketState::Processing)
        ]
    );
    assert!(
        packets::recovery::recover(&db.pool)
            .await
            .unwrap()
            .is_empty(),
        "recovery is idempotent"
    );
    let w = start_packets(&db.pool, settings(Processor::Manifest, true));
    wait_state(&db.pool, ids[0], PacketState::ReadyForReview).await;
    wait_state(&db.pool, ids[1], PacketState::ReadyForReview).await;
    w.stop().await.unwrap();
    assert_eq!(snapshot(&db.pool, &ids[2..]).await, before[2..]);
    let h = history(&db.pool, ids[1]).await;
    let back = h
        .iter()
        .find(|e| e.0 == Some(PacketState::Processing) && e.1 == PacketState::Queued)
        .unwrap();
    assert_eq!(back.2, "recovery");
    assert!(
        back.3
            .as_deref()
            .unwrap()
            .contains("recovered at worker start-up"),
        "{h:?}"
    );
}

#[tokio::test]
async fn recovery_runs_at_worker_start_up() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let ids = orphans(&db.pool, dir.path()).await;
    let mut w = spawn_worker_process(&db.url, &[], &[("SKIPLOCK_POLL_INTERVAL", "100ms")]);
    wait_state(&db.pool, ids[0], PacketState::ReadyForReview).await;
    wait_state(&db.pool, ids[1], PacketState::ReadyForReview).await;
    sigterm(&w);
    assert!(w.wait().unwrap().success());
    assert_eq!(event_count(&db.pool, ids[2]).await, 3);
}

#[tokio::test]
async fn processor_failure_goes_to_error_with_stderr_and_operators_retry() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let fixed = dir.path().join("fixed");
    let proc_ = script(
        dir.path(),
        "picky.sh",
        &format!(
            "if [ -e {f} ]; then echo \"checked $2\"; exit 0; fi\necho 'some progress'\necho 'frame 3 is black' >&2\nexit 2",
            f = fixed.display()
        ),
    );
    let w = start_packets(
        &db.pool,
        settings(
            Processor::from_setting(Some(path_str(&proc_))).unwrap(),
            true,
        ),
    );
    let src = frames(dir.path(), "x", 1);
    let id = packets::submit(&db.pool, path_str(&src), Some("picky"), None)
        .await
        .unwrap();
    wait_state(&db.pool, id, PacketState::Error).await;
    let p = packets::get(&db.pool, id).await.unwrap();
    assert_eq!(
        p.error.as_deref(),
        Some("processor exited with status 2: frame 3 is black")
    );
    // The failure is the packet's, not the job's: one attempt, job completed (acks are
    // batched, so wait for it).
    let attempt: i32 = wait_for("the job to complete", LIMIT, || async {
        let (state, attempt): (String, i32) =
            sqlx::query_as("SELECT state::text, attempt FROM skiplock.jobs WHERE id = $1")
                .bind(p.job_id.unwrap())
                .fetch_one(&db.pool)
                .await
                .unwrap();
        (state != "running").then(|| {
            assert_eq!(state, "completed");
            attempt
        })
    })
    .await;
    assert_eq!(attempt, 1);

    // Retry from error (after a reshoot).
    std::fs::write(&fixed, "").unwrap();
    let (code, out, err) = run_cmd(
        &db.url,
        &["packet", "retry", &id.to_string(), "--reason", "reshoot"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("packet {id}: queued")), "{out}");
    wait_state(&db.pool, id, PacketState::ReadyForReview).await;
    let p = packets::get(&db.pool, id).await.unwrap();
    assert_eq!(
        (p.error, p.result),
        (
            None,
            Some(serde_json::json!(format!("checked {}", src.display())))
        )
    );

    // Retry from in_review (edited frames).
    packets::take(&db.pool, id, Some("ana")).await.unwrap();
    packets::retry(&db.pool, id, Some("edited frames"), Some("ana"))
        .await
        .unwrap();
    wait_state(&db.pool, id, PacketState::ReadyForReview).await;
    w.stop().await.unwrap();

    use PacketState::*;
    let h = history(&db.pool, id).await;
    let moves: Vec<(Option<PacketState>, PacketState)> = h.iter().map(|e| (e.0, e.1)).collect();
    assert_eq!(
        moves,
        [
            (None, Queued),
            (Some(Queued), Processing),
            (Some(Processing), Error),
            (Some(Error), Queued),
            (Some(Queued), Processing),
            (Some(Processing), ReadyForReview),
            (Some(ReadyForReview), InReview),
            (Some(InReview), Queued),
            (Some(Queued), Processing),
            (Some(Processing), ReadyForReview),
        ]
    );
    assert!(
        h[2].3.as_deref().unwrap().contains("frame 3 is black"),
        "{h:?}"
    );
    assert_eq!(h[3].3.as_deref(), Some("retry: reshoot"));
    assert_eq!(
        (h[7].2.as_str(), h[7].3.as_deref()),
        ("ana", Some("retry: edited frames"))
    );
    assert!(h[1].2.starts_with("worker:"), "{h:?}");
}
