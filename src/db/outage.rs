//! Riding out database outages: which errors mean "the database is unavailable" (retry
//! later) rather than "this statement is wrong", a capped exponential backoff for every
//! retry loop, and the process-wide [`Availability`] clock the rescuer consults so that an
//! outage never makes live jobs look abandoned.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::Error;

/// SQLSTATEs that mean the server cannot serve us right now (retry later), not that the
/// statement is wrong: connection exceptions (class 08), shutdown and start-up (57P01-57P03),
/// too many connections (53300), a read-only server or session (25006: a standby after
/// failover, or `default_transaction_read_only`), a full disk (53100: no write can commit
/// until space returns), and statements stopped by skiplock's own `statement_timeout` /
/// `lock_timeout` (57014, 55P03). Each leaves heartbeats unwritten while their workers live,
/// so each stops the rescuer's clock (crates/skiplock-devtools/tests/outage.rs
/// `a_full_disk_stops_the_rescuers_clock_like_an_outage`).
pub fn unavailable_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "53300" | "53100" | "25006" | "57014" | "55P03"
        )
}

/// Refusals a connection pooler sends with a connection-exception SQLSTATE (PgBouncer: 08P01)
/// that waiting will not cure: a start-up parameter it does not accept, a database or user it
/// does not know. Matched on the pooler's text, as it gives no other sign.
pub const PERMANENT_REFUSALS: [&str; 3] = [
    "unsupported startup parameter",
    "no such database",
    "no such user",
];

/// Whether a server's error `message` (with SQLSTATE `code`) is one of the
/// [`PERMANENT_REFUSALS`].
pub fn permanent_refusal(code: &str, message: &str) -> bool {
    code == "08P01" && PERMANENT_REFUSALS.iter().any(|r| message.contains(r))
}

/// Whether a driver error means the database is unavailable (see [`unavailable_sqlstate`]):
/// I/O and TLS failures, a pool that could not hand out a connection in time, a broken
/// protocol stream, or one of those SQLSTATEs, except a pooler's [`permanent_refusal`].
pub fn sqlx_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| unavailable_sqlstate(&c) && !permanent_refusal(&c, d.message())),
        _ => false,
    }
}

/// Whether `e` means the database is unavailable (retry with backoff) rather than a
/// permanent problem (bad setting, missing schema, wrong password: stop and say so).
pub fn is_unavailable(e: &Error) -> bool {
    match e {
        Error::Database(d) => sqlx_unavailable(d),
        Error::Unavailable(_) => true,
        _ => false,
    }
}

/// Whether `e` is the server's answer to the statement itself (a constraint, a trigger, a
/// refusal, its statement or lock timeout) rather than the connection or the server's state
/// (class 08, shutdown and start-up, read-only, a pool timeout, and the server's resources:
/// class 53's insufficient resources, disk full, out of memory and too many connections, and
/// class 58's system and I/O errors): the same statement with fewer rows may succeed, where
/// waiting for the server cures the others. The ack writer splits a batch that keeps failing
/// so only on these; a full disk is an outage, whose acks wait whole (tests/hardening_sql.rs,
/// the_servers_own_trouble_is_never_blamed_on_the_statement).
pub fn statement_failed(e: &Error) -> bool {
    match e {
        Error::Refused { .. } => true,
        Error::Database(sqlx::Error::Database(d)) => d.code().is_none_or(|c| {
            !c.starts_with("08")
                && !c.starts_with("58")
                && !matches!(
                    &*c,
                    "57P01" | "57P02" | "57P03" | "53000" | "53100" | "53200" | "53300" | "25006"
                )
        }),
        _ => false,
    }
}

/// Whether `e` says the server is read-only (SQLSTATE 25006): connections opened before it
/// turned read-only must not be reused.
pub fn is_read_only(e: &Error) -> bool {
    match e {
        Error::Database(sqlx::Error::Database(d)) => d.code().as_deref() == Some("25006"),
        Error::Unavailable(m) => m.contains("read-only"),
        _ => false,
    }
}

/// A capped exponential backoff: `initial`, then doubling up to `cap`, until [`reset`].
/// Deterministic (no jitter) so tests can bound the attempts an outage may cause.
///
/// [`reset`]: Backoff::reset
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    /// A backoff starting at `initial` and never waiting longer than `cap`.
    pub fn new(initial: Duration, cap: Duration) -> Self {
        let cap = cap.max(initial);
        Backoff {
            initial,
            cap,
            next: initial,
        }
    }

    /// The delay before the next attempt; doubles the one after (up to the cap).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.cap);
        d
    }

    /// Back to the initial delay (after a success).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }

    /// The most attempts this schedule can make within `elapsed` (the first is immediate):
    /// a bound tests compare an outage's log lines against.
    pub fn max_attempts_within(&self, elapsed: Duration) -> u64 {
        let mut b = Backoff::new(self.initial, self.cap);
        let mut t = Duration::ZERO;
        let mut n = 1;
        loop {
            t += b.next_delay();
            if t > elapsed {
                return n;
            }
            n += 1;
        }
    }
}

