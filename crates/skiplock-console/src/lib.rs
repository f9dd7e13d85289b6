//! # skiplock-console
//!
//! skiplock's operator console (`skiplock web`) and Prometheus exporter (a worker's
//! `/metrics`), with the HTTP server they share; the core crate `skiplock` has no HTTP server.
//!
//! - [`web`]: the console: pages, templates, assets, access (tokens, sessions, CSRF), the
//!   `Host` names it answers for.
//! - [`http`]: the HTTP/1 server with its read timeout and the `Host` checks, which the
//!   console and the exporter share.
//! - [`metrics`]: the Prometheus recorder of the worker's series (`skiplock::metrics`), the
//!   database's part of a scrape and a worker's `/metrics` endpoint, whose settings come in
//!   as values ([`metrics::serve::EndpointSettings`]; the `skiplock` command reads them).
//! - [`db`]: the console's connections ([`db::console::connect`]).
//! - [`store`]: the console's statements (`sql/web/`); changes go through the SQL API, the
//!   bulk ones through the core's (`skiplock::admin::cancel_jobs`/`retry_jobs`).
//!
//! The console runs the core's statements one by one, so it depends on `skiplock` with the
//! feature `internals` (no stability promise between the crates of this repository, which
//! are released together); docs/layout.md maps the files.

// The core's modules, under the names the console's files have used since they were part of
// the core (`crate::queue::JobState`, `crate::db::outage`, ...).
use skiplock::{Error, admin, config, error, queue, redact, text, time};
use skiplock_workflows as workflows;

pub mod db;
pub mod http;
pub mod metrics;
pub mod store;
pub mod web;
