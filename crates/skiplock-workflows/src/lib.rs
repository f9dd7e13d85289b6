//! # skiplock-workflows
//!
//! skiplock's built-in workflows: plain handlers, registered with the worker exactly as a
//! user's handlers would be, each an optional part of skiplock ([`skiplock::part::Part`]) with
//! its own tables, SQL API and reserved names, and a cargo feature of this crate:
//!
//! - [`fetch`]: polite, scheduled page fetching (the crawler's "entree").
//! - [`pack`]: debounced packing of a host's pages into a SQLite artifact.
//! - [`packets`]: the six-state packet pipeline.
//!
//! [`parts`] has the three as parts (`skiplock migrate` installs their schema, a worker runs
//! them); [`store`] their statements (this crate's `sql/`), beside the core's store, which it
//! names as its own (`skiplock::store`, feature `internals`: no stability promise between the
//! crates of this repository, which are released together). docs/layout.md maps the files.

// The core's modules, under the names the workflows' files have used since they were part
// of the core (`crate::error::Result`, `crate::worker::Handler`, ...).
#[allow(unused_imports)]
use skiplock::{config, error, time, worker};

#[cfg(feature = "fetch")]
pub mod fetch;
pub mod metrics;
pub mod names;
#[cfg(feature = "pack")]
pub mod pack;
#[cfg(feature = "packets")]
pub mod packets;
pub mod parts;
pub mod store;

pub use parts::{WorkflowSettings, register_all, schemas};
