//! What a handler returns, and the pure decision that turns an attempt's result into the
//! job's next state (an [`Ack`]).

use std::borrow::Cow;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::queue::JobState;
use crate::queue::backoff::backoff;
use crate::store::ack::Ack;

/// A successful handler's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Done.
    Complete,
    /// Done, with a result to store in the row (e.g. why no work was needed).
    CompleteWith(Value),
    /// Run again after this long, without using up an attempt.
    Snooze(Duration),
    /// Stop for good, with a reason; the job becomes `cancelled`.
    Cancel(String),
    /// Run again after this long, without using up an attempt, and hold the job's whole
    /// `limit_key` as long, for every worker: the remote said "slow down" (HTTP 429 with a
    /// Retry-After). The key's waiting jobs are moved to the end of the hold and jobs of the
    /// key enqueued meanwhile wait for it (`skiplock.hold_key`); jobs already claimed are not
    /// stopped. A job without a limit key is snoozed alone.
    SnoozeKey(Duration),
}

/// A handler's failure. Retryable errors run again after a backoff until `max_attempts`;
/// a discard ends the job at once (retrying could not help, e.g. bad args).
#[derive(Debug, Clone, PartialEq)]
pub struct JobError {
    /// Human-readable message, stored in the job's `errors`.
    pub message: String,
    /// Whether another attempt may succeed.
    pub retryable: bool,
}

impl JobError {
    /// A retryable error.
    pub fn retry(message: impl Into<String>) -> Self {
        JobError {
            message: message.into(),
            retryable: true,
        }
    }
    /// An error that discards the job without further attempts.
    pub fn discard(message: impl Into<String>) -> Self {
        JobError {
            message: message.into(),
            retryable: false,
        }
    }
}

/// Any error that displays is a retryable [`JobError`] (its alternate form, `{:#}`, which
/// includes the chain of causes for `anyhow::Error`): `?` works in a handler on
/// `std::io::Error`, `sqlx::Error`, `anyhow::Error`, `Box<dyn Error>`, a `String`, … For a
/// discard, return [`JobError::discard`]. (`JobError` itself does not implement `Display`, so
/// that this conversion can cover every type that does.)
impl<E: std::fmt::Display> From<E> for JobError {
    fn from(e: E) -> Self {
        JobError::retry(format!("{e:#}"))
    }
}

/// What a handler returns.
pub type HandlerResult = Result<Outcome, JobError>;

/// What a handler function may return: nothing (the job completed), an [`Outcome`], or a
/// `Result` of either with any error that displays (`anyhow::Result<()>`, `Result<(),
/// sqlx::Error>`, `Result<Outcome, JobError>`, …): an error is retried with a backoff, and a
/// [`JobError::discard`] ends the job at once.
pub trait IntoJobResult {
    /// This value as the handler's verdict.
    fn into_job_result(self) -> HandlerResult;
}

/// A successful handler's value: nothing (completed) or an [`Outcome`].
pub trait IntoOutcome {
    /// This value as an outcome.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Outcome::Complete
    }
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl IntoJobResult for () {
    fn into_job_result(self) -> HandlerResult {
        Ok(Outcome::Complete)
    }
}

impl IntoJobResult for Outcome {
    fn into_job_result(self) -> HandlerResult {
        Ok(self)
    }
}

impl<T: IntoOutcome, E: Into<JobError>> IntoJobResult for Result<T, E> {
    fn into_job_result(self) -> HandlerResult {
        self.map(IntoOutcome::into_outcome).map_err(Into::into)
    }
}

/// How an attempt ended, as seen by the executor.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// The handler returned.
    Returned(HandlerResult),
    /// The handler panicked (message).
    Panicked(String),
    /// The handler ran past its timeout.
    TimedOut(Duration),
    /// The job's kind has no handler here (should not happen: workers claim known kinds).
    NoHandler,
    /// The worker is shutting down and stopped the handler: put the job back untouched.
    Released,
    /// The handler ended its attempt with a durable sleep or wait (docs/steps.md): the job is
    /// due again at this time, its attempt given back.
    Suspended(DateTime<Utc>),
}

/// The most bytes of an error message stored in a job's `errors` and written in the worker's
/// log line, per attempt (docs/reliability.md, "Errors"): a handler's error can hold anything
/// a job's args or a remote answer put in it, and without a cap one enqueue of a huge message
/// is stored and logged whole on every attempt.
pub const MAX_ERROR_BYTES: usize = 8 * 1024;

/// `message` cut to at most [`MAX_ERROR_BYTES`] bytes, on a UTF-8 character boundary, ending
/// with a marker that says how many bytes were cut; unchanged when it fits. The one place
/// errors are capped: the ack ([`decide`]) and the log line (the executor's attempt) use it.
pub fn cap_error(message: &str) -> Cow<'_, str> {
    if message.len() <= MAX_ERROR_BYTES {
        return Cow::Borrowed(message);
    }
    let marker =
        |cut: usize| format!(" … [{cut} bytes cut: errors are capped at {MAX_ERROR_BYTES} bytes]");
    // The marker for the whole length is at least as long as the one for any cut.
    let mut keep = MAX_ERROR_BYTES - marker(message.len()).len();
    while !message.is_char_boundary(keep) {
        keep -= 1;
    }
    Cow::Owned(format!(
        "{}{}",
        &message[..keep],
        marker(message.len() - keep)
    ))
}

