//! Workflow `packets`: a packet (a folder of scanned frames) is processed by machine, then
//! checked by an operator, through six states (see [`transitions`]). The packet's row is the
//! truth; its `process-packet` job (queue `packets`) only drives the machine's part:
//!
//! - [`submit`] commits the packet and its job in one transaction (`skiplock.submit_packet`).
//! - [`ProcessPacket`] moves `queued → processing` under a cross-process concurrency limit,
//!   runs the [`processor`], then moves to `ready_for_review` or `error`. A job for a packet
//!   that is no longer `queued` does nothing.
//! - [`recovery`] at worker start-up requeues packets left without a live job.
//! - Operators [`take`], [`complete`] and [`retry`].
//!
//! Attempts: a processing failure (processor exits non-zero, times out, cannot start; the
//! built-in manifest finds no files) sends the packet to `error` at once — retrying the same
//! frames would fail the same way, and an operator decides. Infrastructure errors (the
//! database) are retried by the job, up to [`JOB_MAX_ATTEMPTS`] attempts with backoff; the
//! last one sends the packet to `error` if it can.

pub mod processor;
pub mod recovery;
pub mod roots;
pub mod transitions;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::config::{env_bool, env_duration, env_opt, env_usize};
use crate::dbtime::DbTime;
use crate::error::{Error, Result};
use crate::worker::{HandlerResult, JobContext, JobError, Outcome, WorkerBuilder};
use processor::Processor;
use roots::PacketRoots;
use transitions::{Mover, PacketState, Refused, mover};

/// The job kind that processes a packet.
pub const KIND: &str = "process-packet";
/// The queue its jobs go to.
pub const QUEUE: &str = "packets";
/// Attempts of a `process-packet` job (set in `skiplock._packet_enqueue`); only
/// infrastructure errors use them up.
pub const JOB_MAX_ATTEMPTS: i32 = 5;
/// Default of `SKIPLOCK_PACKET_CONCURRENCY`.
pub const DEFAULT_CONCURRENCY: usize = 1;
/// Default of `SKIPLOCK_PACKET_TIMEOUT`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a packet waits for a free processing slot before asking again (jittered ±50%).
/// A packet finishing (or interrupted) wakes the earliest waiting job at once; this fallback
/// covers the wake-ups that miss (a waiter whose "busy" snooze is not yet written, a slot
/// freed by a worker that died). Each waiting packet asks about once per this interval.
pub const SLOT_WAIT: Duration = Duration::from_secs(3);

/// The pipeline's settings, read from the environment once at worker start-up.
#[derive(Debug, Clone)]
pub struct PacketSettings {
    /// Most packets in `processing` at once, across every worker (`SKIPLOCK_PACKET_CONCURRENCY`).
    pub concurrency: usize,
    /// What processes a packet (`SKIPLOCK_PACKET_PROCESSOR`; unset: the built-in manifest).
    pub processor: Processor,
    /// How long the processor may run (`SKIPLOCK_PACKET_TIMEOUT`).
    pub timeout: Duration,
    /// Whether start-up recovery runs (`SKIPLOCK_PACKET_RECOVERY`).
    pub recovery: bool,
    /// The only folders packets are read from (`SKIPLOCK_PACKET_ROOTS`, resolved at start).
    pub roots: PacketRoots,
}

impl Default for PacketSettings {
    fn default() -> Self {
        PacketSettings {
            concurrency: DEFAULT_CONCURRENCY,
            processor: Processor::Manifest,
            timeout: DEFAULT_TIMEOUT,
            recovery: true,
            roots: PacketRoots::new(&[roots::DEFAULT]),
        }
    }
}

impl PacketSettings {
    /// Reads and validates the settings; a bad value names the variable.
    pub fn from_env() -> Result<Self> {
        let processor = Processor::from_setting(env_opt("SKIPLOCK_PACKET_PROCESSOR").as_deref())
            .map_err(|m| Error::config("SKIPLOCK_PACKET_PROCESSOR", m))?;
        let timeout = env_duration("SKIPLOCK_PACKET_TIMEOUT", DEFAULT_TIMEOUT)?;
        if timeout.is_zero() {
            return Err(Error::config(
                "SKIPLOCK_PACKET_TIMEOUT",
                "must be more than 0s",
            ));
        }
        Ok(PacketSettings {
            concurrency: env_usize("SKIPLOCK_PACKET_CONCURRENCY", DEFAULT_CONCURRENCY)?,
            processor,
            timeout,
            recovery: env_bool("SKIPLOCK_PACKET_RECOVERY", true)?,
            roots: PacketRoots::from_env()?,
        })
    }
}

