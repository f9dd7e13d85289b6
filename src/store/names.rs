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

/// Kind of the chaos runs' jobs (a dev tool: `skiplock chaos`).
pub const CHAOS_RECORD_KIND: &str = "chaos_record";

/// Unique-key prefixes the built-in workflows own (`skiplock._reserved_key_prefix` enforces
/// them in the database): a generic enqueue may not create or replace such a key.
pub const RESERVED_KEY_PREFIXES: &[&str] = &[FETCH_KEY_PREFIX, PACK_KEY_PREFIX, PACKET_KEY_PREFIX];

/// Queue-name prefix of skiplock's own queues (the maintenance jobs' `skiplock.maintenance`).
pub const RESERVED_QUEUE_PREFIX: &str = "skiplock.";
/// Kinds of the maintenance jobs (the reaper's and retention's), enqueued only by the
/// scheduler into `skiplock.maintenance`.
pub const MAINTENANCE_KINDS: &[&str] = &["reap", "retain"];

/// The built-in workflows' queues, each reserved to the workflow's own functions
/// (`skiplock._reserved_job` enforces them in the database, with the function to use).
pub const RESERVED_QUEUES: &[(&str, &str)] = &[
    (FETCH_QUEUE, "skiplock.request_fetch"),
    (PACK_QUEUE, "skiplock.timer_reset or skiplock.pack_now"),
    (
        PACKET_QUEUE,
        "skiplock.submit_packet or skiplock.retry_packet",
    ),
];
/// The built-in workflows' kinds, likewise.
pub const RESERVED_KINDS: &[(&str, &str)] = &[
    (FETCH_KIND, "skiplock.request_fetch"),
    (
        TIMER_RESET_KIND,
        "skiplock.timer_reset or skiplock.pack_now",
    ),
    (
        DO_THE_PACKING_KIND,
        "skiplock.timer_reset or skiplock.pack_now",
    ),
    (
        PACKET_KIND,
        "skiplock.submit_packet or skiplock.retry_packet",
    ),
];
/// What `skiplock._reserved_job` names for the maintenance queue and kinds.
pub const MAINTENANCE_USE: &str =
    "the worker's own maintenance (periodic jobs: skiplock.enqueue_periodic)";

/// The function(s) to use instead when a generic enqueue of a `kind` job into `queue` is
/// refused (the Rust twin of `skiplock._reserved_job`), or `None`: a job any caller may
/// enqueue.
pub fn reserved_job(kind: &str, queue: &str) -> Option<&'static str> {
    if queue.starts_with(RESERVED_QUEUE_PREFIX) || MAINTENANCE_KINDS.contains(&kind) {
        return Some(MAINTENANCE_USE);
    }
    // In the SQL's order: the first workflow whose kind or queue matches.
    let workflows: [(&[&str], &str, &str); 3] = [
        (&[FETCH_KIND], FETCH_QUEUE, RESERVED_QUEUES[0].1),
        (
            &[TIMER_RESET_KIND, DO_THE_PACKING_KIND],
            PACK_QUEUE,
            RESERVED_QUEUES[1].1,
        ),
        (&[PACKET_KIND], PACKET_QUEUE, RESERVED_QUEUES[2].1),
    ];
    workflows
        .iter()
        .find(|(kinds, q, _)| kinds.contains(&kind) || *q == queue)
        .map(|(_, _, u)| *u)
}

