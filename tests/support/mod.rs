//! The shared fixtures (crates/skiplock-test-support). The core has no binary: the tests that
//! drive `skiplock` are crates/skiplock-cli's.
#![allow(dead_code, unused_imports)]

pub use skiplock_test_support::*;
