//! The shared fixtures (crates/skiplock-test-support), with this crate's binary,
//! `skiplock-devtools` (the `skiplock` commands plus the dev tools'), as the binary the tests
//! drive.
#![allow(dead_code, unused_imports)]

pub use skiplock_test_support::*;

skiplock_test_support::binary!("skiplock-devtools");
