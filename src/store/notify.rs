//! The LISTEN side of wake-ups: a dedicated connection listening on the wake-up channel
//! ([`wake_channel`]: a name only the owner and the worker role can read, so other logins
//! learn no queue name; migrations/history/0015_wake_channel.sql), which inserting a due job notifies
//! (a statement trigger in `sql/api/10_core.sql`, once per statement and queue). The reconnecting loop around it is
//! the worker's (`worker::listener`). The trigger notifies only queues some producer waits
//! on (`skiplock.waiting`): producers register with [`waiting_add`] before their last
//! empty claim and leave with [`waiting_remove`] while their claims come back full.

use sqlx::postgres::PgListener;

use super::{Executor, Pool, sql};
use crate::error::Result;

/// A connection listening for wake-ups.
pub struct WakeListener(PgListener);

impl WakeListener {
    /// Opens a connection from `pool`'s settings and listens on the wake channel.
    pub async fn connect(pool: &Pool) -> Result<Self> {
        let channel = wake_channel(pool).await?;
        let mut l = PgListener::connect_with(pool).await?;
        l.listen(&channel).await?;
        Ok(WakeListener(l))
    }

    /// The next notification's payload (a queue name, as a hint only); `Ok(None)` when the
    /// connection was lost (notifications may have been missed).
    pub async fn recv(&mut self) -> Result<Option<String>> {
        Ok(self.0.try_recv().await?.map(|n| n.payload().to_string()))
    }
}

/// The channel wake-ups are sent on (`sql/queue/wake_channel.sql`), read at every (re)connect
/// so that a rotated name is picked up.
pub async fn wake_channel<'e, E: Executor<'e>>(exec: E) -> Result<String> {
    Ok(super::query_scalar(sql!("queue", "wake_channel"))
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
