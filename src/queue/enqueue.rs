//! A job to enqueue ([`NewJob`]) and the checks made before the round trip. Enqueueing
//! itself ([`crate::store::jobs::enqueue`]) goes through the same SQL functions psql users
//! call, so the rules (validation, unique keys, NOTIFY) live in one place.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::names::{DEFAULT_QUEUE, reserved_job, reserved_key_prefix};

/// What to do when an available job already holds the new job's `unique_key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    /// Leave the existing job untouched and return its id.
    #[default]
    Keep,
    /// Update the existing job with the new args, `scheduled_at`, priority and max_attempts
    /// (debounce); its attempt count starts again at 0 and its earlier errors stay. (If an
    /// attempt was ever taken away from a worker, the count goes on and max_attempts is
    /// raised by the same amount instead, so that worker's late ack stays fenced off; see
    /// `skiplock._enqueue` and docs/sql-reference.md.)
    Replace,
}

impl OnConflict {
    /// The SQL API's word for it (`on_conflict => 'keep' | 'replace'`).
    pub fn as_str(self) -> &'static str {
        match self {
            OnConflict::Keep => "keep",
            OnConflict::Replace => "replace",
        }
    }
}

/// What a job does when one of the jobs it depends on is discarded or cancelled
/// (`on_dependency_failure` in SQL; docs/flows.md, "When a dependency fails").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnDependencyFailure {
    /// It is cancelled too (with "dependency N discarded" in its errors), and so are the jobs
    /// that depend on it.
    #[default]
    Cancel,
    /// It runs anyway once every dependency has finished, however: a finaliser or a batch's
    /// callback, which reads how they went from [`crate::worker::JobContext::dependency_results`].
    Run,
}

impl OnDependencyFailure {
    /// The SQL API's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnDependencyFailure::Cancel => "cancel",
            OnDependencyFailure::Run => "run",
        }
    }
}

/// What a job's uniqueness is derived from instead of a `unique_key` (`unique_by` in SQL;
/// docs/sql-reference.md, "Uniqueness"): its whole args, or some of their top-level fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UniqueBy {
    /// Kind + queue + the args' hash (`unique_by => 'args'`).
    Args,
    /// Kind + queue + these top-level fields of the args (`unique_by => 'args:a,b'`).
    Fields(Vec<String>),
}

impl UniqueBy {
    /// The SQL API's word for it.
    pub fn to_sql(&self) -> String {
        match self {
            UniqueBy::Args => "args".into(),
            UniqueBy::Fields(f) => format!("args:{}", f.join(",")),
        }
    }
}

impl std::str::FromStr for UniqueBy {
    type Err = String;
    /// `args` or `args:a,b` (what `--unique-by` takes).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.strip_prefix("args") {
            Some("") => Ok(UniqueBy::Args),
            Some(rest) => {
                let fields: Vec<String> = rest
                    .strip_prefix(':')
                    .unwrap_or("")
                    .split(',')
                    .map(|f| f.trim().to_string())
                    .collect();
                if rest.starts_with(':') && fields.iter().all(|f| !f.is_empty()) {
                    Ok(UniqueBy::Fields(fields))
                } else {
                    Err(format!(
                        "unique_by must be 'args' or 'args:<field>,<field>...', got '{s}'"
                    ))
                }
            }
            None => Err(format!(
                "unique_by must be 'args' or 'args:<field>,<field>...', got '{s}'"
            )),
        }
    }
}

