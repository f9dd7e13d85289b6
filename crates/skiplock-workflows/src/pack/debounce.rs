//! The pack handler's decisions as plain functions, tested without a database: whether a
//! `do-the-packing` job packs or skips ([`skip_reason`]), and how long it waits for another
//! pack of its host ([`busy_snooze`]). When a reset makes the timer fire is the SQL API's
//! rule alone (`skiplock._pack_next_fire` in `sql/api/30_pack.sql`, checked in
//! `crates/skiplock-cli/tests/pack.rs`): plain-SQL callers get exactly what the worker gets.

use std::time::Duration;

use chrono::{DateTime, Utc};

fn plus(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    t + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::days(36500))
}

/// What the handler knows when a `do-the-packing` job starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PackStart {
    /// Database clock now.
    pub now: DateTime<Utc>,
    /// When this job's window began (its `created_at`).
    pub window_start: DateTime<Utc>,
    /// The host's other, pending timer (`scheduled_at`), if there is one.
    pub pending_at: Option<DateTime<Utc>>,
    /// Whether the job was asked for with "pack now" (never skipped).
    pub forced: bool,
}

/// Why a `do-the-packing` job should complete without packing, or `None` to pack.
///
/// A job that finds another timer pending for its host skips ("timer pending"): changes are
/// still arriving and that timer will pack them all. Two exceptions keep the guarantees: a
/// "pack now" always packs, and a job whose window is already `max_wait` old packs anyway
/// unless the pending timer is due now (a host reset forever is still packed in time).
pub fn skip_reason(s: &PackStart, max_wait: Duration) -> Option<&'static str> {
    let pending = s.pending_at?;
    if s.forced {
        return None;
    }
    let pending_due = pending <= s.now;
    let window_over = s.now >= plus(s.window_start, max_wait);
    if pending_due || !window_over {
        Some("timer pending")
    } else {
        None
    }
}

/// How long a pack waits before trying again when another process is packing the same host:
/// short enough to follow a quick pack closely, long enough not to spin on a slow one.
pub fn busy_snooze(quiet: Duration) -> Duration {
    quiet.clamp(Duration::from_millis(500), Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(s)
    }
    const MAX: Duration = Duration::from_secs(3600);

    fn start(now: i64, window: i64, pending: Option<i64>, forced: bool) -> PackStart {
        PackStart {
            now: t(now),
            window_start: t(window),
            pending_at: pending.map(t),
            forced,
        }
    }

    #[test]
    fn no_pending_timer_packs() {
        assert_eq!(skip_reason(&start(100, 0, None, false), MAX), None);
    }

    #[test]
    fn a_later_pending_timer_skips() {
        assert_eq!(
            skip_reason(&start(100, 0, Some(160), false), MAX),
            Some("timer pending")
        );
    }

    #[test]
    fn a_due_pending_timer_skips_even_past_the_max_wait() {
        assert_eq!(
            skip_reason(&start(5000, 0, Some(5000), false), MAX),
            Some("timer pending")
        );
    }

    #[test]
    fn past_the_max_wait_a_later_timer_does_not_stop_the_pack() {
        assert_eq!(skip_reason(&start(3600, 0, Some(3660), false), MAX), None);
    }

    #[test]
    fn pack_now_never_skips() {
        assert_eq!(skip_reason(&start(100, 0, Some(160), true), MAX), None);
    }

    #[test]
    fn busy_snooze_is_bounded() {
        assert_eq!(busy_snooze(Duration::from_secs(60)), Duration::from_secs(5));
        assert_eq!(
            busy_snooze(Duration::from_millis(1)),
            Duration::from_millis(500)
        );
        assert_eq!(busy_snooze(Duration::from_secs(2)), Duration::from_secs(2));
    }
}
