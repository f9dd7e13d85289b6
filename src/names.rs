//! Names the SQL API and the Rust code both spell: job kinds and queues of the built-in
//! workflows, the unique-key prefixes they own and lock rows. Rust uses
//! these constants; the SQL files use the same literals, and the test below fails when the
//! two drift apart (a constant the SQL no longer uses, or a near miss such as
//! `'process_packet'` in the SQL).

/// The queue a job goes to when none is named.
pub const DEFAULT_QUEUE: &str = "default";

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

/// Unique-key prefix of the keys `unique_by` derives (each of the enqueuing login's key scope:
/// `skiplock._unique_args_key`), reserved so that no caller names another's.
pub const UNIQUE_BY_KEY_PREFIX: &str = "args:";

/// Queue-name prefix of skiplock's own queues (the maintenance jobs' `skiplock.maintenance`).
pub const RESERVED_QUEUE_PREFIX: &str = "skiplock.";
/// Kinds of the maintenance jobs (the reaper's and retention's), enqueued only by the
/// scheduler into `skiplock.maintenance`.
pub const MAINTENANCE_KINDS: &[&str] = &["reap", "retain"];
/// What a refused enqueue of a maintenance job is told to use.
pub const MAINTENANCE_USE: &str =
    "the worker's own maintenance (periodic jobs: skiplock.enqueue_periodic)";

/// What a reserved name is (the `what` of `skiplock.reserved_names`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// A job kind.
    Kind,
    /// A queue.
    Queue,
    /// Every queue whose name starts with it.
    QueuePrefix,
    /// Every unique key that starts with it.
    KeyPrefix,
}

/// A name only skiplock's own functions may enqueue under: the Rust twin of a row of
/// `skiplock.reserved_names`, which each part's SQL API file writes (sql/api/80_reserved.sql
/// builds the database's checks from them; crates/skiplock-cli/tests/roles.rs checks both agree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservedName {
    /// The part that reserves it (`core`, `fetch`, `pack`, `packets`).
    pub part: &'static str,
    pub what: Reserved,
    pub name: &'static str,
    /// What a refused enqueue is told to use instead.
    pub use_instead: &'static str,
}

const fn reserved(
    part: &'static str,
    what: Reserved,
    name: &'static str,
    use_instead: &'static str,
) -> ReservedName {
    ReservedName {
        part,
        what,
        name,
        use_instead,
    }
}

/// The core's reserved names (sql/api/80_reserved.sql).
pub const CORE_RESERVED: &[ReservedName] = &[
    reserved(
        "core",
        Reserved::QueuePrefix,
        RESERVED_QUEUE_PREFIX,
        MAINTENANCE_USE,
    ),
    reserved("core", Reserved::Kind, "reap", MAINTENANCE_USE),
    reserved("core", Reserved::Kind, "retain", MAINTENANCE_USE),
    reserved(
        "core",
        Reserved::KeyPrefix,
        UNIQUE_BY_KEY_PREFIX,
        "unique_by, whose keys belong to the login that enqueues",
    ),
];
/// The fetch workflow's (sql/api/20_fetch.sql).
#[cfg(feature = "fetch")]
pub const FETCH_RESERVED: &[ReservedName] = &[
    reserved(
        "fetch",
        Reserved::Kind,
        FETCH_KIND,
        "skiplock.request_fetch",
    ),
    reserved(
        "fetch",
        Reserved::Queue,
        FETCH_QUEUE,
        "skiplock.request_fetch",
    ),
    reserved(
        "fetch",
        Reserved::KeyPrefix,
        FETCH_KEY_PREFIX,
        "skiplock.request_fetch",
    ),
];
/// The pack workflow's (sql/api/30_pack.sql).
#[cfg(feature = "pack")]
pub const PACK_RESERVED: &[ReservedName] = &[
    reserved("pack", Reserved::Kind, TIMER_RESET_KIND, PACK_USE),
    reserved("pack", Reserved::Kind, DO_THE_PACKING_KIND, PACK_USE),
    reserved("pack", Reserved::Queue, PACK_QUEUE, PACK_USE),
    reserved("pack", Reserved::KeyPrefix, PACK_KEY_PREFIX, PACK_USE),
];
#[cfg(feature = "pack")]
const PACK_USE: &str = "skiplock.timer_reset or skiplock.pack_now";
/// The packet pipeline's (sql/api/40_packets.sql).
#[cfg(feature = "packets")]
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
#[cfg(feature = "packets")]
const PACKETS_USE: &str = "skiplock.submit_packet or skiplock.retry_packet";

/// Every reserved name of the parts this program has, the core's first (the order
/// `skiplock._reserved_job` checks them in).
pub fn reserved_names() -> Vec<ReservedName> {
    let parts: &[&[ReservedName]] = &[
        CORE_RESERVED,
        #[cfg(feature = "fetch")]
        FETCH_RESERVED,
        #[cfg(feature = "pack")]
        PACK_RESERVED,
        #[cfg(feature = "packets")]
        PACKETS_RESERVED,
    ];
    parts.concat()
}

/// The reserved prefix `key` starts with (the Rust twin of `skiplock._reserved_key_prefix`,
/// for the parts this program has), or `None`.
pub fn reserved_key_prefix(key: &str) -> Option<ReservedName> {
    reserved_names()
        .into_iter()
        .filter(|r| r.what == Reserved::KeyPrefix && key.starts_with(r.name))
        .max_by_key(|r| r.name.len())
}

