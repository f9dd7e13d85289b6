//! skiplock's dev tools, out of the library: the benchmark ([`bench`], `skiplock-devtools
//! bench`, scripts/bench) and the fault-injection runs ([`chaos`], `skiplock-devtools chaos`,
//! scripts/chaos). The integration tests of this crate (tests/bench.rs, tests/faults.rs,
//! tests/partitions.rs, …) drive the same code at smoke size.

#[macro_use]
mod sql_text;
pub mod bench;
pub mod chaos;
