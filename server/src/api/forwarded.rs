//! The client's address as the per-address limits and the network quorum see it.
//!
//! A connection from an address outside `limits.trusted_proxies` is its own client: whatever
//! forwarding header it sends is ignored. A connection from a trusted proxy (a load balancer,
//! a CDN's edge, nginx) names its client in one forwarding header
//! (`limits.client_address_header`: `X-Forwarded-For` by default, or RFC 7239's `Forwarded`):
//! the client is the rightmost hop of that header that is not itself a trusted proxy. Hops to
//! its left were written by the client (or by proxies it chose) and are never believed, so a
//! client cannot pick its own address by sending the header. A hop that is not an address
//! (`unknown`, an obfuscated name) ends the walk at the trusted proxy to its right.
//!
//! Only the header chosen is read: a proxy appends to one header and passes the other along
//! as the client wrote it.

use std::net::{IpAddr, SocketAddr};

use actix_web::http::header::HeaderMap;
use serde::Deserialize;

/// Most hops read from the right of a forwarding header.
const MAX_HOPS: usize = 32;

/// The header a trusted proxy names its client in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientAddressHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx, HAProxy, AWS and Google load
    /// balancers, most CDNs).
    #[default]
    #[serde(alias = "X-Forwarded-For")]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1` (Envoy can, and some CDNs).
    #[serde(alias = "Forwarded")]
    Forwarded,
}

impl ClientAddressHeader {
    /// The header's name, lowercase.
    pub fn name(self) -> &'static str {
        match self {
            Self::XForwardedFor => "x-forwarded-for",
            Self::Forwarded => "forwarded",
        }
    }
}

/// The networks whose forwarding header is believed, and which header that is.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies<'a> {
    /// The proxies' networks.
    pub networks: &'a [ipnet::IpNet],
    /// Where they name the client.
    pub header: ClientAddressHeader,
}

impl TrustedProxies<'_> {
    /// True when `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.networks.iter().any(|n| n.contains(&ip))
    }

    /// The client of a request that reached this server from `peer` with `headers`.
    pub fn client(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let peer = peer?;
        if !self.trusts(peer) {
            return Some(peer);
        }
        let name = self.header.name();
        // Several header lines are one list, in order.
        let mut hops: Vec<Option<IpAddr>> = Vec::new();
        for value in headers.get_all(name) {
            let Ok(text) = value.to_str() else {
                // Not text: nothing in it is believed.
                return Some(peer);
            };
            for element in text.split(',') {
                hops.push(match self.header {
                    ClientAddressHeader::XForwardedFor => node(element),
                    ClientAddressHeader::Forwarded => forwarded_for(element),
                });
            }
        }
        let mut client = peer;
        for hop in hops.into_iter().rev().take(MAX_HOPS) {
            match hop {
                Some(ip) if self.trusts(ip) => client = ip,
                Some(ip) => return Some(ip.to_canonical()),
                None => return Some(client),
            }
        }
        Some(client)
    }
}

/// The `for=` node of one `Forwarded` element (`for=192.0.2.60;proto=https`), if it is an
/// address.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        if !key.trim().eq_ignore_ascii_case("for") {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        node(value)
    })
}

/// One hop: an address, an address with a port, or a bracketed IPv6 address with or without
/// a port.
fn node(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = text.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    text.strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .and_then(|t| t.parse::<IpAddr>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(lines: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in lines {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn nets(list: &[&str]) -> Vec<ipnet::IpNet> {
        list.iter().map(|n| n.parse().expect("net")).collect()
    }

    #[test]
    fn an_untrusted_peer_is_its_own_client_whatever_it_sends() {
        let n = nets(&["10.0.0.0/8"]);
        let t = TrustedProxies {
            networks: &n,
            header: ClientAddressHeader::XForwardedFor,
        };
        let h = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(
            t.client(Some(ip("198.51.100.7")), &h),
            Some(ip("198.51.100.7"))
        );
        let none = TrustedProxies::default();
        assert_eq!(none.client(Some(ip("10.1.1.1")), &h), Some(ip("10.1.1.1")));
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let n = nets(&["10.0.0.0/8", "2001:db8:ffff::/48"]);
        let t = TrustedProxies {
            networks: &n,
            header: ClientAddressHeader::XForwardedFor,
        };
        // The client wrote a made-up hop; the edge (10.9.9.9) appended the real one.
        let h = headers(&[("x-forwarded-for", "1.2.3.4, 198.51.100.7, 10.9.9.9")]);
        assert_eq!(t.client(Some(ip("10.0.0.2")), &h), Some(ip("198.51.100.7")));
        // Two header lines are one list; ports and brackets are read.
        let h = headers(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", "[2001:db8::5]:4711, 10.1.1.1:80"),
        ]);
        assert_eq!(t.client(Some(ip("10.0.0.2")), &h), Some(ip("2001:db8::5")));
        // No header: the proxy itself.
        assert_eq!(
            t.client(Some(ip("10.0.0.2")), &HeaderMap::new()),
            Some(ip("10.0.0.2"))
        );
        // An IPv4-mapped proxy address is trusted as its IPv4 form.
        let h = headers(&[("x-forwarded-for", "198.51.100.8")]);
        assert_eq!(
            t.client(Some(ip("::ffff:10.0.0.2")), &h),
            Some(ip("198.51.100.8"))
        );
    }

    #[test]
    fn a_hop_that_is_not_an_address_stops_at_the_proxy_to_its_right() {
        let n = nets(&["10.0.0.0/8"]);
        let t = TrustedProxies {
            networks: &n,
            header: ClientAddressHeader::XForwardedFor,
        };
        for junk in ["unknown", "", "999.1.1.1", "_hidden", "a,b,c"] {
            let h = headers(&[(
                "x-forwarded-for",
                &format!("198.51.100.7, {junk}, 10.2.2.2"),
            )]);
            assert_eq!(
                t.client(Some(ip("10.0.0.2")), &h),
                Some(ip("10.2.2.2")),
                "{junk:?}"
            );
        }
        // Very long lists are read from the right only.
        let long = vec!["10.3.3.3"; 10_000].join(",");
        let h = headers(&[("x-forwarded-for", &format!("198.51.100.7,{long}"))]);
        assert_eq!(t.client(Some(ip("10.0.0.2")), &h), Some(ip("10.3.3.3")));
    }

    #[test]
    fn forwarded_is_read_only_when_chosen() {
        let n = nets(&["127.0.0.0/8"]);
        let h = headers(&[
            ("x-forwarded-for", "203.0.113.1"),
            (
                "forwarded",
                "for=192.0.2.43;proto=https, For=\"[2001:db8:cafe::17]:4711\";by=x",
            ),
        ]);
        let xff = TrustedProxies {
            networks: &n,
            header: ClientAddressHeader::XForwardedFor,
        };
        assert_eq!(
            xff.client(Some(ip("127.0.0.1")), &h),
            Some(ip("203.0.113.1"))
        );
        let fwd = TrustedProxies {
            networks: &n,
            header: ClientAddressHeader::Forwarded,
        };
        assert_eq!(
            fwd.client(Some(ip("127.0.0.1")), &h),
            Some(ip("2001:db8:cafe::17"))
        );
        let h = headers(&[("forwarded", "for=192.0.2.43, proto=https")]);
        assert_eq!(fwd.client(Some(ip("127.0.0.1")), &h), Some(ip("127.0.0.1")));
    }
}
