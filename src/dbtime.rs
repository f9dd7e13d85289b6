//! Times as skiplock stores them: the one place the supported range is stated.
//!
//! Every time skiplock writes lies between **1970-01-01 00:00:00 UTC and the end of year 9999**
//! (inclusive). The SQL API refuses any other time, `infinity` and `-infinity` included, with
//! a `skiplock: …` error (SQLSTATE 22023); CHECK constraints on every `timestamptz` column
//! (`skiplock._time_ok` in `migrations/0006_hardening.sql`, the SQL twin of [`in_range`]; a
//! test checks that both agree at the edges) make rows outside it impossible, even for a
//! superuser's plain `INSERT`. Rust entry points check [`in_range`] before the round trip, and
//! computed times (snooze, backoff) are clamped with [`clamp`].
//!
//! Readers never trust that: sqlx *panics* decoding `infinity` into a `DateTime<Utc>`
//! (`NaiveDateTime + TimeDelta overflowed`), so every time column skiplock reads is decoded
//! through [`DbTime`] or [`DbTimeOpt`], which turn any value the database can hold into a time
//! inside the range (the nearest end), never a panic.

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use sqlx::postgres::{PgTypeInfo, PgValueFormat, PgValueRef};
use sqlx::{Decode, Postgres, Type};

use crate::error::{Error, Result};

/// The first supported year.
pub const MIN_YEAR: i32 = 1970;
/// The last supported year.
pub const MAX_YEAR: i32 = 9999;

/// The earliest supported time: 1970-01-01 00:00:00 UTC.
pub fn earliest() -> DateTime<Utc> {
    DateTime::UNIX_EPOCH
}

/// The latest supported time: 9999-12-31 23:59:59.999999 UTC (Postgres keeps microseconds).
pub fn latest() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(MAX_YEAR, 12, 31)
        .and_then(|d| d.and_hms_micro_opt(23, 59, 59, 999_999))
        .expect("a valid date")
        .and_utc()
}

/// Whether skiplock may store `t`.
pub fn in_range(t: DateTime<Utc>) -> bool {
    t >= earliest() && t <= latest()
}

/// `t`, moved to the nearest end of the supported range if it lies outside.
pub fn clamp(t: DateTime<Utc>) -> DateTime<Utc> {
    t.clamp(earliest(), latest())
}

/// The sentence every refusal uses, so Rust and SQL say the same thing.
pub fn range_text() -> String {
    format!("a finite time from {MIN_YEAR}-01-01 to {MAX_YEAR}-12-31 (UTC)")
}

/// Refuses `t` unless it is in range, naming the field (`run_at`, …).
pub fn check(what: &str, t: DateTime<Utc>) -> Result<()> {
    if in_range(t) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{what} must be {}, got {}",
            range_text(),
            t.to_rfc3339()
        )))
    }
}

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
/// Use it in `query_as` tuples, or on `DateTime<Utc>` fields of a `FromRow` struct with
/// `#[sqlx(try_from = "crate::dbtime::DbTime")]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DbTime(pub DateTime<Utc>);

/// A nullable `timestamptz` decoded like [`DbTime`] (for `Option<DateTime<Utc>>` fields:
/// `#[sqlx(try_from = "crate::dbtime::DbTimeOpt")]`).
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
    fn the_range_is_1970_to_the_end_of_9999() {
        assert_eq!(earliest().to_rfc3339(), "1970-01-01T00:00:00+00:00");
        assert_eq!(latest().to_rfc3339(), "9999-12-31T23:59:59.999999+00:00");
        assert!(in_range(earliest()) && in_range(latest()));
        assert!(!in_range(earliest() - TimeDelta::microseconds(1)));
        assert!(!in_range(latest() + TimeDelta::microseconds(1)));
        assert!(!in_range(DateTime::<Utc>::MIN_UTC) && !in_range(DateTime::<Utc>::MAX_UTC));
    }

    #[test]
    fn clamp_moves_to_the_nearest_end() {
        assert_eq!(clamp(DateTime::<Utc>::MIN_UTC), earliest());
        assert_eq!(clamp(DateTime::<Utc>::MAX_UTC), latest());
        let now = Utc::now();
        assert_eq!(clamp(now), now);
    }

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

    #[test]
    fn check_names_the_field_and_the_range() {
        let e = check("run_at", DateTime::<Utc>::MIN_UTC)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("run_at must be a finite time from 1970-01-01 to 9999-12-31 (UTC), got "),
            "{e}"
        );
        assert!(check("run_at", Utc::now()).is_ok());
    }
}
