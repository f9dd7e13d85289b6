//! The packet pipeline's statements (`sql/packets/`): submit, read, operator moves, and the
//! worker's fenced start / finish / interrupt through the SQL API's `_packet_*` functions.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::types::{PacketStartOutcome, PacketState};
use super::{Executor, sql};
use crate::error::{Error, Result};

/// A packet row.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
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
    #[sqlx(try_from = "crate::time::DbTime")]
    pub created_at: DateTime<Utc>,
    /// Last change.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub updated_at: DateTime<Utc>,
}

/// One row of a packet's history.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct PacketEvent {
    /// Event id (history order).
    pub id: i64,
    /// The packet.
    pub packet_id: i64,
    /// Previous state; `None` for the submit.
    #[sqlx(rename = "from_state")]
    pub from: Option<PacketState>,
    /// New state.
    #[sqlx(rename = "to_state")]
    pub to: PacketState,
    /// When.
    #[sqlx(try_from = "crate::time::DbTime")]
    pub at: DateTime<Utc>,
    /// Who: an operator, `worker:<id>`, or `recovery`.
    pub actor: String,
    /// Why (retry reason, processor error, job id).
    pub note: Option<String>,
}

/// "Whose move is it?": packets waiting on the machine and on people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default, sqlx::FromRow)]
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

/// Submits a packet (`skiplock.submit_packet`): the packet and its job commit together.
/// Returns its id.
pub async fn submit<'e, E: Executor<'e>>(
    exec: E,
    source: &str,
    name: Option<&str>,
    actor: Option<&str>,
) -> Result<i64> {
    Ok(super::query_scalar(sql!("packets", "submit"))
        .bind(source)
        .bind(name)
        .bind(actor)
        .fetch_one(exec)
        .await?)
}

/// One packet, or [`Error::NotFound`].
pub async fn get<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<Packet> {
    super::query_as(sql!("packets", "get"))
        .bind(id)
        .fetch_optional(exec)
        .await?
        .ok_or_else(|| Error::NotFound(format!("packet {id}")))
}

/// Packets, newest first, optionally only in `state`; `limit` rows at most.
pub async fn list<'e, E: Executor<'e>>(
    exec: E,
    state: Option<PacketState>,
    limit: i64,
) -> Result<Vec<Packet>> {
    Ok(super::query_as(sql!("packets", "list"))
        .bind(state)
        .bind(limit)
        .fetch_all(exec)
        .await?)
}

/// A packet's history, oldest first.
pub async fn events<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<Vec<PacketEvent>> {
    Ok(super::query_as(sql!("packets", "events"))
        .bind(id)
        .fetch_all(exec)
        .await?)
}

/// The "whose move" counts.
pub async fn whose_move<'e, E: Executor<'e>>(exec: E) -> Result<WhoseMove> {
    Ok(super::query_as(sql!("packets", "whose_move"))
        .fetch_one(exec)
        .await?)
}

/// Locks packet `id` (until the transaction ends) and reads its state; `None` if missing.
pub async fn lock<'e, E: Executor<'e>>(exec: E, id: i64) -> Result<Option<PacketState>> {
    Ok(super::query_scalar(sql!("packets", "lock"))
        .bind(id)
        .fetch_optional(exec)
        .await?)
}

/// A move of one packet, for [`move_to`].
#[derive(Debug, Clone, Copy)]
pub struct PacketMove<'a> {
    /// The packet.
    pub id: i64,
    /// The state it goes to (the database trigger checks the transition table).
    pub to: PacketState,
    /// Who moves it.
    pub actor: &'a str,
    /// Why.
    pub note: Option<&'a str>,
}

/// Moves a packet (`skiplock._packet_move`), recording actor and note in its history.
pub async fn move_to<'e, E: Executor<'e>>(exec: E, m: PacketMove<'_>) -> Result<()> {
    super::query(sql!("packets", "move_to"))
        .bind(m.id)
        .bind(m.to)
        .bind(m.actor)
        .bind(m.note)
        .execute(exec)
        .await?;
    Ok(())
}

/// Operator: take a packet that is ready for review (`ready_for_review → in_review`).
pub async fn take<'e, E: Executor<'e>>(exec: E, id: i64, actor: Option<&str>) -> Result<()> {
    super::query(sql!("packets", "take"))
        .bind(id)
        .bind(actor)
        .execute(exec)
        .await?;
    Ok(())
}

/// Operator: the review is done (`in_review → done`).
pub async fn complete<'e, E: Executor<'e>>(exec: E, id: i64, actor: Option<&str>) -> Result<()> {
    super::query(sql!("packets", "complete"))
        .bind(id)
        .bind(actor)
        .execute(exec)
        .await?;
    Ok(())
}

