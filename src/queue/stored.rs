//! A JSON column of a job row other than its args (`meta`, `result`, `errors`), decoded row by
//! row: its value when serde_json reads the stored text, else the text and serde_json's error.
//!
//! Valid jsonb is not always JSON serde_json reads (128 nested containers or more, a number
//! outside the range of an `f64`). Enqueue refuses both, but a row written past the API (by a
//! role with write access to `skiplock.jobs`, or before the check existed) must still fail
//! alone: decoded as a plain `serde_json::Value`, one such column failed the decoding of every
//! row read with it — a whole claim batch after its `UPDATE` had committed, a whole listing
//! (docs/security.md, "One row's JSON fails that row alone"). Args are read as text and parsed by each
//! job's handler ([`super::RawArgs`]); these columns are parsed where they are read, which
//! costs what the plain decode did, and an unreadable one is kept as [`StoredJson::Unreadable`].

use std::fmt;

use serde::{Serialize, Serializer};
use serde_json::Value;
use sqlx::postgres::{PgTypeInfo, PgValueFormat, PgValueRef};
use sqlx::{Decode, Postgres, Type};

/// A JSON column as read from its row.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredJson {
    /// What serde_json read.
    Value(Value),
    /// Stored text serde_json cannot read.
    Unreadable(Unreadable),
}

/// Stored JSON text serde_json cannot read, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The text as stored (Postgres's rendering of the jsonb value).
    pub text: Box<str>,
    /// serde_json's error ("recursion limit exceeded", "number out of range", with where).
    pub error: String,
}

impl StoredJson {
    /// Reads `text` (what the database stored).
    pub fn parse(text: &str) -> Self {
        Self::from_bytes(text.as_bytes())
    }

    fn from_bytes(bytes: &[u8]) -> Self {
        match serde_json::from_slice(bytes) {
            Ok(v) => StoredJson::Value(v),
            Err(e) => StoredJson::Unreadable(Unreadable {
                text: String::from_utf8_lossy(bytes).into(),
                error: e.to_string(),
            }),
        }
    }

    /// The value, or `None` when it could not be read.
    pub fn value(&self) -> Option<&Value> {
        match self {
            StoredJson::Value(v) => Some(v),
            StoredJson::Unreadable(_) => None,
        }
    }

    /// The value, or what made it unreadable.
    pub fn readable(&self) -> Result<&Value, &Unreadable> {
        match self {
            StoredJson::Value(v) => Ok(v),
            StoredJson::Unreadable(u) => Err(u),
        }
    }

    /// The value, or what made it unreadable (taking it).
    pub fn into_readable(self) -> Result<Value, Unreadable> {
        match self {
            StoredJson::Value(v) => Ok(v),
            StoredJson::Unreadable(u) => Err(u),
        }
    }

    /// For people (`skiplock job`, the console): the value as compact JSON, or the text as
    /// stored followed by why it cannot be read.
    pub fn describe(&self) -> String {
        match self {
            StoredJson::Value(v) => v.to_string(),
            StoredJson::Unreadable(u) => format!("{} (unreadable: {})", u.text, u.error),
        }
    }

    /// Whether this is the empty object `{}` (a job's meta when none was given).
    pub fn is_empty_object(&self) -> bool {
        self.value()
            .and_then(Value::as_object)
            .is_some_and(|m| m.is_empty())
    }
}

/// The value, and `null` for an unreadable column (as serde_json's indexing gives `null` for a
/// key that is not there): `row.meta["tenant"]` reads as it did when the column was a plain
/// `Value`. [`StoredJson::readable`] tells an unreadable column from a stored `null`.
impl std::ops::Deref for StoredJson {
    type Target = Value;

    fn deref(&self) -> &Value {
        static NULL: Value = Value::Null;
        self.value().unwrap_or(&NULL)
    }
}

impl Default for StoredJson {
    /// `{}`.
    fn default() -> Self {
        StoredJson::Value(Value::Object(Default::default()))
    }
}

impl From<Value> for StoredJson {
    fn from(v: Value) -> Self {
        StoredJson::Value(v)
    }
}

/// Equal when the column was read and holds that value.
impl PartialEq<Value> for StoredJson {
    fn eq(&self, other: &Value) -> bool {
        self.value() == Some(other)
    }
}

/// The value as compact JSON, or the unreadable text as stored.
impl fmt::Display for StoredJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoredJson::Value(v) => fmt::Display::fmt(v, f),
            StoredJson::Unreadable(u) => f.write_str(&u.text),
        }
    }
}

/// The value; unreadable text as the JSON it is (as [`super::RawArgs`] writes itself), or as a
/// string where even its syntax is broken, so output never fails.
impl Serialize for StoredJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StoredJson::Value(v) => v.serialize(s),
            StoredJson::Unreadable(u) => {
                match serde_json::value::RawValue::from_string(u.text.to_string()) {
                    Ok(raw) => raw.serialize(s),
                    Err(_) => s.serialize_str(&u.text),
                }
            }
        }
    }
}

impl Type<Postgres> for StoredJson {
    fn type_info() -> PgTypeInfo {
        <sqlx::types::Json<Value> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <sqlx::types::Json<Value> as Type<Postgres>>::compatible(ty)
    }
}

/// The bytes as sqlx's own `Json` decoding reads them (binary jsonb: a version byte, 1, then
/// the text), parsed the same way (`serde_json::from_slice`); only a failure of that parse is
/// kept instead of returned. A wrong jsonb version is still an error: that is no row's data
/// but a server this build cannot read at all.
impl<'r> Decode<'r, Postgres> for StoredJson {
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
        Ok(Self::from_bytes(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn readable_text_is_its_value_and_unreadable_text_is_kept_with_its_error() {
        assert_eq!(
            StoredJson::parse(r#"{"a": [1, "x"]}"#),
            json!({"a": [1, "x"]})
        );
        let deep = format!("{{\"m\": {}1{}}}", "[".repeat(300), "]".repeat(300));
        for (text, want) in [
            (deep.as_str(), "recursion limit exceeded"),
            (r#"{"m": 1e400}"#, "number out of range"),
        ] {
            let s = StoredJson::parse(text);
            let u = s.readable().unwrap_err();
            assert_eq!(&*u.text, text);
            assert!(u.error.contains(want), "{}", u.error);
            assert_eq!(s.to_string(), text);
            assert_eq!(s.describe(), format!("{text} (unreadable: {})", u.error));
            assert!(!s.is_empty_object());
        }
        assert!(StoredJson::default().is_empty_object());
        assert!(StoredJson::parse("{}").is_empty_object());
    }

    #[test]
    fn serializes_the_value_or_the_unreadable_text_as_json() {
        #[derive(Serialize)]
        struct Row {
            meta: StoredJson,
        }
        let s = |m: StoredJson| serde_json::to_string(&Row { meta: m }).unwrap();
        assert_eq!(s(json!({"a": 1}).into()), r#"{"meta":{"a":1}}"#);
        assert_eq!(
            s(StoredJson::parse(r#"{"m": 1e400}"#)),
            r#"{"meta":{"m": 1e400}}"#
        );
        let broken = StoredJson::Unreadable(Unreadable {
            text: "{".into(),
            error: "EOF".into(),
        });
        assert_eq!(s(broken), r#"{"meta":"{"}"#);
    }
}
