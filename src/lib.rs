//! # skiplock
//!
//! A Postgres-as-queue job runner. Every job is a row in `skiplock.jobs`, claimed with
//! `SELECT … FOR UPDATE SKIP LOCKED`; a worker pool runs them; operators enqueue with the
//! CLI or plain SQL (`SELECT skiplock.enqueue('noop')`) and inspect everything with `psql`.
//!
//! Layout: [`store`] (every SQL statement, the versioned SQL API, typed rows and errors),
//! [`queue`] (the job data model and the retry policy), [`worker`] (the pool that runs
//! jobs), [`maintenance`] (rescuer, reaper, retention, periodic jobs), [`workflows`]
//! (built-in handlers registered exactly as a user's would be), [`cli`] (the `skiplock`
//! command).

#[cfg(feature = "apalis")]
pub mod apalis;
pub mod bench;
pub mod chaos;
pub mod cli;
pub mod config;
pub mod db;
pub mod dbtime;
pub mod error;
pub mod maintenance;
pub mod progress;
pub mod queue;
pub mod redact;
pub mod store;
pub mod web;
pub mod worker;
pub mod workflows;

pub use error::{Error, Result};
