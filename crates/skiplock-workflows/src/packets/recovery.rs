//! Start-up recovery: a worker killed mid-processing must never leave a packet stuck. At
//! start-up (unless `SKIPLOCK_PACKET_RECOVERY=false`), every `queued` or `processing` packet
//! whose job is no longer live (not `available` or `running`) goes back to `queued` — a
//! history row records it when it was `processing` — and gets a new `process-packet` job.
//! `ready_for_review` and later are never touched.
//!
//! A packet whose job is still `running` on a dead worker is left alone here: the rescuer
//! returns that job to the queue after `SKIPLOCK_RESCUE_AFTER`, and the handler, finding the
//! packet still `processing` for that same job, puts it back through `queued` and runs it.

use super::transitions::PacketState;
use crate::error::Result;
use crate::store::{self, Pool};
use crate::worker::{StartHook, WorkerBuilder};

/// One packet recovery put back in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The packet.
    pub packet_id: i64,
    /// The state it was found in (`queued` or `processing`).
    pub was: PacketState,
    /// Its new job.
    pub job_id: i64,
}

/// Requeues every queued/processing packet without a live job; returns what it did. Each
/// packet is recovered on its own: one that cannot be (its error is logged) never stops the
/// others, nor the worker's start-up.
pub async fn recover(pool: &Pool) -> Result<Vec<Recovered>> {
    let rows = store::packets::recover(pool).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let (packet_id, was) = (r.packet_id, r.was);
        let Some(job_id) = r.job_id else {
            tracing::error!(packet.id = packet_id, was = %was, error = r.error.as_deref().unwrap_or("-"),
                "could not recover a packet left without a live job; skipped (the others are recovered)");
            continue;
        };
        tracing::warn!(packet.id = packet_id, was = %was, job.id = job_id, "recovered a packet left without a live job");
        out.push(Recovered {
            packet_id,
            was,
            job_id,
        });
    }
    Ok(out)
}

/// The start-up hook running [`recover`].
pub fn hook() -> StartHook {
    Box::new(|pool: Pool| {
        Box::pin(async move {
            let done = recover(&pool).await?;
            tracing::info!(packets = done.len(), "packet recovery done");
            Ok(())
        })
    })
}

/// Adds the hook to `builder` when `enabled` (`SKIPLOCK_PACKET_RECOVERY`).
pub fn install(builder: WorkerBuilder, enabled: bool) -> WorkerBuilder {
    if enabled {
        builder.on_start(hook())
    } else {
        tracing::info!("packet recovery at start-up is off (SKIPLOCK_PACKET_RECOVERY=false)");
        builder
    }
}
