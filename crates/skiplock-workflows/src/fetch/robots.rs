//! robots.txt: fetched once per host per day (cached in `skiplock.hosts`) and honoured
//! with the `texting_robots` parser.

use chrono::{DateTime, Utc};
use url::Url;

/// How long a host's robots.txt is trusted before it is fetched again.
pub const ROBOTS_TTL: chrono::Duration = chrono::Duration::days(1);

/// A host's cached robots.txt answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    /// The file, when the host served one (2xx).
    pub txt: Option<String>,
    /// The HTTP status of the robots.txt request.
    pub status: Option<i32>,
    /// When it was fetched.
    pub fetched_at: Option<DateTime<Utc>>,
}

impl From<crate::store::fetch::RobotsRow> for Cached {
    fn from(r: crate::store::fetch::RobotsRow) -> Self {
        Cached {
            txt: r.robots_txt,
            status: r.robots_status,
            fetched_at: r.robots_fetched_at,
        }
    }
}

impl Cached {
    /// Whether it must be fetched (again) before a page of the host is requested.
    pub fn is_stale(&self, now: DateTime<Utc>) -> bool {
        self.fetched_at.is_none_or(|t| now - t >= ROBOTS_TTL)
    }
}

/// The robots.txt URL of a page's host.
pub fn robots_url(page: &Url) -> Url {
    let mut u = page.clone();
    u.set_path("/robots.txt");
    u.set_query(None);
    u.set_fragment(None);
    u
}

/// The product token robots.txt groups are matched against: the User-Agent up to the first
/// `/` or space (`skiplock/0.1 (+https://…)` → `skiplock`).
pub fn agent_token(user_agent: &str) -> &str {
    user_agent
        .split(['/', ' '])
        .next()
        .filter(|t| !t.is_empty())
        .unwrap_or(user_agent)
}

/// Whether `url` may be fetched. No robots.txt (4xx) allows everything; an unparsable file
/// is treated as absent.
pub fn allowed(cached: &Cached, user_agent: &str, url: &Url) -> bool {
    let Some(txt) = &cached.txt else {
        return true;
    };
    match texting_robots::Robot::new(agent_token(user_agent), txt.as_bytes()) {
        Ok(r) => r.allowed(url.as_str()),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(txt: &str) -> Cached {
        Cached {
            txt: Some(txt.into()),
            status: Some(200),
            fetched_at: Some(Utc::now()),
        }
    }

    #[test]
    fn disallow_rules_apply_to_our_agent() {
        let c = cached(
            "User-agent: *\nDisallow: /private/\n\nUser-agent: skiplock\nDisallow: /secret\n",
        );
        let ua = "skiplock/0.1 (+https://example.com)";
        assert!(!allowed(
            &c,
            ua,
            &Url::parse("http://a.com/secret/x").unwrap()
        ));
        // Our own group replaces the * group.
        assert!(allowed(
            &c,
            ua,
            &Url::parse("http://a.com/private/x").unwrap()
        ));
        assert!(allowed(&c, ua, &Url::parse("http://a.com/public").unwrap()));
        let none = Cached {
            txt: None,
            status: Some(404),
            fetched_at: Some(Utc::now()),
        };
        assert!(allowed(
            &none,
            ua,
            &Url::parse("http://a.com/secret").unwrap()
        ));
    }

    #[test]
    fn cache_is_trusted_for_a_day() {
        let now = Utc::now();
        let mut c = cached("");
        c.fetched_at = Some(now - chrono::Duration::hours(23));
        assert!(!c.is_stale(now));
        c.fetched_at = Some(now - chrono::Duration::hours(25));
        assert!(c.is_stale(now));
        c.fetched_at = None;
        assert!(c.is_stale(now));
    }

    #[test]
    fn robots_url_and_agent_token() {
        let u = Url::parse("http://a.com:81/x/y?q=1").unwrap();
        assert_eq!(robots_url(&u).as_str(), "http://a.com:81/robots.txt");
        assert_eq!(agent_token("skiplock/0.1 (+x)"), "skiplock");
        assert_eq!(agent_token("MyBot"), "MyBot");
    }
}
