//! Who is in the field: the devices that resolved a model, by protocol version and SDK
//! (`ferry fleet clients MODEL`, the dashboard's health page), so an operator knows who a
//! protocol retirement or an SDK's bug would reach before acting.
//!
//! Each resolve notes its install id (hashed) under the key `PROTOCOL SDK` (`1
//! ferry-client-rust/0.1.0`, `legacy unknown`) in the model's rollup, which replicas flush and
//! merge like every other count, so the view is fleet-wide and survives restarts.
//!
//! The names come from the requests, so a name takes a row of its own only once devices
//! vouched for it ([`Vouched`]): receipted telemetry that names it, from
//! `telemetry.census_min_networks` client networks. Until then its devices count under
//! `PROTOCOL other`, and made-up names from one host never crowd out the real SDKs.

use std::collections::{BTreeMap, HashSet};
use std::sync::RwLock;

use ferry_shared::wire::protocol::{Protocol, Sdk};

use crate::fleet::devices::Devices;

/// Most distinct keys noted per model in one rollup; a further key keeps its protocol and
/// folds its SDK into `other` (the protocols are a small fixed set, see [`Protocol::label`],
/// so who speaks which protocol is always counted).
pub const MAX_KEYS_PER_MODEL: usize = 32;

/// Most rows [`view`] lists; the rest are summed into one `other` row.
pub const MAX_ROWS: usize = 20;

/// The key a device is counted under.
pub fn key(protocol: Protocol, sdk: Option<&Sdk>) -> String {
    format!(
        "{} {}",
        protocol.label(),
        sdk.map_or_else(|| "unknown".to_string(), Sdk::header_value)
    )
}

/// Most SDK names whose vouching networks one rollup holds; further names are not noted there
/// (they are vouched for in another minute, or by the networks already counted).
pub const MAX_VOUCHED_NAMES: usize = 256;

/// The SDK names (`NAME/VERSION`) that take a row of their own: those named by receipted
/// telemetry from enough distinct client networks. Read by every resolve; refreshed at each
/// flush from the fleet's counts and as this replica's telemetry vouches.
#[derive(Debug, Default)]
pub struct Vouched {
    /// Networks a name needs; 0: every name has a row (first come, as far as the bound).
    min_networks: u64,
    names: RwLock<HashSet<String>>,
}

impl Vouched {
    /// An empty set whose names need `min_networks` networks each (0: no vouching needed).
    pub fn new(min_networks: u64) -> Self {
        Self {
            min_networks,
            names: RwLock::default(),
        }
    }

    /// The networks a name needs (0: none).
    pub fn min_networks(&self) -> u64 {
        self.min_networks
    }

    /// True when `sdk` (`NAME/VERSION`) takes a row of its own.
    pub fn holds(&self, sdk: &str) -> bool {
        self.min_networks == 0 || ferry_shared::sync::read(&self.names).contains(sdk)
    }

    /// Adds `sdk` when the distinct networks `networks` that vouched for it are enough.
    pub fn consider(&self, sdk: &str, networks: &Devices) {
        if networks.estimate() as u64 >= self.min_networks.max(1) {
            ferry_shared::sync::write(&self.names).insert(sdk.to_string());
        }
    }

    /// Replaces the set with the names of `all` (name → networks) that have enough networks.
    pub fn replace(&self, all: &BTreeMap<String, Devices>) {
        let next: HashSet<String> = all
            .iter()
            .filter(|(_, n)| n.estimate() as u64 >= self.min_networks.max(1))
            .map(|(k, _)| k.clone())
            .collect();
        *ferry_shared::sync::write(&self.names) = next;
    }

    /// `key` (`PROTOCOL SDK`) as counted: itself when its SDK is vouched for or unknown,
    /// else `PROTOCOL other`.
    pub fn fold<'k>(&self, key: &'k str) -> std::borrow::Cow<'k, str> {
        match key.split_once(' ') {
            Some((protocol, sdk)) if sdk != "unknown" && !self.holds(sdk) => {
                std::borrow::Cow::Owned(format!("{protocol} other"))
            }
            _ => std::borrow::Cow::Borrowed(key),
        }
    }
}

/// Notes in a rollup's `sdks` (name → networks) that receipted telemetry from `network` (a
/// hashed client network) named `sdk`.
pub fn note_vouch(sdks: &mut BTreeMap<String, Devices>, sdk: &str, network: u64) {
    if let Some(d) = sdks.get_mut(sdk) {
        d.insert(&network);
    } else if sdks.len() < MAX_VOUCHED_NAMES {
        sdks.entry(sdk.to_string()).or_default().insert(&network);
    }
}

