//! Which `Host` (and `Origin`) names the console and a worker's metrics endpoint answer for.
//!
//! A page on any website can make the operator's browser send requests to a name it
//! controls and then re-point that name's DNS at 127.0.0.1 (DNS rebinding): the browser
//! then treats the console as the attacker's own origin, sends `Host: attacker.example:PORT`
//! and an `Origin` with the same name, and lets the page read every answer. Only the
//! `Host` tells such a request apart, so both servers refuse every `Host` that is not one of
//! their own names (docs/console.md, "Access", host names):
//!
//! - the listen address itself (`127.0.0.1:8080`, `[::1]:8080`);
//! - on loopback, `localhost:PORT`, `127.0.0.1:PORT` and `[::1]:PORT`;
//! - on an unspecified address (`0.0.0.0`, `[::]`, every interface), any IP literal with
//!   the port, and `localhost:PORT` (a name no website can rebind: the browser never asks
//!   DNS for it); an IP literal cannot be rebound either, the browser's origin is the
//!   address itself;
//! - the names a setting lists (`SKIPLOCK_WEB_HOSTS`, `SKIPLOCK_METRICS_HOSTS`): the
//!   public names a reverse proxy or a scraper uses, each `name` or `name:port`.
//!
//! A port-less `Host` counts as port 80 (what a browser sends for `http://name/`).

use std::net::{IpAddr, SocketAddr};

/// The console's setting of extra host names.
pub const WEB_HOSTS_SETTING: &str = "SKIPLOCK_WEB_HOSTS";
/// A worker metrics endpoint's setting of extra host names.
pub const METRICS_HOSTS_SETTING: &str = "SKIPLOCK_METRICS_HOSTS";
/// The most names a hosts setting may list.
pub const MAX_HOSTS: usize = 100;

/// The `Host` values a server answers for (see the module docs).
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    port: u16,
    /// Names allowed with the listen port (lowercase, IPv6 without brackets).
    names: Vec<String>,
    /// Any IP literal is allowed with the listen port (listening on every interface).
    any_ip: bool,
    /// Whole `Host` values from the setting (lowercase).
    extra: Vec<String>,
    /// The setting that lists more names, for error messages.
    setting: &'static str,
}

/// Splits an authority (`name`, `name:port`, `[v6]:port`) into a lowercase host (IPv6
/// without brackets) and its port (`None`: none given). `None` when it is not one.
fn split_authority(a: &str) -> Option<(String, Option<u16>)> {
    let a = a.trim();
    if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '/' || c == '@') {
        return None;
    }
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        h.parse::<std::net::Ipv6Addr>().ok()?;
        match after {
            "" => (h, None),
            p => (h, Some(p.strip_prefix(':')?)),
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    if host.is_empty() || host.contains(':') && !a.starts_with('[') {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) => Some(p.parse::<u16>().ok()?),
    };
    Some((host.to_ascii_lowercase(), port))
}

/// Parses a hosts setting: names (or `name:port`) separated by commas; empty: none. The
/// error names the entry and what is wrong with it.
pub fn parse_hosts(value: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for raw in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if raw.contains("://") {
            return Err(format!(
                "{raw:?} is a URL; list host names (e.g. console.example.com or console.example.com:8443)"
            ));
        }
        let Some((host, _)) = split_authority(raw) else {
            return Err(format!(
                "{raw:?} is not a host name or name:port (e.g. console.example.com:8443)"
            ));
        };
        if !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
        {
            return Err(format!(
                "{raw:?} is not a host name or name:port (letters, digits, dots and dashes)"
            ));
        }
        out.push(raw.to_ascii_lowercase());
        if out.len() > MAX_HOSTS {
            return Err(format!("lists more than {MAX_HOSTS} names"));
        }
    }
    Ok(out)
}

impl AllowedHosts {
    /// The names a server bound to `bound` answers for, plus `extra` (from `setting`).
    pub fn new(bound: SocketAddr, extra: Vec<String>, setting: &'static str) -> AllowedHosts {
        let ip = bound.ip();
        let mut names = vec![ip.to_string()];
        let any_ip = ip.is_unspecified();
        if ip.is_loopback() || any_ip {
            names.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
        }
        AllowedHosts {
            port: bound.port(),
            names,
            any_ip,
            extra,
            setting,
        }
    }

