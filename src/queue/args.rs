//! A job's args as the database stored them: the JSON text of the `args` column, read without
//! parsing it.
//!
//! Every reader of a job row (the claim, `skiplock job`, the console, the apalis storage)
//! reads args as text, and only the code that needs their value parses them, one job at a
//! time. Valid jsonb is not always JSON that serde_json reads (nesting of 128 levels or
//! more, a number outside the range of an `f64`): enqueue refuses both (sql/api/10_core.sql,
//! `skiplock._unreadable_args`), but a row written past the API (by a superuser, or before the
//! check existed) must still fail alone, as a discarded job with the decode error, not fail
//! the decoding of every row read with it (docs/errors.md;
//! crates/skiplock-cli/tests/worker.rs `a_row_the_worker_cannot_decode_is_discarded_alone_and_its_batch_runs`).

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};
use serde_json::Value;
use sqlx::postgres::{PgTypeInfo, PgValueFormat, PgValueRef};
use sqlx::{Decode, Postgres, Type};

/// The JSON text of a job's `args`, as stored (Postgres's rendering of the jsonb value).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RawArgs(Box<str>);

impl RawArgs {
    /// Args from JSON text (not checked: [`RawArgs::parse`] reports what is wrong with it).
    pub fn new(text: impl Into<Box<str>>) -> Self {
        RawArgs(text.into())
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The args as `T`, parsed straight from the text; the error names what serde_json could
    /// not read (a missing field, a wrong type, "recursion limit exceeded", "number out of
    /// range").
    pub fn parse<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(&self.0)
    }

    /// The args as a JSON value (see [`RawArgs::parse`] for the errors).
    pub fn to_value(&self) -> serde_json::Result<Value> {
        self.parse()
    }
}

impl From<&Value> for RawArgs {
    fn from(v: &Value) -> Self {
        RawArgs(v.to_string().into())
    }
}

impl From<Value> for RawArgs {
    fn from(v: Value) -> Self {
        RawArgs::from(&v)
    }
}

/// Equal when the text parses to that value (never for text that does not parse).
impl PartialEq<Value> for RawArgs {
    fn eq(&self, other: &Value) -> bool {
        self.to_value().is_ok_and(|v| v == *other)
    }
}

/// The text as stored.
impl fmt::Display for RawArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for RawArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// Written into JSON output as the JSON it is (not as a string), without parsing its value:
/// serde_json's raw values are only checked for syntax, which Postgres's rendering of a jsonb
/// value always passes (a text that does not is written as a string, so output never fails).
impl Serialize for RawArgs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match serde_json::value::RawValue::from_string(self.0.to_string()) {
            Ok(raw) => raw.serialize(s),
            Err(_) => s.serialize_str(&self.0),
        }
    }
}

impl Type<Postgres> for RawArgs {
    fn type_info() -> PgTypeInfo {
        <sqlx::types::Json<Value> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <sqlx::types::Json<Value> as Type<Postgres>>::compatible(ty)
    }
}

/// Reads the column's bytes as text: the binary jsonb format is a version byte (1) followed
/// by the JSON text (as sqlx's own `Json` decoding reads it), json and the text format are
/// the text itself.
impl<'r> Decode<'r, Postgres> for RawArgs {
    fn decode(value: PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let binary_jsonb = value.format() == PgValueFormat::Binary
            && *sqlx::ValueRef::type_info(&value) == <Self as Type<Postgres>>::type_info();
        let mut bytes = value.as_bytes()?;
        if binary_jsonb {
            match bytes.split_first() {
                Some((1, rest)) => bytes = rest,
                Some((v, _)) => {
                    return Err(format!("unsupported jsonb format version {v} (expected 1)").into());
                }
                None => return Err("empty jsonb value".into()),
            }
        }
        Ok(RawArgs(std::str::from_utf8(bytes)?.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_that_serde_json_cannot_read_is_kept_and_its_error_named() {
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        let a = RawArgs::new(deep.clone());
        assert_eq!(a.as_str(), deep);
        let e = a.to_value().unwrap_err().to_string();
        assert!(e.contains("recursion limit exceeded"), "{e}");
        let e = RawArgs::new(r#"{"x": 1e400}"#)
            .to_value()
            .unwrap_err()
            .to_string();
        assert!(e.contains("number out of range"), "{e}");
        assert_ne!(RawArgs::new(r#"{"x": 1e400}"#), json!({"x": null}));
    }

    #[test]
    fn serde_json_reads_127_nested_containers_and_not_128() {
        // The limit enqueue enforces (skiplock._unreadable_args, sql/api/10_core.sql).
        let nest = |d: usize| RawArgs::new(format!("{}1{}", "{\"a\":".repeat(d), "}".repeat(d)));
        assert!(nest(127).to_value().is_ok());
        assert!(nest(128).to_value().is_err());
        // Straight into a type as well, not only into a Value.
        assert!(nest(127).parse::<serde_json::Map<String, Value>>().is_ok());
        assert!(nest(128).parse::<serde_json::Map<String, Value>>().is_err());
    }

    #[test]
    fn serde_json_reads_the_numbers_postgres_prints_below_the_bound_enqueue_enforces() {
        // Postgres sends a jsonb number as plain decimal digits: the bound enqueue enforces
        // (skiplock._unreadable_args, sql/api/10_core.sql) is 17976931348623156225 followed
        // by 289 zeros, in magnitude.
        let sql = include_str!("../../sql/api/10_core.sql");
        assert!(sql.contains("@ >= 1.7976931348623156225e308 || @ <= -1.7976931348623156225e308"));
        let digits =
            |head: &str, tail: char, n: usize| format!("{head}{}", tail.to_string().repeat(n));
        let below = digits("17976931348623156224", '9', 289);
        let bound = digits("17976931348623156225", '0', 289);
        // f64::MAX's shortest form, 1.7976931348623157e308, as Postgres prints it.
        let max_shortest = digits("17976931348623157", '0', 292);
        for ok in [
            below.clone(),
            format!("-{below}"),
            format!("{below}.99"),
            digits("1", '0', 308),
            "0.".to_string() + &"0".repeat(399) + "1",
        ] {
            let a = RawArgs::new(format!(r#"{{"x": {ok}}}"#));
            assert!(a.to_value().is_ok(), "{ok:.40}");
        }
        for bad in [
            bound.clone(),
            format!("-{bound}"),
            max_shortest,
            digits("1", '0', 309),
        ] {
            let a = RawArgs::new(format!(r#"{{"x": {bad}}}"#));
            let e = a.to_value().unwrap_err().to_string();
            assert!(e.contains("number out of range"), "{bad:.40}: {e}");
        }
    }

    #[test]
    fn serializes_as_the_json_it_holds() {
        let a = RawArgs::new(r#"{"x": 1e400}"#);
        assert_eq!(
            serde_json::to_string(&json!({"args": "placeholder"})).unwrap(),
            r#"{"args":"placeholder"}"#
        );
        #[derive(Serialize)]
        struct Row {
            args: RawArgs,
        }
        assert_eq!(
            serde_json::to_string(&Row { args: a }).unwrap(),
            r#"{"args":{"x": 1e400}}"#
        );
    }
}
