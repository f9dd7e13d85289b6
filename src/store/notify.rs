//! The LISTEN side of wake-ups: a dedicated connection listening on the wake-up channel
//! ([`wake_channel`]: a name only the owner and the worker role can read, so other logins
//! learn no queue name; migrations/history/0015_wake_channel.sql), which inserting a due job notifies
//! (a statement trigger in `sql/api/10_jobs.sql`, once per statement and queue). The reconnecting loop around it is
//! the worker's (`worker::listener`). The trigger notifies only queues some producer waits
//! on (`skiplock.waiting`): producers register with [`waiting_add`] before their last
//! empty claim and leave with [`waiting_remove`] while their claims come back full.
//!
//! The same connection listens on the settle channel ([`settle_channel`]): an enqueue whose
//! new dependency edges name jobs that had not finished sends their ids there, delivered once
//! it has committed, for a worker to settle them if they finished meanwhile
//! (`skiplock._add_dependencies` says why an ack may have missed them).

use sqlx::postgres::PgListener;

use super::{Executor, Pool, sql};
use crate::error::Result;

/// A connection listening for wake-ups and settle hints.
pub struct WakeListener {
    listener: PgListener,
    /// The settle channel's name (its notifications are settle hints).
    settle: String,
}

/// What a notification on a worker's channels says. A hint only: whoever knows a channel's
/// name may send one, so it never makes a worker start anything it would not do anyway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A job became due in this queue (the wake channel).
    Queue(String),
    /// These jobs got dependency edges from a transaction that has committed, and may have
    /// finished without settling them (the settle channel; `skiplock._add_dependencies`).
    Settle(Vec<i64>),
}

/// The most job ids one settle hint is read for (the SQL API sends at most 300 a notification).
pub const MAX_HINT_IDS: usize = 1000;

/// The job ids of a settle hint's payload (ids separated by spaces); anything else in it is
/// skipped, and at most [`MAX_HINT_IDS`] are read.
pub fn hint_ids(payload: &str) -> Vec<i64> {
    payload
        .split_ascii_whitespace()
        .filter_map(|t| t.parse::<i64>().ok())
        .filter(|id| *id > 0)
        .take(MAX_HINT_IDS)
        .collect()
}

impl WakeListener {
    /// Opens a connection from `pool`'s settings and listens on the wake and settle channels.
    pub async fn connect(pool: &Pool) -> Result<Self> {
        let wake = wake_channel(pool).await?;
        let settle = settle_channel(pool).await?;
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen_all([wake.as_str(), settle.as_str()]).await?;
        Ok(WakeListener { listener, settle })
    }

    /// The next notification; `Ok(None)` when the connection was lost (notifications may
    /// have been missed).
    pub async fn recv(&mut self) -> Result<Option<Heard>> {
        Ok(self.listener.try_recv().await?.map(|n| {
            if n.channel() == self.settle {
                Heard::Settle(hint_ids(n.payload()))
            } else {
                Heard::Queue(n.payload().to_string())
            }
        }))
    }
}

/// The channel wake-ups are sent on (`sql/queue/wake_channel.sql`), read at every (re)connect
/// so that a rotated name is picked up.
pub async fn wake_channel<'e, E: Executor<'e>>(exec: E) -> Result<String> {
    Ok(super::query_scalar(sql!("queue", "wake_channel"))
        .fetch_one(exec)
        .await?)
}

/// The channel settle hints are sent on (`sql/queue/settle_channel.sql`): the wake channel's
/// name with `_settle`, as secret.
pub async fn settle_channel<'e, E: Executor<'e>>(exec: E) -> Result<String> {
    Ok(super::query_scalar(sql!("queue", "settle_channel"))
        .fetch_one(exec)
        .await?)
}

/// Registers `worker` as waiting for jobs in `queue` (`""`: every queue), so that inserting
/// a due job there sends a NOTIFY (`sql/queue/waiting_add.sql`; writes nothing when already
/// registered).
pub async fn waiting_add<'e, E: Executor<'e>>(exec: E, worker: &str, queue: &str) -> Result<()> {
    super::query(sql!("queue", "waiting_add"))
        .bind(worker)
        .bind(queue)
        .execute(exec)
        .await?;
    Ok(())
}

/// `worker` no longer waits for jobs in `queue` (`sql/queue/waiting_remove.sql`).
pub async fn waiting_remove<'e, E: Executor<'e>>(exec: E, worker: &str, queue: &str) -> Result<()> {
    super::query(sql!("queue", "waiting_remove"))
        .bind(worker)
        .bind(queue)
        .execute(exec)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settle_hint_is_read_as_ids_and_anything_else_is_skipped() {
        assert_eq!(hint_ids("41 42 9000000000"), vec![41, 42, 9_000_000_000]);
        assert_eq!(hint_ids(" 7\t x -3 0 1.5 8 "), vec![7, 8]);
        assert!(hint_ids("").is_empty());
        let many = (1..=5000).map(|i| i.to_string()).collect::<Vec<_>>().join(" ");
        assert_eq!(hint_ids(&many).len(), MAX_HINT_IDS);
    }
}
