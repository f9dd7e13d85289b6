//! Names the workflows' SQL API and their Rust code both spell: job kinds and queues, the
//! unique-key prefixes they own and lock rows, and the names each workflow reserves (the
//! Rust twin of the rows its SQL API file writes to `skiplock.reserved_names`). The SQL files
//! use the same literals, and the test below fails when the two drift apart (a constant the
//! SQL no longer uses, or a near miss such as `'process_packet'` in the SQL).

use skiplock::names::{Reserved, ReservedName, reserved};

/// Kind of a fetch job.
pub const FETCH_KIND: &str = "fetch";
/// Queue of fetch jobs.
pub const FETCH_QUEUE: &str = "fetch";
/// Unique-key prefix of a pending fetch (`fetch:<url>`).
pub const FETCH_KEY_PREFIX: &str = "fetch:";

/// Queue of both pack kinds.
pub const PACK_QUEUE: &str = "pack";
/// Kind of the "content of this host changed" message.
pub const TIMER_RESET_KIND: &str = "timer-reset";
/// Kind of the pack job (the host's timer while it waits).
pub const DO_THE_PACKING_KIND: &str = "do-the-packing";
/// Unique-key prefix of a host's pack timer (`pack:<host>`), also its lock row's name.
pub const PACK_KEY_PREFIX: &str = "pack:";

/// Kind of the job that processes a packet.
pub const PACKET_KIND: &str = "process-packet";
/// Queue of packet jobs.
pub const PACKET_QUEUE: &str = "packets";
/// Unique-key prefix of a packet's job (`packet:<id>`).
pub const PACKET_KEY_PREFIX: &str = "packet:";
/// The `skiplock.locks` row that serialises packet starts.
pub const PACKET_PROCESSING_LOCK: &str = "packets.processing";

/// The fetch workflow's reserved names (sql/api/20_fetch.sql).
pub const FETCH_RESERVED: &[ReservedName] = &[
    reserved("fetch", Reserved::Kind, FETCH_KIND, FETCH_USE),
    reserved("fetch", Reserved::Queue, FETCH_QUEUE, FETCH_USE),
    reserved("fetch", Reserved::KeyPrefix, FETCH_KEY_PREFIX, FETCH_USE),
];
const FETCH_USE: &str = "skiplock.request_fetch";
/// The pack workflow's (sql/api/30_pack.sql).
pub const PACK_RESERVED: &[ReservedName] = &[
    reserved("pack", Reserved::Kind, TIMER_RESET_KIND, PACK_USE),
    reserved("pack", Reserved::Kind, DO_THE_PACKING_KIND, PACK_USE),
    reserved("pack", Reserved::Queue, PACK_QUEUE, PACK_USE),
    reserved("pack", Reserved::KeyPrefix, PACK_KEY_PREFIX, PACK_USE),
];
const PACK_USE: &str = "skiplock.timer_reset or skiplock.pack_now";
/// The packet pipeline's (sql/api/40_packets.sql).
pub const PACKETS_RESERVED: &[ReservedName] = &[
    reserved("packets", Reserved::Kind, PACKET_KIND, PACKETS_USE),
    reserved("packets", Reserved::Queue, PACKET_QUEUE, PACKETS_USE),
    reserved(
        "packets",
        Reserved::KeyPrefix,
        PACKET_KEY_PREFIX,
        PACKETS_USE,
    ),
];
const PACKETS_USE: &str = "skiplock.submit_packet or skiplock.retry_packet";

/// Every shared name, with where the SQL must use it (paths under this crate's `sql/`).
pub const ALL: &[(&str, &[&str])] = &[
    (FETCH_KIND, &["api/20_fetch.sql"]),
    (FETCH_QUEUE, &["api/20_fetch.sql"]),
    (FETCH_KEY_PREFIX, &["api/20_fetch.sql"]),
    (PACK_QUEUE, &["api/30_pack.sql"]),
    (TIMER_RESET_KIND, &["api/30_pack.sql"]),
    (
        DO_THE_PACKING_KIND,
        &["api/30_pack.sql", "pack/pending.sql"],
    ),
    (PACK_KEY_PREFIX, &["api/30_pack.sql"]),
    (PACKET_KIND, &["api/40_packets.sql"]),
    (PACKET_QUEUE, &["api/40_packets.sql"]),
    (PACKET_KEY_PREFIX, &["api/40_packets.sql"]),
    (PACKET_PROCESSING_LOCK, &["api/40_packets.sql"]),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_sql_files_use_exactly_the_shared_names() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        // This crate's files, then (in the repository, absent from the package) the core's
        // and the console's, whose statements spell them too ('fetch').
        skiplock_test_support::sql_names::check(
            ALL,
            &[
                &here.join("sql"),
                &here.join("../../sql"),
                &here.join("../skiplock-console/sql"),
            ],
            &[
                (
                    "timer_reset",
                    "the SQL function's name, in the grants of sql/api/93_pack_roles.sql",
                ),
                (
                    "_ack",
                    "the SQL function skiplock._ack's name, in the core's sql/doctor/worker_grants.sql",
                ),
            ],
        );
    }

    #[test]
    fn reserved_jobs_name_the_function_to_use() {
        use skiplock::names::{register, reserved_job, reserved_key_prefix};
        register(FETCH_RESERVED);
        register(PACK_RESERVED);
        register(PACKETS_RESERVED);
        assert_eq!(reserved_job("sleep", "packets"), Some(PACKETS_USE));
        assert_eq!(reserved_job("fetch", "other"), Some(FETCH_USE));
        assert_eq!(reserved_job("timer-reset", "default"), Some(PACK_USE));
        assert_eq!(reserved_job("fetchy", "fetchq"), None);
        assert_eq!(
            reserved_key_prefix("pack:example.org").map(|r| r.use_instead),
            Some(PACK_USE)
        );
        assert_eq!(reserved_key_prefix("packing:x"), None);
    }
}
