//! The LISTEN side of wake-ups: a dedicated connection listening on
//! [`names::WAKE_CHANNEL`], which inserting a due job notifies (a statement trigger in
//! `sql/api/10_core.sql`, once per statement and queue). The reconnecting loop around it is
//! the worker's (`worker::listener`). The trigger notifies only queues some producer waits
//! on (`skiplock.waiting`): producers register with [`waiting_add`] before their last
//! empty claim and leave with [`waiting_remove`] while their claims come back full.

use sqlx::postgres::PgListener;

use super::{Executor, Pool, names, sql};
use crate::error::Result;

/// A connection listening for wake-ups.
pub struct WakeListener(PgListener);

impl WakeListener {
    /// Opens a connection from `pool`'s settings and listens on the wake channel.
    pub async fn connect(pool: &Pool) -> Result<Self> {
        let mut l = PgListener::connect_with(pool).await?;
        l.listen(names::WAKE_CHANNEL).await?;
        Ok(WakeListener(l))
    }

    /// The next notification's payload (a queue name, as a hint only); `Ok(None)` when the
    /// connection was lost (notifications may have been missed).
    pub async fn recv(&mut self) -> Result<Option<String>> {
        Ok(self.0.try_recv().await?.map(|n| n.payload().to_string()))
    }
}

/// Registers `worker` as waiting for jobs in `queue` (`""`: every queue), so that inserting
/// a due job there sends a NOTIFY (`sql/queue/waiting_add.sql`; writes nothing when already
/// registered).
pub async fn waiting_add<'e, E: Executor<'e>>(exec: E, worker: &str, queue: &str) -> Result<()> {
    sqlx::query(sql!("queue", "waiting_add"))
        .bind(worker)
        .bind(queue)
        .execute(exec)
        .await?;
    Ok(())
}

/// `worker` no longer waits for jobs in `queue` (`sql/queue/waiting_remove.sql`).
pub async fn waiting_remove<'e, E: Executor<'e>>(exec: E, worker: &str, queue: &str) -> Result<()> {
    sqlx::query(sql!("queue", "waiting_remove"))
        .bind(worker)
        .bind(queue)
        .execute(exec)
        .await?;
    Ok(())
}