/// Registers the `process-packet` handler and the start-up recovery hook.
pub fn register(builder: WorkerBuilder) -> Result<WorkerBuilder> {
    let settings = PacketSettings::from_env()?;
    Ok(register_with(builder, settings))
}

/// [`register`] with explicit settings (tests, embedding).
pub fn register_with(mut builder: WorkerBuilder, settings: PacketSettings) -> WorkerBuilder {
    let recovery = settings.recovery;
    builder.registry_mut().register(ProcessPacket { settings });
    recovery::install(builder, recovery)
}

/// A packet row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Packet {
    /// Id.
    pub id: i64,
    /// The folder to process.
    pub source: String,
    /// An operator's label.
    pub name: Option<String>,
    /// Where it is in the lifecycle.
    pub state: PacketState,
    /// Why processing failed.
    pub error: Option<String>,
    /// What processing produced.
    pub result: Option<Value>,
    /// The job that last took charge of it.
    pub job_id: Option<i64>,
    /// Submitted at.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

type PacketRow = (
    i64,
    String,
    Option<String>,
    String,
    Option<String>,
    Option<Value>,
    Option<i64>,
    DbTime,
    DbTime,
);

fn packet_from(r: PacketRow) -> Result<Packet> {
    Ok(Packet {
        id: r.0,
        source: r.1,
        name: r.2,
        state: r.3.parse().map_err(Error::Other)?,
        error: r.4,
        result: r.5,
        job_id: r.6,
        created_at: r.7.0,
        updated_at: r.8.0,
    })
}

/// One row of a packet's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PacketEvent {
    /// Event id (history order).
    pub id: i64,
    /// The packet.
    pub packet_id: i64,
    /// Previous state; `None` for the submit.
    pub from: Option<PacketState>,
    /// New state.
    pub to: PacketState,
    /// When.
    pub at: DateTime<Utc>,
    /// Who: an operator, `worker:<id>`, or `recovery`.
    pub actor: String,
    /// Why (retry reason, processor error, job id).
    pub note: Option<String>,
}

/// "Whose move is it?": packets waiting on the machine and on people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct WhoseMove {
    /// queued + processing.
    pub machine: i64,
    /// ready_for_review + in_review + error.
    pub people: i64,
    /// Waiting for a worker.
    pub queued: i64,
    /// Being processed.
    pub processing: i64,
    /// Waiting for an operator.
    pub ready_for_review: i64,
    /// Being checked.
    pub in_review: i64,
    /// Failed; an operator decides.
    pub error: i64,
    /// Finished.
    pub done: i64,
}

/// Submits a packet: the packet (`queued`) and its job commit together. Returns its id.
pub async fn submit(
    pool: &PgPool,
    source: &str,
    name: Option<&str>,
    actor: Option<&str>,
) -> Result<i64> {
    Ok(
        sqlx::query_scalar(include_str!("../../../sql/packets/submit.sql"))
            .bind(source)
            .bind(name)
            .bind(actor)
            .fetch_one(pool)
            .await?,
    )
}

/// One packet, or [`Error::NotFound`].
pub async fn get(pool: &PgPool, id: i64) -> Result<Packet> {
    let row: Option<PacketRow> = sqlx::query_as(include_str!("../../../sql/packets/get.sql"))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    packet_from(row.ok_or_else(|| Error::NotFound(format!("packet {id}")))?)
}

/// Packets, newest first, optionally only in `state`; `limit` rows at most.
pub async fn list(pool: &PgPool, state: Option<PacketState>, limit: i64) -> Result<Vec<Packet>> {
    let rows: Vec<PacketRow> = sqlx::query_as(include_str!("../../../sql/packets/list.sql"))
        .bind(state.map(PacketState::as_str))
        .bind(limit)
        .fetch_all(pool)
        .await?;
    rows.into_iter().map(packet_from).collect()
}

/// A packet's history, oldest first.
pub async fn events(pool: &PgPool, id: i64) -> Result<Vec<PacketEvent>> {
    type Row = (
        i64,
        i64,
        Option<String>,
        String,
        DbTime,
        String,
        Option<String>,
    );
    let rows: Vec<Row> = sqlx::query_as(include_str!("../../../sql/packets/events.sql"))
        .bind(id)
        .fetch_all(pool)
        .await?;
    rows.into_iter()
        .map(|r| {
            Ok(PacketEvent {
                id: r.0,
                packet_id: r.1,
                from: r.2.map(|s| s.parse()).transpose().map_err(Error::Other)?,
                to: r.3.parse().map_err(Error::Other)?,
                at: r.4.0,
                actor: r.5,
                note: r.6,
            })
        })
        .collect()
}

