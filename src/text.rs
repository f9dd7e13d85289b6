//! Text shown to people, escaped: job kinds, queues, args, errors and packet sources are data
//! anyone with an enqueuer role can write, and a raw control character in them would be a
//! command to the operator's terminal (`\x1b[2J` clears it, others retitle the window or
//! rewrite earlier lines), an invisible one would make two names look alike. The `skiplock`
//! command (crates/skiplock-cli, `output.rs`) and the console (its `format.rs`) show every
//! such value through [`escape`] or [`escape_invisible`].

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal raw: C0 and C1 control characters and DEL; every
/// character Unicode says shows nothing (Default_Ignorable_Code_Point: zero-width and bidi
/// controls, variation selectors, the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0, the
/// tag characters U+E0000–U+E0FFF) or is a format character (general category Cf); line and
/// paragraph separators; and U+2800, the blank Braille pattern, which shows as a space. Any of
/// them would make text display differently from what it is, or two names look alike. The
/// Unicode data is ICU4X's (`icu_properties`), so new characters come with its updates.
fn is_unsafe(c: char) -> bool {
    use icu_properties::props::{
        BinaryProperty, DefaultIgnorableCodePoint, EnumeratedProperty, GeneralCategory,
    };
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    c.is_control()
        || c == '\u{2800}'
        || DefaultIgnorableCodePoint::for_char(c)
        || matches!(
            GeneralCategory::for_char(c),
            GeneralCategory::Format
                | GeneralCategory::LineSeparator
                | GeneralCategory::ParagraphSeparator
        )
}

/// `s` with control and invisible formatting characters written as escapes (`\n`, `\t`,
/// `\r`, `\x1b`, `\u{202e}`), so a value can never steer the terminal or break a line.
pub fn escape(s: &str) -> Cow<'_, str> {
    escape_unless(s, |_| false)
}

/// [`escape`] for text that may span lines (the console's pages, where a `<pre>` of JSON
/// keeps its line breaks and tabs): the same characters written as the same escapes, but
/// `\n` and `\t` left as they are. The console shows every value through this
/// (crates/skiplock-console/src/web/format.rs, `ConsoleHtml`), so a queue `q\u{202e}evil`
/// reads the same on a page as in `skiplock stats`.
pub fn escape_invisible(s: &str) -> Cow<'_, str> {
    escape_unless(s, |c| c == '\n' || c == '\t')
}

fn escape_unless(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if keep(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if is_unsafe(c) && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A number of seconds as its two largest units: `45s`, `12m 5s`, `3h 20m`, `2d 4h` — the
/// one way the doctor (src/doctor/mod.rs) and the console
/// (crates/skiplock-console/src/web/format.rs) show an age.
pub fn two_units(s: u64) -> String {
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {sec}s")
    } else {
        format!("{sec}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape("plain kind-1 ü ✓"), "plain kind-1 ü ✓");
        assert_eq!(escape("\x1b[2J"), "\\x1b[2J");
        assert_eq!(escape("a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(escape("\x07\x7f\u{9b}"), "\\x07\\x7f\\x9b");
        assert_eq!(escape("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(escape("\u{0}"), "\\x00");
        for c in [
            '\u{202a}',
            '\u{2066}',
            '\u{2069}',
            '\u{200b}',
            '\u{200f}',
            '\u{feff}',
            // Shown as nothing, or as a space: Hangul fillers, tag characters, a variation
            // selector, an Arabic number sign (Cf), the blank Braille
            // pattern, the line separator.
            '\u{3164}',
            '\u{115f}',
            '\u{1160}',
            '\u{ffa0}',
            '\u{e0000}',
            '\u{e0041}',
            '\u{e007f}',
            '\u{e01ef}',
            '\u{fe0f}',
            '\u{600}',
            '\u{2800}',
            '\u{2028}',
            '\u{180e}',
            '\u{1d173}',
        ] {
            assert_eq!(escape(&c.to_string()), format!("\\u{{{:x}}}", c as u32));
        }
        // The soft hyphen is below U+0100, so written like the C1 controls.
        assert_eq!(escape("b\u{ad}"), "b\\xad");
        // Letters, marks, emoji and spaces of other scripts stay as they are.
        assert_eq!(escape("ㄱ가 é ç ✓ 日本 مرحبا"), "ㄱ가 é ç ✓ 日本 مرحبا");
    }

    #[test]
    fn multi_line_text_keeps_its_lines_and_loses_its_invisible_characters() {
        assert_eq!(escape_invisible("{\n\t\"a\": 1\n}"), "{\n\t\"a\": 1\n}");
        assert_eq!(escape_invisible("q\u{202e}evil"), "q\\u{202e}evil");
        assert_eq!(escape_invisible("a\rb\x1b"), "a\\rb\\x1b");
        assert_eq!(escape_invisible("zero\u{200b}width"), "zero\\u{200b}width");
    }
}