/// The process's view of the database's availability, fed by every runtime task: a failed
/// statement that means "unavailable" ([`is_unavailable`]) stops the clock, the next
/// success restarts it. The rescuer rescues nothing until the clock shows a full rescue
/// window of continuous connection, so live workers' heartbeats (written first on
/// reconnect) always land before any job is judged abandoned after an outage.
#[derive(Debug)]
pub struct Availability {
    state: Mutex<ClockState>,
    /// Woken by every failure (a permit is kept when nobody waits, so none is missed).
    failed: tokio::sync::Notify,
    /// Woken when the database answers again after an outage ([`Availability::recovered`]).
    back: tokio::sync::Notify,
}

#[derive(Debug, Clone, Copy)]
struct ClockState {
    /// Since when the database has answered without an outage in between; `None` while
    /// the last word was a failure (or nothing succeeded yet).
    up_since: Option<Instant>,
    failures: u64,
}

impl Default for Availability {
    fn default() -> Self {
        Self::new()
    }
}

impl Availability {
    /// A clock that has seen no success yet (so it shows zero uptime).
    pub fn new() -> Self {
        Availability {
            state: Mutex::new(ClockState {
                up_since: None,
                failures: 0,
            }),
            failed: tokio::sync::Notify::new(),
            back: tokio::sync::Notify::new(),
        }
    }

    /// A statement succeeded (or a connection was made): starts the clock if it was stopped.
    pub fn success(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.up_since.is_none() {
            s.up_since = Some(Instant::now());
        }
    }

    /// The database was unavailable: stops the clock.
    pub fn failure(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.up_since = None;
        s.failures += 1;
        self.failed.notify_one();
    }

    /// Resolves at the next failure (or at once if one came since the last call).
    pub async fn next_failure(&self) {
        self.failed.notified().await
    }

    /// The database answers again after an outage (a probe found it, see
    /// `crate::db::hosts::follow`): starts the clock and wakes every task waiting out its
    /// retry backoff ([`Availability::back`]), so the queue resumes within a probe's
    /// interval of the database's return rather than at the end of each task's backoff.
    pub fn recovered(&self) {
        self.success();
        self.back.notify_waiters();
    }

    /// Resolves at the next [`Availability::recovered`]; a retry loop sleeps on this beside
    /// its backoff.
    pub async fn back(&self) {
        self.back.notified().await
    }

    /// Records `e` as a failure if it means "unavailable"; returns whether it did.
    pub fn observe(&self, e: &Error) -> bool {
        let unavailable = is_unavailable(e);
        if unavailable {
            self.failure();
        }
        unavailable
    }

    /// How long the database has been reachable without a failure in between.
    pub fn up_for(&self) -> Duration {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.up_since.map(|t| t.elapsed()).unwrap_or(Duration::ZERO)
    }

    /// Failures seen so far (for logs and tests).
    pub fn failures(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failures
    }
}

/// The rescuer's gate: rescue only after `up_for` of continuous connection covers a whole
/// `rescue_after` window. Before that a stale heartbeat may only mean that its (live)
/// worker could not reach the database either; its next heartbeat is on its way.
pub fn may_rescue(up_for: Duration, rescue_after: Duration) -> bool {
    up_for >= rescue_after
}

/// The time at which connections opened before it must be closed (the server turned
/// read-only under them). Checked by the pools' `before_acquire` hook without a round
/// trip: a connection whose age reaches back before the mark is dropped.
#[derive(Debug, Default)]
pub struct RecycleMark {
    at: Mutex<Option<Instant>>,
}

impl RecycleMark {
    /// No mark yet: every connection is accepted.
    pub const fn new() -> Self {
        RecycleMark {
            at: Mutex::new(None),
        }
    }

