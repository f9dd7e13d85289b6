//! `sql!("area", "name")`: the text of the statement `sql/<area>/<name>.sql` of this crate,
//! embedded at build time, as the core's store does with its own (src/sql_text.rs at the
//! repository's root): every statement of the dev tools stays a file under this crate's `sql/`.

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
