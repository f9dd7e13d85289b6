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

/// The URL split lexically: `(prefix up to and including "://", userinfo, rest after '@')`.
/// The userinfo ends at the LAST '@' before the query: a password with a raw '@' or '/'
/// (a malformed URL) is then still inside it, so redaction errs towards hiding too much.
fn split_userinfo(url: &str) -> (&str, Option<&str>, &str) {
    let start = url.find("://").map(|i| i + 3).unwrap_or(0);
    let (prefix, rest) = url.split_at(start);
    let search_end = rest.find('?').unwrap_or(rest.len());
    match rest[..search_end].rfind('@') {
        Some(at) => (prefix, Some(&rest[..at]), &rest[at + 1..]),
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
/// replaced by `***`: `postgres://user:***@host/db?sslmode=require&password=***`. Never
/// fails: a malformed URL is redacted lexically (erring towards hiding more).
pub fn redact_url(url: &str) -> String {
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

/// Every spelling of every password in `url`: as written, percent-decoded and
/// form-decoded, from the userinfo and from the query, read both lexically and the way the
/// `url` crate (and so sqlx) reads it. Longest first, no empty strings.
pub fn url_secrets(url: &str) -> Vec<String> {
    let mut raw: Vec<String> = Vec::new();
    let (_, userinfo, rest) = split_userinfo(url);
    if let Some((_, pw)) = userinfo.and_then(|ui| ui.split_once(':')) {
        raw.push(pw.to_string());
    }
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

/// Stderr for `tracing_subscriber`, with every registered password scrubbed from each
/// line. The formatter writes one event per `write` call, so a password never straddles two.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScrubbedStderr;

/// The writer [`ScrubbedStderr`] hands out.
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

#[cfg(feature = "cli")]
impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for ScrubbedStderr {
    type Writer = ScrubbedWriter;

    fn make_writer(&'a self) -> Self::Writer {
        ScrubbedWriter
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
    fn scrub_hides_every_spelling_and_only_registered_ones() {
        let url = "postgres://u:Zq7%2Bx@h/d?password=Qy9%3D";
        let t = "a Zq7%2Bx b Zq7+x c Qy9%3D d Qy9= e";
        assert_eq!(scrub_with(t, url), "a *** b *** c *** d *** e");
        assert_eq!(scrub_with("nothing here", url), "nothing here");
        assert_eq!(scrub_with("x", "postgres://h/d"), "x");
    }
}
