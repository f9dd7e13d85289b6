//! `sql!("area", "name")`: the text of the statement `sql/<area>/<name>.sql` of the crate that
//! calls it, embedded at build time (`env!("CARGO_MANIFEST_DIR")` expands in the calling
//! crate), so every statement stays a file under its crate's `sql/`: the library's store
//! (src/store/mod.rs), the workflows' (crates/skiplock-workflows/src/store/mod.rs) and the dev
//! tools' (`#[macro_use] extern crate skiplock` in crates/skiplock-devtools/src/lib.rs).

#[doc(hidden)]
#[macro_export]
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
