//! Who may use the console, and proof that a change was asked for by its own pages.
//!
//! - **Where it listens.** Loopback by default. A `--listen` address that is not loopback
//!   (`0.0.0.0`, a LAN address, a name resolving to one) is refused unless
//!   `SKIPLOCK_WEB_TOKEN` is set ([`listen_decision`]).
//! - **The token.** When it is set, every request needs it, wherever the console listens:
//!   the login form trades it for a cookie (`HttpOnly`, `SameSite=Strict`) holding an HMAC
//!   of the token (never the token itself), or a script sends `Authorization: Bearer TOKEN`.
//!   Every comparison is constant-time.
//! - **CSRF.** Every state-changing request is a POST carrying a `csrf` form field: an HMAC,
//!   under a key only the server knows, of a random nonce kept in the browser's
//!   `skiplock_csrf` cookie. Another site can neither read the field nor forge it, and
//!   `SameSite=Strict` keeps the cookies off its requests anyway; a cross-site `Origin` or
//!   `Sec-Fetch-Site` is refused as well.

use std::net::SocketAddr;

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The login cookie.
pub const SESSION_COOKIE: &str = "skiplock_session";
/// The CSRF nonce cookie.
pub const CSRF_COOKIE: &str = "skiplock_csrf";
/// The form field carrying the CSRF token.
pub const CSRF_FIELD: &str = "csrf";
/// The setting holding the token.
pub const TOKEN_SETTING: &str = "SKIPLOCK_WEB_TOKEN";
/// Shortest token accepted: a guessable token would make the login form an open door.
pub const MIN_TOKEN_LEN: usize = 16;
/// Longest token accepted.
pub const MAX_TOKEN_LEN: usize = 1024;
/// Characters of a CSRF nonce (hex of 16 random bytes).
const NONCE_LEN: usize = 32;

/// Checks a `SKIPLOCK_WEB_TOKEN` value: 16 to 1024 visible ASCII characters (no spaces), so
/// it is not trivially guessed and fits in a header. The message never quotes the token.
pub fn check_token(token: &str) -> Result<(), String> {
    let n = token.chars().count();
    if n < MIN_TOKEN_LEN {
        return Err(format!(
            "is {n} characters long; use at least {MIN_TOKEN_LEN} random characters (e.g. `openssl rand -hex 24`)"
        ));
    }
    if n > MAX_TOKEN_LEN {
        return Err(format!("is {n} characters long (at most {MAX_TOKEN_LEN})"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(
            "must be visible ASCII characters only (no spaces or control characters)".into(),
        );
    }
    Ok(())
}

/// Whether the console may listen on `addrs` (what `--listen` resolved to): loopback
/// addresses always; anything else only with a token. The error is the one line the
/// command prints.
pub fn listen_decision(listen: &str, addrs: &[SocketAddr], token_set: bool) -> Result<(), String> {
    if addrs.is_empty() {
        return Err(format!("--listen {listen} resolves to no address"));
    }
    if token_set || addrs.iter().all(|a| a.ip().is_loopback()) {
        return Ok(());
    }
    let open: Vec<String> = addrs
        .iter()
        .filter(|a| !a.ip().is_loopback())
        .map(|a| a.ip().to_string())
        .collect();
    Err(format!(
        "refusing to listen on {listen} ({} is not a loopback address) without {TOKEN_SETTING}: set a token of at least {MIN_TOKEN_LEN} random characters, or listen on 127.0.0.1",
        open.join(", ")
    ))
}

fn hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(msg);
    m.finalize().into_bytes().into()
}

/// The console's secrets: the token (if any) and the CSRF key.
pub struct Auth {
    /// HMAC of the token under a fixed label: what a login cookie holds.
    session: Option<[u8; 32]>,
    /// HMAC key of the CSRF tokens.
    csrf_key: [u8; 32],
    /// The token, for comparing a bearer header (through HMACs, constant-time).
    token: Option<Vec<u8>>,
}

impl Auth {
    /// Builds the secrets. With a token the CSRF key is derived from it, so forms stay valid
    /// across restarts; without one it is random per process.
    pub fn new(token: Option<&str>) -> Auth {
        let csrf_key = match token {
            Some(t) => hmac(t.as_bytes(), b"skiplock web csrf key v1"),
            None => rand::random(),
        };
        Auth {
            session: token.map(|t| hmac(t.as_bytes(), b"skiplock web session v1")),
            csrf_key,
            token: token.map(|t| t.as_bytes().to_vec()),
        }
    }

    /// Whether requests need the token.
    pub fn required(&self) -> bool {
        self.session.is_some()
    }

    /// The login cookie's value (hex), when a token is set.
    pub fn session_value(&self) -> Option<String> {
        self.session.map(hex::encode)
    }

    /// Whether `given` is the token (constant-time: both sides are hashed first, so neither
    /// content nor length leaks through timing).
    pub fn token_matches(&self, given: &str) -> bool {
        match &self.token {
            None => false,
            Some(t) => {
                let key = b"skiplock web compare v1";
                bool::from(hmac(key, t).ct_eq(&hmac(key, given.as_bytes())))
            }
        }
    }

    /// Whether a request may see the console: no token set, a login cookie holding the
    /// session value, or `Authorization: Bearer TOKEN`.
    pub fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(session) = self.session_value() else {
            return true;
        };
        if let Some(c) = cookie(headers, SESSION_COOKIE)
            && bool::from(c.as_bytes().ct_eq(session.as_bytes()))
        {
            return true;
        }
        headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| self.token_matches(t.trim()))
    }

    /// The CSRF token that goes with `nonce` (hex).
    pub fn csrf_token(&self, nonce: &str) -> String {
        hex::encode(hmac(&self.csrf_key, nonce.as_bytes()))
    }

    /// Whether `field` is the CSRF token of the browser's `nonce` (constant-time).
    pub fn csrf_ok(&self, nonce: Option<&str>, field: Option<&str>) -> bool {
        match (nonce, field) {
            (Some(n), Some(f)) if valid_nonce(n) => {
                bool::from(self.csrf_token(n).as_bytes().ct_eq(f.as_bytes()))
            }
            _ => false,
        }
    }
}

