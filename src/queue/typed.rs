//! Typed jobs: an args type names its kind once ([`JobArgs::KIND`]), so the code that
//! enqueues a job and the handler that runs it cannot disagree on a string. Enqueue with
//! [`enqueue`] / [`enqueue_with`]; register the handler with
//! [`crate::worker::WorkerBuilder::register_typed`], which finds the kind from the same type.
//! [`NewJob`] stays for kinds only known at run time (the CLI, SQL users).
//!
//! ```no_run
//! use skiplock::prelude::*;
//!
//! #[derive(Serialize, Deserialize)]
//! struct SendEmail { to: String }
//!
//! impl JobArgs for SendEmail {
//!     const KIND: &'static str = "send-email";
//! }
//!
//! # async fn demo(pool: skiplock::store::Pool) -> skiplock::Result<()> {
//! let mut tx = pool.begin().await?;
//! // … the caller's own writes in the same transaction …
//! skiplock::enqueue(&mut *tx, SendEmail { to: "a@b.c".into() }).await?;
//! tx.commit().await?;
//! skiplock::enqueue_with(&pool, SendEmail { to: "x@y.z".into() },
//!     JobOptions::new().queue("mail").priority(-1).unique_key("mail:x@y.z", OnConflict::Replace)).await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::enqueue::{NewJob, OnConflict, OnDependencyFailure, UniqueBy};
use crate::error::{Error, Result};

/// The args of a job kind known at compile time: the type is the contract between the code
/// that enqueues and the handler that runs it (see the module docs).
pub trait JobArgs: Serialize + DeserializeOwned + Send + 'static {
    /// The kind stored in `skiplock.jobs.kind` (what `skiplock jobs --kind` filters on).
    const KIND: &'static str;

    /// Defaults for every job of this type (queue, priority, attempts…); the options given
    /// to [`enqueue_with`] override them field by field.
    fn options() -> JobOptions {
        JobOptions::default()
    }
}

/// How to enqueue a job: every field unset means "the type's default, else skiplock's"
/// (queue `default`, due now, priority 0, 25 attempts, no unique key).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobOptions {
    /// Queue name.
    pub queue: Option<String>,
    /// When the job becomes due.
    pub run_at: Option<DateTime<Utc>>,
    /// Smaller runs first.
    pub priority: Option<i16>,
    /// Attempt limit.
    pub max_attempts: Option<i32>,
    /// Dedup / debounce key, and what to do when an available job holds it.
    pub unique_key: Option<(String, OnConflict)>,
    /// The key the queue's per-key limits (concurrency, rate) count the job under.
    pub limit_key: Option<String>,
    /// Uniqueness derived from the args, and what to do when an available job has the same.
    pub unique_by: Option<(UniqueBy, OnConflict)>,
    /// At most one such job created per window of this length.
    pub unique_for: Option<Duration>,
    /// Labels to filter by.
    pub tags: Option<Vec<String>>,
    /// What is about the job rather than its work (a JSON object).
    pub meta: Option<Value>,
    /// Jobs that must finish first (docs/flows.md).
    pub depends_on: Option<Vec<i64>>,
    /// What a failed dependency does to the job.
    pub on_dependency_failure: Option<OnDependencyFailure>,
}

impl JobOptions {
    /// No options: the type's defaults apply.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the queue.
    pub fn queue(mut self, q: impl Into<String>) -> Self {
        self.queue = Some(q.into());
        self
    }
    /// Sets when the job becomes due.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }
    /// Sets the priority (smaller runs first).
    pub fn priority(mut self, p: i16) -> Self {
        self.priority = Some(p);
        self
    }
    /// Sets the attempt limit.
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = Some(n);
        self
    }
    /// Sets the unique key and the conflict rule (`Keep`: one waiting job per key;
    /// `Replace`: debounce, see docs/concepts.md, "Unique keys").
    pub fn unique_key(mut self, key: impl Into<String>, on_conflict: OnConflict) -> Self {
        self.unique_key = Some((key.into(), on_conflict));
        self
    }
    /// Sets the key the queue's per-key limits count the job under (a host, a tenant…).
    pub fn limit_key(mut self, key: impl Into<String>) -> Self {
        self.limit_key = Some(key.into());
        self
    }
    /// Makes the job unique by its args (or some fields of them) instead of a key.
    pub fn unique_by(mut self, by: UniqueBy, on_conflict: OnConflict) -> Self {
        self.unique_by = Some((by, on_conflict));
        self
    }
    /// Creates at most one such job per window of `period` (docs/sql-reference.md,
    /// "Uniqueness").
    pub fn unique_for(mut self, period: Duration) -> Self {
        self.unique_for = Some(period);
        self
    }
    /// Sets the tags.
    pub fn tags<T: Into<String>>(mut self, tags: impl IntoIterator<Item = T>) -> Self {
        self.tags = Some(tags.into_iter().map(Into::into).collect());
        self
    }
    /// Sets the meta (a JSON object).
    pub fn meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }
    /// Makes the job wait until the jobs `ids` have finished (docs/flows.md).
    pub fn depends_on(mut self, ids: impl IntoIterator<Item = i64>) -> Self {
        self.depends_on = Some(ids.into_iter().collect());
        self
    }
    /// Sets what a failed dependency does to the job.
    pub fn on_dependency_failure(mut self, f: OnDependencyFailure) -> Self {
        self.on_dependency_failure = Some(f);
        self
    }
    /// These options, with every unset field taken from `base`.
    pub fn or(self, base: JobOptions) -> JobOptions {
        JobOptions {
            queue: self.queue.or(base.queue),
            run_at: self.run_at.or(base.run_at),
            priority: self.priority.or(base.priority),
            max_attempts: self.max_attempts.or(base.max_attempts),
            unique_key: self.unique_key.or(base.unique_key),
            limit_key: self.limit_key.or(base.limit_key),
            unique_by: self.unique_by.or(base.unique_by),
            unique_for: self.unique_for.or(base.unique_for),
            tags: self.tags.or(base.tags),
            meta: self.meta.or(base.meta),
            depends_on: self.depends_on.or(base.depends_on),
            on_dependency_failure: self.on_dependency_failure.or(base.on_dependency_failure),
        }
    }
    /// Applies the set fields to `job`.
    pub fn apply(self, mut job: NewJob) -> NewJob {
        if let Some(q) = self.queue {
            job = job.queue(q);
        }
        if let Some(t) = self.run_at {
            job = job.run_at(t);
        }
        if let Some(p) = self.priority {
            job = job.priority(p);
        }
        if let Some(n) = self.max_attempts {
            job = job.max_attempts(n);
        }
        if let Some((k, c)) = self.unique_key {
            job = job.unique_key(k, c);
        }
        if let Some(k) = self.limit_key {
            job = job.limit_key(k);
        }
        if let Some((by, c)) = self.unique_by {
            job = job.unique_by(by, c);
        }
        if let Some(p) = self.unique_for {
            job = job.unique_for(p);
        }
        if let Some(t) = self.tags {
            job.tags = t;
        }
        if let Some(m) = self.meta {
            job = job.meta(m);
        }
        if let Some(d) = self.depends_on {
            job = job.depends_on(d);
        }
        if let Some(f) = self.on_dependency_failure {
            job = job.on_dependency_failure(f);
        }
        job
    }
}

