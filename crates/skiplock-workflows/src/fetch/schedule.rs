//! The schedule file: how often each page is due, and which hosts may be crawled at all.
//!
//! Pure: parsing and the decisions ([`Schedule::frequency_for`], [`next_fetch`], [`is_due`])
//! take their inputs as arguments, so they are unit-tested without a database or clock.
//! `next_fetch` is computed once, when a page is fetched; a later check only compares it
//! with the time ([`is_due`]), so editing the file affects pages as they are next fetched.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use toml::Spanned;

use crate::error::{Error, Result};

/// The setting naming the schedule file.
pub const SCHEDULES_VAR: &str = "SKIPLOCK_SCHEDULES";
/// The schedule file used when `SKIPLOCK_SCHEDULES` is not set.
pub const DEFAULT_SCHEDULES_PATH: &str = "schedules.toml";

/// How often a page is due again after a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Frequency {
    /// 1 hour.
    Hourly,
    /// 1 day.
    Daily,
    /// 7 days.
    Weekly,
    /// 14 days.
    Biweekly,
    /// 30 days (the default).
    Monthly,
    /// 90 days.
    Quarterly,
    /// 180 days.
    BiAnnually,
    /// 365 days.
    Annually,
}

impl Frequency {
    /// The interval between fetches.
    pub fn interval(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            Frequency::Hourly => 3600,
            Frequency::Daily => DAY,
            Frequency::Weekly => 7 * DAY,
            Frequency::Biweekly => 14 * DAY,
            Frequency::Monthly => 30 * DAY,
            Frequency::Quarterly => 90 * DAY,
            Frequency::BiAnnually => 180 * DAY,
            Frequency::Annually => 365 * DAY,
        })
    }
}

/// Rules of one host: its own default and path-prefix rules.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    default: Option<Frequency>,
    #[serde(default)]
    paths: BTreeMap<Spanned<String>, Frequency>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSchedule {
    default: Option<Frequency>,
    allow: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    hosts: BTreeMap<Spanned<String>, RawHost>,
}

/// The frequency rules of one host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostRules {
    /// The host's own default.
    pub default: Option<Frequency>,
    /// Path prefix → frequency; the longest matching prefix wins.
    pub paths: Vec<(String, Frequency)>,
}

/// A parsed, validated schedule file.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Frequency of pages no rule names (monthly unless the file says otherwise).
    pub default: Frequency,
    /// Allowed host patterns (`example.com`, `example.com:8080`, `*.example.com`);
    /// `None` allows every host.
    pub allow: Option<Vec<String>>,
    /// Rules by host key (`example.com`, or `example.com:8080` for that port only).
    pub hosts: BTreeMap<String, HostRules>,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            default: Frequency::Monthly,
            allow: None,
            hosts: BTreeMap::new(),
        }
    }
}

/// `line L, column C: msg` for a place in the file; messages never quote the file's text
/// (the setting may name any readable file, see [`crate::config::toml_error`]).
fn at(text: &str, span: std::ops::Range<usize>, msg: impl std::fmt::Display) -> String {
    format!("{}: {msg}", crate::config::position(text, span.start))
}

/// Checks an allow pattern: a host name, optionally `*.`-prefixed, optionally with `:port`.
fn check_pattern(p: &str) -> std::result::Result<(), String> {
    let name = p.strip_prefix("*.").unwrap_or(p);
    let (name, port) = match name.rsplit_once(':') {
        Some((n, port)) if !n.contains(']') || n.ends_with(']') => (n, Some(port)),
        _ => (name, None),
    };
    if name.is_empty()
        || name.contains(['*', '/', '@', ' ', '?', '#'])
        || port.is_some_and(|p| p.parse::<u16>().is_err())
    {
        return Err(
            "invalid host pattern (write e.g. \"example.com\", \"*.example.com\" or \"example.com:8080\")"
                .to_string(),
        );
    }
    Ok(())
}