/// What to use instead when a generic enqueue of a `kind` job into `queue` is refused (the
/// Rust twin of `skiplock._reserved_job`, for the parts this program has), or `None`: a job any
/// caller may enqueue. The core's names first, then each part's in turn, as the SQL checks.
pub fn reserved_job(kind: &str, queue: &str) -> Option<&'static str> {
    let mut names = reserved_names();
    // The SQL orders the groups by part (the core first) and then by what to use.
    names.sort_by_key(|r| (r.part != "core", r.part, r.use_instead));
    names
        .into_iter()
        .find(|r| match r.what {
            Reserved::Kind => r.name == kind,
            Reserved::Queue => r.name == queue,
            Reserved::QueuePrefix => queue.starts_with(r.name),
            Reserved::KeyPrefix => false,
        })
        .map(|r| r.use_instead)
}

/// Every shared name, with where the SQL must use it.
pub const ALL: &[(&str, &[&str])] = &[
    (DEFAULT_QUEUE, &["api/11_enqueue.sql"]),
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
    use std::collections::BTreeMap;
    use std::path::Path;

    /// Literals that are close to a shared name on purpose, and why.
    const NOT_NAMES: &[(&str, &str)] = &[
        (
            "timer_reset",
            "the SQL function's name, in the grants of 90_roles.sql",
        ),
        (
            "_ack",
            "the SQL function skiplock._ack's name, in sql/doctor/worker_grants.sql",
        ),
    ];

    /// The single-quoted literals of a SQL text, outside `--` comments.
    fn literals(sql: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut chars = sql.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '-' if chars.peek() == Some(&'-') => {
                    for c in chars.by_ref() {
                        if c == '\n' {
                            break;
                        }
                    }
                }
                '\'' => {
                    let mut lit = String::new();
                    while let Some(c) = chars.next() {
                        if c == '\'' {
                            if chars.peek() == Some(&'\'') {
                                chars.next();
                                lit.push('\'');
                                continue;
                            }
                            break;
                        }
                        lit.push(c);
                    }
                    out.push(lit);
                }
                _ => {}
            }
        }
        out
    }

    fn sql_files(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                sql_files(&p, base, out);
            } else if p.extension().is_some_and(|x| x == "sql") {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }

    fn distance(a: &str, b: &str) -> usize {
        let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.iter().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                cur.push(
                    (prev[j] + usize::from(ca != cb))
                        .min(prev[j + 1] + 1)
                        .min(cur[j] + 1),
                );
            }
            prev = cur;
        }
        prev[b.len()]
    }

    #[test]
    fn literal_scanner_skips_comments_and_unescapes_quotes() {
        assert_eq!(
            literals("SELECT 'a''b', x -- 'not this'\n, 'c'"),
            vec!["a'b".to_string(), "c".to_string()]
        );
        assert_eq!(distance("process-packet", "process_packet"), 1);
        assert_eq!(distance("pack", "pack"), 0);
    }

    #[test]
    fn the_sql_files_use_exactly_the_shared_names() {
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
        let mut files = BTreeMap::new();
        sql_files(&base, &base, &mut files);
        // The console's statements (crates/skiplock-console/sql/web) spell them too ('fetch');
        // absent from the core's package, present in the repository.
        let console = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/skiplock-console/sql");
        if console.is_dir() {
            sql_files(&console, &console, &mut files);
        }
        let names: Vec<&str> = ALL.iter().map(|(n, _)| *n).collect();
        // Each name is spelled where the SQL needs it.
        for (name, wanted) in ALL {
            for f in *wanted {
                let sql = files
                    .get(*f)
                    .unwrap_or_else(|| panic!("sql/{f} is missing"));
                assert!(
                    literals(sql).iter().any(|l| l == name),
                    "sql/{f} no longer uses '{name}': the Rust constant and the SQL disagree"
                );
            }
        }
        // No literal anywhere is a near miss of a name (a typo, `_` for `-`, a rename on one
        // side only).
        for (f, sql) in &files {
            for lit in literals(sql) {
                if names.contains(&lit.as_str()) || NOT_NAMES.iter().any(|(n, _)| *n == lit) {
                    continue;
                }
                for name in &names {
                    let near = distance(&lit.to_lowercase(), name) <= 1
                        || lit.replace(['_', '-', '.'], "") == name.replace(['_', '-', '.'], "");
                    assert!(
                        !near,
                        "sql/{f} has '{lit}', a near miss of the shared name '{name}' (src/names.rs)"
                    );
                }
            }
        }
    }

    #[test]
    fn reserved_jobs_name_the_function_to_use() {
        assert_eq!(reserved_job("noop", "default"), None);
        assert_eq!(
            reserved_job("sleep", "skiplock.maintenance"),
            Some(MAINTENANCE_USE)
        );
        assert_eq!(reserved_job("reap", "default"), Some(MAINTENANCE_USE));
        #[cfg(feature = "packets")]
        assert_eq!(reserved_job("sleep", "packets"), Some(PACKETS_USE));
        #[cfg(feature = "fetch")]
        assert_eq!(
            reserved_job("fetch", "other"),
            Some("skiplock.request_fetch")
        );
        #[cfg(feature = "pack")]
        assert_eq!(reserved_job("timer-reset", "default"), Some(PACK_USE));
        assert_eq!(reserved_job("fetchy", "fetchq"), None);
        #[cfg(feature = "pack")]
        assert_eq!(
            reserved_key_prefix("pack:example.org").map(|r| r.use_instead),
            Some(PACK_USE)
        );
        assert_eq!(reserved_key_prefix("packing:x"), None);
    }
}
