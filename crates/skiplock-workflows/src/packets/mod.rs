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

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::config::{env_bool, env_duration, env_opt, env_usize};
use crate::error::{Error, Result};
use crate::names;
use crate::store::packets::{FinishResult, PacketFinish, PacketMove, PacketStart, StartResult};
use crate::store::types::PacketStartOutcome;
use crate::store::{self, Pool};
use crate::worker::{HandlerResult, JobContext, JobError, Outcome, WorkerBuilder};
use processor::Processor;
use roots::PacketRoots;
use transitions::{Mover, PacketState, Refused, mover};

pub use crate::store::packets::{Packet, PacketEvent, WhoseMove};

/// The job kind that processes a packet.
pub const KIND: &str = names::PACKET_KIND;
/// The queue its jobs go to.
pub const QUEUE: &str = names::PACKET_QUEUE;
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

/// Registers the `process-packet` handler and the start-up recovery hook with `settings`.
pub fn register_with(builder: WorkerBuilder, settings: PacketSettings) -> WorkerBuilder {
    let mut builder = builder;
    let recovery = settings.recovery;
    let concurrency = settings.concurrency;
    builder.registry_mut().register(ProcessPacket { settings });
    recovery::install(builder, recovery).on_start(limit_hook(concurrency))
}

/// The start-up hook that makes `SKIPLOCK_PACKET_CONCURRENCY` the packets queue's
/// concurrency limit (`skiplock.set_queue_limit`): a packet job beyond it is not claimed at
/// all (it stays `available`, no attempt, no worker slot, no snooze), instead of being
/// claimed and snoozed by the handler. The handler's own count in `skiplock._packet_start`
/// stays as a guard. The last worker to start sets the value: set the same everywhere.
fn limit_hook(concurrency: usize) -> crate::worker::StartHook {
    let n = i32::try_from(concurrency.max(1)).unwrap_or(i32::MAX);
    Box::new(move |pool: Pool| {
        Box::pin(async move { store::control::set_queue_limit(&pool, QUEUE, Some(n)).await })
    })
}

/// Submits a packet: the packet (`queued`) and its job commit together. Returns its id.
pub async fn submit(
    pool: &Pool,
    source: &str,
    name: Option<&str>,
    actor: Option<&str>,
) -> Result<i64> {
    store::packets::submit(pool, source, name, actor).await
}

/// One packet, or [`Error::NotFound`].
pub async fn get(pool: &Pool, id: i64) -> Result<Packet> {
    store::packets::get(pool, id).await
}

/// Packets, newest first, optionally only in `state`; `limit` rows at most.
pub async fn list(pool: &Pool, state: Option<PacketState>, limit: i64) -> Result<Vec<Packet>> {
    store::packets::list(pool, state, limit).await
}

/// A packet's history, oldest first.
pub async fn events(pool: &Pool, id: i64) -> Result<Vec<PacketEvent>> {
    store::packets::events(pool, id).await
}

/// The "whose move" counts.
pub async fn whose_move(pool: &Pool) -> Result<WhoseMove> {
    store::packets::whose_move(pool).await
}

/// Moves packet `id` to `to` as `actor`, after checking the transition table here first
/// (the database trigger checks it again). Only the worker's and operators' rows of the
/// table: `processing → queued` belongs to recovery. A refusal is [`Error::Invalid`] naming
/// the packet, its current state and the requested one.
pub async fn transition(
    pool: &Pool,
    id: i64,
    to: PacketState,
    actor: &str,
    note: Option<&str>,
) -> Result<()> {
    let mut tx = pool.begin().await?;
    let from = store::packets::lock(&mut *tx, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("packet {id}")))?;
    if !matches!(mover(from, to), Some(Mover::Worker | Mover::Operator)) {
        return Err(Error::Invalid(Refused { id, from, to }.to_string()));
    }
    let m = PacketMove {
        id,
        to,
        actor,
        note,
    };
    store::packets::move_to(&mut *tx, m).await?;
    tx.commit().await?;
    Ok(())
}

/// Operator: take a packet that is ready for review (`ready_for_review → in_review`).
pub async fn take(pool: &Pool, id: i64, actor: Option<&str>) -> Result<()> {
    store::packets::take(pool, id, actor).await
}

/// Operator: the review is done (`in_review → done`).
pub async fn complete(pool: &Pool, id: i64, actor: Option<&str>) -> Result<()> {
    store::packets::complete(pool, id, actor).await
}

/// Operator: process again (`error | in_review → queued`) with a new job; returns the job.
pub async fn retry(pool: &Pool, id: i64, reason: Option<&str>, actor: Option<&str>) -> Result<i64> {
    store::packets::retry(pool, id, reason, actor).await
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

/// What the handler does after a start attempt: process, snooze, or complete doing nothing
/// with this reason.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AfterStart {
    Process,
    Wait,
    Skip(String),
}

