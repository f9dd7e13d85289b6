//! Times as skiplock stores them: the one place the supported range is stated.
//!
//! Every time skiplock writes lies between **1970-01-01 00:00:00 UTC and the end of year 9999**
//! (inclusive). The SQL API refuses any other time, `infinity` and `-infinity` included, with
//! a `skiplock: …` error (SQLSTATE 22023); CHECK constraints on every `timestamptz` column
//! (`skiplock._time_ok` in `migrations/history/0006_hardening.sql`, the SQL twin of [`in_range`]; a
//! test checks that both agree at the edges) make rows outside it impossible, even for a
//! superuser's plain `INSERT`. Rust entry points check [`in_range`] before the round trip, and
//! computed times (snooze, backoff) are clamped with [`clamp`].
//!
//! Readers never trust that: sqlx *panics* decoding `infinity` into a `DateTime<Utc>`
//! (`NaiveDateTime + TimeDelta overflowed`), so every time column skiplock reads is decoded
//! through [`DbTime`] or [`DbTimeOpt`] (`decode.rs`), which turn any value the database can
//! hold into a time inside the range (the nearest end), never a panic.

mod decode;

use chrono::{DateTime, NaiveDate, Utc};

pub use decode::{DbTime, DbTimeOpt};

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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

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
