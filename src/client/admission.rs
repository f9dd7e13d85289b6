//! Admission control from the producer's side (docs/operations.md, "Admission control"): a
//! queue with a limit on waiting jobs (`skiplock.set_queue_admission`) refuses an enqueue
//! that would pass it with SQLSTATE [`QUEUE_FULL`], as [`crate::Error::Refused`], and nothing
//! of the statement is enqueued. [`OnFull`] says what the caller does then: return the
//! refusal, or [`with_room`]: try again with backoff until the queue has room or the time is
//! up, then return the refusal.

use std::future::Future;
use std::time::Duration;

use crate::db::outage::Backoff;
use crate::error::{Error, Result};

/// The SQLSTATE of an enqueue refused because its queue is full (docs/errors.md).
pub const QUEUE_FULL: &str = "SK429";

/// The first wait of [`with_room`]; each next one doubles, up to [`MAX_DELAY`].
pub const FIRST_DELAY: Duration = Duration::from_millis(20);
/// The longest single wait of [`with_room`].
pub const MAX_DELAY: Duration = Duration::from_secs(1);

/// What an enqueue into a full queue does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFull {
    /// Return the refusal at once.
    #[default]
    Refuse,
    /// Try again with backoff for at most this long, then return the refusal.
    Wait(Duration),
}

/// Whether `e` is an enqueue refused because its queue is full.
pub fn is_queue_full(e: &Error) -> bool {
    matches!(e, Error::Refused { sqlstate, .. } if sqlstate == QUEUE_FULL)
}

/// Runs `enqueue` (any enqueue: one job, [`crate::enqueue_many`], a typed job) as `on_full`
/// says: with [`OnFull::Wait`], a refusal for a full queue is retried after waits of
/// [`FIRST_DELAY`] doubling to [`MAX_DELAY`] (never past the deadline) until it succeeds or
/// the time is up; then the last refusal is returned. Any other error returns at once.
pub async fn with_room<T, F, Fut>(on_full: OnFull, mut enqueue: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let OnFull::Wait(limit) = on_full else {
        return enqueue().await;
    };
    let deadline = tokio::time::Instant::now() + limit;
    let mut backoff = Backoff::new(FIRST_DELAY, MAX_DELAY);
    loop {
        match enqueue().await {
            Err(e) if is_queue_full(&e) => {
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Err(e);
                }
                let jitter = 0.5 + rand::random::<f64>() / 2.0;
                let delay = backoff.next_delay().mul_f64(jitter).min(deadline - now);
                tokio::time::sleep(delay).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn full() -> Error {
        Error::Refused {
            sqlstate: QUEUE_FULL.into(),
            message: "skiplock: queue 'q' is full".into(),
        }
    }

    #[tokio::test]
    async fn refuse_returns_the_first_refusal() {
        let calls = AtomicU32::new(0);
        let r: Result<()> = with_room(OnFull::Refuse, || async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err(full())
        })
        .await;
        assert!(is_queue_full(&r.unwrap_err()));
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn wait_retries_until_there_is_room() {
        let calls = AtomicU32::new(0);
        let r = with_room(OnFull::Wait(Duration::from_secs(10)), || async {
            if calls.fetch_add(1, Ordering::Relaxed) < 3 {
                Err(full())
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(r.unwrap(), 7);
        assert_eq!(calls.load(Ordering::Relaxed), 4);
    }

    #[tokio::test]
    async fn wait_gives_up_at_the_deadline_with_the_refusal() {
        let start = tokio::time::Instant::now();
        let calls = AtomicU32::new(0);
        let r: Result<()> = with_room(OnFull::Wait(Duration::from_millis(300)), || async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err(full())
        })
        .await;
        assert!(is_queue_full(&r.unwrap_err()));
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert!(calls.load(Ordering::Relaxed) >= 2);
    }

    #[tokio::test]
    async fn other_errors_return_at_once() {
        let calls = AtomicU32::new(0);
        let r: Result<()> = with_room(OnFull::Wait(Duration::from_secs(10)), || async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err(Error::Refused {
                sqlstate: "22023".into(),
                message: "skiplock: bad".into(),
            })
        })
        .await;
        assert!(!is_queue_full(&r.unwrap_err()));
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }
}