/// The decision for `packet`'s start result `r`.
fn after_start(packet: i64, r: &StartResult) -> AfterStart {
    match r.outcome {
        PacketStartOutcome::Started => AfterStart::Process,
        PacketStartOutcome::Busy => AfterStart::Wait,
        PacketStartOutcome::Stale => AfterStart::Skip(match r.state {
            Some(state) => format!("packet {packet} is {state}, not queued"),
            None => format!("packet {packet} is missing, not queued"),
        }),
        PacketStartOutcome::Duplicate => AfterStart::Skip(match r.owner_job {
            Some(job) => format!("packet {packet} belongs to job {job}"),
            None => format!("packet {packet} belongs to another job"),
        }),
    }
}

/// The job's result names the packet's new state, or `lost:<state>` when the packet had
/// been taken away (the wording of earlier releases, kept for whoever reads job results).
fn finish_word(r: &FinishResult) -> String {
    let state = r.state.map_or("missing", PacketState::as_str);
    if r.recorded {
        state.to_string()
    } else {
        format!("lost:{state}")
    }
}

fn slot_wait() -> Duration {
    SLOT_WAIT.mul_f64(0.5 + rand::random::<f64>())
}

impl ProcessPacket {
    async fn process(&self, ctx: &JobContext, id: i64) -> HandlerResult {
        let actor = format!("worker:{}", ctx.worker_id);
        let start = PacketStart {
            id,
            job_id: ctx.id,
            max_processing: i32::try_from(self.settings.concurrency).unwrap_or(i32::MAX),
            worker: &actor,
        };
        let started = store::packets::start(&ctx.pool, start).await?;
        match after_start(id, &started) {
            AfterStart::Process => {}
            AfterStart::Wait => return Ok(Outcome::Snooze(slot_wait())),
            AfterStart::Skip(why) => {
                tracing::info!(packet.id = id, job.id = ctx.id, "{why}; nothing to do");
                return Ok(Outcome::CompleteWith(json!({ "skipped": why })));
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
                store::packets::interrupt(&ctx.pool, id, ctx.id, "worker shutting down; processing interrupted")
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
        let finished = self
            .finish(ctx, id, ok, value.as_ref(), error.as_deref(), &actor)
            .await?;
        Ok(Outcome::CompleteWith(
            json!({ "packet_id": id, "state": finish_word(&finished) }),
        ))
    }

    async fn finish(
        &self,
        ctx: &JobContext,
        id: i64,
        ok: bool,
        result: Option<&Value>,
        error: Option<&str>,
        actor: &str,
    ) -> Result<FinishResult> {
        let f = PacketFinish {
            id,
            job_id: ctx.id,
            ok,
            result,
            error,
            worker: actor,
        };
        let r = store::packets::finish(&ctx.pool, f).await?;
        if !r.recorded {
            tracing::warn!(
                packet.id = id,
                job.id = ctx.id,
                state = r.state.map_or("missing", PacketState::as_str),
                "packet was taken away while processing; result dropped"
            );
        }
        Ok(r)
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

    fn start(
        outcome: PacketStartOutcome,
        state: Option<PacketState>,
        owner: Option<i64>,
    ) -> StartResult {
        StartResult {
            outcome,
            state,
            owner_job: owner,
        }
    }

    #[test]
    fn start_results_decide_what_the_handler_does() {
        use PacketStartOutcome::*;
        let s = |o, st, ow| after_start(7, &start(o, st, ow));
        assert_eq!(
            s(Started, Some(PacketState::Processing), Some(1)),
            AfterStart::Process
        );
        assert_eq!(s(Busy, None, None), AfterStart::Wait);
        assert_eq!(
            s(Stale, Some(PacketState::Done), None),
            AfterStart::Skip("packet 7 is done, not queued".into())
        );
        assert_eq!(
            s(Stale, None, None),
            AfterStart::Skip("packet 7 is missing, not queued".into())
        );
        assert_eq!(
            s(Duplicate, Some(PacketState::Queued), Some(12)),
            AfterStart::Skip("packet 7 belongs to job 12".into())
        );
    }

    #[test]
    fn a_finish_reports_the_new_state_or_that_the_packet_was_lost() {
        let f = |recorded, state| finish_word(&FinishResult { recorded, state });
        assert_eq!(
            f(true, Some(PacketState::ReadyForReview)),
            "ready_for_review"
        );
        assert_eq!(f(true, Some(PacketState::Error)), "error");
        assert_eq!(f(false, Some(PacketState::Done)), "lost:done");
        assert_eq!(f(false, None), "lost:missing");
    }

    #[test]
    fn slot_wait_is_jittered_around_the_default() {
        for _ in 0..100 {
            let w = slot_wait();
            assert!(w >= SLOT_WAIT / 2 && w <= SLOT_WAIT * 3 / 2);
        }
    }
}
