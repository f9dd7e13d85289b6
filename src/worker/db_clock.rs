//! The database's clock as this process reads it between statements: when a handler starts,
//! the worker records the start on this clock, so `attempted_at` (written by the heartbeat
//! and the ack, `skiplock._heartbeat` / `skiplock._ack`) is comparable with the times the
//! database writes itself (`scheduled_at`, `finalized_at`, other workers' starts) whatever
//! this host's own clock says. Each claim's answer carries the database's `now()`; a reading
//! is that clock plus the time elapsed here since the answer came back, and never earlier than
//! the previous reading, so jobs started one after the other on this worker keep their order
//! (docs/internals.md, "When a job started").

use std::sync::Mutex;
use std::time::Instant;

use chrono::{DateTime, Utc};

/// The latest anchor (the database's clock at a claim, and when its answer came back) and the
/// last reading.
#[derive(Debug, Default)]
pub(crate) struct DbClock {
    state: Mutex<State>,
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    anchor: Option<(DateTime<Utc>, Instant)>,
    last: Option<DateTime<Utc>>,
}

impl DbClock {
    /// A claim answered at `at` with the database's clock `db_now`.
    pub fn observe(&self, db_now: DateTime<Utc>, at: Instant) {
        self.lock().anchor = Some((db_now, at));
    }

    /// Now on the database's clock, as well as this process can tell.
    pub fn now(&self) -> DateTime<Utc> {
        let mut s = self.lock();
        let t = reading(s.anchor, Instant::now(), Utc::now(), s.last);
        s.last = Some(t);
        t
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock holds plain values that are still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The reading at `at`: the anchor's clock plus the time since it (this host's clock `local`
/// before any anchor), at least one microsecond after `last` (timestamptz's resolution).
fn reading(
    anchor: Option<(DateTime<Utc>, Instant)>,
    at: Instant,
    local: DateTime<Utc>,
    last: Option<DateTime<Utc>>,
) -> DateTime<Utc> {
    let t = match anchor {
        Some((db, seen)) => chrono::Duration::from_std(at.saturating_duration_since(seen))
            .ok()
            .and_then(|d| db.checked_add_signed(d))
            .unwrap_or(db),
        None => local,
    };
    match last {
        Some(l) if t <= l => l + chrono::Duration::microseconds(1),
        _ => t,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_reading_is_the_database_clock_plus_the_time_since_and_never_goes_back() {
        let db: DateTime<Utc> = "2026-12-04T10:00:00Z".parse().unwrap();
        let local: DateTime<Utc> = "2026-12-04T09:59:30Z".parse().unwrap(); // 30 s behind
        let seen = Instant::now();
        let at = seen + Duration::from_millis(250);
        assert_eq!(
            reading(Some((db, seen)), at, local, None),
            db + chrono::Duration::milliseconds(250)
        );
        // Without an anchor, this host's clock.
        assert_eq!(reading(None, at, local, None), local);
        // A later anchor that reads earlier than the last reading (the claim's answer came back
        // slowly) does not move the clock back: one microsecond after the last reading.
        let last = db + chrono::Duration::milliseconds(300);
        assert_eq!(
            reading(Some((db, seen)), at, local, Some(last)),
            last + chrono::Duration::microseconds(1)
        );
        assert!(reading(Some((db, seen)), at, local, Some(db)) > db);
    }

    #[test]
    fn readings_in_a_row_are_strictly_increasing() {
        let c = DbClock::default();
        c.observe(Utc::now(), Instant::now());
        let mut prev = c.now();
        for _ in 0..1000 {
            let t = c.now();
            assert!(t > prev);
            prev = t;
        }
    }
}
