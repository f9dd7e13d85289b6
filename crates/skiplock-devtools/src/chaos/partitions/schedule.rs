//! A partition run's schedule: which faults hit which worker when, and for how long, drawn
//! from a seed so that a failing schedule can be run again (`--seed`). Pure: no I/O.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// A fault one worker sees (or, for [`Kind::DiskFull`], the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Every packet between the worker and Postgres dropped, both ways.
    Partition,
    /// Only the server's packets to the worker dropped (its statements arrive and run, their
    /// answers never come back).
    RepliesLost,
    /// A slow, lossy link: random loss (TCP retransmits, hundreds of ms of delay and jitter),
    /// with `tc netem` delay and jitter where the kernel has it.
    Slow,
    /// Every connection of the worker reset at once.
    Reset,
    /// The worker process stopped (SIGSTOP) for longer than the rescue window, then SIGCONT.
    Pause,
    /// Commits whose answer is lost: the server's packets to the worker dropped while its
    /// acks and claims flow, then its connections reset, so statements committed on the server
    /// fail in the worker.
    LostCommit,
    /// The jobs' tablespace full: enqueues, claims, acks and heartbeats fail until space returns.
    DiskFull,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 7] = [
        Kind::Partition,
        Kind::RepliesLost,
        Kind::Slow,
        Kind::Reset,
        Kind::Pause,
        Kind::LostCommit,
        Kind::DiskFull,
    ];

    /// Its name in reports and the history.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Partition => "partition",
            Kind::RepliesLost => "replies_lost",
            Kind::Slow => "slow_link",
            Kind::Reset => "reset",
            Kind::Pause => "pause",
            Kind::LostCommit => "lost_commit",
            Kind::DiskFull => "disk_full",
        }
    }

    /// Whether it hits one worker (else the server).
    pub fn one_worker(self) -> bool {
        self != Kind::DiskFull
    }
}

/// One planned fault.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fault {
    /// When, from the start of the workload.
    pub at: Duration,
    /// What.
    pub kind: Kind,
    /// The worker slot it hits (0 for [`Kind::DiskFull`]).
    pub slot: usize,
    /// How long it lasts (for a reset: 0).
    pub hold: Duration,
    /// For [`Kind::Slow`]: the share of packets dropped each way.
    pub loss: f64,
}

/// The faults of schedule `seed`: every kind once, in a random order, plus `extra` more of
/// random kinds, at random moments of the first `span`, each hold drawn around
/// `rescue_after`: partitions and full disks sometimes shorter and sometimes longer than the
/// window, pauses always longer. Faults on one worker never overlap (each begins half a
/// second after the one before it healed), so each is undone exactly.
pub fn plan(
    seed: u64,
    workers: usize,
    span: Duration,
    rescue_after: Duration,
    extra: usize,
) -> Vec<Fault> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kinds: Vec<Kind> = Kind::ALL.to_vec();
    for _ in 0..extra {
        kinds.push(Kind::ALL[rng.random_range(0..Kind::ALL.len())]);
    }
    kinds.shuffle(&mut rng);
    let w = rescue_after.as_secs_f64();
    let mut faults: Vec<Fault> = kinds
        .into_iter()
        .map(|kind| {
            let hold = match kind {
                Kind::Partition | Kind::DiskFull => w * rng.random_range(0.3..2.5),
                Kind::RepliesLost => w * rng.random_range(0.3..2.0),
                Kind::Slow => w * rng.random_range(1.0..2.0),
                Kind::Reset => 0.0,
                Kind::Pause => w * rng.random_range(1.2..2.5),
                Kind::LostCommit => rng.random_range(0.2..0.8),
            };
            Fault {
                at: span.mul_f64(rng.random_range(0.0..1.0)),
                kind,
                slot: if kind.one_worker() {
                    rng.random_range(0..workers.max(1))
                } else {
                    0
                },
                hold: Duration::from_secs_f64(hold),
                loss: rng.random_range(0.05..0.3),
            }
        })
        .collect();
    faults.sort_by_key(|f| f.at);
    // One fault at a time per worker (and for the server).
    let mut free: Vec<Duration> = vec![Duration::ZERO; workers.max(1) + 1];
    for f in &mut faults {
        let lane = if f.kind.one_worker() {
            f.slot
        } else {
            workers.max(1)
        };
        f.at = f.at.max(free[lane]);
        free[lane] = f.at + f.hold + Duration::from_millis(500);
    }
    faults.sort_by_key(|f| f.at);
    faults
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_is_its_seed_and_holds_every_kind() {
        let w = Duration::from_secs(4);
        let a = plan(7, 3, Duration::from_secs(20), w, 3);
        assert_eq!(a, plan(7, 3, Duration::from_secs(20), w, 3));
        assert_ne!(a, plan(8, 3, Duration::from_secs(20), w, 3));
        assert_eq!(a.len(), 10);
        for k in Kind::ALL {
            assert!(a.iter().any(|f| f.kind == k), "{k:?} missing");
        }
        assert!(a.windows(2).all(|p| p[0].at <= p[1].at));
        for f in &a {
            assert!(f.slot < 3);
            if f.kind == Kind::Pause {
                assert!(f.hold > w, "a pause outlasts the rescue window");
            }
        }
    }

    #[test]
    fn faults_on_one_worker_never_overlap() {
        for seed in 0..50 {
            let a = plan(seed, 3, Duration::from_secs(10), Duration::from_secs(4), 6);
            for lane in 0..4 {
                let mine: Vec<&Fault> = a
                    .iter()
                    .filter(|f| {
                        if f.kind.one_worker() {
                            f.slot == lane
                        } else {
                            lane == 3
                        }
                    })
                    .collect();
                for p in mine.windows(2) {
                    assert!(p[0].at + p[0].hold < p[1].at, "seed {seed}: {p:?}");
                }
            }
        }
    }
}
