//! The tower layer a [`super::SkiplockStorage`] gives its apalis worker. apalis puts it
//! outside the user's middleware, so it sees each task's final result (after the user's
//! retries, timeouts and the like) and reports it to the native worker that claimed the job
//! (src/handoff.rs): `Ok` completes, an error retries with skiplock's backoff
//! (discarded after `max_attempts`), an `AbortError` discards at once, a panic is an error.
//! When the native side stops waiting (the job was taken away, timed out, or still ran when
//! the shutdown grace ran out), it drops the user's future.

use std::error::Error as StdError;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use apalis_core::error::{AbortError, BoxDynError};
use apalis_core::task::Task;
use futures::FutureExt;
use tower_layer::Layer;
use tower_service::Service;

use super::SkiplockJob;
use super::handoff::{Ended, Handoff};
use skiplock::worker::{JobError, Outcome};

/// Reports each task's result to skiplock's worker.
#[derive(Clone, Debug, Default)]
pub struct SkiplockLayer {
    _private: (),
}

impl<S> Layer<S> for SkiplockLayer {
    type Service = SkiplockService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        SkiplockService { inner }
    }
}

/// The service [`SkiplockLayer`] wraps around the worker's stack.
#[derive(Clone, Debug)]
pub struct SkiplockService<S> {
    inner: S,
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
        let handoff = task.data().get::<Handoff>().cloned();
        let id = task.data().get::<SkiplockJob>().map(|j| j.id);
        let fut = self.inner.call(task);
        Box::pin(async move {
            let (Some(handoff), Some(id)) = (handoff, id) else {
                // Not one of ours (cannot happen with SkiplockStorage as the backend).
                return fut.await.map_err(Into::into);
            };
            let Some(mut report) = handoff.start() else {
                return Err(format!(
                    "job {id} went back to the queue before apalis started it; not run"
                )
                .into());
            };
            let end = tokio::select! {
                biased;
                r = AssertUnwindSafe(fut).catch_unwind() => r,
                _ = report.closed() => {
                    return Err(format!(
                        "job {id} is no longer this worker's (cancelled, rescued, timed out, or \
                         put back at shutdown); its handler was stopped"
                    )
                    .into());
                }
            };
            match end {
                Ok(Ok(resp)) => {
                    let _ = report.send(Ended::Returned(Ok(Outcome::Complete)));
                    Ok(resp)
                }
                Ok(Err(e)) => {
                    let e: BoxDynError = e.into();
                    let message = error_message(e.as_ref());
                    let err = if is_abort(e.as_ref()) {
                        JobError::discard(message)
                    } else {
                        JobError::retry(message)
                    };
                    let _ = report.send(Ended::Returned(Err(err)));
                    Err(e)
                }
                Err(panic) => {
                    let msg = skiplock::worker::panic_message(panic.as_ref());
                    let _ = report.send(Ended::Panicked(msg.clone()));
                    Err(format!("handler panicked: {msg}").into())
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
