//! When and how much a producer's claim loop claims ([`super::run`]): pure functions of its
//! state (free slots, the buffer, the claims in flight, what the last answer said), kept apart
//! from the loop so each decision is tested alone.

use std::time::Duration;

/// What the producer does about claiming, given its state (see [`next_claim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimNow {
    /// Claim this many jobs now.
    Now(usize),
    /// Claim once the cooldown since the last claim has passed.
    AfterCooldown,
    /// Nothing to claim for: wait for a slot to free (or a wake-up).
    Wait,
}

/// Whether and how much to claim. `free`: free slots (after starting buffered jobs, so
/// `free > 0` means the buffer is empty); `buffered`: jobs claimed ahead; `asked`: jobs the
/// claims in flight asked for; `ahead`: the buffer's bound ([`claim_ahead`]); `one_at_a_time`: after a failure; `cooled_down`: the fetch
/// cooldown since the last claim was sent or came back has passed.
///
/// Without a buffer (`ahead == 0`: claim-ahead off, a key's limits, a binding queue limit; or
/// claiming one at a time) a claim asks for free slots no claim in flight asked for. A busy
/// queue waits for the cooldown so a claim takes every slot freed meanwhile, unless half the
/// slots are free already: then it claims at once, also beside a claim in flight, so that
/// with short jobs one claim runs while the jobs of the other do (a limited queue's claims
/// wait for each other on its row, so the database always has the next one). With a buffer,
/// it is refilled while the slots are busy once at least half of it has been used, so every
/// claim takes a batch of at least `ahead / 2` and one is in flight before the buffer runs
/// dry.
pub fn next_claim(
    free: usize,
    buffered: usize,
    asked: usize,
    limit: usize,
    ahead: usize,
    one_at_a_time: bool,
    cooled_down: bool,
) -> ClaimNow {
    if one_at_a_time || ahead == 0 {
        let unasked = free.saturating_sub(asked);
        let want = if one_at_a_time {
            unasked.min(1)
        } else {
            unasked
        };
        if want == 0 || buffered > 0 {
            return ClaimNow::Wait;
        }
        let half_free = !one_at_a_time && want * 2 >= limit;
        return if half_free || (asked == 0 && (free >= limit || cooled_down)) {
            ClaimNow::Now(want)
        } else if asked == 0 {
            ClaimNow::AfterCooldown
        } else {
            ClaimNow::Wait
        };
    }
    let want = (free + ahead).saturating_sub(buffered + asked);
    if want > 0 && want >= ahead.div_ceil(2) {
        ClaimNow::Now(want)
    } else {
        ClaimNow::Wait
    }
}


/// The most jobs the next claim may ask for (None: no bound of this kind), after a claim that
/// asked for `asked` jobs: `refused`, the server refused the statement itself
/// ([`crate::db::outage::statement_failed`]: a row that fails it, a statement timeout), or
/// answered. A claim the server keeps refusing asks for half as many each time, down to one,
/// so a statement too expensive at its size gets through at a smaller one; each answer
/// doubles the bound back until it reaches `full` (the most a claim asks for) and goes.
pub fn next_claim_cap(cap: Option<usize>, asked: usize, refused: bool, full: usize) -> Option<usize> {
    if refused {
        Some((cap.unwrap_or(asked).min(asked.max(1)) / 2).max(1))
    } else {
        cap.map(|c| c.saturating_mul(2)).filter(|&c| c < full)
    }
}

/// Whether to claim again after a claim that asked for `want` jobs got `got`: when it came
/// back full (more may be waiting), or when a wake-up, a freed slot or a poll arrived while it
/// was in flight (`started_at` wake-ups counted when it started, `wakes` now). That claim's
/// snapshot may predate what the wake-up announced (the ack that freed a limited queue's slot,
/// a job's insert); without this, the wake-up is lost until the next poll.
pub fn look_again(got: usize, want: usize, started_at: u64, wakes: u64) -> bool {
    got == want || wakes > started_at
}

