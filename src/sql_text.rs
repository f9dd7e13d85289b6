//! `sql!("area", "name")`: the text of the statement `sql/<area>/<name>.sql`, embedded at
//! build time. One file for the library's store (src/store/mod.rs) and the binary's dev tools
//! (src/bench/mod.rs, src/chaos/mod.rs), which include it by path: every statement stays a
//! file under `sql/`.

macro_rules! sql {
    ($area:literal, $name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/sql/",
            $area,
            "/",
            $name,
            ".sql"
        ))
    };
}
// The store names it by path (`store::sql`); the dev tools take it by `#[macro_use]`.
#[allow(unused_imports)]
pub(crate) use sql;
