//! # skiplock
//!
//! A Postgres-as-queue job runner. Every job is a row in `skiplock.jobs`, claimed with
//! `SELECT … FOR UPDATE SKIP LOCKED`; a worker pool runs them; operators enqueue with the
//! CLI or plain SQL (`SELECT skiplock.enqueue('noop')`) and inspect everything with `psql`.
//!
//! Start with [`prelude`]: a [`queue::JobArgs`] type names its kind, [`enqueue`] writes it
//! (in your transaction or on a pool), `Worker::builder(pool, settings).register_typed(f)`
//! runs it, with the rescuer, reaper, retention and periodic scheduler installed by default.
//!
//! Layout: [`store`] (every SQL statement, the versioned SQL API, typed rows and errors),
//! [`queue`] (the job data model, typed jobs and the retry policy), [`worker`] (the pool that
//! runs jobs: builder, lifecycle phases, runtime tasks, and under it [`maintenance`]: reaper,
//! retention, periodic jobs), [`workflows`] (built-in handlers registered exactly as a user's
//! would be), [`config`] (settings as values; the environment is read only at the edge),
//! [`cli`] (the `skiplock` command).

#[cfg(feature = "apalis")]
pub mod apalis;
pub mod cli;
pub mod config;
pub mod db;
pub mod dbtime;
pub mod error;
pub mod metrics;
pub mod prelude;
pub mod progress;
pub mod queue;
pub mod redact;
pub mod store;
pub mod web;
pub mod worker;
pub mod workflows;

// Dev tools, not the library's API: the drivers behind `skiplock bench` and `skiplock chaos`
// (and tests/bench.rs, tests/faults.rs, tests/outage.rs). Hidden from the docs, no stability
// promise; only `cli` and those tests use them, and their SQL stays in the store layer
// (`store::bench`, `store::chaos`, hidden the same way), so "only the store runs SQL" holds.
#[doc(hidden)]
pub mod bench;
#[doc(hidden)]
pub mod chaos;

pub use error::{Error, Result};
pub use queue::typed::{enqueue, enqueue_with};
/// The maintenance services every worker runs by default (they live under the worker).
pub use worker::maintenance;
