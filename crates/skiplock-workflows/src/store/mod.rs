//! The workflows' statements (`sql/<area>/<name>.sql` of this crate, one function per
//! statement, named after it, as in the core's store): [`fetch`], [`pack`], [`packets`] and
//! the packet pipeline's enum [`types`], beside the core's store, which this module names as
//! its own (`skiplock::store`, feature `internals`), so the files call `super::query_as` and
//! `crate::store::control::set_queue_limit` as they did inside the core.

#[cfg(feature = "fetch")]
pub mod fetch;
#[cfg(feature = "pack")]
pub mod pack;
#[cfg(feature = "packets")]
pub mod packets;
#[cfg(feature = "packets")]
pub mod types;

pub use skiplock::store::Pool;
#[allow(unused_imports)]
pub(crate) use skiplock::store::*;

// The text of this crate's `sql/<area>/<name>.sql`, compiled in (the core's `sql!`, which
// reads the calling crate's files).
#[allow(unused_imports)]
pub(crate) use skiplock::sql;