impl Schedule {
    /// Parses a schedule file's text; errors name the line and the problem.
    pub fn parse(text: &str) -> std::result::Result<Schedule, String> {
        let raw: RawSchedule =
            toml::from_str(text).map_err(|e| crate::config::toml_error(text, &e))?;
        let allow = match raw.allow {
            None => None,
            Some(list) => {
                let mut out = Vec::new();
                for p in list {
                    let span = p.span();
                    let v = p.into_inner().trim().to_ascii_lowercase();
                    check_pattern(&v).map_err(|m| at(text, span, m))?;
                    out.push(v);
                }
                Some(out)
            }
        };
        let mut hosts = BTreeMap::new();
        for (host, rules) in raw.hosts {
            let span = host.span();
            let key = host.into_inner().trim().to_ascii_lowercase();
            if key.starts_with("*.") {
                return Err(at(
                    text,
                    span,
                    "host rules name one host, not a \"*.\" pattern",
                ));
            }
            check_pattern(&key).map_err(|m| at(text, span, m))?;
            let mut paths = Vec::new();
            for (prefix, f) in rules.paths {
                let pspan = prefix.span();
                let prefix = prefix.into_inner();
                if !prefix.starts_with('/') {
                    return Err(at(text, pspan, "a path prefix must start with \"/\""));
                }
                paths.push((prefix, f));
            }
            hosts.insert(
                key,
                HostRules {
                    default: rules.default,
                    paths,
                },
            );
        }
        Ok(Schedule {
            default: raw.default.unwrap_or(Frequency::Monthly),
            allow,
            hosts,
        })
    }

    /// Loads the schedule file at `path`; a missing file means "everything monthly".
    pub fn load(path: &Path) -> Result<Schedule> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Schedule::default()),
            Err(e) => {
                return Err(Error::config(
                    SCHEDULES_VAR,
                    format!("{}: {e}", path.display()),
                ));
            }
        };
        Schedule::parse(&text)
            .map_err(|m| Error::config(SCHEDULES_VAR, format!("{}: {m}", path.display())))
    }

    /// Loads the file named by `SKIPLOCK_SCHEDULES` (default `schedules.toml`).
    pub fn from_env() -> Result<Schedule> {
        let path = crate::config::env_string(SCHEDULES_VAR, DEFAULT_SCHEDULES_PATH);
        Schedule::load(Path::new(&path))
    }

    fn host_rules(&self, host_key: &str) -> Option<&HostRules> {
        self.hosts
            .get(host_key)
            .or_else(|| self.hosts.get(host_name(host_key)))
    }

    /// The frequency of the page at `path` on `host_key`: the host's longest matching path
    /// prefix, else the host's default, else the file's default.
    pub fn frequency_for(&self, host_key: &str, path: &str) -> Frequency {
        let Some(rules) = self.host_rules(host_key) else {
            return self.default;
        };
        rules
            .paths
            .iter()
            .filter(|(prefix, _)| path.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, f)| *f)
            .or(rules.default)
            .unwrap_or(self.default)
    }

    /// Whether the allow-list admits `host_key` (every host when the file has no `allow`).
    pub fn is_allowed(&self, host_key: &str) -> bool {
        let Some(allow) = &self.allow else {
            return true;
        };
        let name = host_name(host_key);
        allow.iter().any(|p| match p.strip_prefix("*.") {
            Some(suffix) => {
                let (target, suffix) = if suffix.contains(':') && !suffix.ends_with(']') {
                    (host_key, suffix)
                } else {
                    (name, suffix)
                };
                target.len() > suffix.len() + 1
                    && target.ends_with(suffix)
                    && target.as_bytes()[target.len() - suffix.len() - 1] == b'.'
            }
            None if p.contains(':') && !p.ends_with(']') => p == host_key,
            None => p == name,
        })
    }
}

