//! The runtimes in the field, by what they can execute: each resolve with an
//! `operators_digest` notes its install id (hashed) under `APP_VERSION DIGEST` in the model's
//! rollup, which replicas flush and merge like every other count. With the operator sets
//! ([`crate::fleet::census::operators`]) that says, before a ramp, what share of the fleet's runtimes
//! can execute each variant of a release, and which devices no variant of it would run on.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use ferry_shared::Sha256Digest;
use ferry_shared::manifest::ReleaseManifest;

use crate::fleet::census::operators::OperatorSets;
use crate::fleet::devices::Devices;
use crate::storage::Store;

/// Most distinct runtime keys noted per model in one rollup; further ones are counted under
/// one `other other` key (their operators unknown).
pub const MAX_KEYS_PER_MODEL: usize = 64;

/// The key a device is counted under.
pub fn key(app_version: &semver::Version, digest: &Sha256Digest) -> String {
    format!("{app_version} {}", digest.to_hex())
}

/// Notes in a rollup's `runtimes` (model → key → devices) that `device` (a hashed install
/// id) resolved `model` with runtime `key`.
pub fn note(
    runtimes: &mut BTreeMap<String, BTreeMap<String, Devices>>,
    model: &str,
    key: &str,
    device: u64,
) {
    let keys = runtimes.entry(model.to_string()).or_default();
    // Bounded whatever devices send: past the limit, one `other other` row.
    let key = if keys.contains_key(key) || keys.len() < MAX_KEYS_PER_MODEL {
        key.to_string()
    } else {
        "other other".to_string()
    };
    keys.entry(key).or_default().insert(&device);
}

/// One runtime in the census: the app version it ships in, its operator set when known, and
/// the distinct devices that reported it.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// The app version.
    pub app: String,
    /// Its digest (`None` for the `other` row).
    pub digest: Option<Sha256Digest>,
    /// Its operators, when a device sent them.
    pub operators: Option<Arc<BTreeSet<String>>>,
    /// Distinct devices (estimated).
    pub devices: usize,
}

/// The census of `model`'s runtimes from a merged rollup's `runtimes` entry, with each
/// digest's operator set looked up (memory, then the store).
pub async fn census(
    entry: Option<&BTreeMap<String, Devices>>,
    sets: &OperatorSets,
    store: &Store,
) -> Vec<Runtime> {
    let mut out = Vec::new();
    let mut looked: HashMap<Sha256Digest, Option<Arc<BTreeSet<String>>>> = HashMap::new();
    for (k, d) in entry.into_iter().flatten() {
        let (app, rest) = k.split_once(' ').unwrap_or((k.as_str(), "other"));
        let digest = Sha256Digest::from_hex(rest).ok();
        let operators = match digest {
            Some(dg) => match looked.get(&dg) {
                Some(found) => found.clone(),
                None => {
                    let found = sets.lookup(store, &dg).await;
                    looked.insert(dg, found.clone());
                    found
                }
            },
            None => None,
        };
        out.push(Runtime {
            app: app.to_string(),
            digest,
            operators,
            devices: d.estimate(),
        });
    }
    out
}

/// What the census says of one release: per variant, the devices whose runtime can execute
/// it, out of the devices whose runtime is known; and the devices no variant meant for their
/// app version would run on, with the operators they lack.
pub fn coverage(census: &[Runtime], manifest: &ReleaseManifest) -> serde_json::Value {
    let known: usize = census
        .iter()
        .filter(|r| r.operators.is_some())
        .map(|r| r.devices)
        .sum();
    let mut variants = serde_json::Map::new();
    for v in &manifest.variants {
        // Among the devices whose app the variant is meant for.
        let meant = |r: &&Runtime| {
            r.operators.is_some()
                && semver::Version::parse(&r.app).map_or(true, |a| v.app.matches(&a))
        };
        let of: usize = census.iter().filter(meant).map(|r| r.devices).sum();
        let runnable: usize = census
            .iter()
            .filter(meant)
            .filter(|r| {
                r.operators.as_ref().is_some_and(|ops| {
                    ferry_shared::select::operators::missing(v.operators_needed(), ops).is_empty()
                })
            })
            .map(|r| r.devices)
            .sum();
        variants.insert(
            v.id.to_string(),
            serde_json::json!({
                "runnable_devices": runnable,
                "of_devices": of,
                "share": if of == 0 { 0.0 } else { runnable as f64 / of as f64 },
            }),
        );
    }
    let mut stranded = Vec::new();
    for r in census {
        let Some(ops) = &r.operators else { continue };
        let app = semver::Version::parse(&r.app).ok();
        let meant: Vec<_> = manifest
            .variants
            .iter()
            .filter(|v| app.as_ref().is_none_or(|a| v.app.matches(a)))
            .collect();
        if meant.is_empty() {
            continue;
        }
        if meant
            .iter()
            .any(|v| ferry_shared::select::operators::missing(v.operators_needed(), ops).is_empty())
        {
            continue;
        }
        let lacking: BTreeSet<&str> = meant
            .iter()
            .flat_map(|v| ferry_shared::select::operators::missing(v.operators_needed(), ops))
            .collect();
        stranded.push(serde_json::json!({
            "app_version": r.app,
            "devices": r.devices,
            "missing": lacking.into_iter().take(16).collect::<Vec<_>>(),
        }));
    }
    serde_json::json!({
        "known_devices": known,
        "variants": variants,
        "unrunnable": stranded,
    })
}

/// Warnings for a ramp to `manifest`: one line per app version whose reported runtimes can run
/// none of its variants.
pub fn warnings(coverage: &serde_json::Value, manifest: &ReleaseManifest) -> Vec<String> {
    coverage["unrunnable"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| {
            format!(
                "{} devices on app {} report a runtime that can run no variant of {} {} (it lacks {})",
                u["devices"],
                u["app_version"].as_str().unwrap_or("?"),
                manifest.model,
                manifest.version,
                u["missing"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|m| m.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_census_stays_bounded_whatever_devices_send() {
        let mut map = BTreeMap::new();
        for i in 0..1000u64 {
            let app = semver::Version::new(i, 0, 0);
            let key = key(&app, &Sha256Digest::of(&i.to_be_bytes()));
            note(&mut map, "m", &key, i);
        }
        let keys = &map["m"];
        assert_eq!(keys.len(), MAX_KEYS_PER_MODEL + 1);
        assert!(keys["other other"].estimate() > 900);
    }
}
