//! The packet state machine as one pure function, so the rule is written once in Rust (and
//! once in SQL, `skiplock._packet_mover`, which a test checks against this one pair by pair).
//!
//! | from | to | who |
//! |---|---|---|
//! | (submit) | queued | submitter |
//! | queued | processing | worker |
//! | processing | ready_for_review | worker, on success |
//! | processing | error | worker, when processing fails |
//! | processing | queued | recovery: processing was interrupted (worker died or stopped) |
//! | ready_for_review | in_review | operator takes it |
//! | in_review | done | operator completes it |
//! | in_review | queued | operator: retry |
//! | error | queued | operator: retry |

use std::fmt;

pub use crate::store::types::PacketState;

/// Who may make a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mover {
    /// A worker running the packet's job.
    Worker,
    /// A person (CLI, SQL API).
    Operator,
    /// The system putting interrupted processing back in the queue (start-up recovery, a
    /// rescued job, a worker shutting down). The database requires a recovery flag for it.
    Recovery,
}

/// A refused transition; its message names the packet, the current and requested state, and
/// where the packet may go instead (worded like the database trigger's error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The packet.
    pub id: i64,
    /// Its current state.
    pub from: PacketState,
    /// The state asked for.
    pub to: PacketState,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let next: Vec<&str> = PacketState::ALL
            .into_iter()
            .filter(|t| matches!(mover(self.from, *t), Some(Mover::Worker | Mover::Operator)))
            .map(PacketState::as_str)
            .collect();
        let next = if next.is_empty() {
            "nothing".to_string()
        } else {
            next.join(", ")
        };
        write!(
            f,
            "packet {} cannot go from {} to {} (from {} it may go to: {next})",
            self.id, self.from, self.to, self.from
        )
    }
}

impl std::error::Error for Refused {}

/// The transition table: who may move a packet from `from` to `to`; `None` if nobody may.
pub fn mover(from: PacketState, to: PacketState) -> Option<Mover> {
    use PacketState::*;
    match (from, to) {
        (Queued, Processing) => Some(Mover::Worker),
        (Processing, ReadyForReview) | (Processing, Error) => Some(Mover::Worker),
        (Processing, Queued) => Some(Mover::Recovery),
        (ReadyForReview, InReview) => Some(Mover::Operator),
        (InReview, Done) | (InReview, Queued) | (Error, Queued) => Some(Mover::Operator),
        _ => None,
    }
}

/// Checks that `by` may move packet `id` from `from` to `to`.
pub fn check(id: i64, from: PacketState, to: PacketState, by: Mover) -> Result<(), Refused> {
    match mover(from, to) {
        Some(m) if m == by => Ok(()),
        _ => Err(Refused { id, from, to }),
    }
}

#[cfg(test)]
mod tests {
    use super::PacketState::*;
    use super::*;

    /// The table, written out independently of `mover`.
    const ALLOWED: [(PacketState, PacketState, Mover); 8] = [
        (Queued, Processing, Mover::Worker),
        (Processing, ReadyForReview, Mover::Worker),
        (Processing, Error, Mover::Worker),
        (Processing, Queued, Mover::Recovery),
        (ReadyForReview, InReview, Mover::Operator),
        (InReview, Done, Mover::Operator),
        (InReview, Queued, Mover::Operator),
        (Error, Queued, Mover::Operator),
    ];

    #[test]
    fn every_pair_matches_the_table() {
        let mut checked = 0;
        for from in PacketState::ALL {
            for to in PacketState::ALL {
                let want = ALLOWED
                    .iter()
                    .find(|(f, t, _)| *f == from && *t == to)
                    .map(|(_, _, m)| *m);
                assert_eq!(mover(from, to), want, "{from} -> {to}");
                checked += 1;
            }
        }
        assert_eq!(checked, 36);
    }

    #[test]
    fn staying_put_is_not_a_transition() {
        for s in PacketState::ALL {
            assert_eq!(mover(s, s), None, "{s} -> {s}");
        }
    }

    #[test]
    fn check_requires_the_right_mover() {
        for from in PacketState::ALL {
            for to in PacketState::ALL {
                for by in [Mover::Worker, Mover::Operator, Mover::Recovery] {
                    let ok = mover(from, to) == Some(by);
                    assert_eq!(
                        check(1, from, to, by).is_ok(),
                        ok,
                        "{from} -> {to} by {by:?}"
                    );
                }
            }
        }
        // An operator cannot pull a packet out of processing: that is recovery's move.
        assert!(check(1, Processing, Queued, Mover::Operator).is_err());
        assert!(check(1, Processing, Queued, Mover::Recovery).is_ok());
    }

    #[test]
    fn refusals_name_packet_current_and_requested_state() {
        let e = check(42, InReview, Processing, Mover::Worker).unwrap_err();
        assert_eq!(
            e.to_string(),
            "packet 42 cannot go from in_review to processing (from in_review it may go to: queued, done)"
        );
        let e = check(7, Done, Queued, Mover::Operator).unwrap_err();
        assert_eq!(
            e.to_string(),
            "packet 7 cannot go from done to queued (from done it may go to: nothing)"
        );
        let e = check(7, Processing, Done, Mover::Worker).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("(from processing it may go to: ready_for_review, error)")
        );
    }

    #[test]
    fn states_round_trip_through_their_names() {
        for s in PacketState::ALL {
            assert_eq!(s.as_str().parse::<PacketState>().unwrap(), s);
        }
        assert!(
            "finished"
                .parse::<PacketState>()
                .unwrap_err()
                .contains("one of: queued")
        );
        assert!(Queued.machine_move() && Processing.machine_move());
        assert!(!ReadyForReview.machine_move() && !Error.machine_move() && !Done.machine_move());
    }
}