/// Operator: process again (`error | in_review → queued`) with a new job; returns the job.
pub async fn retry<'e, E: Executor<'e>>(
    exec: E,
    id: i64,
    reason: Option<&str>,
    actor: Option<&str>,
) -> Result<i64> {
    Ok(super::query_scalar(sql!("packets", "retry"))
        .bind(id)
        .bind(reason)
        .bind(actor)
        .fetch_one(exec)
        .await?)
}

/// A worker's attempt to start a packet, for [`start`].
#[derive(Debug, Clone, Copy)]
pub struct PacketStart<'a> {
    /// The packet.
    pub id: i64,
    /// The job that wants to process it.
    pub job_id: i64,
    /// At most this many packets processing at once, across every worker.
    pub max_processing: i32,
    /// Who starts it (`worker:<id>`).
    pub worker: &'a str,
}

/// How a start went (`skiplock.packet_start_result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct StartResult {
    /// Started, busy, stale or duplicate.
    pub outcome: PacketStartOutcome,
    /// Stale: the state the packet is in (`None`: it is gone).
    pub state: Option<PacketState>,
    /// Duplicate: the live job that owns the packet.
    pub owner_job: Option<i64>,
}

/// Tries to start processing (`skiplock._packet_start`): under the concurrency limit, fenced
/// on the packet being `queued` for this job.
pub async fn start<'e, E: Executor<'e>>(exec: E, s: PacketStart<'_>) -> Result<StartResult> {
    Ok(super::query_as(sql!("packets", "start"))
        .bind(s.id)
        .bind(s.job_id)
        .bind(s.max_processing)
        .bind(s.worker)
        .fetch_one(exec)
        .await?)
}

/// The end of processing, for [`finish`].
#[derive(Debug, Clone, Copy)]
pub struct PacketFinish<'a> {
    /// The packet.
    pub id: i64,
    /// The job that processed it (the fence).
    pub job_id: i64,
    /// Whether processing succeeded (`ready_for_review`) or failed (`error`).
    pub ok: bool,
    /// What it produced.
    pub result: Option<&'a Value>,
    /// Why it failed.
    pub error: Option<&'a str>,
    /// Who (`worker:<id>`).
    pub worker: &'a str,
}

/// How a finish went (`skiplock.packet_finish_result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct FinishResult {
    /// Whether the outcome was recorded (false: the packet had been taken away).
    pub recorded: bool,
    /// The packet's new state, or the one it was found in (`None`: it is gone).
    pub state: Option<PacketState>,
}

/// Records the end of processing (`skiplock._packet_finish`), fenced on the packet still
/// `processing` for this job.
pub async fn finish<'e, E: Executor<'e>>(exec: E, f: PacketFinish<'_>) -> Result<FinishResult> {
    Ok(super::query_as(sql!("packets", "finish"))
        .bind(f.id)
        .bind(f.job_id)
        .bind(f.ok)
        .bind(f.result)
        .bind(f.error)
        .bind(f.worker)
        .fetch_one(exec)
        .await?)
}

/// Processing was stopped on purpose (shutdown): packet `id` of job `job_id` goes back to
/// `queued` with `note` (`skiplock._packet_interrupt`). Returns whether it did.
pub async fn interrupt<'e, E: Executor<'e>>(
    exec: E,
    id: i64,
    job_id: i64,
    note: &str,
) -> Result<bool> {
    Ok(super::query_scalar(sql!("packets", "interrupt"))
        .bind(id)
        .bind(job_id)
        .bind(note)
        .fetch_one(exec)
        .await?)
}

/// One packet start-up recovery handled (`skiplock.recover_packets`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RecoverRow {
    /// The packet.
    pub packet_id: i64,
    /// The state it was found in (`queued` or `processing`).
    pub was: PacketState,
    /// Its new job; `None` when it could not be recovered.
    pub job_id: Option<i64>,
    /// Why it could not be recovered.
    pub error: Option<String>,
}

/// Requeues every queued/processing packet without a live job.
pub async fn recover<'e, E: Executor<'e>>(exec: E) -> Result<Vec<RecoverRow>> {
    Ok(super::query_as(sql!("packets", "recover"))
        .fetch_all(exec)
        .await?)
}

/// How many packets are in one state.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PacketCount {
    /// The state.
    pub state: PacketState,
    /// Packets in it.
    pub packets: i64,
}

/// Packets per state that has packets (the metrics scrape's gauge,
/// `crate::parts::Packets::gauges`).
pub async fn states<'e, E: Executor<'e>>(exec: E) -> Result<Vec<PacketCount>> {
    Ok(super::query_as(sql!("packets", "states"))
        .fetch_all(exec)
        .await?)
}
