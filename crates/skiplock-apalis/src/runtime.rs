//! What runs behind a [`super::SkiplockStorage`] once its apalis worker starts: a native
//! skiplock [`Worker`] serving the storage's queue with the storage's concurrency, whose one
//! handler hands the storage's kind to apalis (src/handoff.rs). The claim loop, the
//! buffer, NOTIFY wake-ups, limits and pause, heartbeats, the rescuer, the fenced ack writer
//! and the graceful shutdown are the native worker's, not copies of them.
//!
//! apalis' "shutting down" is a state it only lets us poll; a watcher turns it into the
//! native worker's shutdown (stop claiming, the grace period, put back the rest).

use std::time::Duration;

use apalis_core::task::Task;
use apalis_core::worker::context::WorkerContext;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::handoff;
use skiplock::Pool;
use skiplock::config::{MAX_QUEUE_CONCURRENCY, QueueSettings};
use skiplock::error::{Error, Result};
use skiplock::worker::Worker;

/// How often the watcher looks at apalis' worker state.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// The storage's settings (see the builder methods of [`super::SkiplockStorage`]).
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub kind: String,
    pub queue: String,
    pub concurrency: usize,
    pub settings: QueueSettings,
    pub rescuer: bool,
}

impl Options {
    /// Checks what a builder call cannot refuse: empty names, a concurrency out of range,
    /// the queue settings' own ranges.
    pub fn validate(&self) -> Result<()> {
        if self.kind.trim().is_empty() {
            return Err(Error::Invalid(
                "apalis storage: the job kind is empty".into(),
            ));
        }
        if self.queue.trim().is_empty() {
            return Err(Error::Invalid(
                "apalis storage: the queue name is empty".into(),
            ));
        }
        if self.concurrency == 0 || self.concurrency > MAX_QUEUE_CONCURRENCY {
            return Err(Error::Invalid(format!(
                "apalis storage: concurrency must be between 1 and {MAX_QUEUE_CONCURRENCY}, got {}",
                self.concurrency
            )));
        }
        self.settings.validate()
    }

    /// The native worker for these options: this queue only, this kind only, the rescuer
    /// if asked, no other maintenance (the storage runs one kind; the reaper, retention and
    /// periodic jobs are a full worker's business).
    fn worker<Args: DeserializeOwned + Send + 'static>(
        &self,
        pool: Pool,
        stream: mpsc::UnboundedSender<Task<Args>>,
    ) -> Worker {
        let settings = QueueSettings {
            queues: None,
            ..self.settings.clone()
        };
        let mut b = Worker::builder(pool)
            .settings(settings)
            .queue(&self.queue, self.concurrency)
            .without_maintenance()
            .id_label("apalis");
        if !self.rescuer {
            b = b.without_rescuer();
        }
        b.registry_mut()
            .register_raw(self.kind.clone(), None, handoff::handler(stream));
        b.build()
    }
}

/// A started runtime, as the storage holds it.
pub(crate) struct Runtime {
    /// The native worker's id (`skiplock.workers`, `attempted_by`).
    pub worker_id: String,
    /// Asks for the shutdown (the storage closing or dropped).
    stop: CancellationToken,
    /// Cancelled once the shutdown began: the task stream ends.
    pub ending: CancellationToken,
    /// The shutdown's result, once it finished.
    closed: Option<oneshot::Receiver<Result<()>>>,
}

impl Runtime {
    /// Checks the options, starts the native worker (waiting out a database that is down,
    /// failing at once on an unmigrated one) and the task that shuts it down when apalis
    /// stops, the storage closes, or the schema moves under it. Returns the runtime and the
    /// stream of tasks for apalis.
    pub async fn start<Args: DeserializeOwned + Send + 'static>(
        pool: Pool,
        opts: Options,
        apalis: WorkerContext,
    ) -> Result<(Runtime, mpsc::UnboundedReceiver<Task<Args>>)> {
        opts.validate()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let worker = opts.worker(pool, tx);
        let worker_id = worker.id().to_string();
        let started = worker.start().await?;
        tracing::info!(worker = %worker_id, kind = %opts.kind, queue = %opts.queue,
            concurrency = opts.concurrency, "apalis storage started");
        let (stop, ending) = (CancellationToken::new(), CancellationToken::new());
        let (closed_tx, closed) = oneshot::channel();
        let (st, en) = (stop.clone(), ending.clone());
        tokio::spawn(async move {
            started.wait(stopping(apalis, st)).await;
            en.cancel();
            let _ = closed_tx.send(started.shutdown().await);
        });
        let runtime = Runtime {
            worker_id,
            stop,
            ending,
            closed: Some(closed),
        };
        Ok((runtime, rx))
    }

    /// Begins the shutdown if it has not begun (the runtime's task finishes it on its own:
    /// a storage dropped without closing still puts back what it held).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Shuts down; the future resolves at the end: claiming stopped, running tasks given
    /// the grace period, the rest put back without using up their attempt, the acks
    /// written and the worker's row removed.
    pub fn close(&mut self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.stop();
        let closed = self.closed.take();
        async move {
            match closed {
                Some(rx) => rx.await.unwrap_or_else(|_| {
                    Err(Error::Other(
                        "apalis storage: the runtime ended without shutting down".into(),
                    ))
                }),
                None => Ok(()),
            }
        }
    }
}

/// Resolves when apalis begins shutting down or `stop` is cancelled.
async fn stopping(apalis: WorkerContext, stop: CancellationToken) {
    while !apalis.is_shutting_down() {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(WATCH_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            kind: "k".into(),
            queue: "default".into(),
            concurrency: 10,
            settings: QueueSettings::default(),
            rescuer: true,
        }
    }

    #[test]
    fn options_refuse_empty_names_and_a_zero_or_huge_concurrency() {
        assert!(opts().validate().is_ok());
        let e = Options {
            kind: " ".into(),
            ..opts()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("kind is empty"), "{e}");
        let e = Options {
            queue: "".into(),
            ..opts()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("queue name is empty"), "{e}");
        let e = Options {
            concurrency: 0,
            ..opts()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("between 1 and"), "{e}");
        assert!(
            Options {
                concurrency: MAX_QUEUE_CONCURRENCY + 1,
                ..opts()
            }
            .validate()
            .is_err()
        );
    }
}
