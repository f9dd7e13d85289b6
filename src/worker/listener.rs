//! LISTEN/NOTIFY wake-ups. Inserting a due job sends a NOTIFY with its queue as the payload on
//! the wake-up channel (`skiplock._wake_channel()`, a name only skiplock's owner and worker
//! role can read; a statement trigger, once per statement and queue); a listener task turns that into a wake
//! signal for the queue's producer. The fallback poll covers anything missed. A payload is
//! only a hint: the worker never starts serving a queue because a notification named it.
//! Settle hints (the settle channel, `crate::store::notify::Heard::Settle`) become
//! [`Wake::Settle`]: the worker settles those jobs' new edges (`worker::hints`: one task, batched);
//! the maintenance's sweep covers anything missed.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::db::outage::{Availability, Backoff};
use crate::store::Pool;
use crate::store::notify::{Heard, WakeListener};

/// What the listener tells the worker.
#[derive(Debug, Clone)]
pub enum Wake {
    /// A notification arrived with this payload: a *hint* that a job became due in the queue
    /// it names. Any login may send one, so the worker never trusts it to create anything.
    Queue(String),
    /// A settle hint: these jobs got dependency edges from a transaction that has committed
    /// (a hint too: settling a job with nothing to settle costs a probe).
    Settle(Vec<i64>),
    /// The connection was (re-)established: notifications may have been missed.
    All,
    /// The connection was lost or could not be made (the database may be down).
    Lost,
}

/// First and longest wait between two reconnection attempts.
pub const RECONNECT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(5));

/// Listens on the wake-up channel ([`crate::store::notify::wake_channel`]) until `stop`, calling `on_wake` for every notification,
/// on `first` (a connection already listening) and then on connections of `pool`.
/// Survives database restarts: it reports [`Wake::Lost`], reconnects with a capped
/// backoff (cut short when `availability` announces the database is back) and reports
/// [`Wake::All`] once listening again.
pub async fn listen(
    pool: Pool,
    mut first: Option<WakeListener>,
    stop: CancellationToken,
    availability: &Availability,
    on_wake: impl Fn(Wake) + Send + Sync,
) {
    let mut backoff = Backoff::new(RECONNECT_BACKOFF.0, RECONNECT_BACKOFF.1);
    'outer: while !stop.is_cancelled() {
        let connected = match first.take() {
            Some(l) => Ok(l),
            None => WakeListener::connect(&pool).await,
        };
        let mut listener = match connected {
            Ok(l) => l,
            Err(e) => {
                on_wake(Wake::Lost);
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, "listener: cannot connect; retrying in {delay:?}");
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(delay) => {}
                    _ = availability.back() => {}
                }
                continue;
            }
        };
        backoff.reset();
        on_wake(Wake::All);
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => break 'outer,
                n = listener.recv() => n,
            };
            match next {
                Ok(Some(Heard::Queue(queue))) => on_wake(Wake::Queue(queue)),
                Ok(Some(Heard::Settle(ids))) => on_wake(Wake::Settle(ids)),
                Ok(None) => {
                    on_wake(Wake::Lost);
                    tracing::warn!("listener: connection lost; reconnecting");
                    continue 'outer;
                }
                Err(e) => {
                    on_wake(Wake::Lost);
                    let delay = backoff.next_delay();
                    tracing::warn!(error = %e, "listener: error; reconnecting in {delay:?}");
                    tokio::select! {
                        _ = stop.cancelled() => break 'outer,
                        _ = tokio::time::sleep(delay) => {}
                        _ = availability.back() => {}
                    }
                    continue 'outer;
                }
            }
        }
    }
}
