//! Politeness across every worker process, through the host's row in `skiplock.hosts`.
//!
//! A fetch reserves a slot once (atomically, at the end of its host's line: the slot is
//! `interval` after the previous reservation) and snoozes exactly until it, so 1,000 queued
//! pages of one host each wake about once and hold no worker slot while they wait. At its
//! slot the fetch takes the host's lease (only if no request is in flight and the last
//! response is `interval` old), sends its request, and releases the lease once the response
//! is in: the next request to the host starts at least `interval` after this one was
//! answered, however late or early the jobs wake.

use std::time::Duration;

use crate::error::Result;
use crate::store::{self, Pool};

/// What the host slot says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Slot {
    /// Send the request now (the lease is held: call [`release`] after).
    Go,
    /// Snooze this long, then ask again (the reservation is kept).
    Wait(Duration),
}

/// Asks for job `job_id`'s slot on `host`; `lease` bounds how long a crashed fetch can
/// hold the host.
pub async fn acquire(
    pool: &Pool,
    job_id: i64,
    host: &str,
    interval: Duration,
    lease: Duration,
) -> Result<Slot> {
    let r = store::fetch::SlotRequest {
        job_id,
        host,
        interval,
        lease,
    };
    Ok(match store::fetch::slot(pool, r).await? {
        None => Slot::Go,
        Some(wait) => Slot::Wait(wait),
    })
}

/// Ends the lease: the host's next request may start `interval` from now.
pub async fn release(pool: &Pool, host: &str, interval: Duration) -> Result<()> {
    store::fetch::release(pool, host, interval).await
}
