//! Who may use the console, and proof that a change was asked for by its own pages.
//!
//! - **Where it listens.** Loopback by default. A `--listen` address that is not loopback
//!   (`0.0.0.0`, a LAN address, a name resolving to one) is refused unless a token is set
//!   ([`listen_decision`]). Whatever the address, only requests for the console's own host
//!   names are answered ([`super::hosts`]).
//! - **Tokens.** `SKIPLOCK_WEB_TOKEN` opens everything; `SKIPLOCK_WEB_READ_TOKEN` opens every
//!   page and `/metrics` but no button (every POST but log in and log out is refused with
//!   403). When either is set, every request needs one: the login form trades it for a
//!   session (a random id in an `HttpOnly`, `SameSite=Strict` cookie, kept on the server with
//!   its expiry and forgotten at logout), or a script sends `Authorization: Bearer TOKEN`.
//!   Tokens are checked for length and variety at start-up ([`check_token`]); every
//!   comparison is constant-time; wrong tokens are limited per client address
//!   ([`LoginLimiter`]).
//! - **TLS.** The console serves plain HTTP; behind a TLS-terminating proxy,
//!   `SKIPLOCK_WEB_HTTPS=true` makes its cookies `Secure` and `__Host-` prefixed (a setting,
//!   not a header a client could send).
//! - **CSRF.** Every state-changing request is a POST carrying a `csrf` form field: an HMAC,
//!   under a key only the server knows, of a random nonce kept in the browser's
//!   `skiplock_csrf` cookie. Another site can neither read the field nor forge it, and
//!   `SameSite=Strict` keeps the cookies off its requests anyway; a cross-site
//!   `Sec-Fetch-Site`, or an `Origin` that is not one of the console's own names, is
//!   refused as well.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::hosts::AllowedHosts;

/// The login cookie (`__Host-` prefixed behind TLS: [`Auth::session_cookie`]).
pub const SESSION_COOKIE: &str = "skiplock_session";
/// The CSRF nonce cookie (`__Host-` prefixed behind TLS: [`Auth::csrf_cookie`]).
pub const CSRF_COOKIE: &str = "skiplock_csrf";
/// The form field carrying the CSRF token.
pub const CSRF_FIELD: &str = "csrf";
/// The setting holding the token that opens everything.
pub const TOKEN_SETTING: &str = "SKIPLOCK_WEB_TOKEN";
/// The setting holding the read-only token (pages and `/metrics`, no buttons).
pub const READ_TOKEN_SETTING: &str = "SKIPLOCK_WEB_READ_TOKEN";
/// The setting saying browsers reach the console over https (a TLS proxy in front).
pub const HTTPS_SETTING: &str = "SKIPLOCK_WEB_HTTPS";
/// The setting of how long a login lasts.
pub const SESSION_TTL_SETTING: &str = "SKIPLOCK_WEB_SESSION_TTL";
/// Default of `SKIPLOCK_WEB_SESSION_TTL`.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Shortest token accepted: a guessable token would make the login form an open door.
pub const MIN_TOKEN_LEN: usize = 16;
/// Fewest distinct characters a token must have (`aaaaaaaaaaaaaaaa` is 16 long and one
/// guess away; 24 random hex digits have 16 distinct ones almost surely).
pub const MIN_TOKEN_DISTINCT: usize = 8;
/// Longest token accepted.
pub const MAX_TOKEN_LEN: usize = 1024;
/// Wrong tokens one client address may send per [`LOGIN_LOCKOUT`] before it is refused.
pub const LOGIN_FAILURES: u32 = 5;
/// How long a client address that sent [`LOGIN_FAILURES`] wrong tokens is refused.
pub const LOGIN_LOCKOUT: Duration = Duration::from_secs(60);
/// Client addresses the login limiter remembers (older ones are forgotten first).
const LIMITER_CAPACITY: usize = 10_000;
/// Sessions kept at most per access level: logins with the read-only token and logins with
/// the write token never take each other's room ([`Auth::open_session`]).
const MAX_SESSIONS: usize = 10_000;
/// Sessions one client address (an IPv6 /64) keeps at most per access level: at this bound
/// its own session expiring soonest is dropped, so a client logging in again and again
/// replaces its own logins, not other clients'.
const MAX_SESSIONS_PER_CLIENT: usize = 100;
/// Characters of a CSRF nonce (hex of 16 random bytes).
const NONCE_LEN: usize = 32;