/// A fresh CSRF nonce.
pub fn new_nonce() -> String {
    hex::encode(rand::random::<[u8; NONCE_LEN / 2]>())
}

/// Whether `n` looks like a nonce this console made (a cookie is browser input).
pub fn valid_nonce(n: &str) -> bool {
    n.len() == NONCE_LEN && n.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// A `Set-Cookie` value for the console's cookies: `HttpOnly`, `SameSite=Strict`, whole
/// site, gone when the browser closes (`max_age` zero: deleted now).
pub fn set_cookie(name: &str, value: &str, delete: bool) -> String {
    let mut c = format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict");
    if delete {
        c.push_str("; Max-Age=0");
    }
    c
}

/// Whether a POST comes from another site: `Sec-Fetch-Site: cross-site`/`same-site`, or an
/// `Origin` whose host and port differ from the request's `Host`. Requests without these
/// headers (curl, old browsers) are judged by the CSRF token alone.
pub fn cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && matches!(site, "cross-site" | "same-site")
    {
        return true;
    }
    let Some(origin) = headers.get("origin").and_then(|v| v.to_str().ok()) else {
        return false;
    };
    if origin == "null" {
        return true;
    }
    let host = headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .split_once("://")
        .map(|(_, rest)| rest.trim_end_matches('/'))
        .unwrap_or("");
    !origin_host.eq_ignore_ascii_case(host)
}

