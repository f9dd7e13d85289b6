//! URL normalisation and the host key, pure. A page is identified by its normalised URL
//! (scheme, host, port, path, query; no fragment), a host by its lower-case name plus
//! `:port` when the port is not the scheme's default, so two servers on one machine are
//! two hosts for politeness.

use std::net::IpAddr;

use url::Url;

/// The longest URL skiplock fetches, in bytes (`skiplock._normalize_url` has the same cap):
/// a URL is a key of btree indexes (the crawl's pages, the pages, the fetch job's unique
/// key), whose rows must stay under about 2.7 KB.
pub const MAX_URL_BYTES: usize = 2000;

/// Parses and normalises a URL to fetch; the error says what is wrong with it.
pub fn normalize(s: &str) -> Result<Url, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("invalid URL: it is empty".into());
    }
    let mut u = Url::parse(t).map_err(|e| format!("invalid URL {t:?}: {e}"))?;
    check(&u, t)?;
    u.set_fragment(None);
    check_len(&u)?;
    Ok(u)
}

fn check_len(u: &Url) -> Result<(), String> {
    if u.as_str().len() > MAX_URL_BYTES {
        return Err(format!(
            "invalid URL: it is {} bytes long (at most {MAX_URL_BYTES})",
            u.as_str().len()
        ));
    }
    Ok(())
}

fn check(u: &Url, shown: &str) -> Result<(), String> {
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!(
            "invalid URL {shown:?}: only http and https URLs can be fetched, not {}:",
            u.scheme()
        ));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(format!("invalid URL {shown:?}: it has no host"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(format!(
            "invalid URL {shown:?}: user names and passwords are not allowed"
        ));
    }
    Ok(())
}

/// Resolves a link found on a page against the page's URL; `None` for links that are not
/// http(s) pages (mailto:, javascript:, broken) or longer than [`MAX_URL_BYTES`] (skipped,
/// so one overlong link never fails the fetch of the page that has it).
pub fn resolve_link(base: &Url, href: &str) -> Option<Url> {
    let mut u = base.join(href.trim()).ok()?;
    check(&u, href).ok()?;
    u.set_fragment(None);
    check_len(&u).ok()?;
    Some(u)
}

/// The host key of a normalised URL: `example.com`, or `example.com:8080`.
pub fn host_key(u: &Url) -> String {
    let host = u.host_str().unwrap_or_default().to_ascii_lowercase();
    match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host,
    }
}

/// The request target of a URL: its path plus `?query` when there is one.
pub fn target(u: &Url) -> String {
    match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_string(),
    }
}

/// The literal IP address of a URL's host, if it is one.
pub fn literal_ip(u: &Url) -> Option<IpAddr> {
    match u.host()? {
        url::Host::Ipv4(a) => Some(IpAddr::V4(a)),
        url::Host::Ipv6(a) => Some(IpAddr::V6(a)),
        url::Host::Domain(_) => None,
    }
}

pub use super::address::is_internal;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_scheme_host_port_and_fragment() {
        let u = normalize("HTTP://Example.COM:80/a/../b?x=1#frag").unwrap();
        assert_eq!(u.as_str(), "http://example.com/b?x=1");
        assert_eq!(host_key(&u), "example.com");
        assert_eq!(target(&u), "/b?x=1");
        let u = normalize("https://example.com:8443").unwrap();
        assert_eq!(u.as_str(), "https://example.com:8443/");
        assert_eq!(host_key(&u), "example.com:8443");
        assert_eq!(
            host_key(&normalize("http://127.0.0.1:3000/x").unwrap()),
            "127.0.0.1:3000"
        );
        assert_eq!(
            host_key(&normalize("http://[::1]:81/").unwrap()),
            "[::1]:81"
        );
    }

    #[test]
    fn refuses_what_cannot_be_fetched() {
        assert!(
            normalize("ftp://example.com/")
                .unwrap_err()
                .contains("only http and https")
        );
        assert!(normalize("not a url").unwrap_err().contains("invalid URL"));
        assert!(normalize("").unwrap_err().contains("empty"));
        assert!(
            normalize("http://user:pw@example.com/")
                .unwrap_err()
                .contains("passwords")
        );
        assert!(normalize("mailto:a@example.com").is_err());
    }

    #[test]
    fn links_resolve_against_the_page() {
        let base = normalize("http://example.com/a/b").unwrap();
        assert_eq!(
            resolve_link(&base, "c#x").unwrap().as_str(),
            "http://example.com/a/c"
        );
        assert_eq!(
            resolve_link(&base, "/d").unwrap().as_str(),
            "http://example.com/d"
        );
        assert_eq!(
            resolve_link(&base, "//other.org/").unwrap().as_str(),
            "http://other.org/"
        );
        assert!(resolve_link(&base, "mailto:x@y.z").is_none());
        assert!(resolve_link(&base, "javascript:void(0)").is_none());
    }
}