/// Adds the vouching networks `from` into `into`, holding at most [`MAX_VOUCHED_NAMES`] four
/// times over (a merge of many minutes): past that, the names with the fewest networks go, so
/// made-up names (one network each) never crowd out one that networks vouched for.
pub fn merge_vouches(into: &mut BTreeMap<String, Devices>, from: &BTreeMap<String, Devices>) {
    for (k, d) in from {
        into.entry(k.clone()).or_default().merge(d);
    }
    let cap = MAX_VOUCHED_NAMES * 4;
    if into.len() > cap {
        let mut by_networks: Vec<(usize, String)> = into
            .iter()
            .map(|(k, d)| (d.estimate(), k.clone()))
            .collect();
        by_networks.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        for (_, k) in by_networks.into_iter().skip(cap) {
            into.remove(&k);
        }
    }
}

/// Named keys (an SDK, not `unknown` or `other`) of protocols other than the current one (`1`)
/// one rollup keeps per model: a device that claims `Ferry-Protocol: 7` with a real SDK's name
/// cannot take the rows the real SDK needs.
pub const MAX_OTHER_PROTOCOL_KEYS: usize = 8;

/// Notes in a rollup's `clients` (model → key → devices) that `device` (a hashed install id)
/// resolved `model` with `key`. Keys without an SDK name (`PROTOCOL unknown`, `PROTOCOL
/// other`) are always kept: the protocol labels are a small fixed set. Named keys take from
/// [`MAX_KEYS_PER_MODEL`], those of a protocol other than `1` also from
/// [`MAX_OTHER_PROTOCOL_KEYS`]; past either, the SDK folds into `PROTOCOL other`.
pub fn note(
    clients: &mut BTreeMap<String, BTreeMap<String, Devices>>,
    model: &str,
    key: &str,
    device: u64,
) {
    let keys = clients.entry(model.to_string()).or_default();
    let protocol = key.split_once(' ').map_or(key, |(p, _)| p);
    let unnamed = |k: &str| k.ends_with(" unknown") || k.ends_with(" other");
    let kept = if unnamed(key) || keys.contains_key(key) {
        true
    } else {
        let named = keys.keys().filter(|k| !unnamed(k));
        let (all, other_protocol) = named.fold((0, 0), |(a, o), k| {
            (a + 1, o + usize::from(!k.starts_with("1 ")))
        });
        all < MAX_KEYS_PER_MODEL && (protocol == "1" || other_protocol < MAX_OTHER_PROTOCOL_KEYS)
    };
    let key = if kept {
        key.to_string()
    } else {
        format!("{protocol} other")
    };
    keys.entry(key).or_default().insert(&device);
}

