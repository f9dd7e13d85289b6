//! Handler failures as an operator reads them: the first failure of a kind is logged in full,
//! then, while that kind keeps failing, one summary line per [`WINDOW`] with how many more
//! failed and the latest error, instead of one WARN per job (a kind whose dependency is down
//! fails every job it claims, thousands a minute). What is left unsaid when the worker stops
//! is said then ([`FailureLog::drain`]). Each failure is still in the job's `errors`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long the failures of one kind after its first are summed into one line.
pub const WINDOW: Duration = Duration::from_secs(60);

/// What to log for one failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Say {
    /// Log this failure in full (the first of its kind in a window).
    Full,
    /// Log this failure in full, after one line for the failures of the window before it:
    /// how many, and the latest error.
    SummaryThenFull { more: u64, last_error: String },
    /// Nothing now: counted for the window's summary.
    Nothing,
}

#[derive(Debug)]
struct Kind {
    since: Instant,
    more: u64,
    last_error: String,
}

/// The failures of each kind in its current window.
#[derive(Debug, Default)]
pub struct FailureLog {
    kinds: HashMap<String, Kind>,
}

impl FailureLog {
    /// Records a failure of `kind` at `now` with `error`, and says what to log.
    pub fn record(&mut self, kind: &str, now: Instant, error: &str) -> Say {
        match self.kinds.get_mut(kind) {
            Some(k) if now.saturating_duration_since(k.since) < WINDOW => {
                k.more += 1;
                k.last_error.clear();
                k.last_error.push_str(error);
                Say::Nothing
            }
            Some(k) => {
                let said = std::mem::take(&mut k.last_error);
                let more = std::mem::take(&mut k.more);
                k.since = now;
                if more == 0 {
                    Say::Full
                } else {
                    Say::SummaryThenFull {
                        more,
                        last_error: said,
                    }
                }
            }
            None => {
                self.kinds.insert(
                    kind.to_string(),
                    Kind {
                        since: now,
                        more: 0,
                        last_error: String::new(),
                    },
                );
                Say::Full
            }
        }
    }

    /// The summaries not yet logged: (kind, how many more failed, the latest error), in kind
    /// order; forgets every kind.
    pub fn drain(&mut self) -> Vec<(String, u64, String)> {
        let mut out: Vec<_> = self
            .kinds
            .drain()
            .filter(|(_, k)| k.more > 0)
            .map(|(kind, k)| (kind, k.more, k.last_error))
            .collect();
        out.sort();
        out
    }
}

/// Logs the summary line of `more` failures of `kind` after its first.
pub fn summary(kind: &str, more: u64, last_error: &str) {
    tracing::warn!(job.kind = %kind, failures = more, last_error = %last_error,
        "{more} more job(s) of kind {kind} failed since its failure logged before (the latest error is last_error)");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_logged_then_a_summary_per_window() {
        let t0 = Instant::now();
        let mut log = FailureLog::default();
        assert_eq!(log.record("mail", t0, "e1"), Say::Full);
        assert_eq!(
            log.record("mail", t0 + Duration::from_secs(1), "e2"),
            Say::Nothing
        );
        assert_eq!(
            log.record("sms", t0 + Duration::from_secs(1), "x"),
            Say::Full
        );
        assert_eq!(
            log.record("mail", t0 + Duration::from_secs(2), "e3"),
            Say::Nothing
        );
        assert_eq!(
            log.record("mail", t0 + WINDOW, "e4"),
            Say::SummaryThenFull {
                more: 2,
                last_error: "e3".into()
            }
        );
        // A window with no failure after its first says nothing more.
        assert_eq!(log.record("mail", t0 + WINDOW * 2, "e5"), Say::Full);
        assert_eq!(log.record("mail", t0 + WINDOW * 2, "e6"), Say::Nothing);
        assert_eq!(log.drain(), vec![("mail".to_string(), 1, "e6".to_string())]);
        assert_eq!(log.drain(), vec![]);
        assert_eq!(log.record("mail", t0 + WINDOW * 2, "e7"), Say::Full);
    }
}
