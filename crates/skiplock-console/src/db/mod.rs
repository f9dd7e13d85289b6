//! The console's connections ([`console`]), beside the core's `skiplock::db` (feature
//! `internals`), which this module names as its own, so the console's files reach its
//! connection setup and outage classification as they did inside the core.

pub mod console;

#[allow(unused_imports)]
pub(crate) use skiplock::db::*;
