//! Where a producer's next claim starts reading each lane of its queue (a lane: one priority;
//! `skiplock.lanes`), so that a claim does not step over the index entries of every job claimed
//! since Postgres last could vacuum (`skiplock._claim` in `sql/api/13_claim.sql` says why;
//! docs/internals.md, "Claims when Postgres cannot vacuum").
//!
//! A lane a claim read to its end (every due job it could lock) holds no due job older than
//! that claim's clock that was visible to it, so the next claim may start a little before that
//! clock: [`Cursors::lookback`] before, for jobs whose transaction committed after the claim
//! with an older `scheduled_at` (an insert that commits within the lookback is found). A lane
//! whose claim stopped at the batch's size starts at the last job taken. Anything older (a
//! transaction that committed later than that, a job enqueued with a `run_at` long past, the
//! jobs a claim that failed had locked) is found by a claim from the start of every lane, which
//! the producer sends first, after a failure, and then as often as its cost allows: at least
//! [`Cursors::every`] apart, and [`FROM_START_SHARE`] of the time at most (under a held
//! horizon such a claim is slow, and is then sent rarely).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

pub use crate::store::claim::LaneStart as Lane;

/// The most of a producer's time that claims from the start of every lane may take: the next
/// one waits 1 / share times as long as the last one took.
pub const FROM_START_SHARE: f64 = 0.01;

/// How long a claim from the start counts as in flight when no answer comes (a failure, or
/// a lost answer, also makes the next claim one from the start).
const IN_FLIGHT: Duration = Duration::from_secs(600);

/// A producer's lanes and when it next claims from the start of every lane.
#[derive(Debug, Clone)]
pub struct Cursors {
    lanes: BTreeMap<i16, DateTime<Utc>>,
    /// The last claim read as many lanes as one claim may without filling its batch: the next
    /// one resumes after this lane (`skiplock._claim_lanes`).
    after: Option<i16>,
    /// When the next claim from the start is due (None: now).
    from_start_at: Option<Instant>,
    lookback: chrono::TimeDelta,
    every: Duration,
}

/// What the database answered to a claim, as far as the cursors care.
#[derive(Debug, Clone, Default)]
pub struct Answer<'a> {
    /// The claim's clock (None: the answer had none, e.g. an older schema's).
    pub clock: Option<DateTime<Utc>>,
    /// The lanes the claim read to their end.
    pub exhausted: &'a [i16],
    /// Priority and scheduled_at of each job claimed.
    pub claimed: &'a [(i16, DateTime<Utc>)],
    /// Where the next claim resumes (None: from the first lane).
    pub lanes_after: Option<i16>,
}

impl Cursors {
    /// No lane known yet: the first claim reads every lane from its start.
    pub fn new(lookback: Duration, every: Duration) -> Self {
        Cursors {
            lanes: BTreeMap::new(),
            after: None,
            from_start_at: None,
            lookback: chrono::TimeDelta::from_std(lookback).unwrap_or(chrono::TimeDelta::MAX),
            every,
        }
    }

    /// The lanes to send with the next claim, or None: read every lane from its start (then
    /// no other claim does so until this one's answer says when).
    pub fn next(&mut self, now: Instant) -> Option<Vec<Lane>> {
        if self.from_start_at.is_none_or(|at| now >= at) {
            self.from_start_at = Some(now + IN_FLIGHT);
            return None;
        }
        Some(
            self.lanes
                .iter()
                .map(|(&priority, &since)| Lane { priority, since })
                .collect(),
        )
    }

    /// The lane the next claim resumes after (None: it reads from the first lane).
    pub fn after(&self) -> Option<i16> {
        self.after
    }

    /// Records a claim's answer. `from_start`: it was sent without lanes, at `sent` and
    /// answered after `took`.
    pub fn answered(&mut self, from_start: bool, sent: Instant, took: Duration, a: Answer<'_>) {
        if from_start {
            // Lanes it did not reach are read from their start by the claim that reaches them.
            self.lanes.clear();
            let wait = self.every.max(took.div_f64(FROM_START_SHARE));
            self.from_start_at = Some(sent + took + wait);
        }
        self.after = a.lanes_after;
        let Some(clock) = a.clock else { return };
        let bound = clock.checked_sub_signed(self.lookback).unwrap_or(clock);
        for &p in a.exhausted {
            self.raise(p, bound);
        }
        let mut last: BTreeMap<i16, DateTime<Utc>> = BTreeMap::new();
        for &(p, at) in a.claimed {
            if a.exhausted.contains(&p) {
                continue;
            }
            let e = last.entry(p).or_insert(at);
            *e = (*e).max(at);
        }
        for (p, at) in last {
            self.raise(p, at.min(bound));
        }
    }

    /// A claim failed: jobs it had locked may be older than any lane's start, so the next
    /// claim reads every lane from its start.
    pub fn failed(&mut self) {
        self.from_start_at = None;
        self.after = None;
    }

