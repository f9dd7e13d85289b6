//! Which addresses a fetch may connect to, pure: only globally routable ones, unless
//! `SKIPLOCK_FETCH_ALLOW_PRIVATE=true`.
//!
//! The rule is an allow-list for IPv6 (global unicast `2000::/3` only) and a deny-list for
//! IPv4, both following the IANA special-purpose address registries. Addresses that carry an
//! IPv4 address inside them are judged by that IPv4 address, because that is where a packet
//! to them ends up: IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64
//! `64:ff9b::a.b.c.d` and 6to4 `2002:AABB:CCDD::/48`. So `64:ff9b::127.0.0.1` or
//! `2002:7f00:1::` cannot reach a loopback service through a translator on the way.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPv4 ranges that are not globally routable: (network, prefix length, what it is).
const V4_SPECIAL: &[(Ipv4Addr, u8, &str)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8, "\"this network\""),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private"),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        "shared (carrier-grade NAT)",
    ),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link-local"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private"),
    (Ipv4Addr::new(192, 0, 0, 0), 24, "IETF protocol assignment"),
    (
        Ipv4Addr::new(192, 0, 2, 0),
        24,
        "documentation (TEST-NET-1)",
    ),
    (Ipv4Addr::new(192, 88, 99, 0), 24, "6to4 relay anycast"),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private"),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "benchmarking"),
    (
        Ipv4Addr::new(198, 51, 100, 0),
        24,
        "documentation (TEST-NET-2)",
    ),
    (
        Ipv4Addr::new(203, 0, 113, 0),
        24,
        "documentation (TEST-NET-3)",
    ),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast"),
    (Ipv4Addr::new(255, 255, 255, 255), 32, "broadcast"),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "reserved"),
];

/// IPv6 ranges inside `2000::/3` that are not globally routable (or, for 6to4 and NAT64,
/// are judged by their embedded IPv4 address before this table is consulted).
const V6_SPECIAL: &[(Ipv6Addr, u8, &str)] = &[
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        "IETF protocol assignment",
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        "documentation",
    ),
    (
        Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
        20,
        "documentation",
    ),
];

fn in_v4(a: Ipv4Addr, net: Ipv4Addr, len: u8) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(a) & mask == u32::from(net) & mask
}

fn in_v6(a: Ipv6Addr, net: Ipv6Addr, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    u128::from(a) & mask == u128::from(net) & mask
}

/// Why an IPv4 address is not globally routable, or `None` if it is.
pub fn v4_reason(a: Ipv4Addr) -> Option<&'static str> {
    V4_SPECIAL
        .iter()
        .find(|(net, len, _)| in_v4(a, *net, *len))
        .map(|(_, _, why)| *why)
}

/// Why an IPv6 address is not globally routable, or `None` if it is. Addresses embedding
/// an IPv4 address answer for that address (prefixed with how it was embedded).
pub fn v6_reason(a: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(a);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    if a.is_unspecified() {
        return Some("unspecified");
    }
    if a.is_loopback() {
        return Some("loopback");
    }
    // ::ffff:a.b.c.d (IPv4-mapped) and ::a.b.c.d (IPv4-compatible, deprecated).
    if bits >> 32 == 0xffff || bits >> 32 == 0 {
        return v4_reason(low32).map(|_| "IPv4-mapped or -compatible, embedding a non-global IPv4");
    }
    // NAT64 well-known prefix 64:ff9b::/96: the last 32 bits are the IPv4 destination.
    if in_v6(a, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        return v4_reason(low32).map(|_| "NAT64, embedding a non-global IPv4");
    }
    // The local-use NAT64 prefix is site-specific (where the IPv4 sits depends on the local
    // prefix length), and not globally reachable by definition.
    if in_v6(a, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
        return Some("local-use NAT64");
    }
    // 6to4 2002::/16: bits 16..48 are the IPv4 address of the site.
    if in_v6(a, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        let v4 = Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32);
        return v4_reason(v4).map(|_| "6to4, embedding a non-global IPv4");
    }
    // Only global unicast space is routable; everything else (multicast ff00::/8,
    // link-local fe80::/10, site-local fec0::/10, unique-local fc00::/7, discard-only
    // 100::/64, SRv6 5f00::/16, unassigned) is not.
    if !in_v6(a, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3) {
        let s0 = a.segments()[0];
        return Some(match s0 {
            0xff00..=0xffff => "multicast",
            0xfe80..=0xfebf => "link-local",
            0xfec0..=0xfeff => "site-local",
            0xfc00..=0xfdff => "unique local",
            _ => "not global unicast",
        });
    }
    V6_SPECIAL
        .iter()
        .find(|(net, len, _)| in_v6(a, *net, *len))
        .map(|(_, _, why)| *why)
}

/// Why `ip` is not a globally routable address, or `None` for a public one.
pub fn non_global_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) => v4_reason(a),
        IpAddr::V6(a) => v6_reason(a),
    }
}

