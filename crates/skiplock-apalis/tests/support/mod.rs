//! The shared fixtures (crates/skiplock-test-support); this crate has no binary.
#![allow(dead_code, unused_imports)]

pub use skiplock_test_support::*;
