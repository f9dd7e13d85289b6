//! The database's enum types as Rust enums: [`JobState`] is `skiplock.job_state` (an optional
//! part declares its own with [`pg_enum!`](crate::pg_enum)). Rows and parameters use the enums
//! directly, so a state is never a string in between.
//!
//! Hand-written rather than derived: the derive compares type names, and Postgres names a
//! type `job_state` or `skiplock.job_state` depending on the session's `search_path`. These
//! accept either (and `text`, for a column cast with `::text`), and decode through the
//! enum's `FromStr`, so an unknown label is a decode error naming it, never a panic.

use sqlx::TypeInfo;
use sqlx::postgres::PgTypeInfo;

pub use crate::queue::JobState;

/// Whether a column of type `ty` can hold the enum named `name` (`schema.type`).
pub fn compatible(ty: &PgTypeInfo, name: &str) -> bool {
    let short = name.rsplit('.').next().unwrap_or(name);
    let n = ty.name();
    n == name || n == short || n == "TEXT" || n == "VARCHAR"
}

/// Implements sqlx's `Type`, `PgHasArrayType`, `Decode` and `Encode` for a Rust enum of a
/// database enum type `$name` (its array type `$array`), through the enum's `as_str` and
/// `FromStr`. Exported for the optional parts' own enum types (skiplock-workflows' packet
/// states); the crate using it depends on `sqlx`.
#[doc(hidden)]
#[macro_export]
macro_rules! pg_enum {
    ($ty:ty, $name:literal, $array:literal) => {
        impl ::sqlx::Type<::sqlx::Postgres> for $ty {
            fn type_info() -> ::sqlx::postgres::PgTypeInfo {
                ::sqlx::postgres::PgTypeInfo::with_name($name)
            }
            fn compatible(ty: &::sqlx::postgres::PgTypeInfo) -> bool {
                $crate::store::types::compatible(ty, $name)
            }
        }

        impl ::sqlx::postgres::PgHasArrayType for $ty {
            fn array_type_info() -> ::sqlx::postgres::PgTypeInfo {
                ::sqlx::postgres::PgTypeInfo::with_name($array)
            }
        }

        impl<'r> ::sqlx::Decode<'r, ::sqlx::Postgres> for $ty {
            fn decode(
                value: ::sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, ::sqlx::error::BoxDynError> {
                // An enum travels as its label in both the text and the binary format.
                let s = <&str as ::sqlx::Decode<::sqlx::Postgres>>::decode(value)?;
                Ok(s.parse::<$ty>()?)
            }
        }

        impl ::sqlx::Encode<'_, ::sqlx::Postgres> for $ty {
            fn encode_by_ref(
                &self,
                buf: &mut ::sqlx::postgres::PgArgumentBuffer,
            ) -> Result<::sqlx::encode::IsNull, ::sqlx::error::BoxDynError> {
                <&str as ::sqlx::Encode<::sqlx::Postgres>>::encode_by_ref(&self.as_str(), buf)
            }
        }
    };
}

pg_enum!(JobState, "skiplock.job_state", "skiplock._job_state");