/// The rows of the view: protocol, SDK name and version, distinct devices and their share of
/// all devices counted, most devices first.
pub fn view(clients: Option<&BTreeMap<String, Devices>>) -> serde_json::Value {
    let mut all = Devices::new();
    let mut rows: Vec<(String, String, usize)> = Vec::new();
    let mut protocols: BTreeMap<String, Devices> = BTreeMap::new();
    for (k, d) in clients.into_iter().flatten() {
        all.merge(d);
        let (protocol, sdk) = k.split_once(' ').unwrap_or((k.as_str(), "unknown"));
        protocols.entry(protocol.to_string()).or_default().merge(d);
        rows.push((protocol.to_string(), sdk.to_string(), d.estimate()));
    }
    let total = all.estimate();
    let share = |n: usize| {
        if total == 0 {
            0.0
        } else {
            (n as f64 / total as f64).min(1.0)
        }
    };
    let mut by_protocol: Vec<(String, usize)> = protocols
        .into_iter()
        .map(|(p, d)| (p, d.estimate()))
        .collect();
    by_protocol.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    rows.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1))));
    if rows.len() > MAX_ROWS {
        let rest: usize = rows[MAX_ROWS - 1..].iter().map(|r| r.2).sum();
        rows.truncate(MAX_ROWS - 1);
        rows.push(("other".into(), "other".into(), rest));
    }
    let list: Vec<serde_json::Value> = rows
        .into_iter()
        .map(|(protocol, sdk, devices)| {
            let (name, version) = sdk.split_once('/').unwrap_or((sdk.as_str(), ""));
            serde_json::json!({
                "protocol": protocol,
                "sdk": name,
                "sdk_version": version,
                "devices": devices,
                "share": share(devices),
            })
        })
        .collect();
    let by_protocol: Vec<serde_json::Value> = by_protocol
        .into_iter()
        .map(|(protocol, devices)| {
            serde_json::json!({"protocol": protocol, "devices": devices, "share": share(devices)})
        })
        .collect();
    serde_json::json!({ "devices": total, "by_protocol": by_protocol, "by_client": list })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::counts::rollup::Rollup;

    #[test]
    fn shares_are_of_distinct_devices_and_keys_stay_bounded() {
        let mut r = Rollup::default();
        let rust = key(
            Protocol::V(1),
            Sdk::from_header(Some(b"ferry-client-rust/0.1.0")).as_ref(),
        );
        let legacy = key(Protocol::Legacy, None);
        for i in 0..300u64 {
            note(&mut r.clients, "m", &rust, i % 100);
        }
        for i in 0..100u64 {
            note(&mut r.clients, "m", &legacy, 1000 + i);
        }
        for i in 0..100u64 {
            note(&mut r.clients, "m", &format!("1 sdk-{i}/1"), 5000 + i);
        }
        // Past the bound a key keeps its protocol; only the SDK folds.
        assert_eq!(r.clients["m"].len(), MAX_KEYS_PER_MODEL + 2);
        assert!(r.clients["m"].contains_key("1 other"));
        note(&mut r.clients, "m", "legacy newsdk/1", 9999);
        assert!(r.clients["m"].contains_key("legacy other"));
        let v = view(r.clients.get("m"));
        let rows = v["by_client"].as_array().expect("rows");
        assert_eq!(rows.len(), MAX_ROWS);
        assert_eq!(rows[0]["sdk"], "ferry-client-rust");
        assert_eq!(rows[0]["protocol"], "1");
        let share = rows[0]["share"].as_f64().expect("share");
        assert!((share - 1.0 / 3.0).abs() < 0.05, "{share}");
        assert!(
            rows.iter()
                .any(|r| r["protocol"] == "legacy" && r["sdk"] == "unknown")
        );
        assert_eq!(rows.last().expect("row")["sdk"], "other");
        // Every protocol is listed with its devices, whatever the SDK rows fold.
        let protocols = v["by_protocol"].as_array().expect("protocols");
        let legacy = protocols
            .iter()
            .find(|p| p["protocol"] == "legacy")
            .expect("legacy");
        assert_eq!(legacy["devices"], 101);
        assert_eq!(view(None)["devices"], 0);
    }

    #[test]
    fn every_protocol_label_with_a_real_name_cannot_take_the_real_sdks_row() {
        let mut r = Rollup::default();
        // One host, first in the minute: every protocol label without an SDK and as `other`,
        // and the real SDK's name under every protocol but 1.
        for p in [
            "legacy", "2", "3", "4", "5", "6", "7", "8", "9", "newer", "invalid", "1",
        ] {
            note(&mut r.clients, "m", &format!("{p} unknown"), 1);
            note(&mut r.clients, "m", &format!("{p} other"), 1);
            note(&mut r.clients, "m", &format!("{p} acme/2.0"), 1);
        }
        // Then the real devices.
        note(&mut r.clients, "m", "1 acme/2.0", 2);
        note(&mut r.clients, "m", "1 acme/2.1", 3);
        assert!(r.clients["m"].contains_key("1 acme/2.0"));
        assert!(r.clients["m"].contains_key("1 acme/2.1"));
        let other_protocols = r.clients["m"]
            .keys()
            .filter(|k| k.ends_with("acme/2.0") && !k.starts_with("1 "))
            .count();
        assert_eq!(other_protocols, MAX_OTHER_PROTOCOL_KEYS);
    }

    #[test]
    fn a_name_takes_a_row_once_enough_networks_vouched_for_it() {
        let v = Vouched::new(3);
        let mut sdks = BTreeMap::new();
        for i in 0..MAX_VOUCHED_NAMES + 10 {
            note_vouch(&mut sdks, &format!("junk-{i}/1"), 1);
        }
        assert_eq!(
            sdks.len(),
            MAX_VOUCHED_NAMES,
            "one rollup holds a bounded set"
        );
        for n in 0..3u64 {
            note_vouch(&mut sdks, "junk-0/1", 10 + n);
        }
        v.replace(&sdks);
        assert!(v.holds("junk-0/1"), "four networks");
        assert!(!v.holds("junk-1/1"), "one network");
        assert_eq!(v.fold("1 junk-1/1"), "1 other");
        assert_eq!(v.fold("legacy junk-0/1"), "legacy junk-0/1");
        assert_eq!(
            v.fold("1 unknown"),
            "1 unknown",
            "no SDK sent is not a name"
        );
        let mut more = BTreeMap::new();
        note_vouch(&mut more, "late/1", 1);
        note_vouch(&mut more, "late/1", 2);
        v.consider("late/1", &more["late/1"]);
        assert!(!v.holds("late/1"), "two networks");
        note_vouch(&mut more, "late/1", 3);
        v.consider("late/1", &more["late/1"]);
        assert!(v.holds("late/1"));
        assert!(Vouched::new(0).holds("anything/1"), "0: no vouching needed");
        // A merge of many minutes stays bounded too.
        let mut all = BTreeMap::new();
        for m in 0..10 {
            let mut minute = BTreeMap::new();
            for i in 0..MAX_VOUCHED_NAMES {
                note_vouch(&mut minute, &format!("m{m}-{i}/1"), 1);
            }
            merge_vouches(&mut all, &minute);
        }
        assert_eq!(all.len(), MAX_VOUCHED_NAMES * 4);
        // A name networks vouched for survives a merge full of made-up ones.
        let mut real = BTreeMap::new();
        for n in 0..3 {
            note_vouch(&mut real, "zz-real/1", 100 + n);
        }
        merge_vouches(&mut all, &real);
        assert_eq!(all.len(), MAX_VOUCHED_NAMES * 4);
        assert!(all.contains_key("zz-real/1"));
    }
}