    /// Whether a request with this `Host` header value is for this server.
    pub fn host_ok(&self, host: &str) -> bool {
        let host = host.trim();
        if self.extra.iter().any(|e| {
            e.eq_ignore_ascii_case(host) || e.eq_ignore_ascii_case(host.trim_end_matches(":80"))
        }) {
            return true;
        }
        let Some((name, port)) = split_authority(host) else {
            return false;
        };
        if port.unwrap_or(80) != self.port {
            return false;
        }
        if self.names.contains(&name) {
            return true;
        }
        self.any_ip && name.parse::<IpAddr>().is_ok()
    }

    /// Whether an `Origin` header value (`http://host:port`) is one of this server's own
    /// names: what a POST from one of its own pages carries.
    pub fn origin_ok(&self, origin: &str) -> bool {
        let Some(rest) = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
        else {
            return false;
        };
        !rest.contains('/') && self.host_ok(rest)
    }

    /// The refusal's text for `host` (it names the setting that would allow a name).
    pub fn refusal(&self, host: Option<&str>) -> String {
        match host {
            None => "refused: the request has no Host header".to_string(),
            Some(_) => format!(
                "refused: this server answers only for its own address (port {}), localhost, and the names in {}; a request for another name may come from a DNS-rebinding web page",
                self.port, self.setting
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(bound: &str, extra: &[&str]) -> AllowedHosts {
        AllowedHosts::new(
            bound.parse().unwrap(),
            extra.iter().map(|s| s.to_string()).collect(),
            WEB_HOSTS_SETTING,
        )
    }

    #[test]
    fn loopback_answers_for_its_own_names_only() {
        let a = allowed("127.0.0.1:8080", &[]);
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "[::1]:8080",
        ] {
            assert!(a.host_ok(ok), "{ok}");
        }
        for bad in [
            "rebind.attacker.example:8080",
            "127.0.0.1:8081",
            "127.0.0.1",
            "localhost",
            "localhost.attacker.example:8080",
            "10.0.0.1:8080",
            "",
            "127.0.0.1:8080/x",
            "user@127.0.0.1:8080",
        ] {
            assert!(!a.host_ok(bad), "{bad}");
        }
        assert!(a.origin_ok("http://127.0.0.1:8080"));
        assert!(a.origin_ok("http://localhost:8080"));
        assert!(!a.origin_ok("http://rebind.attacker.example:8080"));
        assert!(!a.origin_ok("null"));
        assert!(!a.origin_ok("127.0.0.1:8080"));
    }

    #[test]
    fn every_interface_answers_for_ip_literals_and_the_listed_names() {
        let a = allowed("0.0.0.0:8443", &["console.example.com", "ops.example:9000"]);
        assert!(a.host_ok("192.168.1.5:8443"));
        assert!(a.host_ok("[fe80::1]:8443"));
        assert!(a.host_ok("localhost:8443"));
        assert!(!a.host_ok("evil.example:8443"));
        assert!(a.host_ok("console.example.com"));
        assert!(a.host_ok("Console.Example.Com"));
        assert!(a.host_ok("ops.example:9000"));
        assert!(!a.host_ok("ops.example:9001"));
        assert!(a.origin_ok("https://console.example.com"));
        assert!(!a.origin_ok("https://console.example.com.evil.example"));
        let b = allowed("192.168.1.5:80", &[]);
        assert!(b.host_ok("192.168.1.5") && b.host_ok("192.168.1.5:80"));
        assert!(!b.host_ok("localhost:80"), "not loopback");
    }

    #[test]
    fn the_hosts_setting_is_checked() {
        assert_eq!(
            parse_hosts(" a.example , b.example:8443,").unwrap(),
            ["a.example", "b.example:8443"]
        );
        assert!(parse_hosts("").unwrap().is_empty());
        assert!(
            parse_hosts("https://a.example")
                .unwrap_err()
                .contains("URL")
        );
        assert!(parse_hosts("a.example:99999").is_err());
        assert!(parse_hosts("a b").is_err());
        assert!(parse_hosts("a.example/x").is_err());
    }
}
