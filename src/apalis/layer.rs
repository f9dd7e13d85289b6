//! The tower layer a [`super::SkiplockStorage`] gives its apalis worker. apalis puts it
//! outside the user's middleware, so it sees each task's final result (after the user's
//! retries, timeouts and the like) and turns it into a skiplock ack: `Ok` completes, an
//! error retries with skiplock's backoff (discarded after `max_attempts`), an `AbortError`
//! discards at once, a panic is an error. It also stops a handler whose job was taken away,
//! and one still running `shutdown_grace` after apalis began shutting down (its job goes
//! back without using up the attempt).

use std::error::Error as StdError;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use apalis_core::error::{AbortError, BoxDynError};
use apalis_core::task::Task;
use futures::FutureExt;
use tower_layer::Layer;
use tower_service::Service;

use super::SkiplockJob;
use super::engine::Engine;
use crate::worker::outcome::{Attempt, JobError, Outcome};

/// Adds skiplock's acknowledgements to an apalis worker's service stack.
#[derive(Clone)]
pub struct SkiplockLayer {
    pub(crate) engine: Arc<Engine>,
}

impl std::fmt::Debug for SkiplockLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkiplockLayer")
            .field("worker", &self.engine.worker_id)
            .finish()
    }
}

impl<S> Layer<S> for SkiplockLayer {
    type Service = SkiplockService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        SkiplockService {
            inner,
            engine: self.engine.clone(),
        }
    }
}

/// The service [`SkiplockLayer`] wraps around the worker's stack.
#[derive(Clone)]
pub struct SkiplockService<S> {
    inner: S,
    engine: Arc<Engine>,
}

/// Whether `e`, or any error in its source chain, is apalis's [`AbortError`].
pub fn is_abort(e: &(dyn StdError + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.is::<AbortError>() {
            return true;
        }
        cur = c.source();
    }
    false
}

/// The message stored in `errors`: the error and its sources.
pub fn error_message(e: &(dyn StdError + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        // apalis's wrappers repeat their source in their own text; say it once.
        if !parts.last().is_some_and(|p| p.contains(&t)) {
            parts.push(t);
        }
        src = s.source();
    }
    parts.join(": ")
}

impl<S, Args> Service<Task<Args>> for SkiplockService<S>
where
    S: Service<Task<Args>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxDynError>,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxDynError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxDynError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, task: Task<Args>) -> Self::Future {
        let job = task.data().get::<SkiplockJob>().cloned();
        let engine = self.engine.clone();
        let fut = self.inner.call(task);
        Box::pin(async move {
            let Some(job) = job else {
                // Not one of ours (cannot happen with SkiplockStorage as the backend).
                return fut.await.map_err(Into::into);
            };
            let Some(lost) = engine.lost_token(job.id) else {
                return Err(format!("job {} is no longer held by this worker", job.id).into());
            };
            let grace = engine.opts.settings.shutdown_grace;
            let shutdown = engine.shutdown.clone();
            let cut = async move {
                shutdown.cancelled().await;
                tokio::time::sleep(grace).await;
            };
            enum End<T> {
                Ran(std::thread::Result<T>),
                Lost,
                Released,
            }
            let end = tokio::select! {
                biased;
                r = AssertUnwindSafe(fut).catch_unwind() => End::Ran(r),
                _ = lost.cancelled() => End::Lost,
                _ = cut => End::Released,
            };
            let ack =
                |result: Attempt| engine.decide(job.id, job.attempt, job.max_attempts, result);
            match end {
                End::Ran(Ok(Ok(resp))) => {
                    engine.ack(ack(Attempt::Returned(Ok(Outcome::Complete))));
                    Ok(resp)
                }
                End::Ran(Ok(Err(e))) => {
                    let e: BoxDynError = e.into();
                    let message = error_message(e.as_ref());
                    let err = if is_abort(e.as_ref()) {
                        JobError::discard(message)
                    } else {
                        JobError::retry(message)
                    };
                    engine.ack(ack(Attempt::Returned(Err(err))));
                    Err(e)
                }
                End::Ran(Err(panic)) => {
                    let msg = crate::worker::executor::panic_message(panic.as_ref());
                    engine.ack(ack(Attempt::Panicked(msg.clone())));
                    Err(format!("handler panicked: {msg}").into())
                }
                End::Lost => {
                    engine.forget(job.id);
                    Err(format!(
                        "job {} was taken away from this worker (cancelled or rescued); its handler was stopped",
                        job.id
                    )
                    .into())
                }
                End::Released => {
                    engine.ack(ack(Attempt::Released));
                    Err(format!(
                        "job {} was still running {} after shutdown began; put back without using up its attempt",
                        job.id,
                        humantime::format_duration(grace)
                    )
                    .into())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] AbortError);

    #[test]
    fn an_abort_is_found_anywhere_in_the_source_chain() {
        let plain: BoxDynError = "boom".into();
        assert!(!is_abort(plain.as_ref()));
        let abort: BoxDynError = Box::new(AbortError::new("bad input"));
        assert!(is_abort(abort.as_ref()));
        let wrapped: BoxDynError = Box::new(Outer(AbortError::new("deep")));
        assert!(is_abort(wrapped.as_ref()));
    }

    #[test]
    fn messages_carry_the_source_chain_once() {
        let abort: BoxDynError = Box::new(AbortError::new("bad input"));
        assert_eq!(error_message(abort.as_ref()), "AbortError: bad input");
        let wrapped: BoxDynError = Box::new(Outer(AbortError::new("deep")));
        assert_eq!(error_message(wrapped.as_ref()), "outer: AbortError: deep");
    }
}
