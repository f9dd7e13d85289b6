//! The console's statements ([`web`], its files in this crate's `sql/web/`), beside the
//! core's store, which this module names as its own (`skiplock::store`, feature `internals`),
//! so the console's files call `super::query_as`, `crate::store::control::pause` and the
//! core's bulk statements (`store::bulk`) as they did inside the core.

pub mod web;

pub use skiplock::store::Pool;
#[allow(unused_imports)]
pub(crate) use skiplock::store::*;
