//! How many devices one client address may bring into the evidence in an hour
//! (`telemetry.evidence_installs_per_address_per_hour`, default 50).
//!
//! Receipts prove that some replica answered a device's resolve, not that the device is real:
//! one host can resolve under any number of made-up install ids and then report for each with
//! a valid receipt. Learned deny entries, halts and field latency need many distinct devices;
//! this gate keeps one address from being many of them. The first installs an address brings
//! in an hour count; the events of further new ones are kept in the raw log and weigh in
//! nothing. Their devices are served as any other: a site behind one NAT address loses only
//! weight in the aggregates.
//!
//! Memory is bounded: at most [`MAX_PAIRS`] (address, install) pairs an hour. Once that many
//! are held, no further new pair weighs in until the hour turns (filling it takes 20,000
//! addresses each bringing its allowance); it is never cleared early, so a flood cannot give
//! anyone a fresh allowance.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

use crate::fleet::intake::limits::IpKey;

/// Most (address, install) pairs held in one hour.
pub const MAX_PAIRS: usize = 1_000_000;

/// The installs each address brought this hour.
#[derive(Debug, Default)]
pub(crate) struct EvidenceGate {
    hour: i64,
    /// Hashes of (address, install) pairs admitted this hour.
    pairs: HashSet<u64>,
    /// Installs admitted per address this hour.
    per_address: HashMap<IpKey, u32>,
    /// SDK names (hashed) each client network vouched for this hour (see
    /// [`EvidenceGate::vouches`]).
    names: HashMap<u64, Vec<u64>>,
    hasher: std::collections::hash_map::RandomState,
}

impl EvidenceGate {
    /// True when install `install` (hashed) from `address` weighs in the aggregates in `hour`:
    /// it already did this hour, or the address has room for one more (`allowance` a hour; 0
    /// admits every install, as does an unknown address).
    pub(crate) fn admits(
        &mut self,
        address: IpKey,
        install: u64,
        hour: i64,
        allowance: u32,
    ) -> bool {
        if allowance == 0 || address == IpKey::Unknown {
            return true;
        }
        self.turn(hour);
        let pair = self.hasher.hash_one((address, install));
        if self.pairs.contains(&pair) {
            return true;
        }
        if self.pairs.len() >= MAX_PAIRS {
            return false;
        }
        let n = self.per_address.entry(address).or_default();
        if *n >= allowance {
            return false;
        }
        *n += 1;
        self.pairs.insert(pair);
        true
    }

    /// True when the client network of `address` (IPv4 /24, IPv6 /48) may vouch for SDK name
    /// `sdk` in `hour`: it did already this hour, or it vouched for fewer than `allowance`
    /// names (an unknown address always may). Held for at most [`MAX_PAIRS`] / 8 networks an
    /// hour (then no new network vouches until the hour turns).
    pub(crate) fn vouches(
        &mut self,
        address: Option<std::net::IpAddr>,
        sdk: &str,
        hour: i64,
        allowance: usize,
    ) -> bool {
        if IpKey::of(address) == IpKey::Unknown {
            return true;
        }
        self.turn(hour);
        let network = IpKey::network(address);
        let name = self.hasher.hash_one(sdk);
        if !self.names.contains_key(&network) && self.names.len() >= MAX_PAIRS / 8 {
            return false;
        }
        let names = self.names.entry(network).or_default();
        if names.contains(&name) {
            return true;
        }
        if names.len() >= allowance {
            return false;
        }
        names.push(name);
        true
    }

    /// Starts over when `hour` is a new hour.
    fn turn(&mut self, hour: i64) {
        if hour != self.hour {
            self.hour = hour;
            self.pairs = HashSet::new();
            self.per_address = HashMap::new();
            self.names = HashMap::new();
        }
    }

    /// Pairs held (for the memory bound).
    pub(crate) fn len(&self) -> usize {
        self.pairs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> IpKey {
        IpKey::of(Some(s.parse().expect("ip")))
    }

    #[test]
    fn an_address_brings_its_allowance_of_new_installs_an_hour() {
        let mut g = EvidenceGate::default();
        let home = addr("192.0.2.1");
        assert!((0..3).all(|i| g.admits(home, i, 10, 3)));
        assert!(
            !g.admits(home, 3, 10, 3),
            "a fourth new install does not weigh in"
        );
        assert!(
            g.admits(home, 1, 10, 3),
            "an admitted install keeps weighing in"
        );
        assert!(
            g.admits(addr("192.0.2.2"), 3, 10, 3),
            "another address has its own"
        );
        assert!(g.admits(home, 3, 11, 3), "a new hour, a new allowance");
        assert!((100..200).all(|i| g.admits(home, i, 11, 0)), "0 admits all");
        assert!((100..200).all(|i| g.admits(IpKey::Unknown, i, 11, 3)));
    }

    #[test]
    fn an_address_vouches_for_a_few_sdk_names_an_hour() {
        let mut g = EvidenceGate::default();
        let ip = |s: &str| Some(s.parse::<std::net::IpAddr>().expect("ip"));
        let home = ip("192.0.2.1");
        assert!((0..4).all(|i| g.vouches(home, &format!("sdk-{i}/1"), 10, 4)));
        assert!(!g.vouches(home, "junk/1", 10, 4), "a fifth name is not");
        assert!(
            !g.vouches(ip("192.0.2.2"), "junk/1", 10, 4),
            "nor from another address of the network"
        );
        assert!(g.vouches(home, "sdk-2/1", 10, 4), "a vouched name again is");
        assert!(
            g.vouches(ip("192.0.3.1"), "junk/1", 10, 4),
            "another network"
        );
        assert!(g.vouches(home, "junk/1", 11, 4), "a new hour starts over");
        assert!((0..100).all(|i| g.vouches(None, &format!("x-{i}/1"), 11, 4)));
    }

    #[test]
    fn a_full_gate_admits_no_new_pair_until_the_hour_turns() {
        let mut g = EvidenceGate::default();
        let mut i = 0u64;
        let mut a = 0u32;
        while g.len() < MAX_PAIRS {
            let key = IpKey::V4(a.to_be_bytes());
            for _ in 0..50 {
                assert!(g.admits(key, i, 1, 50));
                i += 1;
            }
            a += 1;
        }
        assert!(!g.admits(addr("198.51.100.1"), 1, 1, 50));
        assert!(
            g.admits(IpKey::V4(0u32.to_be_bytes()), 0, 1, 50),
            "held pairs still weigh"
        );
        assert!(g.admits(addr("198.51.100.1"), 1, 2, 50));
        assert_eq!(g.len(), 1);
    }
}
