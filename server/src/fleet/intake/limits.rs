//! Rate limits for telemetry: per client address and per install, kept in `governor`'s keyed
//! token buckets (GCRA).
//!
//! Memory is bounded: each limiter holds at most [`MAX_KEYS`] buckets (about 64 bytes each);
//! idle buckets (a bucket is idle once it has refilled completely) are dropped at every flush
//! and, at most once a second, whenever the limiter is full. A limiter that is still full after
//! that refuses every request until buckets age out, rather than clearing them: no flood of
//! made-up addresses or install ids can give anyone a fresh allowance (keeping it full takes
//! about 100,000 new keys a second). IPv6 addresses
//! are limited per /64 (what one subscriber usually holds), so one host cannot mint keys.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// Most buckets one limiter keeps.
pub const MAX_KEYS: usize = 100_000;

/// How often a full limiter may scan for idle buckets.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// One keyed limiter with a cap on its keys.
struct Capped<K: std::hash::Hash + Eq + Clone> {
    buckets: DefaultKeyedRateLimiter<K>,
    pruned: Mutex<Option<Instant>>,
}

impl<K: std::hash::Hash + Eq + Clone> Capped<K> {
    fn new(per_minute: u32) -> Self {
        let quota =
            Quota::per_minute(NonZeroU32::new(per_minute.max(1)).unwrap_or(NonZeroU32::MIN));
        Self {
            buckets: RateLimiter::keyed(quota),
            pruned: Mutex::new(None),
        }
    }

    fn take(&self, key: &K, n: u32) -> bool {
        if self.buckets.len() >= MAX_KEYS && !self.prune_if_due() {
            return false;
        }
        let Some(n) = NonZeroU32::new(n) else {
            return true;
        };
        matches!(self.buckets.check_key_n(key, n), Ok(Ok(())))
    }

    /// Drops idle buckets if the last scan was long enough ago; true when there is room after.
    fn prune_if_due(&self) -> bool {
        let mut last = ferry_shared::sync::lock(&self.pruned);
        if last.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
            *last = Some(Instant::now());
            self.prune();
        }
        self.buckets.len() < MAX_KEYS
    }

    fn prune(&self) {
        self.buckets.retain_recent();
        self.buckets.shrink_to_fit();
    }
}

/// Per-address and per-install limits.
pub(crate) struct Limiter {
    addresses: Capped<IpKey>,
    installs: Capped<u64>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("addresses", &self.addresses.buckets.len())
            .field("installs", &self.installs.buckets.len())
            .finish()
    }
}

/// An IPv4 address, or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpKey {
    /// An IPv4 address.
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 address.
    V6([u8; 8]),
    /// No address (not a TCP connection).
    Unknown,
}

impl IpKey {
    /// The limiter key of `addr` (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn of(addr: Option<IpAddr>) -> Self {
        match addr.map(|a| a.to_canonical()) {
            Some(IpAddr::V4(a)) => Self::V4(a.octets()),
            Some(IpAddr::V6(a)) => {
                let mut p = [0; 8];
                p.copy_from_slice(&a.octets()[..8]);
                Self::V6(p)
            }
            None => Self::Unknown,
        }
    }
}

impl IpKey {
    /// The hashed network of `addr` for counting distinct networks: IPv4 /24, IPv6 /48.
    pub(crate) fn network(addr: Option<IpAddr>) -> u64 {
        let mut prefix = [0u8; 7];
        match addr.map(|a| a.to_canonical()) {
            Some(IpAddr::V4(a)) => prefix[..3].copy_from_slice(&a.octets()[..3]),
            Some(IpAddr::V6(a)) => {
                prefix[0] = 6;
                prefix[1..].copy_from_slice(&a.octets()[..6]);
            }
            None => {}
        }
        crate::fleet::devices::hash_id_bytes(&prefix)
    }
}

impl Limiter {
    /// Limits of `per_address` requests and `per_install` events a minute.
    pub(crate) fn new(per_address: u32, per_install: u32) -> Self {
        Self {
            addresses: Capped::new(per_address),
            installs: Capped::new(per_install),
        }
    }

    /// Takes one request from `addr`'s allowance.
    pub(crate) fn address(&self, addr: IpKey) -> bool {
        self.addresses.take(&addr, 1)
    }

    /// Takes `n` events from the allowance of the install whose id hashes to `install`.
    pub(crate) fn install(&self, install: u64, n: u32) -> bool {
        self.installs.take(&install, n)
    }

    /// Drops idle buckets (called at every flush).
    pub(crate) fn prune(&self) {
        self.addresses.prune();
        self.installs.prune();
    }

    /// Buckets held (addresses, installs).
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.addresses.buckets.len(), self.installs.buckets.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allowance_is_spent_and_not_reset_by_a_flood_of_new_keys() {
        let l = Limiter::new(3, 5);
        let home = IpKey::of(Some("192.0.2.1".parse().expect("ip")));
        assert!(l.address(home) && l.address(home) && l.address(home));
        assert!(
            !l.address(home),
            "the fourth request in a minute is refused"
        );
        // A flood of other addresses fills the limiter but never resets `home`.
        for i in 0..(MAX_KEYS as u32 + 10) {
            let _ = l.address(IpKey::V4(i.to_be_bytes()));
        }
        assert!(l.sizes().0 <= MAX_KEYS, "{:?}", l.sizes());
        assert!(!l.address(home), "still spent after the flood");
    }

    #[test]
    fn ipv6_addresses_share_their_64() {
        let l = Limiter::new(2, 5);
        let a = IpKey::of(Some("2001:db8:1:2::1".parse().expect("ip")));
        let b = IpKey::of(Some("2001:db8:1:2:ffff::9".parse().expect("ip")));
        let other = IpKey::of(Some("2001:db8:1:3::1".parse().expect("ip")));
        assert_eq!(a, b);
        assert!(l.address(a) && l.address(b));
        assert!(!l.address(a));
        assert!(l.address(other));
        let mapped = IpKey::of(Some("::ffff:192.0.2.7".parse().expect("ip")));
        assert_eq!(mapped, IpKey::of(Some("192.0.2.7".parse().expect("ip"))));
    }

    #[test]
    fn events_are_taken_in_batches() {
        let l = Limiter::new(10, 5);
        assert!(l.install(7, 3));
        assert!(!l.install(7, 3), "only 2 left");
        assert!(l.install(7, 2));
        assert!(l.install(8, 5));
    }
}