/// The "whose move" counts.
pub async fn whose_move(pool: &PgPool) -> Result<WhoseMove> {
    let r: (i64, i64, i64, i64, i64, i64, i64, i64) =
        sqlx::query_as(include_str!("../../../sql/packets/whose_move.sql"))
            .fetch_one(pool)
            .await?;
    Ok(WhoseMove {
        machine: r.0,
        people: r.1,
        queued: r.2,
        processing: r.3,
        ready_for_review: r.4,
        in_review: r.5,
        error: r.6,
        done: r.7,
    })
}

/// Moves packet `id` to `to` as `actor`, after checking the transition table here first
/// (the database trigger checks it again). Only the worker's and operators' rows of the
/// table: `processing → queued` belongs to recovery. A refusal is [`Error::Invalid`] naming
/// the packet, its current state and the requested one.
pub async fn transition(
    pool: &PgPool,
    id: i64,
    to: PacketState,
    actor: &str,
    note: Option<&str>,
) -> Result<()> {
    let mut tx = pool.begin().await?;
    let cur: Option<String> = sqlx::query_scalar(include_str!("../../../sql/packets/lock.sql"))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    let from: PacketState = cur
        .ok_or_else(|| Error::NotFound(format!("packet {id}")))?
        .parse()
        .map_err(Error::Other)?;
    if !matches!(mover(from, to), Some(Mover::Worker | Mover::Operator)) {
        return Err(Error::Invalid(Refused { id, from, to }.to_string()));
    }
    sqlx::query(include_str!("../../../sql/packets/move.sql"))
        .bind(id)
        .bind(to.as_str())
        .bind(actor)
        .bind(note)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Operator: take a packet that is ready for review (`ready_for_review → in_review`).
pub async fn take(pool: &PgPool, id: i64, actor: Option<&str>) -> Result<()> {
    sqlx::query(include_str!("../../../sql/packets/take.sql"))
        .bind(id)
        .bind(actor)
        .execute(pool)
        .await?;
    Ok(())
}

/// Operator: the review is done (`in_review → done`).
pub async fn complete(pool: &PgPool, id: i64, actor: Option<&str>) -> Result<()> {
    sqlx::query(include_str!("../../../sql/packets/complete.sql"))
        .bind(id)
        .bind(actor)
        .execute(pool)
        .await?;
    Ok(())
}

/// Operator: process again (`error | in_review → queued`) with a new job; returns the job.
pub async fn retry(
    pool: &PgPool,
    id: i64,
    reason: Option<&str>,
    actor: Option<&str>,
) -> Result<i64> {
    Ok(
        sqlx::query_scalar(include_str!("../../../sql/packets/retry.sql"))
            .bind(id)
            .bind(reason)
            .bind(actor)
            .fetch_one(pool)
            .await?,
    )
}

/// Args of a `process-packet` job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessArgs {
    /// The packet to process.
    pub packet_id: i64,
}

/// The `process-packet` handler.
pub struct ProcessPacket {
    /// Its settings.
    pub settings: PacketSettings,
}

/// How the start step went (`skiplock._packet_start`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Start {
    Started,
    Busy,
    Stale(String),
    Duplicate(String),
}

fn parse_start(s: &str) -> Start {
    match s {
        "started" => Start::Started,
        "busy" => Start::Busy,
        other if other.starts_with("duplicate:") => {
            Start::Duplicate(other["duplicate:".len()..].to_string())
        }
        other => Start::Stale(other.strip_prefix("stale:").unwrap_or(other).to_string()),
    }
}

fn slot_wait() -> Duration {
    SLOT_WAIT.mul_f64(0.5 + rand::random::<f64>())
}

