//! Mergeable telemetry aggregates: what every replica counts, flushes to the store and merges
//! with the other replicas' counts, so that health, halts, ramps and the learned deny list
//! see the whole fleet on every replica, and survive restarts.
//!
//! Counters add; distinct devices are HyperLogLog++ estimators (`cardinality-estimator`,
//! exact up to 128 devices, about 1.6% error beyond); load times are a DDSketch
//! (`sketches-ddsketch`, 1% relative error on every quantile). All three merge without loss, so
//! the merge of the replicas' rollups equals the rollup of one server that received every
//! event (counts exactly, distinct devices and percentiles within the stated errors).
//!
//! Memory is bounded by construction: the variants are those of published releases (events
//! count only with a receipt the server issued), device classes are capped per variant
//! ([`MAX_CLASSES`]), error codes and fallback targets are capped ([`MAX_KEYS`]), estimators
//! and sketches have a fixed maximum size.

use std::collections::BTreeMap;

use ferry_shared::errors::ErrorCode;
use ferry_shared::wire::telemetry::{EventKind, Outcome, TelemetryEvent};
use serde::{Deserialize, Serialize};

pub use crate::fleet::counts::classes::ClassCounts;
pub use crate::fleet::counts::sketches::LoadTimes;
pub use crate::fleet::devices::Devices;

/// Most device classes (SoCs, device models, platforms) counted per variant; events of further
/// classes still count toward the variant.
pub const MAX_CLASSES: usize = 1000;

/// Most distinct error codes and fallback targets counted per variant.
pub const MAX_KEYS: usize = 64;

/// Devices crashed per device reporting, never above 1 (0 without devices).
pub fn crash_rate(crashed: usize, devices: usize) -> f64 {
    if devices == 0 {
        0.0
    } else {
        (crashed as f64 / devices as f64).min(1.0)
    }
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    if map.len() < MAX_KEYS || map.contains_key(key) {
        *map.entry(key.to_string()).or_default() += 1;
    }
}

/// Counts of one variant of one release.
#[derive(Clone, Serialize, Deserialize)]
pub struct VariantCounts {
    /// Its delegate (from the first event).
    pub delegate: String,
    /// Distinct devices.
    pub devices: Devices,
    /// Successful loads.
    pub loads_ok: u64,
    /// Failed loads.
    pub load_failures: u64,
    /// Fallbacks away from this variant.
    pub fallbacks: u64,
    /// Where devices fell back to.
    pub fallback_to: BTreeMap<String, u64>,
    /// Error codes of failed loads.
    pub error_codes: BTreeMap<String, u64>,
    /// Failed downloads.
    pub downloads_failed: u64,
    /// Failed verifications.
    pub verify_failed: u64,
    /// Load times (milliseconds) of successful loads.
    pub load_ms: LoadTimes,
    /// Per SoC.
    pub by_soc: BTreeMap<String, ClassCounts>,
    /// Per device model.
    pub by_device_model: BTreeMap<String, ClassCounts>,
    /// Per platform.
    pub by_platform: BTreeMap<String, ClassCounts>,
    /// Per app version.
    #[serde(default)]
    pub by_app_version: BTreeMap<String, ClassCounts>,
    /// Per ExecuTorch runtime version.
    #[serde(default)]
    pub by_runtime_version: BTreeMap<String, ClassCounts>,
    /// Run times reported in `inference` events.
    #[serde(default)]
    pub latency: crate::fleet::counts::latency::Latency,
    /// Native crashes reported (`crash` events).
    #[serde(default)]
    pub crashes: u64,
    /// Distinct devices it crashed on.
    #[serde(default)]
    pub crash_devices: Devices,
    /// The stage each crash happened in (`load_program`, `load_method`, `run`, ...).
    #[serde(default)]
    pub crash_stages: BTreeMap<String, u64>,
}

impl std::fmt::Debug for VariantCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VariantCounts")
            .field("delegate", &self.delegate)
            .field("loads_ok", &self.loads_ok)
            .field("load_failures", &self.load_failures)
            .field("fallbacks", &self.fallbacks)
            .field("crashes", &self.crashes)
            .field("load_ms_samples", &self.load_ms.0.count())
            .finish_non_exhaustive()
    }
}