/// Where to go after logging in: only a path on this console (`/…`, not `//host`), else `/`.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.starts_with("/\\")
                && !n.chars().any(|c| c.is_control()) =>
        {
            n.to_string()
        }
        _ => "/".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_loopback_listens_without_a_token() {
        for ok in ["127.0.0.1:8080", "[::1]:8080", "127.0.0.2:1"] {
            assert!(listen_decision(ok, &[addr(ok)], false).is_ok(), "{ok}");
        }
        for open in [
            "0.0.0.0:8080",
            "[::]:8080",
            "192.168.1.5:80",
            "10.0.0.1:8080",
        ] {
            let e = listen_decision(open, &[addr(open)], false).unwrap_err();
            assert!(
                e.contains("SKIPLOCK_WEB_TOKEN") && e.contains("not a loopback"),
                "{e}"
            );
            assert!(listen_decision(open, &[addr(open)], true).is_ok());
        }
        // A name resolving to loopback and something else is not loopback.
        let mixed = [addr("127.0.0.1:80"), addr("192.168.1.5:80")];
        assert!(listen_decision("box:80", &mixed, false).is_err());
        assert!(listen_decision("nowhere:80", &[], true).is_err());
    }

    #[test]
    fn weak_or_unprintable_tokens_are_refused_without_being_quoted() {
        assert!(check_token("0123456789abcdef").is_ok());
        let e = check_token("secret").unwrap_err();
        assert!(e.contains("6 characters") && !e.contains("secret"), "{e}");
        assert!(check_token("0123456789abcdef ").is_err());
        assert!(check_token("0123456789abcdef\n").is_err());
        assert!(check_token("0123456789abcdéf").is_err());
        assert!(check_token(&"x".repeat(2000)).is_err());
    }

    #[test]
    fn the_token_opens_the_console_by_cookie_or_bearer_and_nothing_else() {
        let open = Auth::new(None);
        assert!(!open.required() && open.authorized(&HeaderMap::new()));
        assert!(!open.token_matches(""));

        let a = Auth::new(Some("0123456789abcdef"));
        assert!(a.required());
        assert!(!a.authorized(&HeaderMap::new()));
        assert!(a.token_matches("0123456789abcdef"));
        assert!(!a.token_matches("0123456789abcdeF") && !a.token_matches(""));
        let session = a.session_value().unwrap();
        assert!(!session.contains("0123456789abcdef"));
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("other=1; {SESSION_COOKIE}={session}")).unwrap(),
        );
        assert!(a.authorized(&h));
        h.insert(
            COOKIE,
            HeaderValue::from_static("skiplock_session=0123456789abcdef"),
        );
        assert!(!a.authorized(&h), "the raw token is not a session cookie");
        let mut b = HeaderMap::new();
        b.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer 0123456789abcdef"),
        );
        assert!(a.authorized(&b));
        b.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer wrong-wrong-wrong"),
        );
        assert!(!a.authorized(&b));
        // Another token's cookie does not open this console.
        let other = Auth::new(Some("fedcba9876543210"));
        assert_ne!(other.session_value(), a.session_value());
    }

    #[test]
    fn a_csrf_token_belongs_to_its_nonce_and_its_console() {
        let a = Auth::new(None);
        let n = new_nonce();
        assert!(valid_nonce(&n));
        let t = a.csrf_token(&n);
        assert!(a.csrf_ok(Some(&n), Some(&t)));
        assert!(!a.csrf_ok(Some(&n), None));
        assert!(!a.csrf_ok(None, Some(&t)));
        assert!(!a.csrf_ok(Some(&new_nonce()), Some(&t)));
        assert!(!a.csrf_ok(Some(&n), Some("")));
        assert!(!a.csrf_ok(Some("short"), Some(&a.csrf_token("short"))));
        assert!(
            !Auth::new(None).csrf_ok(Some(&n), Some(&t)),
            "another process's key"
        );
        // With a token the key survives a restart.
        let k1 = Auth::new(Some("0123456789abcdef"));
        let k2 = Auth::new(Some("0123456789abcdef"));
        assert_eq!(k1.csrf_token(&n), k2.csrf_token(&n));
    }

    #[test]
    fn cross_site_posts_and_open_redirects_are_recognised() {
        let mut h = HeaderMap::new();
        assert!(!cross_site(&h));
        h.insert("host", HeaderValue::from_static("127.0.0.1:8080"));
        h.insert("origin", HeaderValue::from_static("http://127.0.0.1:8080"));
        assert!(!cross_site(&h));
        h.insert("origin", HeaderValue::from_static("http://evil.example"));
        assert!(cross_site(&h));
        h.insert("origin", HeaderValue::from_static("null"));
        assert!(cross_site(&h));
        let mut s = HeaderMap::new();
        s.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(cross_site(&s));
        s.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(!cross_site(&s));

        assert_eq!(
            safe_next(Some("/jobs?state=discarded")),
            "/jobs?state=discarded"
        );
        for bad in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil",
            "jobs",
            "/\nx",
        ] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad:?}");
        }
        assert_eq!(safe_next(None), "/");
        assert_eq!(
            cookie(
                &{
                    let mut h = HeaderMap::new();
                    h.insert(
                        COOKIE,
                        HeaderValue::from_static("a=1; skiplock_csrf=abc ;b=2"),
                    );
                    h
                },
                CSRF_COOKIE
            ),
            Some("abc")
        );
    }
}