/// The longest a producer held back by a key's rate sleeps before it claims again (unless a
/// wake-up comes first): every change that could let a job start sooner wakes it (an insert,
/// a slot freed, a limit changed, the listener reconnecting), and its claim's `wait_until`
/// names the earliest start a key's rate allows or the next job due, whichever is first; this
/// is only the fallback should one be missed.
pub const HELD_NAP: Duration = Duration::from_secs(60);

/// How long an idle producer waits at most before claiming again: the poll interval, or
/// less when a job held back by a key's rate may start sooner (a few ms after it may).
/// `held`: every due job of the queue waits for a key's rate (its last claim took none and
/// named `wait_until`) and wake-ups are heard: then it waits until `wait_until`, at most the
/// longer of the poll interval and [`HELD_NAP`], rather than re-reading every key at each poll.
pub(crate) fn limit_nap(
    poll: Duration,
    wait_until: Option<chrono::DateTime<chrono::Utc>>,
    held: bool,
    now: chrono::DateTime<chrono::Utc>,
) -> Duration {
    let most = if held { poll.max(HELD_NAP) } else { poll };
    match wait_until {
        Some(at) => {
            ((at - now).to_std().unwrap_or(Duration::ZERO) + Duration::from_millis(2)).min(most)
        }
        None => poll,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_the_server_keeps_refusing_asks_for_half_as_many_down_to_one() {
        let mut cap = None;
        let mut asked = Vec::new();
        for _ in 0..10 {
            let want = cap.map_or(300, |c: usize| c.min(300));
            asked.push(want);
            cap = next_claim_cap(cap, want, true, 300);
        }
        assert_eq!(asked, [300, 150, 75, 37, 18, 9, 4, 2, 1, 1]);
        // Each answer doubles it back, and at the full size the bound goes.
        let mut sizes = Vec::new();
        while let Some(c) = cap {
            sizes.push(c);
            cap = next_claim_cap(cap, c, false, 300);
        }
        assert_eq!(sizes, [1, 2, 4, 8, 16, 32, 64, 128, 256]);
        assert_eq!(next_claim_cap(None, 20, false, 300), None);
        // A refused claim that asked for fewer than the bound (few free slots) halves that.
        assert_eq!(next_claim_cap(Some(64), 6, true, 300), Some(3));
    }

    #[test]
    fn a_wake_up_during_a_claim_makes_the_producer_claim_again() {
        // Full: more may be waiting.
        assert!(look_again(10, 10, 3, 3));
        // Short, nothing happened meanwhile: drained.
        assert!(!look_again(4, 10, 3, 3));
        assert!(!look_again(0, 10, 0, 0));
        // Short, but a wake-up came while the claim was in flight.
        assert!(look_again(0, 10, 3, 4));
    }

    #[test]
    fn a_rate_limited_producer_naps_until_the_next_allowed_start() {
        let poll = Duration::from_secs(1);
        let now = chrono::Utc::now();
        assert_eq!(limit_nap(poll, None, false, now), poll);
        let soon = now + chrono::TimeDelta::milliseconds(300);
        assert_eq!(
            limit_nap(poll, Some(soon), false, now),
            Duration::from_millis(302)
        );
        let late = now + chrono::TimeDelta::seconds(30);
        assert_eq!(limit_nap(poll, Some(late), false, now), poll);
        let past = now - chrono::TimeDelta::seconds(3);
        assert_eq!(
            limit_nap(poll, Some(past), false, now),
            Duration::from_millis(2)
        );
        // Every due job held by a rate: until the next start, at most HELD_NAP (or the poll
        // interval, when it is longer); nothing held, the poll interval.
        assert_eq!(
            limit_nap(poll, Some(late), true, now),
            Duration::from_millis(30_002)
        );
        let much_later = now + chrono::TimeDelta::hours(1);
        assert_eq!(limit_nap(poll, Some(much_later), true, now), HELD_NAP);
        let long_poll = Duration::from_secs(600);
        assert_eq!(
            limit_nap(long_poll, Some(much_later), true, now),
            long_poll
        );
        assert_eq!(limit_nap(poll, None, true, now), poll);
    }

    #[test]
    fn without_a_buffer_a_busy_queue_waits_for_the_cooldown_and_claims_its_free_slots() {
        // limit 10, no claim-ahead.
        assert_eq!(next_claim(10, 0, 0, 10, 0, false, false), ClaimNow::Now(10));
        assert_eq!(
            next_claim(3, 0, 0, 10, 0, false, false),
            ClaimNow::AfterCooldown
        );
        assert_eq!(next_claim(3, 0, 0, 10, 0, false, true), ClaimNow::Now(3));
        assert_eq!(next_claim(0, 0, 0, 10, 0, false, true), ClaimNow::Wait);
        // Half the slots free: at once, the cooldown would only make the claim later.
        assert_eq!(next_claim(5, 0, 0, 10, 0, false, false), ClaimNow::Now(5));
    }

    #[test]
    fn without_a_buffer_a_second_claim_goes_out_for_half_the_slots_nobody_asked_for() {
        // limit 10, a claim in flight asked for 3 of the 8 free slots: the other 5 now.
        assert_eq!(next_claim(8, 0, 3, 10, 0, false, false), ClaimNow::Now(5));
        // Fewer than half unasked: wait for the claim in flight, cooled down or not.
        assert_eq!(next_claim(8, 0, 4, 10, 0, false, true), ClaimNow::Wait);
        assert_eq!(next_claim(8, 0, 8, 10, 0, false, true), ClaimNow::Wait);
        // Never beside a claim in flight while claiming one at a time.
        assert_eq!(next_claim(10, 0, 1, 10, 0, true, true), ClaimNow::Wait);
        // Jobs still buffered (more than the free slots came back): none.
        assert_eq!(next_claim(0, 2, 0, 10, 0, false, true), ClaimNow::Wait);
    }

    #[test]
    fn one_at_a_time_claims_single_jobs_and_never_ahead() {
        assert_eq!(next_claim(10, 0, 0, 10, 5, true, false), ClaimNow::Now(1));
        assert_eq!(
            next_claim(4, 0, 0, 10, 5, true, false),
            ClaimNow::AfterCooldown
        );
        assert_eq!(next_claim(4, 0, 0, 10, 5, true, true), ClaimNow::Now(1));
        assert_eq!(next_claim(0, 0, 0, 10, 5, true, true), ClaimNow::Wait);
    }

    #[test]
    fn with_a_buffer_the_claim_fills_free_slots_and_the_buffer() {
        // Idle queue: every slot plus the buffer.
        assert_eq!(
            next_claim(10, 0, 0, 10, 10, false, false),
            ClaimNow::Now(20)
        );
        // All slots busy, buffer full: nothing to claim for.
        assert_eq!(next_claim(0, 10, 0, 10, 10, false, true), ClaimNow::Wait);
        // Less than half the buffer used: wait (a claim would be a small batch).
        assert_eq!(next_claim(0, 6, 0, 10, 10, false, true), ClaimNow::Wait);
        // Half of it used: refill while the slots are busy, before it runs dry.
        assert_eq!(next_claim(0, 5, 0, 10, 10, false, false), ClaimNow::Now(5));
        // Buffer empty with slots free: claim at once, no cooldown.
        assert_eq!(next_claim(4, 0, 0, 10, 10, false, false), ClaimNow::Now(14));
        // A queue of concurrency 1 buffers one job.
        assert_eq!(next_claim(0, 0, 0, 1, 1, false, false), ClaimNow::Now(1));
        assert_eq!(next_claim(0, 1, 0, 1, 1, false, false), ClaimNow::Wait);
        // What the claims in flight asked for counts as buffered.
        assert_eq!(next_claim(0, 3, 2, 10, 10, false, false), ClaimNow::Now(5));
        assert_eq!(next_claim(0, 3, 3, 10, 10, false, false), ClaimNow::Wait);
    }
}
