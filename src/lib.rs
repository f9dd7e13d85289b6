//! # skiplock
//!
//! A Postgres-as-queue job runner. Every job is a row in `skiplock.jobs`, claimed with
//! `SELECT … FOR UPDATE SKIP LOCKED`; a worker pool runs them; operators enqueue with the
//! CLI or plain SQL (`SELECT skiplock.enqueue('noop')`) and inspect everything with `psql`.
//!
//! Start with [`prelude`]: a [`queue::JobArgs`] type names its kind, [`enqueue`] writes it
//! (in your transaction or on a pool), `Worker::builder(pool).settings(settings).register_typed(f)`
//! runs it, with the rescuer, reaper, retention and periodic scheduler installed by default.
//!
//! Layout: `store` (every SQL statement, the versioned SQL API, typed rows and errors),
//! [`queue`] (the job data model, typed jobs and the retry policy), [`worker`] (the pool that
//! runs jobs: builder, lifecycle phases, runtime tasks, and under it [`maintenance`]: reaper,
//! retention, periodic jobs), [`part`] (the trait an optional part, such as the built-in
//! workflows of the crate skiplock-workflows, registers itself through), [`config`] (settings as values; the environment is read only at the edge),
//! [`text`] (values shown to people, escaped). The `skiplock` command is the crate
//! `skiplock-cli` (crates/skiplock-cli).

/// Declares a module of the runtime's inside: crate-private, and public only with the
/// `internals` feature, which this crate's own tests enable (Cargo.toml) so they can reach
/// the statements and tasks they test one by one. Nothing outside this repository should
/// enable it: what it exposes has no stability promise. Without it, an inside item that only
/// an optional part (the console, the CLI, a workflow) or the tests use is unused in a build
/// of the core alone, hence the `dead_code` allowance there.
macro_rules! internal_mod {
    ($(#[$m:meta])* $name:ident) => {
        #[cfg(feature = "internals")]
        $(#[$m])*
        pub mod $name;
        #[cfg(not(feature = "internals"))]
        $(#[$m])*
        #[allow(dead_code)]
        pub(crate) mod $name;
    };
}

mod sql_text;

pub mod admin;
pub mod client;
pub mod config;
pub mod db;
pub mod doctor;
pub mod error;
pub mod metrics;
#[cfg(feature = "otel")]
pub mod otel;
pub mod part;
pub mod prelude;
pub mod queue;
internal_mod!(names);
internal_mod!(redact);
internal_mod!(store);
pub mod testing;
pub mod text;
internal_mod!(time);
pub mod worker;

pub use client::{
    Waited, enqueue, enqueue_flow, enqueue_job, enqueue_many, enqueue_with, signal, wait_for,
};
pub use db::connect;
pub use error::{Error, Result};
pub use queue::flow::{Flow, FlowIds};
pub use queue::{EnqueueOutcome, Enqueued};
pub use store::Pool;
pub use store::jobs::ManyJobs;
pub use store::schema::migrate;
/// The maintenance services every worker runs by default (they live under the worker).
pub use worker::maintenance;
