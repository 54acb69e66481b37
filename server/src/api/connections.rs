//! Open connections per client address (IPv4 address, or IPv6 /64).
//!
//! Each accepted connection takes a [`ConnSlot`] (kept in the connection's extensions and
//! released when it closes). A connection beyond `limits.max_connections_per_address` is shut
//! down as it is accepted (and, should a request still arrive on it, answered `429
//! rate_limited` with `Connection: close`), so one address cannot hold the server's file
//! descriptors. TLS connections are counted once their handshake is done (handshakes have
//! their own timeout). Devices behind carrier NAT share addresses: the
//! default (1024) leaves them room. Connections from `limits.trusted_proxies` are not limited
//! (a proxy carries many clients' connections; limit at the proxy).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::fleet::intake::limits::IpKey;

/// Open connections per address.
#[derive(Debug)]
pub struct Connections {
    open: Mutex<HashMap<IpKey, u32>>,
    max: u32,
    /// Trusted proxies (`limits.trusted_proxies`): their connections are not limited.
    proxies: Vec<ipnet::IpNet>,
}

/// One open connection's place in [`Connections`].
#[derive(Debug)]
pub struct ConnSlot {
    key: IpKey,
    over: bool,
    of: Arc<Connections>,
}

impl ConnSlot {
    /// True when the address had more open connections than allowed as this one opened.
    pub fn over(&self) -> bool {
        self.over
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut open = ferry_shared::sync::lock(&self.of.open);
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

impl Connections {
    /// A tracker allowing `max` connections per address (0: no limit, nothing tracked), except
    /// from the `proxies`' networks (trusted proxies carry many clients' connections).
    pub fn new(max: u32, proxies: Vec<ipnet::IpNet>) -> Arc<Self> {
        Arc::new(Self {
            open: Mutex::new(HashMap::new()),
            max,
            proxies,
        })
    }

    /// Notes a connection from `addr`; the slot frees it when dropped.
    pub fn open(self: &Arc<Self>, addr: Option<std::net::IpAddr>) -> Option<ConnSlot> {
        if self.max == 0 {
            return None;
        }
        let trusted = crate::api::forwarded::TrustedProxies {
            networks: &self.proxies,
            ..Default::default()
        };
        if addr.is_some_and(|ip| trusted.trusts(ip)) {
            return None;
        }
        let key = IpKey::of(addr);
        let mut open = ferry_shared::sync::lock(&self.open);
        let n = open.entry(key).or_default();
        *n += 1;
        Some(ConnSlot {
            key,
            over: *n > self.max,
            of: self.clone(),
        })
    }

    /// Addresses with open connections.
    pub fn addresses(&self) -> usize {
        ferry_shared::sync::lock(&self.open).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_count_per_address_and_free_on_drop() {
        let c = Connections::new(2, vec!["10.0.0.0/8".parse().expect("net")]);
        let a = Some("192.0.2.1".parse().expect("ip"));
        let b = Some("192.0.2.2".parse().expect("ip"));
        let s1 = c.open(a).expect("slot");
        let s2 = c.open(a).expect("slot");
        let s3 = c.open(a).expect("slot");
        assert!(!s1.over() && !s2.over() && s3.over());
        assert!(!c.open(b).expect("slot").over());
        drop(s3);
        drop(s2);
        assert!(!c.open(a).expect("slot").over(), "room again after closes");
        drop(s1);
        assert_eq!(c.addresses(), 0, "closed connections leave nothing behind");
        assert!(Connections::new(0, Vec::new()).open(a).is_none());
        let proxy = Some("10.1.2.3".parse().expect("ip"));
        assert!(
            (0..5).all(|_| c.open(proxy).is_none()),
            "a trusted proxy's connections are not limited"
        );
    }
}
