//! Which addresses `web_fetch` may connect to. An agent must not become a way into the
//! user's machine, LAN or cloud metadata endpoint, so every address that is not a
//! public unicast one is refused unless `[web] allow_private = true`.
//!
//! The check is on [`IpAddr`] values, after the URL parser has read whatever spelling
//! the URL used (decimal `2130706433`, hex `0x7f.1`, octal `0177.0.0.1`, a trailing
//! dot, `[::ffff:127.0.0.1]`) and after DNS has answered for a name: every address is
//! checked, and the connection goes to a checked address, never to the name again (a
//! second lookup could answer differently: DNS rebinding). IPv6 forms that carry an
//! IPv4 address (mapped, compatible, NAT64, 6to4) are judged by that address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What may be reached: public addresses always, the rest only when allowed, and
/// exact socket addresses a test names ([`toolvisor_protocol::worker::WEB_TEST_ALLOW_VAR`]).
#[derive(Clone, Debug, Default)]
pub struct AddressRule {
    /// `[web] allow_private`: non-public addresses may be reached.
    pub allow_private: bool,
    /// Socket addresses treated as public (a test's own server).
    pub exempt: Vec<SocketAddr>,
}

impl AddressRule {
    /// The rule of `[web] allow_private`, plus the test hook's exemptions.
    pub fn from_settings(allow_private: bool) -> AddressRule {
        let exempt = std::env::var(toolvisor_protocol::worker::WEB_TEST_ALLOW_VAR)
            .map(|v| v.split(',').filter_map(|a| a.trim().parse().ok()).collect())
            .unwrap_or_default();
        AddressRule {
            allow_private,
            exempt,
        }
    }

    /// Why `addr` may not be reached, or `None` when it may.
    pub fn refusal(&self, addr: SocketAddr) -> Option<&'static str> {
        if self.allow_private || self.exempt.contains(&addr) {
            return None;
        }
        non_public(addr.ip())
    }
}

/// The range `ip` belongs to when it is not a public unicast address.
pub fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let range = match (a, b, c) {
        (0, _, _) => "unspecified (0.0.0.0/8)",
        (10, _, _) => "private (10.0.0.0/8)",
        (100, 64..=127, _) => "shared (100.64.0.0/10)",
        (127, _, _) => "loopback (127.0.0.0/8)",
        (169, 254, _) => "link-local (169.254.0.0/16)",
        (172, 16..=31, _) => "private (172.16.0.0/12)",
        (192, 0, 0) => "IETF protocol assignments (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (192, 88, 99) => "6to4 relay anycast (192.88.99.0/24)",
        (192, 168, _) => "private (192.168.0.0/16)",
        (198, 18..=19, _) => "benchmarking (198.18.0.0/15)",
        (224..=239, _, _) => "multicast (224.0.0.0/4)",
        _ if ip.is_broadcast() => "broadcast (255.255.255.255)",
        (240..=255, _, _) => "reserved (240.0.0.0/4)",
        _ => return None,
    };
    Some(range)
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = embedded_v4(ip) {
        return non_public_v4(v4);
    }
    let s = ip.segments();
    let range = match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => "unspecified (::)",
        [0, 0, 0, 0, 0, 0, 0, 1] => "loopback (::1)",
        [0x0100, 0, 0, 0, ..] => "discard-only (100::/64)",
        [0x0064, 0xff9b, 1, ..] => "local-use NAT64 (64:ff9b:1::/48)",
        [0x2001, 0, ..] => "Teredo (2001::/32)",
        [0x2001, 0x0db8, ..] => "documentation (2001:db8::/32)",
        [0x2001, b, ..] if b < 0x0200 => "IETF protocol assignments (2001::/23)",
        [a, ..] if a & 0xfe00 == 0xfc00 => "unique-local (fc00::/7)",
        [a, ..] if a & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        [a, ..] if a & 0xffc0 == 0xfec0 => "site-local (fec0::/10)",
        [a, ..] if a & 0xff00 == 0xff00 => "multicast (ff00::/8)",
        [0, ..] => "reserved (::/8)",
        _ => return None,
    };
    Some(range)
}

/// The IPv4 address an IPv6 address stands for: IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:AABB:CCDD::`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(low(hi, lo)),
        // `::` and `::1` are themselves, not 0.0.0.0 and 0.0.0.1.
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 => Some(low(hi, lo)),
        [0x0064, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_non_public_range_is_refused() {
        for a in [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.255.0.9",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::",
            "2001::1",
            "2001:db8::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "100::1",
            "::2:3:4",
        ] {
            assert!(non_public(ip(a)).is_some(), "{a} must be refused");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for a in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.0.1",
            "172.32.0.1",
            "192.169.0.1",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
            "2002:808:808::1",
            "64:ff9b::808:808",
        ] {
            assert_eq!(non_public(ip(a)), None, "{a} is public");
        }
    }

    #[test]
    fn the_rule_allows_private_or_exempt_addresses_only() {
        let lo: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let other: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        let strict = AddressRule::default();
        assert!(strict.refusal(lo).is_some());
        let open = AddressRule {
            allow_private: true,
            exempt: vec![],
        };
        assert!(open.refusal(lo).is_none());
        let exempt = AddressRule {
            allow_private: false,
            exempt: vec![lo],
        };
        assert!(exempt.refusal(lo).is_none());
        assert!(exempt.refusal(other).is_some(), "only the exact address");
    }

    #[test]
    fn url_spellings_reach_the_check_as_addresses() {
        for (u, want) in [
            ("http://2130706433/", "127.0.0.1"),
            ("http://0x7f000001/", "127.0.0.1"),
            ("http://0x7f.1/", "127.0.0.1"),
            ("http://0177.0.0.1/", "127.0.0.1"),
            ("http://127.1/", "127.0.0.1"),
            ("http://127.0.0.1./", "127.0.0.1"),
            ("http://[::ffff:127.0.0.1]/", "::ffff:7f00:1"),
            ("http://[0:0:0:0:0:ffff:a9fe:a9fe]/", "::ffff:a9fe:a9fe"),
            ("http://169.254.169.254/", "169.254.169.254"),
        ] {
            let url = url::Url::parse(u).unwrap();
            let host = match url.host() {
                Some(url::Host::Ipv4(a)) => IpAddr::V4(a),
                Some(url::Host::Ipv6(a)) => IpAddr::V6(a),
                other => panic!("{u}: {other:?}"),
            };
            assert_eq!(host, ip(want), "{u}");
            assert!(non_public(host).is_some(), "{u}");
        }
    }
}
