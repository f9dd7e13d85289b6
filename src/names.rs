//! Names the SQL API and the Rust code both spell, and the reserved names: the job kinds,
//! queues and unique-key prefixes only skiplock's own functions may enqueue under (the core's
//! here; an optional part registers its own, [`register`]). Rust uses these constants; the SQL
//! files use the same literals, and the test below fails when the two drift apart.

/// The queue a job goes to when none is named.
pub const DEFAULT_QUEUE: &str = "default";

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
    /// The part that reserves it (`core`, or an optional part's name).
    pub part: &'static str,
    pub what: Reserved,
    pub name: &'static str,
    /// What a refused enqueue is told to use instead.
    pub use_instead: &'static str,
}

/// A [`ReservedName`] (a `const` constructor, for a part's table of them).
pub const fn reserved(
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
/// The reserved names of the optional parts this process registered ([`register`]).
static REGISTERED: std::sync::Mutex<Vec<&'static [ReservedName]>> = std::sync::Mutex::new(Vec::new());

/// Adds an optional part's reserved names to the checks made before the round trip
/// ([`reserved_job`], [`reserved_key_prefix`]); the database checks them anyway (its part's SQL
/// API file writes them, sql/api/80_reserved.sql builds the checks). `skiplock::part` registers
/// every part a program migrates or runs; registering the same table twice does nothing.
pub fn register(names: &'static [ReservedName]) {
    let mut r = REGISTERED.lock().unwrap_or_else(|p| p.into_inner());
    if !r.iter().any(|n| std::ptr::eq(*n, names)) {
        r.push(names);
    }
}

/// Every reserved name this process knows: the core's first (the order
/// `skiplock._reserved_job` checks them in), then each registered part's.
pub fn reserved_names() -> Vec<ReservedName> {
    let mut v = CORE_RESERVED.to_vec();
    let r = REGISTERED.lock().unwrap_or_else(|p| p.into_inner());
    v.extend(r.iter().flat_map(|n| n.iter().copied()));
    v
}

/// The reserved prefix `key` starts with (the Rust twin of `skiplock._reserved_key_prefix`,
/// for the parts this process registered), or `None`.
pub fn reserved_key_prefix(key: &str) -> Option<ReservedName> {
    reserved_names()
        .into_iter()
        .filter(|r| r.what == Reserved::KeyPrefix && key.starts_with(r.name))
        .max_by_key(|r| r.name.len())
}

/// What to use instead when a generic enqueue of a `kind` job into `queue` is refused (the
/// Rust twin of `skiplock._reserved_job`, for the parts this process registered), or `None`: a job any
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
pub const ALL: &[(&str, &[&str])] = &[(DEFAULT_QUEUE, &["api/11_enqueue.sql"])];

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_sql_files_use_exactly_the_shared_names() {
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
        skiplock_test_support::sql_names::check(ALL, &[&base], &[]);
    }

    #[test]
    fn reserved_jobs_name_the_function_to_use() {
        assert_eq!(reserved_job("noop", "default"), None);
        assert_eq!(
            reserved_job("sleep", "skiplock.maintenance"),
            Some(MAINTENANCE_USE)
        );
        assert_eq!(reserved_job("reap", "default"), Some(MAINTENANCE_USE));
        assert_eq!(reserved_job("fetchy", "fetchq"), None);
        assert_eq!(
            reserved_key_prefix("args:x").map(|r| r.name),
            Some(UNIQUE_BY_KEY_PREFIX)
        );
        assert_eq!(reserved_key_prefix("packing:x"), None);
    }

    #[test]
    fn a_registered_part_s_names_are_checked_after_the_core_s() {
        static PART: &[ReservedName] = &[reserved("demo", Reserved::Queue, "demo-q", "demo.fn")];
        register(PART);
        register(PART);
        assert_eq!(reserved_job("x", "demo-q"), Some("demo.fn"));
        assert_eq!(reserved_job("reap", "demo-q"), Some(MAINTENANCE_USE));
        assert_eq!(reserved_names().iter().filter(|r| r.part == "demo").count(), 1);
    }
}