/// [`cap_error`] of an owned message (no copy when it fits).
pub fn cap_error_owned(message: String) -> String {
    match cap_error(&message) {
        Cow::Borrowed(_) => message,
        Cow::Owned(capped) => capped,
    }
}

/// The retry policy of a worker.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Backoff unit (attempt⁴ × unit).
    pub unit: Duration,
    /// Backoff cap.
    pub max: Duration,
}

fn after(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    // Capped at 100 years: `now + d` panics past chrono's range (e.g. Snooze(Duration::MAX));
    // and never outside the range the database stores (crate::time), whatever `now` is.
    let cap = chrono::Duration::days(36500);
    let d = chrono::Duration::from_std(d).unwrap_or(cap).min(cap);
    crate::time::clamp(
        now.checked_add_signed(d)
            .unwrap_or_else(crate::time::latest),
    )
}

/// Decides the next state of job `id` after attempt `attempt` of `max_attempts`.
/// `jitter` in `[0, 1)` spreads retries (see [`backoff`]).
pub fn decide(
    id: i64,
    attempt: i32,
    max_attempts: i32,
    result: Attempt,
    now: DateTime<Utc>,
    policy: RetryPolicy,
    jitter: f64,
) -> Ack {
    let base = Ack {
        id,
        attempt,
        state: JobState::Completed,
        scheduled_at: None,
        give_back: false,
        error: None,
        result: None,
        started_at: None,
    };
    let fail = |message: String, retryable: bool| {
        let message = cap_error_owned(message);
        if retryable && attempt < max_attempts {
            Ack {
                state: JobState::Available,
                scheduled_at: Some(after(
                    now,
                    backoff(attempt, policy.unit, policy.max, jitter),
                )),
                error: Some(message),
                ..base.clone()
            }
        } else {
            Ack {
                state: JobState::Discarded,
                error: Some(message),
                ..base.clone()
            }
        }
    };
    match result {
        Attempt::Returned(Ok(Outcome::Complete)) => base,
        Attempt::Returned(Ok(Outcome::CompleteWith(v))) => Ack {
            result: Some(v),
            ..base
        },
        Attempt::Returned(Ok(Outcome::Snooze(d) | Outcome::SnoozeKey(d))) => Ack {
            state: JobState::Available,
            scheduled_at: Some(after(now, d)),
            give_back: true,
            ..base
        },
        Attempt::Returned(Ok(Outcome::Cancel(reason))) => Ack {
            state: JobState::Cancelled,
            error: Some(cap_error_owned(format!("cancelled by handler: {reason}"))),
            ..base
        },
        Attempt::Returned(Err(e)) => fail(e.message, e.retryable),
        Attempt::Panicked(msg) => fail(format!("handler panicked: {msg}"), true),
        Attempt::TimedOut(d) => fail(
            format!("timed out after {}", humantime::format_duration(d)),
            true,
        ),
        Attempt::NoHandler => fail("no handler for this kind on this worker".into(), true),
        Attempt::Released => Ack {
            state: JobState::Available,
            scheduled_at: Some(now),
            give_back: true,
            ..base
        },
        Attempt::Suspended(until) => Ack {
            state: JobState::Available,
            scheduled_at: Some(crate::time::clamp(until)),
            give_back: true,
            ..base
        },
    }
}

