//! Keeping database passwords out of every message and log line.
//!
//! A password can sit in two places of a Postgres URL: the userinfo
//! (`postgres://user:PASSWORD@host/db`) and a query parameter (`?password=PASSWORD`, which
//! sqlx honours like libpq). [`redact_url`] shows a URL with both replaced by `***`, and
//! works on malformed URLs too (a URL that does not parse is exactly the one an error message
//! quotes). [`scrub`] removes every registered password, in each spelling it may appear in
//! (as written, percent-decoded, form-decoded), from any text: the binary registers the
//! database URL before anything runs and sends every log line ([`ScrubbedStderr`]) and its
//! final error line through it, so no code path has to remember to redact.

use std::borrow::Cow;
use std::io::Write;
use std::sync::RwLock;

/// What a secret is replaced with.
pub const MASK: &str = "***";

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Whether a query parameter's name marks its value as a secret (`password`, libpq's
/// `sslpassword`, any case, percent-encoded or not).
fn is_secret_key(raw_key: &str) -> bool {
    decode(raw_key).to_ascii_lowercase().contains("password")
}

/// Percent-decodes, with `+` as a space (form encoding) when `plus` is set.
fn decode_with(s: &str, plus: bool) -> String {
    let t: Cow<str> = if plus {
        Cow::Owned(s.replace('+', " "))
    } else {
        Cow::Borrowed(s)
    };
    let b = t.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn decode(s: &str) -> String {
    decode_with(s, false)
}

/// Whether `user` (a userinfo's text before its first `:`) can be a user name rather than a
/// piece of a path or query: a raw `/`, `?` or `#` says the `@` after it is no userinfo's.
fn plain_user(user: &str) -> bool {
    !user.contains(['/', '?', '#'])
}

/// Where each reading of `rest` (a URL after its `://`) may end a userinfo, as the index of
/// its `@`: the widest first. A well-formed URL has one. A password with a raw `/`, `?` or
/// `#` (not percent-encoded) makes a malformed one, read differently by the `url` crate, by
/// libpq and by people: the last `@` before the first `?` (a raw `/` or `@` in the password);
/// failing that, every `@` whose user name part is plain (a raw `?` or `#`, which libpq reads
/// as part of the password too, since its userinfo ends only at a `/`).
fn userinfo_ends(rest: &str) -> Vec<usize> {
    let search_end = rest.find('?').unwrap_or(rest.len());
    if let Some(at) = rest[..search_end].rfind('@') {
        return vec![at];
    }
    let mut ends: Vec<usize> = rest
        .match_indices('@')
        .map(|(i, _)| i)
        .filter(|&i| plain_user(rest[..i].split(':').next().unwrap_or("")))
        .collect();
    ends.reverse();
    ends
}

/// The URL split lexically: `(prefix up to and including "://", userinfo, rest after '@')`,
/// with the widest userinfo any reading gives ([`userinfo_ends`]), so redaction errs towards
/// hiding too much. The host list parser splits a URL with it too (src/db/hosts.rs), so no
/// piece of a password is ever read as a host or a port.
pub(crate) fn split_userinfo(url: &str) -> (&str, Option<&str>, &str) {
    let start = url.find("://").map(|i| i + 3).unwrap_or(0);
    let (prefix, rest) = url.split_at(start);
    match userinfo_ends(rest).first() {
        Some(&at) => (prefix, Some(&rest[..at]), &rest[at + 1..]),
        None => (prefix, None, rest),
    }
}

/// Rewrites `a=1&password=x&b=2` with every secret value replaced.
fn redact_query(q: &str) -> String {
    q.split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if is_secret_key(k) => format!("{k}={MASK}"),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// `url` with the password of its userinfo and the values of password query parameters
/// replaced by `***`: `postgres://user:***@host/db?sslmode=require&password=***`; a libpq
/// `key=value` connection string with its password values replaced
/// (`host=db password=***`, [`key_values`]). Never fails: a malformed URL is redacted
/// lexically (erring towards hiding more).
pub fn redact_url(url: &str) -> String {
    if let Some(kv) = key_values(url) {
        return kv.redacted();
    }
    let (prefix, userinfo, rest) = split_userinfo(url);
    let mut out = String::with_capacity(url.len());
    out.push_str(prefix);
    if let Some(ui) = userinfo {
        match ui.split_once(':') {
            Some((user, _)) => {
                out.push_str(user);
                out.push(':');
                out.push_str(MASK);
            }
            None => out.push_str(ui),
        }
        out.push('@');
    }
    match rest.split_once('?') {
        Some((before, after)) => {
            let (query, fragment) = match after.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (after, None),
            };
            out.push_str(before);
            out.push('?');
            out.push_str(&redact_query(query));
            if let Some(f) = fragment {
                out.push('#');
                out.push_str(f);
            }
        }
        None => out.push_str(rest),
    }
    out
}

/// A libpq `key=value` connection string, read lexically as libpq reads it: keywords, `=`
/// with optional spaces around it, values either bare (up to the next space) or in single
/// quotes, with `\\` escaping the next character in both. A value left open by a missing
/// quote runs to the end (hidden whole).
struct KeyValues<'a> {
    text: &'a str,
    /// Each secret value: its byte range in `text` as written (quotes included) and what
    /// libpq reads from it.
    secrets: Vec<(std::ops::Range<usize>, String)>,
}

