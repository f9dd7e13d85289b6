//! `sql!("area", "name")`: the text of the statement `sql/<area>/<name>.sql`, embedded at
//! build time, for the library's store (src/store/mod.rs): every statement stays a file under
//! `sql/`.

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
// The store names it by path (`store::sql`).
pub(crate) use sql;