impl Default for VariantCounts {
    fn default() -> Self {
        Self {
            delegate: String::new(),
            devices: Devices::new(),
            loads_ok: 0,
            load_failures: 0,
            fallbacks: 0,
            fallback_to: BTreeMap::new(),
            error_codes: BTreeMap::new(),
            downloads_failed: 0,
            verify_failed: 0,
            load_ms: LoadTimes::default(),
            by_soc: BTreeMap::new(),
            by_device_model: BTreeMap::new(),
            by_platform: BTreeMap::new(),
            by_app_version: BTreeMap::new(),
            by_runtime_version: BTreeMap::new(),
            latency: Default::default(),
            crashes: 0,
            crash_devices: Devices::new(),
            crash_stages: BTreeMap::new(),
        }
    }
}

impl VariantCounts {
    /// Counts one event of device `device` (the hashed install id) sent from `network` (the
    /// hashed client network).
    pub fn add(&mut self, e: &TelemetryEvent, device: u64, network: u64) {
        self.devices.insert(&device);
        if self.delegate.is_empty() {
            self.delegate = e.delegate.chars().take(64).collect();
        }
        let classes = |agg: &mut Self, f: &dyn Fn(&mut ClassCounts)| {
            for (map, key) in [
                (&mut agg.by_soc, &e.soc),
                (&mut agg.by_device_model, &e.device_model),
                (&mut agg.by_platform, &e.platform),
                (&mut agg.by_app_version, &e.app_version),
                (&mut agg.by_runtime_version, &e.runtime_version),
            ] {
                if !key.is_empty() && (map.len() < MAX_CLASSES || map.contains_key(key)) {
                    let c = map.entry(key.clone()).or_default();
                    c.devices.insert(&device);
                    c.networks.insert(&network);
                    f(c);
                }
            }
        };
        match (e.kind, e.outcome) {
            (EventKind::Load, Outcome::Ok) => {
                self.loads_ok += 1;
                if let Some(ms) = e.load_ms
                    && ms.is_finite()
                    && ms >= 0.0
                {
                    self.load_ms.0.add(ms);
                }
                classes(self, &|c| c.loads += 1);
            }
            (EventKind::Load, Outcome::Failed) => {
                self.load_failures += 1;
                if let Some(code) = &e.error_code {
                    bump(&mut self.error_codes, code);
                }
                classes(self, &|c| {
                    c.loads += 1;
                    c.load_failures += 1;
                });
            }
            // Passing over a variant that crashed the device before: not a decline (the crash
            // itself was counted once, by its `crash` event).
            (EventKind::Fallback, _)
                if e.error_code.as_deref() == Some(ErrorCode::Crashed.as_str()) =>
            {
                classes(self, &|_| {});
            }
            (EventKind::Crash, _) => {
                self.crashes += 1;
                self.crash_devices.insert(&device);
                if let Some(stage) = &e.stage {
                    bump(&mut self.crash_stages, stage);
                }
                classes(self, &|c| c.crashes += 1);
                for (map, key) in [
                    (&mut self.by_soc, &e.soc),
                    (&mut self.by_device_model, &e.device_model),
                ] {
                    if let Some(c) = map.get_mut(key) {
                        c.crash_devices.insert(&device);
                        c.crash_networks.insert(&network);
                        if c.platform.is_empty() {
                            c.platform = e.platform.chars().take(32).collect();
                        }
                    }
                }
            }
            (EventKind::Fallback, _) => {
                self.fallbacks += 1;
                if let Some(to) = &e.to_variant {
                    bump(&mut self.fallback_to, to);
                }
                classes(self, &|c| c.fallbacks += 1);
            }
            (EventKind::Inference, Outcome::Ok) => {
                self.latency.add(e, device);
                classes(self, &|_| {});
                // Latency per class only where selection and gates look (SoC, device model):
                // sketches are the largest part of a class's counts.
                if let Some(p95) = e.inference.p95_ms.filter(|x| x.is_finite() && *x >= 0.0) {
                    for (map, key) in [
                        (&mut self.by_soc, &e.soc),
                        (&mut self.by_device_model, &e.device_model),
                    ] {
                        if let Some(c) = map.get_mut(key) {
                            c.warm_p95.0.add(p95);
                            c.latency_devices.insert(&device);
                            if c.platform.is_empty() {
                                c.platform = e.platform.chars().take(32).collect();
                            }
                        }
                    }
                }
            }
            (EventKind::Download, Outcome::Failed) => self.downloads_failed += 1,
            (EventKind::Verify, Outcome::Failed) => self.verify_failed += 1,
            _ => {}
        }
    }