impl NewJob {
    /// The job for typed `args`: kind `A::KIND`, args serialised to a JSON object, the
    /// type's [`JobArgs::options`] then `options` applied. Args that do not serialise to a
    /// JSON object are [`Error::Invalid`] (the SQL API stores objects only).
    pub fn typed<A: JobArgs>(args: &A, options: JobOptions) -> Result<NewJob> {
        let value = serde_json::to_value(args).map_err(|e| {
            Error::Invalid(format!("cannot serialise args of kind {}: {e}", A::KIND))
        })?;
        if !value.is_object() {
            return Err(Error::Invalid(format!(
                "args of kind {} must serialise to a JSON object (a struct or a map), got {}",
                A::KIND,
                json_type(&value)
            )));
        }
        Ok(options.or(A::options()).apply(NewJob::new(A::KIND, value)))
    }
}

/// What kind of JSON value `v` is, for error messages ("a string", "an array").
pub fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn dependencies_in_the_options_reach_the_job_and_fall_back_to_the_type_s() {
        let base = JobOptions::new().depends_on([7]);
        let job = JobOptions::new()
            .on_dependency_failure(OnDependencyFailure::Run)
            .or(base)
            .apply(NewJob::new("k", serde_json::json!({})));
        assert_eq!(job.depends_on, vec![7]);
        assert_eq!(job.on_dependency_failure, OnDependencyFailure::Run);
        let own = JobOptions::new()
            .depends_on([1, 2])
            .or(JobOptions::new().depends_on([7]))
            .apply(NewJob::new("k", serde_json::json!({})));
        assert_eq!(own.depends_on, vec![1, 2]);
        assert_eq!(own.on_dependency_failure, OnDependencyFailure::Cancel);
    }

    #[derive(Serialize, Deserialize)]
    struct Mail {
        to: String,
    }
    impl JobArgs for Mail {
        const KIND: &'static str = "mail";
        fn options() -> JobOptions {
            JobOptions::new().queue("mail").max_attempts(3)
        }
    }

    #[derive(Serialize, Deserialize)]
    struct NotAnObject(u32);
    impl JobArgs for NotAnObject {
        const KIND: &'static str = "n";
    }

    #[test]
    fn typed_jobs_take_the_kind_and_defaults_from_the_type_and_options_override_them() {
        let j = NewJob::typed(&Mail { to: "a".into() }, JobOptions::new()).unwrap();
        assert_eq!(
            (
                j.kind.as_str(),
                j.queue.as_str(),
                j.max_attempts,
                j.priority
            ),
            ("mail", "mail", 3, 0)
        );
        assert_eq!(j.args, serde_json::json!({"to": "a"}));
        let j = NewJob::typed(
            &Mail { to: "a".into() },
            JobOptions::new()
                .queue("urgent")
                .priority(-5)
                .unique_key("k", OnConflict::Replace),
        )
        .unwrap();
        assert_eq!(
            (j.queue.as_str(), j.max_attempts, j.priority),
            ("urgent", 3, -5)
        );
        assert_eq!(
            (j.unique_key.as_deref(), j.on_conflict),
            (Some("k"), OnConflict::Replace)
        );
        assert_eq!(j.limit_key, None);
    }

    #[test]
    fn a_typed_job_can_carry_a_limit_key() {
        let j = NewJob::typed(
            &Mail { to: "a".into() },
            JobOptions::new().limit_key("example.test"),
        )
        .unwrap();
        assert_eq!(j.limit_key.as_deref(), Some("example.test"));
        let base = JobOptions::new().limit_key("base");
        assert_eq!(
            JobOptions::new().or(base.clone()).limit_key.as_deref(),
            Some("base")
        );
        assert_eq!(
            JobOptions::new()
                .limit_key("mine")
                .or(base)
                .limit_key
                .as_deref(),
            Some("mine")
        );
    }

    #[test]
    fn args_that_are_not_an_object_are_refused_naming_the_kind() {
        let e = NewJob::typed(&NotAnObject(1), JobOptions::new())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "args of kind n must serialise to a JSON object (a struct or a map), got a number"
        );
    }
}