/// The text of a panic payload.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_capped_on_a_char_boundary_with_a_marker_of_what_was_cut() {
        assert_eq!(cap_error("short"), "short");
        let fits = "x".repeat(MAX_ERROR_BYTES);
        assert!(matches!(cap_error(&fits), Cow::Borrowed(_)));
        for (unit, n) in [
            ("x", 520_000),
            ("é", 300_000),
            ("日本", 100_000),
            ("🦀", 2049),
        ] {
            let m = unit.repeat(n);
            let c = cap_error(&m);
            assert!(c.len() <= MAX_ERROR_BYTES, "{unit}: {}", c.len());
            assert!(c.len() > MAX_ERROR_BYTES - 100, "{unit}: {}", c.len());
            let (kept, marker) = c.split_once(" … [").unwrap();
            assert!(m.starts_with(kept), "{unit}");
            let cut = m.len() - kept.len();
            assert_eq!(
                marker,
                format!("{cut} bytes cut: errors are capped at {MAX_ERROR_BYTES} bytes]"),
                "{unit}"
            );
        }
        // Through the ack: a failure, a panic and a handler's cancel reason.
        let huge = "e".repeat(520_000);
        for result in [
            Attempt::Returned(Err(JobError::retry(huge.clone()))),
            Attempt::Returned(Err(JobError::discard(huge.clone()))),
            Attempt::Panicked(huge.clone()),
            Attempt::Returned(Ok(Outcome::Cancel(huge.clone()))),
        ] {
            let a = decide(1, 1, 3, result, Utc::now(), P, 0.5);
            let e = a.error.unwrap();
            assert!(
                e.len() <= MAX_ERROR_BYTES && e.contains("bytes cut"),
                "{}",
                e.len()
            );
        }
    }

    #[test]
    fn a_huge_delay_is_capped_instead_of_overflowing() {
        let now = Utc::now();
        assert_eq!(
            after(now, Duration::MAX),
            now + chrono::Duration::days(36500)
        );
        assert_eq!(
            after(now, Duration::from_secs(3600 * 24 * 365 * 1_000_000)),
            now + chrono::Duration::days(36500)
        );
        assert_eq!(
            after(now, Duration::from_secs(5)),
            now + chrono::Duration::seconds(5)
        );
    }

    #[test]
    fn snooze_and_backoff_never_leave_the_stored_range() {
        // A clock near the end of year 9999 (or past it) still yields a time the database
        // accepts (crate::time), never an overflow or a CHECK violation in the ack.
        let late = crate::time::latest() - chrono::Duration::seconds(1);
        assert_eq!(
            after(late, Duration::from_secs(3600)),
            crate::time::latest()
        );
        assert_eq!(
            after(DateTime::<Utc>::MAX_UTC, Duration::MAX),
            crate::time::latest()
        );
        let a = decide(
            1,
            1,
            25,
            Attempt::Returned(Err(JobError::retry("x"))),
            late,
            P,
            0.5,
        );
        assert!(crate::time::in_range(a.scheduled_at.unwrap()));
    }
    use chrono::TimeZone;

    const P: RetryPolicy = RetryPolicy {
        unit: Duration::from_secs(1),
        max: Duration::from_secs(86400),
    };

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
    }

    #[test]
    fn success_completes() {
        let a = decide(
            7,
            1,
            25,
            Attempt::Returned(Ok(Outcome::Complete)),
            now(),
            P,
            0.5,
        );
        assert_eq!(a.state, JobState::Completed);
        assert_eq!((a.id, a.attempt, a.give_back), (7, 1, false));
        let v = serde_json::json!({"skipped": "x"});
        let a = decide(
            7,
            1,
            25,
            Attempt::Returned(Ok(Outcome::CompleteWith(v.clone()))),
            now(),
            P,
            0.5,
        );
        assert_eq!(a.result, Some(v));
    }

    #[test]
    fn retryable_error_backs_off_until_attempts_run_out() {
        let a = decide(
            1,
            2,
            3,
            Attempt::Returned(Err(JobError::retry("boom"))),
            now(),
            P,
            0.5,
        );
        assert_eq!(a.state, JobState::Available);
        assert_eq!(a.scheduled_at, Some(now() + chrono::Duration::seconds(16)));
        assert_eq!(a.error.as_deref(), Some("boom"));
        let a = decide(
            1,
            3,
            3,
            Attempt::Returned(Err(JobError::retry("boom"))),
            now(),
            P,
            0.5,
        );
        assert_eq!(a.state, JobState::Discarded);
        assert_eq!(a.error.as_deref(), Some("boom"));
    }

    #[test]
    fn discard_error_ends_at_once() {
        let a = decide(
            1,
            1,
            25,
            Attempt::Returned(Err(JobError::discard("bad args"))),
            now(),
            P,
            0.5,
        );
        assert_eq!(a.state, JobState::Discarded);
    }

    #[test]
    fn snooze_gives_the_attempt_back() {
        let a = decide(
            1,
            4,
            25,
            Attempt::Returned(Ok(Outcome::Snooze(Duration::from_secs(5)))),
            now(),
            P,
            0.5,
        );
        assert_eq!(a.state, JobState::Available);
        assert!(a.give_back);
        assert_eq!(a.scheduled_at, Some(now() + chrono::Duration::seconds(5)));
        assert_eq!(a.error, None);
    }

    #[test]
    fn cancel_panic_timeout_and_release() {
        let a = decide(
            1,
            1,
            25,
            Attempt::Returned(Ok(Outcome::Cancel("no".into()))),
            now(),
            P,
            0.5,
        );
        assert_eq!(a.state, JobState::Cancelled);
        let a = decide(1, 1, 25, Attempt::Panicked("oops".into()), now(), P, 0.5);
        assert_eq!(a.state, JobState::Available);
        assert!(a.error.unwrap().contains("panicked: oops"));
        let a = decide(
            1,
            1,
            1,
            Attempt::TimedOut(Duration::from_secs(2)),
            now(),
            P,
            0.5,
        );
        assert_eq!(a.state, JobState::Discarded);
        assert!(a.error.unwrap().contains("timed out after 2s"));
        let a = decide(1, 1, 1, Attempt::Released, now(), P, 0.5);
        assert_eq!(a.state, JobState::Available);
        assert!(a.give_back);
        assert_eq!(a.error, None);
    }

    #[test]
    fn errors_convert_with_their_sources() {
        let e: JobError = std::io::Error::other("disk full").into();
        assert!(e.retryable);
        assert_eq!(e.message, "disk full");
    }
}
