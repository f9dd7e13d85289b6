//! The packet pipeline's enum types as Rust enums: [`PacketState`] is `skiplock.packet_state`,
//! [`PacketStartOutcome`] is `skiplock.packet_start_outcome` (sqlx's traits through the
//! core's `pg_enum!`, which accepts the type's name with or without its schema).

/// How `skiplock._packet_start` answered (`skiplock.packet_start_outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketStartOutcome {
    /// The packet is now `processing` for this job.
    Started,
    /// No free processing slot (or the gate was held): snooze and ask again.
    Busy,
    /// The packet is no longer `queued` (or is gone): a late job, nothing to do.
    Stale,
    /// Another live job owns the queued packet: nothing to do.
    Duplicate,
}

impl PacketStartOutcome {
    /// Every outcome, in the order of the SQL enum.
    pub const ALL: [PacketStartOutcome; 4] = [
        PacketStartOutcome::Started,
        PacketStartOutcome::Busy,
        PacketStartOutcome::Stale,
        PacketStartOutcome::Duplicate,
    ];

    /// The SQL label.
    pub fn as_str(self) -> &'static str {
        match self {
            PacketStartOutcome::Started => "started",
            PacketStartOutcome::Busy => "busy",
            PacketStartOutcome::Stale => "stale",
            PacketStartOutcome::Duplicate => "duplicate",
        }
    }
}

impl std::str::FromStr for PacketStartOutcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        PacketStartOutcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| format!("unknown packet start outcome {s:?}"))
    }
}

mod packet_state {
    use std::fmt;
    use std::str::FromStr;

    use serde::{Deserialize, Serialize};

    /// The six states of a packet (`skiplock.packet_state`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum PacketState {
        /// Waiting for a worker (the machine's move).
        Queued,
        /// A worker is running the processor (the machine's move).
        Processing,
        /// Processed; waiting for an operator (people's move).
        ReadyForReview,
        /// An operator is checking it (people's move).
        InReview,
        /// Finished.
        Done,
        /// Processing failed; an operator decides (people's move).
        Error,
    }

    impl PacketState {
        /// Every state, in the order of the SQL enum.
        pub const ALL: [PacketState; 6] = [
            PacketState::Queued,
            PacketState::Processing,
            PacketState::ReadyForReview,
            PacketState::InReview,
            PacketState::Done,
            PacketState::Error,
        ];

        /// The name used in SQL and on the command line.
        pub fn as_str(self) -> &'static str {
            match self {
                PacketState::Queued => "queued",
                PacketState::Processing => "processing",
                PacketState::ReadyForReview => "ready_for_review",
                PacketState::InReview => "in_review",
                PacketState::Done => "done",
                PacketState::Error => "error",
            }
        }

        /// Whether the packet waits on the machine (else on people, or it is done).
        pub fn machine_move(self) -> bool {
            matches!(self, PacketState::Queued | PacketState::Processing)
        }
    }

    impl fmt::Display for PacketState {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.as_str())
        }
    }

    impl FromStr for PacketState {
        type Err = String;
        fn from_str(s: &str) -> Result<Self, String> {
            PacketState::ALL
                .into_iter()
                .find(|st| st.as_str() == s.trim())
                .ok_or_else(|| {
                    let names: Vec<&str> = PacketState::ALL.iter().map(|s| s.as_str()).collect();
                    format!("unknown packet state {s:?} (one of: {})", names.join(", "))
                })
        }
    }
}

pub use packet_state::PacketState;
skiplock::pg_enum!(
    PacketState,
    "skiplock.packet_state",
    "skiplock._packet_state"
);
skiplock::pg_enum!(
    PacketStartOutcome,
    "skiplock.packet_start_outcome",
    "skiplock._packet_start_outcome"
);