/// `text` read as a `key=value` connection string, if it is one: it does not start with
/// `postgres://` or `postgresql://` and starts with a keyword followed by `=` (libpq takes
/// everything that is not such a URI this way, so a value holding `://`, such as an
/// `application_name`, leaves it a connection string, whose passwords are then hidden).
fn key_values(text: &str) -> Option<KeyValues<'_>> {
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        return None;
    }
    let b = text.as_bytes();
    let skip_spaces = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut secrets = Vec::new();
    let mut i = skip_spaces(0);
    let mut first = true;
    while i < b.len() {
        let key_start = i;
        while i < b.len() && b[i] != b'=' && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &text[key_start..i];
        i = skip_spaces(i);
        if i >= b.len() || b[i] != b'=' || key.is_empty() {
            // Not `key = value`: not a connection string at all, or its end is garbage
            // (libpq refuses it; what was read is hidden all the same).
            if first {
                return None;
            }
            break;
        }
        if first && !key.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
            return None;
        }
        first = false;
        i = skip_spaces(i + 1);
        let value_start = i;
        let mut value = Vec::new();
        if i < b.len() && b[i] == b'\'' {
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                value.push(b[i]);
                i += 1;
            }
            i = (i + 1).min(b.len());
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                value.push(b[i]);
                i += 1;
            }
        }
        if is_secret_key(key) {
            secrets.push((value_start..i, String::from_utf8_lossy(&value).into_owned()));
        }
        i = skip_spaces(i);
    }
    Some(KeyValues { text, secrets })
}

impl KeyValues<'_> {
    /// The string with each secret value written as `***`.
    fn redacted(&self) -> String {
        let mut out = String::with_capacity(self.text.len());
        let mut at = 0;
        for (r, _) in &self.secrets {
            out.push_str(&self.text[at..r.start]);
            out.push_str(MASK);
            at = r.end;
        }
        out.push_str(&self.text[at..]);
        out
    }

    /// Each secret as written (its quotes taken off) and as read.
    fn secrets(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.secrets.iter().map(|(r, v)| {
            let written = &self.text[r.clone()];
            let inner = written.strip_prefix('\'').unwrap_or(written);
            let inner = inner.strip_suffix('\'').unwrap_or(inner);
            (inner.to_string(), v.clone())
        })
    }
}

/// Every spelling of every password in `url`: as written, percent-decoded and
/// form-decoded, from the userinfo and from the query, read both lexically and the way the
/// `url` crate (and so sqlx) reads it. Longest first, no empty strings.
pub fn url_secrets(url: &str) -> Vec<String> {
    let mut raw: Vec<String> = Vec::new();
    if let Some(kv) = key_values(url) {
        // As written (quotes and backslashes included) and as libpq reads it; no URL reading
        // (an `@` in a value is no userinfo).
        for (written, value) in kv.secrets() {
            raw.push(written);
            raw.push(value);
        }
        return spellings(raw);
    }
    let start = url.find("://").map(|i| i + 3).unwrap_or(0);
    for at in userinfo_ends(&url[start..]) {
        if let Some((_, pw)) = url[start..start + at].split_once(':') {
            raw.push(pw.to_string());
        }
    }
    let (_, _, rest) = split_userinfo(url);
    let query = rest
        .split_once('?')
        .map(|(_, q)| q.split('#').next().unwrap_or(q));
    for pair in query.unwrap_or("").split('&') {
        if let Some((k, v)) = pair.split_once('=')
            && is_secret_key(k)
        {
            raw.push(v.to_string());
        }
    }
    if let Ok(u) = url::Url::parse(url) {
        if let Some(p) = u.password() {
            raw.push(p.to_string());
        }
        for (k, v) in u.query_pairs() {
            if k.to_ascii_lowercase().contains("password") {
                raw.push(v.into_owned());
            }
        }
    }
    spellings(raw)
}

/// Each of `raw` as written, percent-decoded and form-decoded; longest first, no empty ones.
fn spellings(raw: Vec<String>) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    for r in raw {
        for s in [decode_with(&r, false), decode_with(&r, true), r] {
            if !s.is_empty() && !all.contains(&s) {
                all.push(s);
            }
        }
    }
    all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    all
}