/// The host name of a host key (`example.com:8080` → `example.com`, `[::1]:81` → `[::1]`).
pub fn host_name(host_key: &str) -> &str {
    match host_key.rsplit_once(':') {
        Some((name, port))
            if port.bytes().all(|b| b.is_ascii_digit())
                && (!name.contains(':') || name.ends_with(']')) =>
        {
            name
        }
        _ => host_key,
    }
}

/// When a page fetched at `fetched_at` with frequency `f` is due again.
pub fn next_fetch(fetched_at: DateTime<Utc>, f: Frequency) -> DateTime<Utc> {
    fetched_at + chrono::Duration::from_std(f.interval()).expect("frequencies fit chrono")
}

/// The answer to "should this request fetch the page now?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// Never fetched (or never successfully scheduled).
    New,
    /// `next_fetch` has passed.
    Due,
    /// Not due, but forced (the hall pass).
    Forced,
    /// Not due until then.
    NotUntil(DateTime<Utc>),
}

impl Due {
    /// Whether to fetch.
    pub fn fetch(&self) -> bool {
        !matches!(self, Due::NotUntil(_))
    }
}

/// The due check: a comparison, nothing else. `next_fetch` is `None` when there is no page
/// row (or it was never scheduled).
pub fn is_due(next_fetch: Option<DateTime<Utc>>, now: DateTime<Utc>, force: bool) -> Due {
    match next_fetch {
        None => Due::New,
        Some(t) if now >= t => Due::Due,
        Some(_) if force => Due::Forced,
        Some(t) => Due::NotUntil(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
    }

    #[test]
    fn frequencies_have_the_documented_lengths() {
        let days = |f: Frequency| f.interval().as_secs() / 86_400;
        assert_eq!(Frequency::Hourly.interval(), Duration::from_secs(3600));
        assert_eq!(days(Frequency::Daily), 1);
        assert_eq!(days(Frequency::Weekly), 7);
        assert_eq!(days(Frequency::Biweekly), 14);
        assert_eq!(days(Frequency::Monthly), 30);
        assert_eq!(days(Frequency::Quarterly), 90);
        assert_eq!(days(Frequency::BiAnnually), 180);
        assert_eq!(days(Frequency::Annually), 365);
    }

    #[test]
    fn empty_file_and_missing_file_mean_monthly() {
        let s = Schedule::parse("").unwrap();
        assert_eq!(s, Schedule::default());
        assert_eq!(s.frequency_for("example.com", "/x"), Frequency::Monthly);
        let s = Schedule::load(Path::new("/nonexistent/skiplock/schedules.toml")).unwrap();
        assert_eq!(s.default, Frequency::Monthly);
        assert!(s.is_allowed("anything.example"));
    }

    const FILE: &str = r#"
default = "weekly"
allow = ["example.com", "*.example.org", "localhost:8080"]

[hosts."example.com"]
default = "daily"
paths = { "/news/" = "hourly", "/news/archive/" = "annually" }

[hosts."example.com:8443"]
paths = { "/" = "quarterly" }

[hosts."blog.example.org"]
paths = { "/drafts/" = "bi-annually" }
"#;

    #[test]
    fn the_most_specific_rule_wins() {
        let s = Schedule::parse(FILE).unwrap();
        // Longest path prefix of the host.
        assert_eq!(
            s.frequency_for("example.com", "/news/archive/2020"),
            Frequency::Annually
        );
        assert_eq!(
            s.frequency_for("example.com", "/news/today"),
            Frequency::Hourly
        );
        // Host default.
        assert_eq!(s.frequency_for("example.com", "/about"), Frequency::Daily);
        // A port-specific rule set beats the host name's.
        assert_eq!(
            s.frequency_for("example.com:8443", "/news/x"),
            Frequency::Quarterly
        );
        // Another port falls back to the host name's rules.
        assert_eq!(
            s.frequency_for("example.com:81", "/news/x"),
            Frequency::Hourly
        );
        // Path rule without host default falls back to the file default.
        assert_eq!(
            s.frequency_for("blog.example.org", "/drafts/a"),
            Frequency::BiAnnually
        );
        assert_eq!(
            s.frequency_for("blog.example.org", "/post"),
            Frequency::Weekly
        );
        // Unknown host: file default.
        assert_eq!(s.frequency_for("other.net", "/news/"), Frequency::Weekly);
    }

    #[test]
    fn allow_list_with_wildcards_and_ports() {
        let s = Schedule::parse(FILE).unwrap();
        assert!(s.is_allowed("example.com"));
        assert!(s.is_allowed("example.com:8443"));
        assert!(s.is_allowed("a.example.org"));
        assert!(s.is_allowed("a.b.example.org:81"));
        assert!(!s.is_allowed("example.org"), "*. matches subdomains only");
        assert!(!s.is_allowed("badexample.org"));
        assert!(!s.is_allowed("example.com.evil.net"));
        assert!(s.is_allowed("localhost:8080"));
        assert!(!s.is_allowed("localhost:8081"));
        assert!(!s.is_allowed("localhost"));
    }

    #[test]
    fn bad_files_name_the_line_and_the_problem_but_never_quote_the_file() {
        let cases = [
            (
                "default = \"daily\"\n\n[hosts.\"a.com\"]\ndefault = \"fortnightly\"\n",
                "line 4, column 11: unknown variant, expected one of",
                "fortnightly",
            ),
            (
                "default = \"daily\"\nthis is not toml\n",
                "line 2, column 6: key with no value, expected `=`",
                "this",
            ),
            (
                "[hosts.\"a.com\"]\npaths = { \"news\" = \"daily\" }\n",
                "line 2, column 11: a path prefix must start with \"/\"",
                "news",
            ),
            (
                "allow = [\n  \"ok.com\",\n  \"http://bad.com/\",\n]\n",
                "line 3, column 3: invalid host pattern (write e.g.",
                "bad.com",
            ),
            (
                "defualt = \"daily\"\n",
                "line 1, column 1: unknown field, expected one of `default`",
                "defualt",
            ),
            (
                "[hosts.\"*.a.com\"]\n",
                "line 1, column 8: host rules name one host, not a \"*.\" pattern",
                "a.com",
            ),
            (
                "s3cr3t-token-on-line-1\n",
                "line 1, column 23: key with no value",
                "s3cr3t",
            ),
        ];
        for (text, want, secret) in cases {
            let e = Schedule::parse(text).unwrap_err();
            assert!(e.starts_with(want), "{text:?}: {e}");
            assert!(!e.contains(secret), "{text:?} is quoted: {e}");
        }
    }

    #[test]
    fn next_fetch_adds_the_frequency() {
        assert_eq!(
            next_fetch(t0(), Frequency::Daily),
            t0() + chrono::Duration::days(1)
        );
        assert_eq!(
            next_fetch(t0(), Frequency::Hourly),
            t0() + chrono::Duration::hours(1)
        );
    }

    #[test]
    fn due_is_a_comparison() {
        let next = t0() + chrono::Duration::days(1);
        assert_eq!(is_due(None, t0(), false), Due::New);
        assert_eq!(is_due(Some(next), t0(), false), Due::NotUntil(next));
        assert!(!is_due(Some(next), t0(), false).fetch());
        assert_eq!(is_due(Some(next), t0(), true), Due::Forced);
        assert_eq!(is_due(Some(next), next, false), Due::Due);
        assert_eq!(
            is_due(Some(next), next + chrono::Duration::seconds(1), true),
            Due::Due
        );
    }

    #[test]
    fn host_names_drop_the_port() {
        assert_eq!(host_name("example.com:8080"), "example.com");
        assert_eq!(host_name("example.com"), "example.com");
        assert_eq!(host_name("[::1]:81"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
    }
}