impl ProcessPacket {
    async fn process(&self, ctx: &JobContext, id: i64) -> HandlerResult {
        let actor = format!("worker:{}", ctx.worker_id);
        let started: String = sqlx::query_scalar(include_str!("../../../sql/packets/start.sql"))
            .bind(id)
            .bind(ctx.id)
            .bind(self.settings.concurrency as i32)
            .bind(&actor)
            .fetch_one(&ctx.pool)
            .await?;
        match parse_start(&started) {
            Start::Started => {}
            Start::Busy => return Ok(Outcome::Snooze(slot_wait())),
            Start::Stale(state) => {
                tracing::info!(packet.id = id, job.id = ctx.id, %state, "packet is not queued for this job; nothing to do");
                return Ok(Outcome::CompleteWith(
                    json!({ "skipped": format!("packet {id} is {state}, not queued") }),
                ));
            }
            Start::Duplicate(owner) => {
                tracing::info!(packet.id = id, job.id = ctx.id, owner = %owner, "another job owns this packet; nothing to do");
                return Ok(Outcome::CompleteWith(
                    json!({ "skipped": format!("packet {id} belongs to job {owner}") }),
                ));
            }
        }
        let packet = get(&ctx.pool, id).await?;
        tracing::info!(packet.id = id, source = %packet.source, "processing packet");
        let run = self.settings.processor.run(
            id,
            &packet.source,
            self.settings.timeout,
            &self.settings.roots,
        );
        let result = tokio::select! {
            r = run => r,
            _ = ctx.shutdown_requested() => {
                // The processor is killed (dropped); the packet goes back to queued and the
                // job to the queue, so the next worker processes it again.
                sqlx::query(include_str!("../../../sql/packets/interrupt.sql"))
                    .bind(id)
                    .bind(ctx.id)
                    .bind("worker shutting down; processing interrupted")
                    .execute(&ctx.pool)
                    .await?;
                return Ok(Outcome::Snooze(Duration::ZERO));
            }
            _ = ctx.lost() => {
                return Err(JobError::retry("job taken away while processing; processor stopped"));
            }
        };
        let (ok, value, error) = match result {
            Ok(v) => (true, Some(v), None),
            Err(e) => (false, None, Some(e.0)),
        };
        let new_state = self
            .finish(ctx, id, ok, value, error.as_deref(), &actor)
            .await?;
        Ok(Outcome::CompleteWith(
            json!({ "packet_id": id, "state": new_state }),
        ))
    }

    async fn finish(
        &self,
        ctx: &JobContext,
        id: i64,
        ok: bool,
        result: Option<Value>,
        error: Option<&str>,
        actor: &str,
    ) -> Result<String> {
        let s: String = sqlx::query_scalar(include_str!("../../../sql/packets/finish.sql"))
            .bind(id)
            .bind(ctx.id)
            .bind(ok)
            .bind(result)
            .bind(error)
            .bind(actor)
            .fetch_one(&ctx.pool)
            .await?;
        if let Some(state) = s.strip_prefix("lost:") {
            tracing::warn!(
                packet.id = id,
                job.id = ctx.id,
                state,
                "packet was taken away while processing; result dropped"
            );
        }
        Ok(s)
    }
}

impl crate::worker::Handler for ProcessPacket {
    type Args = ProcessArgs;

    fn kind(&self) -> &'static str {
        KIND
    }

    /// The processor's own timeout plus room to record the outcome, so the worker's
    /// `SKIPLOCK_JOB_TIMEOUT` never cuts a long processor short.
    fn timeout(&self) -> Option<Duration> {
        Some(self.settings.timeout + Duration::from_secs(60))
    }

    async fn run(&self, ctx: JobContext, args: ProcessArgs) -> HandlerResult {
        let r = self.process(&ctx, args.packet_id).await;
        if let Err(e) = &r
            && e.retryable
            && ctx.attempt >= ctx.max_attempts
        {
            // Out of attempts: record the failure on the packet if it is still ours.
            let msg = format!(
                "processing failed after {} attempts: {}",
                ctx.attempt, e.message
            );
            let actor = format!("worker:{}", ctx.worker_id);
            if let Err(e2) = self
                .finish(&ctx, args.packet_id, false, None, Some(&msg), &actor)
                .await
            {
                tracing::warn!(packet.id = args.packet_id, error = %e2, "could not mark the packet as failed");
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_results_parse() {
        assert_eq!(parse_start("started"), Start::Started);
        assert_eq!(parse_start("busy"), Start::Busy);
        assert_eq!(parse_start("stale:done"), Start::Stale("done".into()));
        assert_eq!(parse_start("duplicate:12"), Start::Duplicate("12".into()));
    }

    #[test]
    fn slot_wait_is_jittered_around_the_default() {
        for _ in 0..100 {
            let w = slot_wait();
            assert!(w >= SLOT_WAIT / 2 && w <= SLOT_WAIT * 3 / 2);
        }
    }
}