    /// Adds `o` into `self`.
    pub fn merge(&mut self, o: &VariantCounts) {
        if self.delegate.is_empty() {
            self.delegate = o.delegate.clone();
        }
        self.devices.merge(&o.devices);
        self.loads_ok += o.loads_ok;
        self.load_failures += o.load_failures;
        self.fallbacks += o.fallbacks;
        for (k, n) in &o.fallback_to {
            if self.fallback_to.len() < MAX_KEYS || self.fallback_to.contains_key(k) {
                *self.fallback_to.entry(k.clone()).or_default() += n;
            }
        }
        for (k, n) in &o.error_codes {
            if self.error_codes.len() < MAX_KEYS || self.error_codes.contains_key(k) {
                *self.error_codes.entry(k.clone()).or_default() += n;
            }
        }
        self.downloads_failed += o.downloads_failed;
        self.verify_failed += o.verify_failed;
        self.crashes += o.crashes;
        self.crash_devices.merge(&o.crash_devices);
        for (k, n) in &o.crash_stages {
            if self.crash_stages.len() < MAX_KEYS || self.crash_stages.contains_key(k) {
                *self.crash_stages.entry(k.clone()).or_default() += n;
            }
        }
        // Both sketches use the default configuration, so the merge cannot fail; a sketch read
        // from elsewhere with another configuration is left out rather than mixed in.
        let _ = self.load_ms.0.merge(&o.load_ms.0);
        self.latency.merge(&o.latency);
        for (mine, theirs) in [
            (&mut self.by_soc, &o.by_soc),
            (&mut self.by_device_model, &o.by_device_model),
            (&mut self.by_platform, &o.by_platform),
            (&mut self.by_app_version, &o.by_app_version),
            (&mut self.by_runtime_version, &o.by_runtime_version),
        ] {
            for (k, c) in theirs {
                if mine.len() < MAX_CLASSES || mine.contains_key(k) {
                    mine.entry(k.clone()).or_default().merge(c);
                }
            }
        }
    }

    /// Loads attempted (successful and failed).
    pub fn loads(&self) -> u64 {
        self.loads_ok + self.load_failures
    }

    /// The JSON view for `health`.
    pub fn view(&self, variant: &str) -> serde_json::Value {
        let mut codes: Vec<(&String, &u64)> = self.error_codes.iter().collect();
        codes.sort_by(|a, b| b.1.cmp(a.1));
        let loads = self.loads();
        let rate = |n: u64| {
            if loads == 0 {
                0.0
            } else {
                n.min(loads) as f64 / loads as f64
            }
        };
        let q = |p: f64| self.load_ms.0.quantile(p).ok().flatten();
        let classes = |m: &BTreeMap<String, ClassCounts>| {
            m.iter()
                .map(|(k, c)| (k.clone(), c.view()))
                .collect::<BTreeMap<_, _>>()
        };
        serde_json::json!({
            "variant": variant,
            "delegate": self.delegate,
            "devices": self.devices.estimate(),
            "loads": loads,
            "load_failures": self.load_failures,
            "failure_rate": rate(self.load_failures),
            "fallbacks": self.fallbacks,
            "fallback_rate": rate(self.fallbacks),
            "fallbacks_to": self.fallback_to,
            "top_error_codes": codes.iter().take(5).map(|(c, n)| serde_json::json!({"code": c, "count": n})).collect::<Vec<_>>(),
            "downloads_failed": self.downloads_failed,
            "verify_failed": self.verify_failed,
            "crashes": self.crashes,
            "crash_devices": self.crash_devices.estimate(),
            "crash_rate": crash_rate(self.crash_devices.estimate(), self.devices.estimate()),
            "crash_stages": self.crash_stages,
            "load_ms": {"p50": q(0.5), "p95": q(0.95), "samples": self.load_ms.0.count()},
            "by_soc": classes(&self.by_soc),
            "by_device_model": classes(&self.by_device_model),
            "by_platform": classes(&self.by_platform),
            "by_app_version": classes(&self.by_app_version),
            "by_runtime_version": classes(&self.by_runtime_version),
            "inference": self.latency.view(),
        })
    }
}

