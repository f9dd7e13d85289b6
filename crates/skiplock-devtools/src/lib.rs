//! skiplock's dev tools, out of the library: the benchmark ([`bench`], `skiplock-devtools
//! bench`, scripts/bench) and the fault-injection runs ([`chaos`], `skiplock-devtools chaos`,
//! scripts/chaos). The integration tests of this crate (tests/bench.rs, tests/faults.rs,
//! tests/partitions.rs, …) drive the same code at smoke size.

// `sql!` (the core's src/sql_text.rs): this crate's statements are files under its own `sql/`.
#[macro_use]
extern crate skiplock;
pub mod bench;
pub mod chaos;