/// A job to enqueue. Built with [`NewJob::new`] and the chained setters.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Handler name.
    pub kind: String,
    /// Arguments, a JSON object.
    pub args: Value,
    /// Queue name (default `default`).
    pub queue: String,
    /// When it becomes due (`None`: now).
    pub run_at: Option<DateTime<Utc>>,
    /// Smaller runs first (default 0).
    pub priority: i16,
    /// Attempt limit (default 25).
    pub max_attempts: i32,
    /// Dedup / debounce key.
    pub unique_key: Option<String>,
    /// Conflict rule for `unique_key`.
    pub on_conflict: OnConflict,
    /// The key the queue's per-key limits count this job under (a host, a tenant, ...).
    pub limit_key: Option<String>,
    /// Labels to filter by (at most 32, each 1 to 100 characters; stored sorted, once each).
    pub tags: Vec<String>,
    /// What is about the job rather than its work (a JSON object; `None`: `{}`).
    pub meta: Option<Value>,
    /// Derive the unique key from the args (excludes `unique_key`).
    pub unique_by: Option<UniqueBy>,
    /// At most one such job created per window of this length (whatever became of it).
    pub unique_for: Option<Duration>,
    /// Jobs that must finish before this one may run (docs/flows.md): it is `waiting` until
    /// then. Empty: none.
    pub depends_on: Vec<i64>,
    /// What a failed dependency does to it.
    pub on_dependency_failure: OnDependencyFailure,
}

impl NewJob {
    /// A job of `kind` with `args`, due now, in the default queue.
    pub fn new(kind: impl Into<String>, args: Value) -> Self {
        NewJob {
            kind: kind.into(),
            args,
            queue: DEFAULT_QUEUE.into(),
            run_at: None,
            priority: 0,
            max_attempts: 25,
            unique_key: None,
            on_conflict: OnConflict::Keep,
            limit_key: None,
            tags: Vec::new(),
            meta: None,
            unique_by: None,
            unique_for: None,
            depends_on: Vec::new(),
            on_dependency_failure: OnDependencyFailure::Cancel,
        }
    }
    /// Sets the queue.
    pub fn queue(mut self, q: impl Into<String>) -> Self {
        self.queue = q.into();
        self
    }
    /// Sets when the job becomes due.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }
    /// Sets the priority.
    pub fn priority(mut self, p: i16) -> Self {
        self.priority = p;
        self
    }
    /// Sets the attempt limit.
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = n;
        self
    }
    /// Sets the key the queue's per-key limits (concurrency, rate) count this job under.
    pub fn limit_key(mut self, key: impl Into<String>) -> Self {
        self.limit_key = Some(key.into());
        self
    }
    /// Sets the unique key and what to do on conflict.
    pub fn unique_key(mut self, key: impl Into<String>, on_conflict: OnConflict) -> Self {
        self.unique_key = Some(key.into());
        self.on_conflict = on_conflict;
        self
    }
    /// Makes the job unique by its args (or some of their fields) instead of a key, and what
    /// to do when an available job has the same.
    pub fn unique_by(mut self, by: UniqueBy, on_conflict: OnConflict) -> Self {
        self.unique_by = Some(by);
        self.on_conflict = on_conflict;
        self
    }
    /// Creates at most one such job (same kind, queue and key or args) per window of `period`.
    pub fn unique_for(mut self, period: Duration) -> Self {
        self.unique_for = Some(period);
        self
    }
    /// Adds a tag.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }
    /// Sets the meta (a JSON object).
    pub fn meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }
    /// Makes the job wait until the jobs `ids` have finished (they may have been enqueued in
    /// the same transaction).
    pub fn depends_on(mut self, ids: impl IntoIterator<Item = i64>) -> Self {
        self.depends_on.extend(ids);
        self
    }
    /// Sets what a failed dependency does to the job.
    pub fn on_dependency_failure(mut self, f: OnDependencyFailure) -> Self {
        self.on_dependency_failure = f;
        self
    }
}