/// Every shared name, with where the SQL must use it.
pub const ALL: &[(&str, &[&str])] = &[
    (DEFAULT_QUEUE, &["api/10_core.sql"]),
    (FETCH_KIND, &["api/20_fetch.sql"]),
    (FETCH_QUEUE, &["api/20_fetch.sql"]),
    (FETCH_KEY_PREFIX, &["api/10_core.sql", "api/20_fetch.sql"]),
    (PACK_QUEUE, &["api/30_pack.sql"]),
    (TIMER_RESET_KIND, &["api/30_pack.sql"]),
    (
        DO_THE_PACKING_KIND,
        &["api/30_pack.sql", "pack/pending.sql"],
    ),
    (PACK_KEY_PREFIX, &["api/10_core.sql", "api/30_pack.sql"]),
    (PACKET_KIND, &["api/40_packets.sql"]),
    (PACKET_QUEUE, &["api/40_packets.sql"]),
    (
        PACKET_KEY_PREFIX,
        &["api/10_core.sql", "api/40_packets.sql"],
    ),
    (PACKET_PROCESSING_LOCK, &["api/40_packets.sql"]),
    (
        CHAOS_RECORD_KIND,
        &["chaos/fill.sql", "chaos/progress.sql", "chaos/verify.sql"],
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    /// Literals that are close to a shared name on purpose, and why.
    const NOT_NAMES: &[(&str, &str)] = &[(
        "timer_reset",
        "the SQL function's name, in the grants of 90_roles.sql",
    )];

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
                        "sql/{f} has '{lit}', a near miss of the shared name '{name}' (store::names)"
                    );
                }
            }
        }
        // The reserved prefixes are the ones skiplock._reserved_key_prefix lists.
        let core = &files["api/10_core.sql"];
        let listed = core.matches("WHEN starts_with(key, '").count();
        assert_eq!(
            listed,
            RESERVED_KEY_PREFIXES.len(),
            "10_core.sql lists other prefixes than store::names"
        );
        for p in RESERVED_KEY_PREFIXES {
            let case = format!("WHEN starts_with(key, '{p}') THEN '{p}'");
            assert!(core.contains(&case), "10_core.sql must have {case}");
        }
        // The reserved queues and kinds are the ones skiplock._reserved_job lists, each with
        // the same function to use, and nothing else.
        let start = core
            .find("FUNCTION skiplock._reserved_job(")
            .expect("10_core.sql defines skiplock._reserved_job");
        let body = &core[start..start + core[start..].find("$$;").unwrap()];
        for part in [
            format!("starts_with(queue, '{RESERVED_QUEUE_PREFIX}')"),
            format!(
                "kind IN ({})",
                MAINTENANCE_KINDS
                    .iter()
                    .map(|k| format!("'{k}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!("THEN '{}'", MAINTENANCE_USE.replace('\'', "''")),
        ] {
            assert!(
                body.contains(&part),
                "10_core.sql's _reserved_job must have {part}"
            );
        }
        let mut listed: Vec<String> = literals(body)
            .into_iter()
            .filter(|l| !l.contains(' ') && !l.contains('.'))
            .collect();
        listed.sort();
        let mut want: Vec<String> = RESERVED_QUEUES
            .iter()
            .chain(RESERVED_KINDS)
            .map(|(n, _)| n.to_string())
            .chain(MAINTENANCE_KINDS.iter().map(|k| k.to_string()))
            .collect();
        want.sort();
        want.dedup();
        listed.dedup();
        assert_eq!(
            listed, want,
            "10_core.sql's _reserved_job lists other queues and kinds than store::names"
        );
        for (name, use_) in RESERVED_QUEUES.iter().chain(RESERVED_KINDS) {
            assert_eq!(
                reserved_job(name, "x").or(reserved_job("x", name)),
                Some(*use_)
            );
            assert!(
                body.contains(&format!("THEN '{use_}'")),
                "10_core.sql must name {use_}"
            );
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
        assert_eq!(reserved_job("sleep", "packets"), Some(RESERVED_QUEUES[2].1));
        assert_eq!(reserved_job("fetch", "other"), Some(RESERVED_QUEUES[0].1));
        assert_eq!(
            reserved_job("timer-reset", "default"),
            Some(RESERVED_QUEUES[1].1)
        );
        assert_eq!(reserved_job("fetchy", "fetchq"), None);
    }
}
