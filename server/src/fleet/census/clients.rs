//! Who is in the field: the devices that resolved a model, by protocol version and SDK
//! (`ferry fleet clients MODEL`, the dashboard's health page), so an operator knows who a
//! protocol retirement or an SDK's bug would reach before acting.
//!
//! Each resolve notes its install id (hashed) under the key `PROTOCOL SDK` (`1
//! ferry-client-rust/0.1.0`, `legacy unknown`) in the model's rollup, which replicas flush and
//! merge like every other count, so the view is fleet-wide and survives restarts.

use std::collections::BTreeMap;

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

/// Notes in a rollup's `clients` (model → key → devices) that `device` (a hashed install id)
/// resolved `model` with `key`.
pub fn note(
    clients: &mut BTreeMap<String, BTreeMap<String, Devices>>,
    model: &str,
    key: &str,
    device: u64,
) {
    let keys = clients.entry(model.to_string()).or_default();
    let key = if keys.contains_key(key) || keys.len() < MAX_KEYS_PER_MODEL {
        key.to_string()
    } else {
        let protocol = key.split_once(' ').map_or(key, |(p, _)| p);
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
        assert_eq!(r.clients["m"].len(), MAX_KEYS_PER_MODEL + 1);
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
}