    /// Marks every connection open now as to be replaced.
    pub fn recycle_all(&self) {
        *self.at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Whether a connection of this age may be handed out.
    pub fn accepts(&self, age: Duration) -> bool {
        match *self.at.lock().unwrap_or_else(|p| p.into_inner()) {
            None => true,
            Some(mark) => accepts_age(age, mark.elapsed()),
        }
    }
}

/// A connection opened `age` ago survives a recycle mark set `since_mark` ago only if it
/// was opened after the mark.
pub fn accepts_age(age: Duration, since_mark: Duration) -> bool {
    age < since_mark
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poolers_refusals_that_waiting_cannot_cure_are_permanent() {
        for m in [
            "unsupported startup parameter: options",
            "no such database: jobs",
            "no such user: bob",
        ] {
            assert!(permanent_refusal("08P01", m), "{m}");
            // The same words with another SQLSTATE are the server's business, not a pooler's.
            assert!(!permanent_refusal("08006", m), "{m}");
        }
        // PgBouncer's passing troubles stay outages.
        for m in [
            "pgbouncer cannot connect to server",
            "query_wait_timeout",
            "server login has been failing, try again later (server_login_retry)",
        ] {
            assert!(!permanent_refusal("08P01", m), "{m}");
        }
    }

    #[test]
    fn outage_sqlstates_are_retried_and_statement_errors_are_not() {
        for code in [
            "08000", "08006", "08001", "57P01", "57P02", "57P03", "53300", "53100", "25006", "57014",
            "55P03",
        ] {
            assert!(unavailable_sqlstate(code), "{code}");
        }
        // Syntax, constraint, permission, bad password, missing database: permanent.
        for code in [
            "42601", "23505", "42501", "28P01", "3D000", "22023", "P0001",
        ] {
            assert!(!unavailable_sqlstate(code), "{code}");
        }
        assert!(sqlx_unavailable(&sqlx::Error::PoolTimedOut));
        assert!(sqlx_unavailable(&sqlx::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused
        ))));
        assert!(!sqlx_unavailable(&sqlx::Error::RowNotFound));
        assert!(!sqlx_unavailable(&sqlx::Error::PoolClosed));
        assert!(is_unavailable(&Error::Unavailable("read-only".into())));
        assert!(is_read_only(&Error::Unavailable(
            "the server is read-only".into()
        )));
        assert!(!is_unavailable(&Error::NotMigrated("x".into())));
        assert!(!is_unavailable(&Error::Other("x".into())));
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(500));
        let got: Vec<u128> = (0..5).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, vec![100, 200, 400, 500, 500]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
        // A cap below the start is raised to it.
        let mut b = Backoff::new(Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(b.next_delay(), Duration::from_secs(2));
        assert_eq!(b.next_delay(), Duration::from_secs(2));
    }

    #[test]
    fn attempts_within_a_window_are_bounded_by_the_schedule() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(b.max_attempts_within(Duration::ZERO), 1);
        // 0, 0.1, 0.3, 0.7, 1.5, 2.5, 3.5 s.
        assert_eq!(b.max_attempts_within(Duration::from_millis(3500)), 7);
        assert_eq!(b.max_attempts_within(Duration::from_millis(3499)), 6);
        // Linear once capped: an hour is about 3,600 attempts, not millions.
        let n = b.max_attempts_within(Duration::from_secs(3600));
        assert!((3590..3610).contains(&n), "{n}");
    }

    #[tokio::test]
    async fn a_recovery_starts_the_clock_and_wakes_every_task_waiting_out_a_backoff() {
        let a = std::sync::Arc::new(Availability::new());
        a.failure();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let a = a.clone();
                tokio::spawn(async move { a.back().await })
            })
            .collect();
        // Let the waiters start before the announcement (it wakes only those waiting).
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        a.recovered();
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(10), w)
                .await
                .expect("woken by the recovery")
                .unwrap();
        }
        assert!(a.up_for() < Duration::from_secs(10));
        assert!(a.state.lock().unwrap().up_since.is_some());
    }

    #[test]
    fn the_clock_stops_on_failure_and_restarts_on_the_next_success() {
        let a = Availability::new();
        assert_eq!(a.up_for(), Duration::ZERO, "nothing succeeded yet");
        a.success();
        std::thread::sleep(Duration::from_millis(20));
        let up = a.up_for();
        assert!(up >= Duration::from_millis(20), "{up:?}");
        a.success(); // a later success does not restart a running clock
        assert!(a.up_for() >= up);
        assert!(a.observe(&Error::Database(sqlx::Error::PoolTimedOut)));
        assert_eq!(a.up_for(), Duration::ZERO);
        assert!(!a.observe(&Error::Other("a bug, not an outage".into())));
        assert_eq!(a.failures(), 1);
        a.success();
        assert!(a.up_for() < up);
    }

    #[test]
    fn rescue_waits_for_a_full_window_of_connection() {
        let w = Duration::from_secs(60);
        assert!(!may_rescue(Duration::ZERO, w));
        assert!(!may_rescue(Duration::from_secs(59), w));
        assert!(may_rescue(Duration::from_secs(60), w));
    }

    #[test]
    fn a_recycle_mark_refuses_connections_opened_before_it() {
        assert!(accepts_age(Duration::from_secs(1), Duration::from_secs(2)));
        assert!(!accepts_age(Duration::from_secs(3), Duration::from_secs(2)));
        let m = RecycleMark::default();
        assert!(m.accepts(Duration::from_secs(3600)));
        m.recycle_all();
        assert!(!m.accepts(Duration::from_secs(1)));
        std::thread::sleep(Duration::from_millis(20));
        assert!(m.accepts(Duration::from_millis(1)));
    }
}