/// Checks a token setting's value: 16 to 1024 visible ASCII characters (no spaces), at
/// least 8 of them distinct, so it is not trivially guessed and fits in a header. The
/// message never quotes the token.
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
    let mut seen = [false; 128];
    for b in token.bytes() {
        seen[b as usize] = true;
    }
    let distinct = seen.iter().filter(|s| **s).count();
    if distinct < MIN_TOKEN_DISTINCT {
        return Err(format!(
            "has only {distinct} distinct characters; a token must be random, with at least {MIN_TOKEN_DISTINCT} distinct characters (e.g. `openssl rand -hex 24`)"
        ));
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

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Every page and `/metrics`; no button.
    Read,
    /// Everything.
    Write,
}

/// Who a request says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// Let in: no token is set, or a live session.
    Known(Access),
    /// A right bearer token (a login of its own: refused while the address is locked out).
    Bearer(Access),
    /// A bearer token that is no token of this console (counts against the login limit).
    WrongBearer,
    /// No session and no bearer token.
    Unknown,
}

struct Session {
    access: Access,
    /// The address it logged in from ([`client_key`]).
    client: IpAddr,
    expires: Instant,
}

/// The live sessions, by the SHA-256 of their cookie value (the value itself is never kept),
/// and each client's per access level, oldest first: every session lasts the same time, so
/// the oldest is the one expiring soonest.
#[derive(Default)]
struct Sessions {
    by_key: HashMap<[u8; 32], Session>,
    by_client: HashMap<(Access, IpAddr), VecDeque<[u8; 32]>>,
}

impl Sessions {
    fn insert(&mut self, key: [u8; 32], s: Session) {
        self.by_client
            .entry((s.access, s.client))
            .or_default()
            .push_back(key);
        self.by_key.insert(key, s);
    }

    fn remove(&mut self, key: &[u8; 32]) {
        let Some(s) = self.by_key.remove(key) else {
            return;
        };
        if let Some(keys) = self.by_client.get_mut(&(s.access, s.client)) {
            keys.retain(|k| k != key);
            if keys.is_empty() {
                self.by_client.remove(&(s.access, s.client));
            }
        }
    }

    fn drop_expired(&mut self, now: Instant) {
        let expired: Vec<[u8; 32]> = self
            .by_key
            .iter()
            .filter(|(_, v)| v.expires <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in expired {
            self.remove(&k);
        }
    }

    /// The session to drop so one more of `access` from `client` fits, if one must go: at
    /// [`MAX_SESSIONS_PER_CLIENT`] the client's own oldest; at [`MAX_SESSIONS`] of the level,
    /// the oldest of the client holding the most sessions of the level. Sessions of the other
    /// level are never chosen: a read-only login cannot log the write token's holder out.
    fn to_drop(&self, access: Access, client: IpAddr) -> Option<[u8; 32]> {
        let oldest = |c: IpAddr| {
            self.by_client
                .get(&(access, c))
                .and_then(|k| k.front().copied())
        };
        let own = self
            .by_client
            .get(&(access, client))
            .map_or(0, VecDeque::len);
        if own >= MAX_SESSIONS_PER_CLIENT {
            return oldest(client);
        }
        let level = self.by_client.iter().filter(|((a, _), _)| *a == access);
        if level.clone().map(|(_, k)| k.len()).sum::<usize>() < MAX_SESSIONS {
            return None;
        }
        let ((_, biggest), _) = level.max_by_key(|(_, k)| k.len())?;
        oldest(*biggest)
    }
}

/// The console's secrets and sessions.
pub struct Auth {
    /// HMAC key of the CSRF tokens.
    csrf_key: [u8; 32],
    /// The write token, hashed for constant-time comparison.
    write: Option<[u8; 32]>,
    /// The read-only token, hashed the same way.
    read: Option<[u8; 32]>,
    /// Live sessions.
    sessions: Mutex<Sessions>,
    /// How long a login lasts.
    ttl: Duration,
    /// Browsers reach the console over https: cookies are `Secure` and `__Host-`.
    https: bool,
    /// Wrong tokens per client address.
    pub limiter: LoginLimiter,
}

const COMPARE_KEY: &[u8] = b"skiplock web compare v1";

impl Auth {
    /// Builds the secrets with a write token, a read-only token (either may be absent),
    /// how long a login lasts and whether browsers use https. The CSRF key is random per
    /// process: sessions live in memory, so a restart logs everyone out and forms made by
    /// the previous process are stale anyway.
    pub fn new(write: Option<&str>, read: Option<&str>, ttl: Duration, https: bool) -> Auth {
        Auth {
            csrf_key: rand::random(),
            write: write.map(|t| hmac(COMPARE_KEY, t.as_bytes())),
            read: read.map(|t| hmac(COMPARE_KEY, t.as_bytes())),
            sessions: Mutex::new(Sessions::default()),
            ttl,
            https,
            limiter: LoginLimiter::default(),
        }
    }