/// Everything one replica counted (or the merge of several replicas' rollups).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Rollup {
    /// model → release → variant → counts.
    pub models: BTreeMap<String, BTreeMap<String, BTreeMap<String, VariantCounts>>>,
    /// model → cohort (`staged`, `baseline`) → distinct devices served it.
    pub cohorts: BTreeMap<String, BTreeMap<String, Devices>>,
    /// model → `PROTOCOL SDK` (see [`crate::fleet::census::clients`]) → distinct devices that
    /// resolved with it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clients: BTreeMap<String, BTreeMap<String, Devices>>,
    /// model → `in_sync` or `skewed` (wall clock more than [`SKEWED_CLOCK_S`] from the
    /// server's time) → distinct devices that reported their clock offset.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clocks: BTreeMap<String, BTreeMap<String, Devices>>,
    /// model → `APP_VERSION OPERATORS_DIGEST` (see [`crate::fleet::census::runtimes`]) → distinct
    /// devices that resolved with that runtime.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub runtimes: BTreeMap<String, BTreeMap<String, Devices>>,
    /// SDK (`NAME/VERSION`) → distinct client networks whose receipted telemetry named it:
    /// what vouches for a name in the client census (fleet-wide, not per model).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sdks: BTreeMap<String, Devices>,
    /// The operator digests (hex) devices sent and the server knew, whatever the runtime
    /// census folded: what keeps a stored set from being collected
    /// (`fleet::persist::collect`). At most [`MAX_DIGESTS`] (four times that merged).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub operator_digests: std::collections::BTreeSet<String>,
}

/// Most operator digests one rollup notes (a replica keeps 4,096 sets in memory, and a stored
/// set needs a device in only one bucket of its window to stay).
pub const MAX_DIGESTS: usize = 4096;

/// A device clock further than this from the server's time (seconds) counts as skewed: the
/// 5 minutes of skew a decision's issue time is allowed.
pub const SKEWED_CLOCK_S: u64 = 300;

impl Rollup {
    /// Model/release/variant entries held.
    pub fn variant_count(&self) -> usize {
        self.models
            .values()
            .flat_map(BTreeMap::values)
            .map(BTreeMap::len)
            .sum()
    }

    /// The counts of one variant, created on first use.
    pub fn variant_mut(&mut self, model: &str, release: &str, variant: &str) -> &mut VariantCounts {
        self.models
            .entry(model.to_string())
            .or_default()
            .entry(release.to_string())
            .or_default()
            .entry(variant.to_string())
            .or_default()
    }

    /// Notes that `device` was served `cohort` of `model`.
    pub fn note_cohort(&mut self, model: &str, cohort: &str, device: u64) {
        self.cohorts
            .entry(model.to_string())
            .or_default()
            .entry(cohort.to_string())
            .or_default()
            .insert(&device);
    }

    /// Notes that `device` reported its wall clock `offset` seconds from the server's time.
    pub fn note_clock(&mut self, model: &str, offset: i64, device: u64) {
        let state = if offset.unsigned_abs() > SKEWED_CLOCK_S {
            "skewed"
        } else {
            "in_sync"
        };
        self.clocks
            .entry(model.to_string())
            .or_default()
            .entry(state.to_string())
            .or_default()
            .insert(&device);
    }

    /// Adds `o` into `self`.
    pub fn merge(&mut self, o: &Rollup) {
        for (m, releases) in &o.models {
            for (r, variants) in releases {
                for (v, c) in variants {
                    self.variant_mut(m, r, v).merge(c);
                }
            }
        }
        for (m, cohorts) in &o.cohorts {
            merge_devices(&mut self.cohorts, m, cohorts);
        }
        for (m, clients) in &o.clients {
            merge_devices(&mut self.clients, m, clients);
        }
        for (m, clocks) in &o.clocks {
            merge_devices(&mut self.clocks, m, clocks);
        }
        for (m, runtimes) in &o.runtimes {
            merge_devices(&mut self.runtimes, m, runtimes);
        }
        crate::fleet::census::clients::merge_vouches(&mut self.sdks, &o.sdks);
        for d in &o.operator_digests {
            if self.operator_digests.len() >= MAX_DIGESTS * 4 {
                break;
            }
            self.operator_digests.insert(d.clone());
        }
    }

    /// Notes that a device sent the operator digest `digest` (hex) and it was known.
    pub fn note_digest(&mut self, digest: &str) {
        if self.operator_digests.len() < MAX_DIGESTS || self.operator_digests.contains(digest) {
            self.operator_digests.insert(digest.to_string());
        }
    }