    fn raise(&mut self, p: i16, since: DateTime<Utc>) {
        let e = self.lanes.entry(p).or_insert(since);
        *e = (*e).max(since);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn the_first_claim_and_the_one_after_a_failure_read_from_the_start() {
        let now = Instant::now();
        let mut c = Cursors::new(Duration::from_secs(1), Duration::from_secs(1));
        assert_eq!(c.next(now), None);
        c.answered(
            true,
            now,
            Duration::from_millis(2),
            Answer {
                clock: Some(t(100)),
                exhausted: &[0],
                claimed: &[],
                lanes_after: None,
            },
        );
        assert_eq!(
            c.next(now),
            Some(vec![Lane {
                priority: 0,
                since: t(99)
            }])
        );
        c.failed();
        assert_eq!(c.next(now), None);
    }

    #[test]
    fn an_exhausted_lane_starts_a_lookback_before_the_claim_and_a_full_one_at_its_last_job() {
        let now = Instant::now();
        let mut c = Cursors::new(Duration::from_secs(1), Duration::from_secs(1));
        c.answered(
            true,
            now,
            Duration::from_millis(1),
            Answer {
                clock: Some(t(10)),
                exhausted: &[-1, 0, 5],
                claimed: &[],
                lanes_after: None,
            },
        );
        // Lane 0 read to its end; lane 5 filled the claim at its job of t(3).
        c.answered(
            false,
            now,
            Duration::from_millis(1),
            Answer {
                clock: Some(t(50)),
                exhausted: &[-1, 0],
                claimed: &[(0, t(49)), (5, t(2)), (5, t(3))],
                lanes_after: None,
            },
        );
        let lanes = c.next(now).unwrap();
        assert_eq!(
            lanes,
            vec![
                Lane {
                    priority: -1,
                    since: t(49)
                },
                Lane {
                    priority: 0,
                    since: t(49)
                },
                Lane {
                    priority: 5,
                    since: t(9)
                },
            ]
        );
        // A lane's start never moves back (a slower answer of an older claim).
        c.answered(
            false,
            now,
            Duration::from_millis(1),
            Answer {
                clock: Some(t(20)),
                exhausted: &[0],
                claimed: &[],
                lanes_after: None,
            },
        );
        assert_eq!(
            c.next(now).unwrap()[1],
            Lane {
                priority: 0,
                since: t(49)
            }
        );
        // A job taken in a lane that filled the claim within the lookback: the lookback wins.
        c.answered(
            false,
            now,
            Duration::from_millis(1),
            Answer {
                clock: Some(t(60)),
                exhausted: &[],
                claimed: &[(5, t(60))],
                lanes_after: None,
            },
        );
        assert_eq!(
            c.next(now).unwrap()[2],
            Lane {
                priority: 5,
                since: t(59)
            }
        );
    }

    #[test]
    fn claims_from_the_start_are_spaced_by_their_cost() {
        let now = Instant::now();
        let mut c = Cursors::new(Duration::from_secs(1), Duration::from_secs(1));
        // Cheap: again after `every`.
        c.answered(
            true,
            now,
            Duration::from_millis(1),
            Answer {
                clock: Some(t(0)),
                exhausted: &[0],
                claimed: &[],
                lanes_after: None,
            },
        );
        assert!(c.next(now + Duration::from_millis(900)).is_some());
        assert_eq!(c.next(now + Duration::from_millis(1002)), None);
        // Slow (a held horizon): 100 times as long as it took.
        c.answered(
            true,
            now,
            Duration::from_millis(300),
            Answer {
                clock: Some(t(0)),
                exhausted: &[0],
                claimed: &[],
                lanes_after: None,
            },
        );
        assert!(c.next(now + Duration::from_secs(29)).is_some());
        assert_eq!(c.next(now + Duration::from_secs(31)), None);
        // Lanes it did not reach lose their start; the others keep theirs.
        c.answered(
            false,
            now,
            Duration::from_millis(1),
            Answer {
                clock: Some(t(100)),
                exhausted: &[0, 3],
                claimed: &[],
                lanes_after: None,
            },
        );
        c.answered(
            true,
            now,
            Duration::from_millis(1),
            Answer {
                clock: Some(t(200)),
                exhausted: &[],
                claimed: &[(0, t(150))],
                lanes_after: None,
            },
        );
        assert_eq!(
            c.next(now).unwrap(),
            vec![Lane {
                priority: 0,
                since: t(150)
            }]
        );
    }

    #[test]
    fn a_claim_that_read_as_many_lanes_as_it_may_is_resumed_after_its_last_lane() {
        let now = Instant::now();
        let mut c = Cursors::new(Duration::from_secs(1), Duration::from_secs(1));
        let answer = |after| Answer {
            clock: Some(t(10)),
            exhausted: &[-3, -2],
            claimed: &[],
            lanes_after: after,
        };
        assert_eq!(c.after(), None);
        c.answered(true, now, Duration::from_millis(1), answer(Some(-2)));
        assert_eq!(c.after(), Some(-2));
        // The claim from there read to the last lane: the next one starts from the first.
        c.answered(false, now, Duration::from_millis(1), answer(None));
        assert_eq!(c.after(), None);
        // A failed claim starts again from the first lane too.
        c.answered(false, now, Duration::from_millis(1), answer(Some(7)));
        c.failed();
        assert_eq!(c.after(), None);
    }
}
