//! How the console writes times, ages, sizes and JSON for people: pure functions, so every
//! page says "3m 12s" and "1.2 MiB" the same way.

use chrono::{DateTime, SecondsFormat, Utc};

/// The escaper of every value the console's templates print (src/web/askama.toml): the
/// CLI's escapes for control and invisible formatting characters first
/// ([`crate::text::escape_invisible`]: a bidi override `U+202E` shows as `\u{202e}`
/// instead of reversing the text after it, a zero-width space as `\u{200b}` instead of
/// making two names look alike), then askama's HTML escaping.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConsoleHtml;

impl askama::filters::Escaper for ConsoleHtml {
    fn write_escaped_str<W: std::fmt::Write>(&self, dest: W, string: &str) -> std::fmt::Result {
        askama::filters::Html.write_escaped_str(dest, &crate::text::escape_invisible(string))
    }
}

/// A time as `2026-12-01 06:30:12Z` (UTC, to the second); `None` as `-`.
pub fn time(t: Option<DateTime<Utc>>) -> String {
    match t {
        Some(t) => t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
        None => "-".to_string(),
    }
}

/// A time in RFC 3339 with milliseconds (for `title` attributes and `<time datetime>`).
pub fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A duration in seconds as its two largest units: `0s`, `45s`, `3m 12s`, `5h 2m`, `3d 4h`.
/// Negative durations (clock skew between rows) read as `0s`; NaN as `-`.
pub fn age(secs: f64) -> String {
    if secs.is_nan() {
        return "-".to_string();
    }
    let s = if secs.is_sign_negative() {
        0
    } else {
        secs.min(1e15) as u64
    };
    crate::text::two_units(s)
}

/// `age` of an optional duration; `None` as `-`.
pub fn age_opt(secs: Option<f64>) -> String {
    secs.map(age).unwrap_or_else(|| "-".to_string())
}

/// A byte count in binary units: `512 B`, `1.5 KiB`, `2.0 MiB`, `3.1 GiB`.
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A count with thousands separators: `1234567` as `1,234,567`.
pub fn count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A job's args pretty-printed for a `<pre>` block, or, when serde_json cannot read them (a
/// row written past enqueue's check: src/queue/args.rs), the text as stored.
pub fn args(a: &crate::queue::RawArgs) -> String {
    match a.to_value() {
        Ok(v) => json(&v),
        Err(_) => a.to_string(),
    }
}

/// A JSON column pretty-printed for a `<pre>` block, or, when serde_json cannot read it (a
/// row written past the API: src/queue/stored.rs), the text as stored and why.
pub fn stored_json(s: &crate::queue::StoredJson) -> String {
    match s.readable() {
        Ok(v) => json(v),
        Err(u) => format!("{}\n(unreadable: {})", u.text, u.error),
    }
}

/// JSON pretty-printed for a `<pre>` block (the template escapes it).
pub fn json(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(askama::Template)]
    #[template(
        source = "<p title=\"{{ v }}\">{{ v }}</p><input value=\"{{ v|e(\"form\") }}\">",
        ext = "html",
        config = "src/web/askama.toml"
    )]
    struct Probe<'a> {
        v: &'a str,
    }

    #[test]
    fn pages_show_invisible_characters_escaped_and_forms_post_them_back_as_they_are() {
        use askama::Template as _;
        let html = Probe {
            v: "q\u{202e}<evil>\u{200b}",
        }
        .render()
        .unwrap();
        assert_eq!(
            html,
            "<p title=\"q\\u{202e}&#60;evil&#62;\\u{200b}\">q\\u{202e}&#60;evil&#62;\\u{200b}</p><input value=\"q\u{202e}&#60;evil&#62;\u{200b}\">"
        );
    }

    #[test]
    fn ages_show_their_two_largest_units() {
        assert_eq!(age(0.0), "0s");
        assert_eq!(age(45.9), "45s");
        assert_eq!(age(192.0), "3m 12s");
        assert_eq!(age(5.0 * 3600.0 + 125.0), "5h 2m");
        assert_eq!(age(3.0 * 86_400.0 + 4.0 * 3600.0 + 59.0), "3d 4h");
        assert_eq!(age(-3.0), "0s");
        assert_eq!(age(f64::NAN), "-");
        assert_eq!(age(f64::INFINITY), age(1e15));
        assert_eq!(age_opt(None), "-");
    }

    #[test]
    fn sizes_counts_and_times_read_the_same_everywhere() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(2 * 1024 * 1024), "2.0 MiB");
        assert_eq!(bytes(i64::MAX), "8192.0 PiB");
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(-1_234), "-1,234");
        assert_eq!(count(i64::MIN), "-9,223,372,036,854,775,808");
        let t = DateTime::parse_from_rfc3339("2026-12-01T06:30:12.345Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(time(Some(t)), "2026-12-01 06:30:12Z");
        assert_eq!(time(None), "-");
        assert_eq!(iso(t), "2026-12-01T06:30:12.345Z");
    }
}
