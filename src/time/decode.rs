//! Reading times without panicking: sqlx *panics* decoding `infinity` into a
//! `DateTime<Utc>`, so every time column the store reads goes through [`DbTime`] or
//! [`DbTimeOpt`], which turn any value the database can hold into a time inside the supported
//! range (the nearest end; see [`super`] for the range itself).

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use sqlx::postgres::{PgTypeInfo, PgValueFormat, PgValueRef};
use sqlx::{Decode, Postgres, Type};

use super::{clamp, earliest, latest};

/// Postgres counts `timestamptz` in microseconds from 2000-01-01 UTC; `i64::MAX` is
/// `infinity` and `i64::MIN` is `-infinity`.
fn from_pg_micros(us: i64) -> DateTime<Utc> {
    let pg_epoch = NaiveDate::from_ymd_opt(2000, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .expect("a valid date")
        .and_utc();
    match pg_epoch.checked_add_signed(TimeDelta::microseconds(us)) {
        Some(t) => clamp(t),
        None if us < 0 => earliest(),
        None => latest(),
    }
}

fn decode_time(
    value: PgValueRef<'_>,
) -> std::result::Result<DateTime<Utc>, sqlx::error::BoxDynError> {
    match value.format() {
        PgValueFormat::Binary => Ok(from_pg_micros(<i64 as Decode<Postgres>>::decode(value)?)),
        PgValueFormat::Text => match value.as_str()? {
            "infinity" => Ok(latest()),
            "-infinity" => Ok(earliest()),
            // Text results only come from the simple query protocol; chrono's parser
            // returns an error (never panics) for what it cannot read (BC dates, …).
            _ => Ok(clamp(<DateTime<Utc> as Decode<Postgres>>::decode(value)?)),
        },
    }
}

/// A `timestamptz` decoded without panicking: values outside the supported range
/// (`±infinity`, years before 1970 or after 9999) read as the nearest end of the range.
/// Use it on `DateTime<Utc>` fields of a `FromRow` struct with
/// `#[sqlx(try_from = "crate::time::DbTime")]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DbTime(pub DateTime<Utc>);

/// A nullable `timestamptz` decoded like [`DbTime`] (for `Option<DateTime<Utc>>` fields:
/// `#[sqlx(try_from = "crate::time::DbTimeOpt")]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbTimeOpt(pub Option<DateTime<Utc>>);

impl Type<Postgres> for DbTime {
    fn type_info() -> PgTypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }
}

impl Type<Postgres> for DbTimeOpt {
    fn type_info() -> PgTypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }
}

impl<'r> Decode<'r, Postgres> for DbTime {
    fn decode(value: PgValueRef<'r>) -> std::result::Result<Self, sqlx::error::BoxDynError> {
        Ok(DbTime(decode_time(value)?))
    }
}

impl<'r> Decode<'r, Postgres> for DbTimeOpt {
    fn decode(value: PgValueRef<'r>) -> std::result::Result<Self, sqlx::error::BoxDynError> {
        use sqlx::ValueRef;
        if value.is_null() {
            return Ok(DbTimeOpt(None));
        }
        Ok(DbTimeOpt(Some(decode_time(value)?)))
    }
}

impl From<DbTime> for DateTime<Utc> {
    fn from(t: DbTime) -> Self {
        t.0
    }
}

impl From<DbTimeOpt> for Option<DateTime<Utc>> {
    fn from(t: DbTimeOpt) -> Self {
        t.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_microseconds_never_overflow() {
        assert_eq!(from_pg_micros(i64::MAX), latest()); // 'infinity'
        assert_eq!(from_pg_micros(i64::MIN), earliest()); // '-infinity'
        assert_eq!(from_pg_micros(0).to_rfc3339(), "2000-01-01T00:00:00+00:00");
        assert_eq!(
            from_pg_micros(-946_684_800_000_000 - 1),
            earliest(),
            "1969 is clamped"
        );
    }
}