/// Whether `ip` is anything but a globally routable address: such addresses are refused
/// unless `SKIPLOCK_FETCH_ALLOW_PRIVATE=true`, so a fetch request cannot reach internal
/// services.
pub fn is_internal(ip: IpAddr) -> bool {
    non_global_reason(ip).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (address, expected reason or None for a public address).
    const CASES: &[(&str, Option<&str>)] = &[
        // IPv4: one address inside and at the edges of every range.
        ("0.0.0.0", Some("\"this network\"")),
        ("0.255.255.255", Some("\"this network\"")),
        ("10.1.2.3", Some("private")),
        ("100.64.0.1", Some("shared (carrier-grade NAT)")),
        ("100.127.255.255", Some("shared (carrier-grade NAT)")),
        ("100.128.0.0", None),
        ("100.63.255.255", None),
        ("127.0.0.1", Some("loopback")),
        ("127.255.255.254", Some("loopback")),
        ("169.254.169.254", Some("link-local")),
        ("172.16.0.1", Some("private")),
        ("172.31.255.255", Some("private")),
        ("172.32.0.0", None),
        ("192.0.0.1", Some("IETF protocol assignment")),
        ("192.0.0.170", Some("IETF protocol assignment")),
        ("192.0.2.1", Some("documentation (TEST-NET-1)")),
        ("192.0.3.1", None),
        ("192.88.99.1", Some("6to4 relay anycast")),
        ("192.168.1.1", Some("private")),
        ("198.18.0.1", Some("benchmarking")),
        ("198.19.255.255", Some("benchmarking")),
        ("198.20.0.0", None),
        ("198.51.100.7", Some("documentation (TEST-NET-2)")),
        ("203.0.113.9", Some("documentation (TEST-NET-3)")),
        ("224.0.0.1", Some("multicast")),
        ("239.255.255.250", Some("multicast")),
        ("240.0.0.1", Some("reserved")),
        ("255.255.255.254", Some("reserved")),
        ("255.255.255.255", Some("broadcast")),
        ("1.1.1.1", None),
        ("8.8.8.8", None),
        ("93.184.216.34", None),
        ("223.255.255.255", None),
        // IPv6 basics.
        ("::", Some("unspecified")),
        ("::1", Some("loopback")),
        ("fe80::1", Some("link-local")),
        ("febf::1", Some("link-local")),
        ("fec0::1", Some("site-local")),
        ("fc00::1", Some("unique local")),
        ("fd12:3456::1", Some("unique local")),
        ("ff02::1", Some("multicast")),
        ("ff0e::1", Some("multicast")),
        ("100::1", Some("not global unicast")),
        ("5f00::1", Some("not global unicast")),
        ("4000::1", Some("not global unicast")),
        ("2001::1", Some("IETF protocol assignment")),
        ("2001:1ff::1", Some("IETF protocol assignment")),
        ("2001:200::1", None),
        ("2001:db8::1", Some("documentation")),
        ("3fff::1", Some("documentation")),
        ("2606:2800:220:1:248:1893:25c8:1946", None),
        ("2a00:1450:4001:81c::200e", None),
        // Embedded IPv4: mapped, compatible, NAT64, 6to4.
        (
            "::ffff:127.0.0.1",
            Some("IPv4-mapped or -compatible, embedding a non-global IPv4"),
        ),
        (
            "::ffff:10.0.0.1",
            Some("IPv4-mapped or -compatible, embedding a non-global IPv4"),
        ),
        ("::ffff:8.8.8.8", None),
        (
            "::127.0.0.1",
            Some("IPv4-mapped or -compatible, embedding a non-global IPv4"),
        ),
        (
            "::169.254.169.254",
            Some("IPv4-mapped or -compatible, embedding a non-global IPv4"),
        ),
        (
            "::0.0.0.2",
            Some("IPv4-mapped or -compatible, embedding a non-global IPv4"),
        ),
        ("::8.8.8.8", None),
        (
            "64:ff9b::127.0.0.1",
            Some("NAT64, embedding a non-global IPv4"),
        ),
        (
            "64:ff9b::a9fe:a9fe",
            Some("NAT64, embedding a non-global IPv4"),
        ),
        (
            "64:ff9b::198.18.0.1",
            Some("NAT64, embedding a non-global IPv4"),
        ),
        ("64:ff9b::8.8.8.8", None),
        ("64:ff9b:1::8.8.8.8", Some("local-use NAT64")),
        ("64:ff9b:1:ffff::1", Some("local-use NAT64")),
        ("64:ff9c::1", Some("not global unicast")),
        ("2002:7f00:1::", Some("6to4, embedding a non-global IPv4")),
        (
            "2002:c0a8:101::1",
            Some("6to4, embedding a non-global IPv4"),
        ),
        ("2002:f000:1::1", Some("6to4, embedding a non-global IPv4")),
        ("2002:808:808::1", None),
    ];

    #[test]
    fn every_special_purpose_range_is_refused_and_public_addresses_pass() {
        for (ip, want) in CASES {
            let got = non_global_reason(ip.parse().unwrap());
            assert_eq!(got, *want, "{ip}");
            assert_eq!(is_internal(ip.parse().unwrap()), want.is_some(), "{ip}");
        }
    }

    #[test]
    fn every_range_of_the_table_has_a_case() {
        for (net, _, why) in V4_SPECIAL {
            assert_eq!(v4_reason(*net), Some(*why), "{net}");
        }
        for (net, _, why) in V6_SPECIAL {
            assert_eq!(v6_reason(*net), Some(*why), "{net}");
        }
    }
}
