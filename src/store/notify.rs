//! The LISTEN side of wake-ups: a dedicated connection listening on
//! [`names::WAKE_CHANNEL`], which inserting a due job notifies (a statement trigger in
//! `sql/api/10_core.sql`, once per statement and queue). The reconnecting loop around it is
//! the worker's (`worker::listener`).

use sqlx::postgres::PgListener;

use super::{Pool, names};
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