    /// Adds `o`'s counts of `model` only into `self`.
    pub fn merge_model(&mut self, o: &Rollup, model: &str) {
        if let Some(releases) = o.models.get(model) {
            for (r, variants) in releases {
                for (v, c) in variants {
                    self.variant_mut(model, r, v).merge(c);
                }
            }
        }
        if let Some(cohorts) = o.cohorts.get(model) {
            merge_devices(&mut self.cohorts, model, cohorts);
        }
        if let Some(clients) = o.clients.get(model) {
            merge_devices(&mut self.clients, model, clients);
        }
        if let Some(clocks) = o.clocks.get(model) {
            merge_devices(&mut self.clocks, model, clocks);
        }
        if let Some(runtimes) = o.runtimes.get(model) {
            merge_devices(&mut self.runtimes, model, runtimes);
        }
    }

    /// Distinct devices (estimated) that reported on any variant of `release` of `model`.
    pub fn release_devices(&self, model: &str, release: &str) -> u64 {
        let mut all = Devices::new();
        if let Some(variants) = self.models.get(model).and_then(|r| r.get(release)) {
            for c in variants.values() {
                all.merge(&c.devices);
            }
        }
        all.estimate() as u64
    }

    /// Distinct devices (estimated) that reported a crash of any variant of `release` of
    /// `model`, and distinct devices that reported on it at all.
    pub fn release_crash_devices(&self, model: &str, release: &str) -> (u64, u64) {
        let (mut crashed, mut all) = (Devices::new(), Devices::new());
        if let Some(variants) = self.models.get(model).and_then(|r| r.get(release)) {
            for c in variants.values() {
                crashed.merge(&c.crash_devices);
                all.merge(&c.devices);
            }
        }
        (crashed.estimate() as u64, all.estimate() as u64)
    }

    /// Loads, failures and fallbacks of all variants of `release` of `model`.
    pub fn release_totals(&self, model: &str, release: &str) -> (u64, u64, u64) {
        self.models
            .get(model)
            .and_then(|r| r.get(release))
            .map_or((0, 0, 0), |variants| {
                variants.values().fold((0, 0, 0), |(l, f, b), a| {
                    (l + a.loads(), f + a.load_failures, b + a.fallbacks)
                })
            })
    }

    /// The health view of `model` (releases newest first).
    pub fn health(&self, model: &str) -> serde_json::Value {
        let mut list: Vec<(semver::Version, &String, Vec<serde_json::Value>)> = self
            .models
            .get(model)
            .into_iter()
            .flatten()
            .map(|(r, variants)| {
                (
                    r.parse().unwrap_or(semver::Version::new(0, 0, 0)),
                    r,
                    variants.iter().map(|(v, c)| c.view(v)).collect(),
                )
            })
            .collect();
        list.sort_by(|a, b| b.0.cmp(&a.0));
        let cohorts: BTreeMap<&String, usize> = self
            .cohorts
            .get(model)
            .into_iter()
            .flatten()
            .map(|(c, d)| (c, d.estimate()))
            .collect();
        serde_json::json!({
            "releases": list.into_iter().map(|(_, r, v)| {
                let (crashed, devices) = self.release_crash_devices(model, r);
                let crashes: u64 = v.iter().filter_map(|x| x["crashes"].as_u64()).sum();
                serde_json::json!({"release": r, "variants": v, "crashes": crashes,
                    "crash_devices": crashed, "devices": devices,
                    "crash_rate": crash_rate(crashed as usize, devices as usize)})
            }).collect::<Vec<_>>(),
            "cohort_sizes": cohorts,
            "clients": crate::fleet::census::clients::view(self.clients.get(model)),
            "clocks": {
                "reporting": self.clocks.get(model).map_or(0, |c| {
                    let mut all = Devices::new();
                    for d in c.values() {
                        all.merge(d);
                    }
                    all.estimate()
                }),
                "skewed": self
                    .clocks
                    .get(model)
                    .and_then(|c| c.get("skewed"))
                    .map_or(0, Devices::estimate),
            },
        })
    }
}

/// Adds the device sets `from` of `model` into `into`.
fn merge_devices(
    into: &mut BTreeMap<String, BTreeMap<String, Devices>>,
    model: &str,
    from: &BTreeMap<String, Devices>,
) {
    let to = into.entry(model.to_string()).or_default();
    for (k, d) in from {
        to.entry(k.clone()).or_default().merge(d);
    }
}

#[cfg(test)]
mod tests;