/// Where `v` holds a NUL character (`\u0000`), as a JSON path like `$.a[2]`: Postgres
/// cannot store NUL in jsonb or text and would answer with an obscure escape-sequence error.
pub fn find_nul(v: &Value) -> Option<String> {
    fn walk(v: &Value, path: &mut String) -> bool {
        match v {
            Value::String(s) => s.contains('\0'),
            Value::Array(a) => a.iter().enumerate().any(|(i, x)| {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let found = walk(x, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            Value::Object(o) => o.iter().any(|(k, x)| {
                let len = path.len();
                path.push_str(&format!(".{k}"));
                let found = k.contains('\0') || walk(x, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            _ => false,
        }
    }
    let mut path = String::from("$");
    walk(v, &mut path).then_some(path)
}

/// Rejects a NUL character in the job field `name` (Postgres cannot store one in text and
/// would answer with an obscure error).
pub fn check_text(name: &str, value: Option<&str>) -> Result<()> {
    if value.is_some_and(|v| v.contains('\0')) {
        return Err(Error::Invalid(format!(
            "job {name} contains a NUL character, which Postgres cannot store"
        )));
    }
    Ok(())
}

/// Rejects NUL characters in a job's text fields and args with a message that says so.
pub fn check_nul(
    kind: &str,
    queue: &str,
    unique_key: Option<&str>,
    limit_key: Option<&str>,
    args: &[&Value],
) -> Result<()> {
    for (name, value) in [
        ("kind", Some(kind)),
        ("queue", Some(queue)),
        ("unique_key", unique_key),
        ("limit_key", limit_key),
    ] {
        check_text(name, value)?;
    }
    for a in args {
        if let Some(path) = find_nul(a) {
            return Err(Error::Invalid(format!(
                "job args contain a NUL character (\\u0000) at {path}, which Postgres cannot store in jsonb; encode binary data (e.g. base64)"
            )));
        }
    }
    Ok(())
}

/// Refuses a unique key in a reserved namespace, naming the prefix and what to use, before the
/// round trip (`skiplock._reserved_key_prefix`, built by `sql/api/80_reserved.sql`, is the
/// rule the database enforces; `reserved_key_prefix` its twin for the parts this program
/// has): a generic enqueue may not create or replace such a key, so no caller can squat or
/// steer a workflow's job.
pub fn check_key(key: Option<&str>) -> Result<()> {
    match key.and_then(reserved_key_prefix) {
        Some(r) => Err(Error::Invalid(format!(
            "unique_key prefix '{}' is reserved for skiplock's own functions (use {})",
            r.name, r.use_instead
        ))),
        None => Ok(()),
    }
}

/// Refuses a job of a queue or kind reserved to skiplock's own functions, naming the function
/// to use, before the round trip (`skiplock._reserved_job`, built by `sql/api/80_reserved.sql`,
/// is the rule the database enforces; `reserved_job` its twin): the built-in workflows'
/// queues and kinds, and the `skiplock.` queues of the maintenance jobs.
pub fn check_reserved_job(kind: &str, queue: &str) -> Result<()> {
    match reserved_job(kind, queue) {
        Some(use_) => Err(Error::Invalid(format!(
            "a '{kind}' job in queue '{queue}' is reserved for skiplock's own functions: use {use_}"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod nul_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nul_characters_are_found_with_their_path() {
        assert_eq!(
            find_nul(&json!({"a": [1, "x\u{0}"]})),
            Some("$.a[1]".into())
        );
        assert_eq!(
            find_nul(&json!({"a": {"b": "ok"}, "c": "\u{0}"})),
            Some("$.c".into())
        );
        assert_eq!(
            find_nul(&json!({"a": [1, "x"], "q": "'; DROP TABLE"})),
            None
        );
        let e = check_nul("noop", "default", None, None, &[&json!({"s": "\u{0}"})]).unwrap_err();
        assert!(e.to_string().contains("(\\u0000) at $.s"), "{e}");
        assert!(check_nul("no\0op", "default", None, None, &[]).is_err());
        assert!(check_nul("noop", "default", Some("k\0"), None, &[]).is_err());
        assert!(check_nul("noop", "default", None, Some("k\0"), &[]).is_err());
        assert!(check_nul("noop", "default", Some("k"), Some("h"), &[&json!({})]).is_ok());
    }
}
