//! The shared fixtures (crates/skiplock-test-support), with the `skiplock` binary of this
//! package as the binary the tests drive.
#![allow(dead_code, unused_imports)]

pub use skiplock_test_support::*;

skiplock_test_support::binary!("skiplock");