/// `text` with each of `secrets` (and any URL's password) replaced by `***`.
pub fn scrub_secrets(text: &str, secrets: &[String]) -> String {
    let mut t = text.to_string();
    for s in secrets {
        if t.contains(s.as_str()) {
            t = t.replace(s.as_str(), MASK);
        }
    }
    t
}

/// `text` with every password of `url` replaced by `***`.
pub fn scrub_with(text: &str, url: &str) -> String {
    scrub_secrets(text, &url_secrets(url))
}

/// Remembers the passwords of `url`, so [`scrub`] (and with it every log line and the
/// binary's error line) hides them from now on.
pub fn register_url(url: &str) {
    let new = url_secrets(url);
    if new.is_empty() {
        return;
    }
    let mut g = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    for s in new {
        if !g.contains(&s) {
            g.push(s);
        }
    }
    g.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// `text` with every registered password replaced by `***`.
pub fn scrub(text: &str) -> String {
    let g = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    if g.is_empty() {
        return text.to_string();
    }
    scrub_secrets(text, &g)
}

/// Stderr with every registered password scrubbed from each write: the writer of the
/// `skiplock` command's logs (crates/skiplock-cli, `ScrubbedStderr`). `tracing_subscriber`'s
/// formatter writes one event per `write` call, so a password never straddles two.
#[derive(Debug)]
pub struct ScrubbedWriter;

impl Write for ScrubbedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let clean = scrub(&text);
        std::io::stderr().write_all(clean.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_passwords_are_masked_exactly() {
        assert_eq!(
            redact_url("postgres://bob:s3cret@db:5432/x"),
            "postgres://bob:***@db:5432/x"
        );
        assert_eq!(redact_url("postgres://db/x"), "postgres://db/x");
        assert_eq!(redact_url("postgres://bob@db/x"), "postgres://bob@db/x");
        assert_eq!(
            redact_url("postgres://bob:@db/x"),
            "postgres://bob:***@db/x"
        );
    }

    #[test]
    fn percent_encoded_passwords_are_masked_in_every_spelling() {
        let url = "postgres://bob:p%40ss%2Fw%20rd@db/x";
        assert_eq!(redact_url(url), "postgres://bob:***@db/x");
        let secrets = url_secrets(url);
        for spelling in ["p%40ss%2Fw%20rd", "p@ss/w rd"] {
            assert!(secrets.contains(&spelling.to_string()), "{secrets:?}");
            assert_eq!(
                scrub_secrets(&format!("auth failed for {spelling}!"), &secrets),
                "auth failed for ***!"
            );
        }
    }

    #[test]
    fn query_parameter_passwords_are_masked() {
        assert_eq!(
            redact_url("postgres://db/x?user=u&password=hunter2&sslmode=require"),
            "postgres://db/x?user=u&password=***&sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://db/x?password=hunter2"),
            "postgres://db/x?password=***"
        );
        // Percent-encoded key, upper case, libpq's sslpassword, a fragment.
        assert_eq!(
            redact_url("postgres://db/x?PASS%57ORD=a%26b&sslpassword=k#frag"),
            "postgres://db/x?PASS%57ORD=***&sslpassword=***#frag"
        );
        let s = url_secrets("postgres://u@db/x?a=1&password=a%26b+c");
        for spelling in ["a%26b+c", "a&b+c", "a&b c"] {
            assert!(s.contains(&spelling.to_string()), "{spelling}: {s:?}");
        }
        // Both places at once.
        assert_eq!(
            redact_url("postgres://u:one@db/x?password=two"),
            "postgres://u:***@db/x?password=***"
        );
    }

    #[test]
    fn malformed_urls_are_still_redacted() {
        // A raw '@' and '/' in the password: the url crate would misread this one.
        let url = "postgres://bob:p@ss/w@rd@db:5432/x";
        assert_eq!(redact_url(url), "postgres://bob:***@db:5432/x");
        assert!(url_secrets(url).contains(&"p@ss/w@rd".to_string()));
        // A port that is not a number: url::Url::parse fails.
        assert_eq!(
            redact_url("postgres://bob:s3cret@db:port/x"),
            "postgres://bob:***@db:port/x"
        );
        // No scheme separator at all.
        assert_eq!(redact_url("bob:s3cret@db"), "bob:***@db");
        assert_eq!(redact_url("post gres://:s3cret@"), "post gres://:***@");
        assert_eq!(redact_url(""), "");
        assert_eq!(redact_url("?password="), "?password=***");
    }

    #[test]
    fn every_form_libpq_accepts_is_redacted_and_its_password_registered() {
        // (connection string, redacted, the password as libpq reads it)
        let cases: &[(&str, &str, &str)] = &[
            // URLs: userinfo, percent-encoded, several hosts, the query.
            ("postgresql://u:Hunter2Secret@h/db", "postgresql://u:***@h/db", "Hunter2Secret"),
            ("postgres://u:Hunter%3F2@h1:5432,h2:5433/db", "postgres://u:***@h1:5432,h2:5433/db", "Hunter?2"),
            ("postgres://u@h/db?password=Hunter2Secret&sslmode=require", "postgres://u@h/db?password=***&sslmode=require", "Hunter2Secret"),
            ("postgres://u@[::1]:5432/db?sslpassword=Hunter2Secret", "postgres://u@[::1]:5432/db?sslpassword=***", "Hunter2Secret"),
            // Malformed URLs: a raw `?`, `#`, `/`, `@` in the password, and combinations.
            ("postgres://app:Hunter2?Secret@127.0.0.1/db", "postgres://app:***@127.0.0.1/db", "Hunter2?Secret"),
            ("postgres://app:Hun#ter2Secret@127.0.0.1/db", "postgres://app:***@127.0.0.1/db", "Hun#ter2Secret"),
            ("postgres://app:Hun/ter2Secret@127.0.0.1/db", "postgres://app:***@127.0.0.1/db", "Hun/ter2Secret"),
            ("postgres://app:Hun@ter2Secret@127.0.0.1/db", "postgres://app:***@127.0.0.1/db", "Hun@ter2Secret"),
            ("postgres://app:a/b?c#d2Secret@h/db?sslmode=disable", "postgres://app:***@h/db?sslmode=disable", "a/b?c#d2Secret"),
            ("postgres://app:Hunter2?Secret@h1,h2/db?password=Other2Secret", "postgres://app:***@h1,h2/db?password=***", "Hunter2?Secret"),
            // key=value strings: bare, quoted, escaped, spaces around `=`, sslpassword.
            ("host=h port=5432 password=Hunter2Secret dbname=d", "host=h port=5432 password=*** dbname=d", "Hunter2Secret"),
            ("host=h password='Hunter 2 Secret' user=u", "host=h password=*** user=u", "Hunter 2 Secret"),
            (r"host=h password='it\'s \\ Secret'", "host=h password=***", r"it's \ Secret"),
            (r"password=Hunter\ 2Secret host=h", "password=*** host=h", "Hunter 2Secret"),
            ("host = h  password = Hunter2Secret", "host = h  password = ***", "Hunter2Secret"),
            ("dbname=d sslpassword=Hunter2Secret", "dbname=d sslpassword=***", "Hunter2Secret"),
            ("PASSWORD=Hunter2Secret host=h", "PASSWORD=*** host=h", "Hunter2Secret"),
            // A value holding `://` leaves it a key=value string (only a string starting with
            // postgres:// or postgresql:// is a URL to libpq).
            ("application_name=http://x host=h password=Hunter2Secret", "application_name=http://x host=h password=***", "Hunter2Secret"),
            // A quote left open hides the rest.
            ("host=h password='Hunter2 Secret", "host=h password=***", "Hunter2 Secret"),
        ];
        for &(dsn, redacted, password) in cases {
            assert_eq!(redact_url(dsn), redacted, "{dsn}");
            let secrets = url_secrets(dsn);
            assert!(secrets.iter().any(|s| s == password), "{dsn}: {secrets:?}");
            let line = format!("FATAL: password authentication failed ({password}) for {dsn}");
            let clean = scrub_secrets(&line, &secrets);
            assert!(!clean.contains(password), "{dsn}: {clean}");
            // Nor a piece of it a reading may have taken for something else.
            for piece in ["Hunter2", "Secret", "Hun"] {
                if password.contains(piece) {
                    assert!(!redact_url(dsn).contains(piece), "{dsn}");
                }
            }
        }
        // Strings that are neither keep everything; an `@` in a query or path is no userinfo.
        for plain in ["localhost", "postgres://h/d@b", "postgres://h/db?application_name=x:y@z", "host=h port=5432"] {
            assert_eq!(redact_url(plain), plain);
            assert!(url_secrets(plain).is_empty(), "{plain}: {:?}", url_secrets(plain));
        }
    }

    #[test]
    fn scrub_hides_every_spelling_and_only_registered_ones() {
        let url = "postgres://u:Zq7%2Bx@h/d?password=Qy9%3D";
        let t = "a Zq7%2Bx b Zq7+x c Qy9%3D d Qy9= e";
        assert_eq!(scrub_with(t, url), "a *** b *** c *** d *** e");
        assert_eq!(scrub_with("nothing here", url), "nothing here");
        assert_eq!(scrub_with("x", "postgres://h/d"), "x");
    }
}