    /// Whether requests need a token.
    pub fn required(&self) -> bool {
        self.write.is_some() || self.read.is_some()
    }

    /// Whether cookies are `Secure` (browsers use https).
    pub fn https(&self) -> bool {
        self.https
    }

    /// The login cookie's name.
    pub fn session_cookie(&self) -> &'static str {
        if self.https {
            "__Host-skiplock_session"
        } else {
            SESSION_COOKIE
        }
    }

    /// The CSRF nonce cookie's name.
    pub fn csrf_cookie(&self) -> &'static str {
        if self.https {
            "__Host-skiplock_csrf"
        } else {
            CSRF_COOKIE
        }
    }

    /// What `given` opens, if it is one of the tokens (constant-time: both sides are
    /// hashed first, so neither content nor length leaks through timing, and both tokens
    /// are compared every time).
    pub fn token_access(&self, given: &str) -> Option<Access> {
        let g = hmac(COMPARE_KEY, given.as_bytes());
        let is = |t: &Option<[u8; 32]>| t.as_ref().is_some_and(|t| bool::from(t.ct_eq(&g)));
        let (w, r) = (is(&self.write), is(&self.read));
        if w {
            Some(Access::Write)
        } else if r {
            Some(Access::Read)
        } else {
            None
        }
    }

    /// Starts a session for `access`, logged in from `ip`; returns the cookie value (32
    /// random bytes, hex). Memory stays bounded without one token holder's logins evicting
    /// another's ([`Sessions::to_drop`]).
    pub fn open_session(&self, access: Access, ip: IpAddr) -> String {
        let id: [u8; 32] = rand::random();
        let value = hex::encode(id);
        let now = Instant::now();
        let client = client_key(ip);
        let mut s = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if s.by_key.len() >= MAX_SESSIONS {
            s.drop_expired(now);
        }
        if let Some(k) = s.to_drop(access, client) {
            s.remove(&k);
        }
        s.insert(
            Sha256::digest(value.as_bytes()).into(),
            Session {
                access,
                client,
                expires: now + self.ttl,
            },
        );
        value
    }

    /// Forgets the session of this request's cookie (logout): the cookie opens nothing
    /// afterwards, even if a copy of it was kept.
    pub fn close_session(&self, headers: &HeaderMap) {
        if let Some(c) = cookie(headers, self.session_cookie()) {
            let key: [u8; 32] = Sha256::digest(c.as_bytes()).into();
            self.sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
        }
    }

    fn session_access(&self, value: &str) -> Option<Access> {
        // Looked up by hash: the map's comparisons never touch the secret itself.
        let key: [u8; 32] = Sha256::digest(value.as_bytes()).into();
        let mut s = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        match s.by_key.get(&key) {
            Some(v) if v.expires > Instant::now() => Some(v.access),
            Some(_) => {
                s.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Who a request is: no token set (everything), a live session, or a bearer token.
    pub fn identify(&self, headers: &HeaderMap) -> Identity {
        if !self.required() {
            return Identity::Known(Access::Write);
        }
        if let Some(a) = cookie(headers, self.session_cookie()).and_then(|c| self.session_access(c))
        {
            return Identity::Known(a);
        }
        match headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        {
            Some(t) => match self.token_access(t.trim()) {
                Some(a) => Identity::Bearer(a),
                None => Identity::WrongBearer,
            },
            None => Identity::Unknown,
        }
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

    /// A `Set-Cookie` value for the console's cookies: `HttpOnly`, `SameSite=Strict`, whole
    /// site, gone when the browser closes (`delete`: deleted now); `Secure` behind https.
    pub fn set_cookie(&self, name: &str, value: &str, delete: bool) -> String {
        let mut c = format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict");
        if self.https {
            c.push_str("; Secure");
        }
        if delete {
            c.push_str("; Max-Age=0");
        }
        c
    }
}

/// Wrong tokens per client address: after [`LOGIN_FAILURES`] of them the address is refused
/// (429, without looking at the token) until [`LOGIN_LOCKOUT`] has passed since its last
/// wrong one. IPv6 clients count per /64, the block one machine usually holds. Memory is
/// bounded ([`LIMITER_CAPACITY`] addresses).
#[derive(Default)]
pub struct LoginLimiter {
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
}

/// The key a client address counts under.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl LoginLimiter {
    /// How much longer `ip` is refused (`None`: it may try).
    pub fn locked(&self, ip: IpAddr) -> Option<Duration> {
        let f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        match f.get(&client_key(ip)) {
            Some((n, last)) if *n >= LOGIN_FAILURES => LOGIN_LOCKOUT.checked_sub(last.elapsed()),
            _ => None,
        }
    }

    /// Counts a wrong token from `ip`.
    pub fn failed(&self, ip: IpAddr) {
        let now = Instant::now();
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if f.len() >= LIMITER_CAPACITY {
            f.retain(|_, (_, last)| now.duration_since(*last) < LOGIN_LOCKOUT);
        }
        if f.len() >= LIMITER_CAPACITY
            && let Some(k) = f.iter().min_by_key(|(_, (_, last))| *last).map(|(k, _)| *k)
        {
            f.remove(&k);
        }
        let e = f.entry(client_key(ip)).or_insert((0, now));
        if now.duration_since(e.1) >= LOGIN_LOCKOUT {
            e.0 = 0;
        }
        e.0 += 1;
        e.1 = now;
    }

    /// Forgets `ip`'s wrong tokens (it logged in).
    pub fn succeeded(&self, ip: IpAddr) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&client_key(ip));
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

/// Whether a POST comes from another site: `Sec-Fetch-Site: cross-site`/`same-site`, or an
/// `Origin` that is not one of the console's own names (not merely the request's own
/// `Host`: under DNS rebinding both name the attacker). Requests without these headers
/// (curl, old browsers) are judged by the CSRF token alone.
pub fn cross_site(headers: &HeaderMap, hosts: &AllowedHosts) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && matches!(site, "cross-site" | "same-site")
    {
        return true;
    }
    match headers.get("origin").map(|v| v.to_str()) {
        None => false,
        Some(Ok(origin)) => !hosts.origin_ok(origin),
        Some(Err(_)) => true,
    }
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

    const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn read_only_logins_never_log_out_the_write_token_or_another_client() {
        let a = Auth::new(
            Some("0123456789abcdef"),
            Some("read-only-0123456789"),
            DEFAULT_SESSION_TTL,
            false,
        );
        let live = |v: &str| a.identify(&with_cookie(SESSION_COOKIE, v));
        let ip = |n: u32| IpAddr::V4(std::net::Ipv4Addr::from(0x7f00_0000 + n));
        // The oldest logins: the admin's and another read-only user's.
        let admin = a.open_session(Access::Write, ip(1));
        let reader = a.open_session(Access::Read, ip(2));
        // One read-token holder logs in from one address, then from a hundred more, past
        // every bound.
        let first = a.open_session(Access::Read, ip(3));
        for _ in 0..MAX_SESSIONS + 10 {
            a.open_session(Access::Read, ip(3));
        }
        assert_eq!(
            live(&first),
            Identity::Unknown,
            "its own oldest login went first"
        );
        for n in 0..MAX_SESSIONS + 10 {
            a.open_session(Access::Read, ip(10 + (n % 150) as u32));
        }
        assert_eq!(live(&admin), Identity::Known(Access::Write));
        assert_eq!(live(&reader), Identity::Known(Access::Read));
        let kept = a.sessions.lock().unwrap().by_key.len();
        assert!(kept <= MAX_SESSIONS + 1, "{kept}");
        // The write token's logins have their own room.
        let admin2 = a.open_session(Access::Write, ip(3));
        assert_eq!(live(&admin2), Identity::Known(Access::Write));
        assert_eq!(live(&admin), Identity::Known(Access::Write));
    }

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
        // Long enough but hardly random.
        for weak in [
            "aaaaaaaaaaaaaaaa",
            "abababababababababab",
            "abcabcabcabcabcabc1",
        ] {
            let e = check_token(weak).unwrap_err();
            assert!(
                e.contains("distinct characters") && !e.contains(weak),
                "{e}"
            );
        }
        assert!(check_token("abcdefgh12345678").is_ok());
    }

    fn with_cookie(name: &str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("other=1; {name}={value}")).unwrap(),
        );
        h
    }

    #[test]
    fn a_session_is_random_server_side_expires_and_ends_at_logout() {
        let open = Auth::new(None, None, DEFAULT_SESSION_TTL, false);
        assert!(!open.required());
        assert_eq!(
            open.identify(&HeaderMap::new()),
            Identity::Known(Access::Write)
        );
        assert_eq!(open.token_access(""), None);

        let a = Auth::new(
            Some("0123456789abcdef"),
            Some("read-only-0123456789"),
            DEFAULT_SESSION_TTL,
            false,
        );
        assert!(a.required());
        assert_eq!(a.identify(&HeaderMap::new()), Identity::Unknown);
        assert_eq!(a.token_access("0123456789abcdef"), Some(Access::Write));
        assert_eq!(a.token_access("read-only-0123456789"), Some(Access::Read));
        assert_eq!(a.token_access("0123456789abcdeF"), None);
        let s1 = a.open_session(Access::Write, LOCAL);
        let s2 = a.open_session(Access::Write, LOCAL);
        assert_ne!(s1, s2, "every login gets its own random session");
        assert!(!s1.contains("0123456789abcdef"));
        let h = with_cookie(SESSION_COOKIE, &s1);
        assert_eq!(a.identify(&h), Identity::Known(Access::Write));
        let r = a.open_session(Access::Read, LOCAL);
        assert_eq!(
            a.identify(&with_cookie(SESSION_COOKIE, &r)),
            Identity::Known(Access::Read)
        );
        // Logging out ends this login only.
        a.close_session(&h);
        assert_eq!(a.identify(&h), Identity::Unknown);
        assert_eq!(
            a.identify(&with_cookie(SESSION_COOKIE, &s2)),
            Identity::Known(Access::Write)
        );
        // The raw token, or a made-up value, is no session.
        assert_eq!(
            a.identify(&with_cookie(SESSION_COOKIE, "0123456789abcdef")),
            Identity::Unknown
        );
        let mut b = HeaderMap::new();
        b.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer read-only-0123456789"),
        );
        assert_eq!(a.identify(&b), Identity::Bearer(Access::Read));
        b.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer wrong-wrong-wrong"),
        );
        assert_eq!(a.identify(&b), Identity::WrongBearer);
        // A session past its expiry opens nothing.
        let short = Auth::new(Some("0123456789abcdef"), None, Duration::ZERO, false);
        let s = short.open_session(Access::Write, LOCAL);
        assert_eq!(
            short.identify(&with_cookie(SESSION_COOKIE, &s)),
            Identity::Unknown
        );
    }

    #[test]
    fn behind_https_the_cookies_are_secure_and_host_prefixed() {
        let a = Auth::new(Some("0123456789abcdef"), None, DEFAULT_SESSION_TTL, true);
        assert_eq!(a.session_cookie(), "__Host-skiplock_session");
        assert_eq!(a.csrf_cookie(), "__Host-skiplock_csrf");
        let c = a.set_cookie(a.session_cookie(), "v", false);
        assert!(
            c.contains("; Secure") && c.contains("Path=/") && !c.contains("Domain"),
            "{c}"
        );
        let s = a.open_session(Access::Write, LOCAL);
        assert_eq!(
            a.identify(&with_cookie("__Host-skiplock_session", &s)),
            Identity::Known(Access::Write)
        );
        assert_eq!(
            a.identify(&with_cookie(SESSION_COOKIE, &s)),
            Identity::Unknown,
            "behind https only the prefixed cookie counts"
        );
        let plain = Auth::new(None, None, DEFAULT_SESSION_TTL, false);
        assert!(!plain.set_cookie(CSRF_COOKIE, "v", false).contains("Secure"));
    }

    #[test]
    fn wrong_tokens_lock_an_address_out_and_a_login_forgets_them() {
        let l = LoginLimiter::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        for _ in 0..LOGIN_FAILURES - 1 {
            l.failed(ip);
        }
        assert_eq!(l.locked(ip), None);
        l.failed(ip);
        assert!(l.locked(ip).is_some_and(|d| d <= LOGIN_LOCKOUT));
        assert_eq!(l.locked(other), None, "per address");
        l.succeeded(ip);
        assert_eq!(l.locked(ip), None);
        // IPv6 counts per /64.
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2::ffff".parse().unwrap();
        for _ in 0..LOGIN_FAILURES {
            l.failed(a);
        }
        assert!(l.locked(b).is_some());
        // Bounded memory: many addresses never grow it past its capacity.
        for i in 0..(LIMITER_CAPACITY as u32 + 10) {
            l.failed(IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i)));
        }
        assert!(l.failures.lock().unwrap().len() <= LIMITER_CAPACITY);
    }

    #[test]
    fn a_csrf_token_belongs_to_its_nonce_and_its_console() {
        let a = Auth::new(None, None, DEFAULT_SESSION_TTL, false);
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
            !Auth::new(None, None, DEFAULT_SESSION_TTL, false).csrf_ok(Some(&n), Some(&t)),
            "another process's key"
        );
    }

    #[test]
    fn cross_site_posts_and_open_redirects_are_recognised() {
        let hosts = AllowedHosts::new(
            "127.0.0.1:8080".parse().unwrap(),
            Vec::new(),
            super::super::hosts::WEB_HOSTS_SETTING,
        );
        let mut h = HeaderMap::new();
        assert!(!cross_site(&h, &hosts));
        h.insert("host", HeaderValue::from_static("127.0.0.1:8080"));
        h.insert("origin", HeaderValue::from_static("http://127.0.0.1:8080"));
        assert!(!cross_site(&h, &hosts));
        h.insert("origin", HeaderValue::from_static("http://evil.example"));
        assert!(cross_site(&h, &hosts));
        h.insert("origin", HeaderValue::from_static("null"));
        assert!(cross_site(&h, &hosts));
        // A rebound name: Origin and Host agree, and both are the attacker's.
        h.insert(
            "host",
            HeaderValue::from_static("rebind.attacker.example:8080"),
        );
        h.insert(
            "origin",
            HeaderValue::from_static("http://rebind.attacker.example:8080"),
        );
        assert!(cross_site(&h, &hosts));
        let mut s = HeaderMap::new();
        s.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(cross_site(&s, &hosts));
        s.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(!cross_site(&s, &hosts));

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
