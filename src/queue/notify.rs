//! LISTEN/NOTIFY wake-ups. Inserting a due job sends `NOTIFY skiplock_wake, '<queue>'` (a
//! statement trigger, once per statement and queue); a listener task turns that into a wake
//! signal for the queue's producer. The fallback poll covers anything missed.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

/// The channel job inserts notify.
pub const WAKE_CHANNEL: &str = "skiplock_wake";

/// What the listener tells the worker.
#[derive(Debug, Clone)]
pub enum Wake {
    /// A job became due in this queue.
    Queue(String),
    /// The connection was lost and re-established: notifications may have been missed.
    All,
}

/// Listens on [`WAKE_CHANNEL`] until `stop`, calling `on_wake` for every notification.
/// Survives database restarts: it reconnects with backoff and reports [`Wake::All`].
pub async fn listen(pool: PgPool, stop: CancellationToken, on_wake: impl Fn(Wake) + Send + Sync) {
    let mut delay = Duration::from_millis(100);
    'outer: while !stop.is_cancelled() {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "listener: cannot connect; retrying in {delay:?}");
                tokio::select! { _ = stop.cancelled() => break, _ = tokio::time::sleep(delay) => {} }
                delay = (delay * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if let Err(e) = listener.listen(WAKE_CHANNEL).await {
            tracing::warn!(error = %e, "listener: LISTEN failed; retrying in {delay:?}");
            tokio::select! { _ = stop.cancelled() => break, _ = tokio::time::sleep(delay) => {} }
            delay = (delay * 2).min(Duration::from_secs(5));
            continue;
        }
        delay = Duration::from_millis(100);
        on_wake(Wake::All);
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => break 'outer,
                n = listener.try_recv() => n,
            };
            match next {
                Ok(Some(n)) => on_wake(Wake::Queue(n.payload().to_string())),
                Ok(None) => {
                    tracing::warn!("listener: connection lost; reconnecting");
                    continue 'outer;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "listener: error; reconnecting in {delay:?}");
                    tokio::select! { _ = stop.cancelled() => break 'outer, _ = tokio::time::sleep(delay) => {} }
                    continue 'outer;
                }
            }
        }
    }
}
