//! What the fleet's telemetry teaches a model's deny list: a variant that falls back on a device
//! class is not offered there any more (kind `fallback`), and a variant that runs slowly on one,
//! or crashes the app natively there, is ranked after the next candidate there (kinds
//! `slow_in_field`, `crashed_in_field`). Only events with valid
//! receipts reach the rollups read here, so telemetry without receipts teaches nothing.

use std::collections::{BTreeMap, BTreeSet};

use ferry_shared::ModelName;
use ferry_shared::manifest::{Delegate, Platform, ReleaseManifest, Variant};
use ferry_shared::select::deny::{
    CrashFigures, DenyEntry, DenyKind, DenySource, DenyState, DeviceClass, SlowFigures,
};
use ferry_shared::select::{self, Preference};

use crate::fleet::Fleet;
use crate::fleet::config::TelemetryConfig;
use crate::fleet::counts::rollup::{ClassCounts, Rollup, VariantCounts};
use crate::plans::deny;
use crate::storage::catalog::Catalog;
use crate::storage::revisions::now_text;

/// How many times slower than the next candidate on a class (both measured) a variant may be
/// before it is ranked after it there, whatever its budget.
pub const SLOWER_THAN_NEXT: f64 = 1.5;

fn entry(release: &str, variant: &str, class: DeviceClass, value: &str) -> DenyEntry {
    DenyEntry {
        release: release.to_string(),
        variant: variant.to_string(),
        class,
        value: value.to_string(),
        fallback_rate: 0.0,
        samples: 0,
        source: DenySource::Telemetry,
        state: DenyState::Deny,
        kind: DenyKind::Fallback,
        latency: None,
        crash: None,
    }
}

/// Device classes of `model` over the deny thresholds: the fallback rate from enough attempts,
/// devices and networks.
pub fn fallbacks(r: &Rollup, model: &str, cfg: &TelemetryConfig) -> Vec<DenyEntry> {
    let mut out = Vec::new();
    for (release, variants) in r.models.get(model).into_iter().flatten() {
        for (variant, a) in variants {
            for (class, map) in [
                (DeviceClass::Soc, &a.by_soc),
                (DeviceClass::DeviceModel, &a.by_device_model),
            ] {
                for (value, c) in map {
                    if c.loads >= cfg.deny_min_samples
                        && c.devices.estimate() as u64 >= cfg.deny_min_devices
                        && c.networks.estimate() as u64 >= cfg.deny_min_networks
                        && c.fallback_rate() >= cfg.deny_fallback_rate
                    {
                        out.push(DenyEntry {
                            fallback_rate: c.fallback_rate(),
                            samples: c.loads,
                            ..entry(release, variant, class, value)
                        });
                    }
                }
            }
        }
    }
    out
}

/// The least share of a class's devices (those that reported the variant) that must have
/// crashed on it before it is ranked after the next candidate there.
pub const CRASH_SHARE: f64 = 0.05;

/// Device classes of `model` where a variant crashed natively on enough devices: at least
/// `deny_min_devices` distinct devices with receipts, whose crash reports came from
/// `deny_min_networks` networks, and at
/// least [`CRASH_SHARE`] of the class's devices that reported the variant. Floors (XNNPACK,
/// portable) included: a crash is not a decline, and the entry only demotes.
pub fn crashed(r: &Rollup, model: &str, cfg: &TelemetryConfig) -> Vec<DenyEntry> {
    let mut out = Vec::new();
    for (release, variants) in r.models.get(model).into_iter().flatten() {
        for (variant, a) in variants {
            for (class, map) in [
                (DeviceClass::Soc, &a.by_soc),
                (DeviceClass::DeviceModel, &a.by_device_model),
            ] {
                for (value, c) in map {
                    let crashed = c.crash_devices.estimate() as u64;
                    if crashed >= cfg.deny_min_devices.max(1)
                        && c.crash_networks.estimate() as u64 >= cfg.deny_min_networks
                        && c.crash_share() >= CRASH_SHARE
                    {
                        out.push(DenyEntry {
                            kind: DenyKind::CrashedInField,
                            samples: c.crashes,
                            crash: Some(CrashFigures {
                                devices: crashed,
                                class_devices: c.devices.estimate() as u64,
                                share: c.crash_share(),
                            }),
                            ..entry(release, variant, class, value)
                        });
                    }
                }
            }
        }
    }
    out
}

/// True for the variants a device falls back to (XNNPACK, portable kernels): telemetry never
/// denies or demotes them.
fn floor(v: &Variant) -> bool {
    matches!(v.delegate, Delegate::Xnnpack | Delegate::Portable)
}

/// The median of a class's device windows' warm p95s.
fn median(c: &ClassCounts) -> Option<f64> {
    c.warm_p95.0.quantile(0.5).ok().flatten()
}

/// One device-class map of a variant's counts.
type ClassMap = fn(&VariantCounts) -> &BTreeMap<String, ClassCounts>;

/// How much field data a `slow_in_field` entry needs on one class.
#[derive(Debug, Clone, Copy)]
pub struct Evidence {
    /// Distinct devices (with receipts) that timed the variant there.
    pub min_devices: u64,
    /// Distinct client networks its events came from (`deny_min_networks`).
    pub min_networks: u64,
}

/// The `slow_in_field` entries one release's field latency calls for. Per SoC and per device
/// model, a variant that enough devices timed (see [`Evidence`]) is slow when the median of
/// their windows' warm p95s is over its budget (unless the next candidate is known to be
/// slower still), or over [`SLOWER_THAN_NEXT`] times the next candidate's when both are known.
/// Candidates are in resolve's order for the class's platform ([`select::rank_key`] with the
/// server's delegate preference); the next one is the next the class reported on, else the
/// fallback it would get. A variant with none after it stays where it is.
pub fn slow_in_release(
    counts: &BTreeMap<String, VariantCounts>,
    manifest: &ReleaseManifest,
    pref: &Preference,
    evidence: Evidence,
) -> Vec<DenyEntry> {
    let release = manifest.version.to_string();
    let mut out = Vec::new();
    let classes: [(DeviceClass, ClassMap); 2] = [
        (DeviceClass::Soc, |c| &c.by_soc),
        (DeviceClass::DeviceModel, |c| &c.by_device_model),
    ];
    let enough = |c: &ClassCounts| {
        c.networks.estimate() as u64 >= evidence.min_networks
            && (c.latency_devices.estimate() as u64) >= evidence.min_devices
    };
    for (class, map) in classes {
        let on =
            |v: &Variant, value: &str| counts.get(v.id.as_str()).and_then(|c| map(c).get(value));
        let values: BTreeSet<&String> = counts.values().flat_map(|c| map(c).keys()).collect();
        for value in values {
            let platform: Platform = counts
                .values()
                .filter_map(|c| map(c).get(value))
                .map(|c| c.platform.as_str())
                .find(|p| !p.is_empty())
                .unwrap_or("other")
                .parse()
                .unwrap_or(Platform::Other);
            let mut order: Vec<(usize, &Variant)> = manifest.variants.iter().enumerate().collect();
            order.sort_by_key(|(i, v)| select::rank_key(pref, &platform, v, *i));
            let order: Vec<&Variant> = order.into_iter().map(|(_, v)| v).collect();
            for (i, v) in order.iter().enumerate().filter(|(_, v)| !floor(v)) {
                let Some(c) = on(v, value).filter(|c| enough(c)) else {
                    continue;
                };
                let Some(p95) = median(c) else { continue };
                // The next variant the class was served, else the fallback it would get.
                let next = order[i + 1..]
                    .iter()
                    .find(|w| on(w, value).is_some())
                    .or_else(|| order[i + 1..].iter().find(|w| floor(w)));
                let Some(next) = next else { continue };
                let next_p95 = on(next, value).filter(|c| enough(c)).and_then(median);
                let over_budget = v.latency_budget_ms.is_some_and(|b| p95 > b)
                    && next_p95.is_none_or(|n| n < p95);
                let much_slower = next_p95.is_some_and(|n| p95 > SLOWER_THAN_NEXT * n);
                if over_budget || much_slower {
                    out.push(DenyEntry {
                        kind: DenyKind::SlowInField,
                        latency: Some(SlowFigures {
                            p95_ms: p95,
                            devices: c.latency_devices.estimate() as u64,
                            budget_ms: v.latency_budget_ms,
                            next_variant: Some(next.id.to_string()),
                            next_p95_ms: next_p95,
                        }),
                        ..entry(&release, v.id.as_str(), class, value)
                    });
                }
            }
        }
    }
    out
}

/// The `slow_in_field` entries `model`'s field latency calls for, over its published releases.
pub fn slow(
    r: &Rollup,
    model: &ModelName,
    catalog: &Catalog,
    pref: &Preference,
    evidence: Evidence,
) -> Vec<DenyEntry> {
    let mut out = Vec::new();
    for (release, counts) in r.models.get(model.as_str()).into_iter().flatten() {
        if let Some(rel) = catalog.release_named(model, release) {
            out.extend(slow_in_release(counts, &rel.manifest, pref, evidence));
        }
    }
    out
}

/// True when `variant` of `release` is a fallback floor, or is not known (nothing is learned
/// about what the catalog does not hold).
fn is_floor(catalog: &Catalog, model: &ModelName, release: &str, variant: &str) -> bool {
    catalog
        .release_named(model, release)
        .and_then(|r| r.manifest.variant_named(variant).map(floor))
        .unwrap_or(true)
}

/// Adds what `view` (the fleet-wide rollup of `model`) teaches to the deny list: entries for
/// targets not listed yet (an operator's override or clear of a learned entry is not undone
/// by the next evaluation; a variant denied on a class is not also marked slow there).
/// Errors are logged: the next evaluation tries again.
pub async fn learn(fleet: &Fleet, model: &ModelName, view: &Rollup) {
    let catalog = fleet.views.catalog.get();
    let mut candidates = fallbacks(view, model.as_str(), &fleet.config);
    let evidence = Evidence {
        min_devices: fleet.config.latency_min_devices,
        min_networks: fleet.config.deny_min_networks,
    };
    candidates.extend(slow(view, model, &catalog, &fleet.preference, evidence));
    candidates.retain(|c| !is_floor(&catalog, model, &c.release, &c.variant));
    // Crashes are learned about every variant the catalog holds, floors included.
    candidates.extend(
        crashed(view, model.as_str(), &fleet.config)
            .into_iter()
            .filter(|c| catalog.release_named(model, &c.release).is_some()),
    );
    if candidates.is_empty() {
        return;
    }
    let current = fleet
        .views
        .deny
        .get()
        .get(model)
        .map(|d| d.entries.clone())
        .unwrap_or_default();
    // A variant denied on a class is not also demoted there.
    let denied = |c: &DenyEntry| {
        c.kind != DenyKind::Fallback
            && current.iter().any(|e| {
                e.kind == DenyKind::Fallback && e.state == DenyState::Deny && e.same_class(c)
            })
    };
    // Each kind has its own cap, so made-up classes of one kind cannot crowd out the other.
    let full = |kind: DenyKind| {
        current
            .iter()
            .filter(|e| e.source == DenySource::Telemetry && e.kind == kind)
            .count()
            >= deny::MAX_LEARNED
    };
    let fresh: Vec<DenyEntry> = candidates
        .into_iter()
        .filter(|c| !current.iter().any(|e| e.same_target(c)) && !denied(c) && !full(c.kind))
        .collect();
    if fresh.is_empty() {
        return;
    }
    match deny::add_learned(&fleet.store, model, &fresh, &now_text()).await {
        Ok((revision, entries)) => {
            for c in &fresh {
                tracing::warn!(%model, "{} {}: {}", c.release, c.variant, c.reason());
            }
            fleet.views.set_deny(model, revision, entries);
        }
        Err(e) => tracing::error!(%model, "deny list could not be written: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_shared::wire::telemetry::TelemetryEvent;

    fn manifest(budget: Option<f64>) -> ReleaseManifest {
        with_variants(&[
            ("xnnpack", "XnnpackBackend", None),
            ("vulkan", "VulkanBackend", budget),
        ])
    }

    /// A release of variants (id = delegate, backend, budget) in this order.
    fn with_variants(variants: &[(&str, &str, Option<f64>)]) -> ReleaseManifest {
        let v = |id: &str, delegate: &str, backend: &str, budget: Option<f64>| {
            serde_json::json!({
                "id": id, "delegate": delegate, "quant": "fp32", "backends": [backend],
                "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                "size": 10, "runtime": ">=1.0.0", "app": "*", "latency_budget_ms": budget,
            })
        };
        let json = serde_json::json!({
            "model": "m", "version": "1.0.0", "created": "2026-12-01T00:00:00Z",
            "variants": variants.iter().map(|(id, b, budget)| v(id, id, b, *budget))
                .collect::<Vec<_>>(),
        });
        ReleaseManifest::from_json(&serde_json::to_vec(&json).expect("json")).expect("valid")
    }

    /// `devices` devices of `soc` each report one window of `variant` with warm p95 `p95`.
    fn report(r: &mut Rollup, variant: &str, soc: &str, devices: u64, p95: f64) {
        for d in 0..devices {
            let e: TelemetryEvent = serde_json::from_value(serde_json::json!({
                "kind": "inference", "model": "m", "release": "1.0.0", "variant": variant,
                "delegate": variant, "outcome": "ok", "install_id": "i", "platform": "android",
                "soc": soc, "device_model": format!("{soc}-phone"), "os_version": "",
                "app_version": "", "runtime_version": "", "at": "2026-12-01T00:00:00Z",
                "method": "forward", "runs": 50, "p95_ms": p95,
            }))
            .expect("event");
            let device = u64::from(soc.as_bytes()[0]) << 32 | d;
            r.variant_mut("m", "1.0.0", variant).add(&e, device, 0);
        }
    }

    const EVIDENCE: Evidence = Evidence {
        min_devices: 20,
        min_networks: 0,
    };

    fn slow_on(r: &Rollup, m: &ReleaseManifest) -> Vec<(DeviceClass, String)> {
        slow_in_release(&r.models["m"]["1.0.0"], m, &Preference::default(), EVIDENCE)
            .into_iter()
            .map(|e| {
                assert_eq!(e.variant, "vulkan", "the fallback is never demoted");
                (e.class, e.value)
            })
            .collect()
    }

    #[test]
    fn a_variant_over_budget_or_much_slower_than_the_next_is_demoted_on_that_class_only() {
        let mut r = Rollup::default();
        // A: over its 20 ms budget, XNNPACK faster there.
        report(&mut r, "vulkan", "A", 20, 40.0);
        report(&mut r, "xnnpack", "A", 20, 30.0);
        // B: within budget.
        report(&mut r, "vulkan", "B", 25, 10.0);
        // C: over budget but one device short.
        report(&mut r, "vulkan", "C", 19, 40.0);
        // D: over budget, but XNNPACK is slower still there.
        report(&mut r, "vulkan", "D", 20, 40.0);
        report(&mut r, "xnnpack", "D", 20, 60.0);
        // E: within budget, but XNNPACK has fewer devices: unknown, the budget decides.
        report(&mut r, "vulkan", "E", 20, 15.0);
        report(&mut r, "xnnpack", "E", 5, 5.0);
        let with_budget = manifest(Some(20.0));
        let soc = |s: &str| (DeviceClass::Soc, s.to_string());
        let model = |s: &str| (DeviceClass::DeviceModel, format!("{s}-phone"));
        assert_eq!(slow_on(&r, &with_budget), [soc("A"), model("A")]);
        let e = &slow_in_release(
            &r.models["m"]["1.0.0"],
            &with_budget,
            &Preference::default(),
            EVIDENCE,
        )[0];
        let f = e.latency.as_ref().expect("figures");
        assert!((f.p95_ms - 40.0).abs() < 1.0, "{f:?}");
        assert_eq!((f.devices, f.budget_ms), (20, Some(20.0)));
        assert_eq!(f.next_variant.as_deref(), Some("xnnpack"));
        assert!(f.next_p95_ms.is_some_and(|n| (n - 30.0).abs() < 1.0));
        assert!(e.reason().starts_with("slow_in_field: "), "{}", e.reason());
        // Without a budget only "1.5x slower than the next" counts: A is 1.33x, so nothing,
        // until XNNPACK on A is measured at 20 ms (2x).
        let no_budget = manifest(None);
        assert!(slow_on(&r, &no_budget).is_empty());
        let mut faster = Rollup::default();
        report(&mut faster, "vulkan", "A", 20, 40.0);
        report(&mut faster, "xnnpack", "A", 20, 20.0);
        assert_eq!(slow_on(&faster, &no_budget), [soc("A"), model("A")]);
    }

    #[test]
    fn the_next_candidate_is_the_one_resolve_ranks_next_and_one_network_is_not_enough() {
        // Listed Vulkan first, but on Android resolve ranks the NPU (QNN) before the GPU: a
        // slow Vulkan variant goes behind XNNPACK, not behind QNN, and QNN is within budget.
        let m = with_variants(&[
            ("vulkan", "VulkanBackend", Some(20.0)),
            ("qnn", "QnnBackend", Some(20.0)),
            ("xnnpack", "XnnpackBackend", None),
        ]);
        let mut r = Rollup::default();
        report(&mut r, "vulkan", "A", 20, 40.0);
        report(&mut r, "qnn", "A", 20, 10.0);
        report(&mut r, "xnnpack", "A", 20, 30.0);
        let slow = slow_in_release(
            &r.models["m"]["1.0.0"],
            &m,
            &Preference::default(),
            EVIDENCE,
        );
        let vulkan: Vec<_> = slow
            .iter()
            .filter(|e| e.class == DeviceClass::Soc)
            .collect();
        assert_eq!(vulkan.len(), 1, "{slow:?}");
        assert_eq!(vulkan[0].variant, "vulkan");
        let f = vulkan[0].latency.as_ref().expect("figures");
        assert_eq!(f.next_variant.as_deref(), Some("xnnpack"), "{f:?}");
        // Every event came from one network: with deny_min_networks 2, nothing is learned.
        let strict = Evidence {
            min_networks: 2,
            ..EVIDENCE
        };
        assert!(
            slow_in_release(&r.models["m"]["1.0.0"], &m, &Preference::default(), strict).is_empty()
        );
    }

    /// `devices` devices of `soc`: each loads `variant` (`crashed` of them crash on it
    /// instead: a crash event, then fallbacks past it on every later launch).
    fn crash_fleet(r: &mut Rollup, variant: &str, soc: &str, devices: u64, crashed: u64) {
        for d in 0..devices {
            let ev = |kind: &str, extra: serde_json::Value| {
                let mut j = serde_json::json!({
                    "kind": kind, "model": "m", "release": "1.0.0", "variant": variant,
                    "delegate": variant, "outcome": "ok", "install_id": "i",
                    "platform": "android", "soc": soc, "device_model": format!("{soc}-phone"),
                    "os_version": "", "app_version": "", "runtime_version": "",
                    "at": "2026-12-01T00:00:00Z",
                });
                for (k, v) in extra.as_object().into_iter().flatten() {
                    j[k] = v.clone();
                }
                serde_json::from_value::<TelemetryEvent>(j).expect("event")
            };
            let device = u64::from(soc.as_bytes()[0]) << 32 | d;
            let counts = r.variant_mut("m", "1.0.0", variant);
            if d < crashed {
                let failed = serde_json::json!({"outcome": "failed", "error_code": "crashed",
                    "stage": "load_method"});
                counts.add(&ev("crash", failed.clone()), device, d);
                for _ in 0..5 {
                    let mut skip = failed.clone();
                    skip["to_variant"] = "xnnpack".into();
                    counts.add(&ev("fallback", skip), device, d);
                }
            } else {
                counts.add(&ev("load", serde_json::json!({"load_ms": 3.0})), device, d);
            }
        }
    }

    #[test]
    fn crashes_on_enough_devices_of_a_class_demote_the_variant_there_floors_included() {
        let cfg = TelemetryConfig::default();
        let mut r = Rollup::default();
        // A: 20 of 100 devices crashed (20%): learned. B: 19 crashed: short of the devices.
        // C: 25 of 1000 (2.5%): short of the share. D: XNNPACK crashed on 30 of 40: learned.
        crash_fleet(&mut r, "vulkan", "A", 100, 20);
        crash_fleet(&mut r, "vulkan", "B", 100, 19);
        crash_fleet(&mut r, "vulkan", "C", 1000, 25);
        crash_fleet(&mut r, "xnnpack", "D", 40, 30);
        let learned = crashed(&r, "m", &cfg);
        let on: Vec<(&str, DeviceClass, &str)> = learned
            .iter()
            .map(|e| (e.variant.as_str(), e.class, e.value.as_str()))
            .collect();
        assert_eq!(
            on,
            [
                ("vulkan", DeviceClass::Soc, "A"),
                ("vulkan", DeviceClass::DeviceModel, "A-phone"),
                ("xnnpack", DeviceClass::Soc, "D"),
                ("xnnpack", DeviceClass::DeviceModel, "D-phone"),
            ]
        );
        let a = &learned[0];
        assert_eq!(a.kind, DenyKind::CrashedInField);
        let f = a.crash.as_ref().expect("figures");
        assert_eq!((f.devices, f.class_devices), (20, 100));
        assert!(
            a.reason()
                .contains("crashed natively on 20 of 100 devices (20%) on A"),
            "{}",
            a.reason()
        );
        // Passing over a crashed variant is not a decline: no fallback entry comes of it.
        assert!(fallbacks(&r, "m", &cfg).is_empty());
        let v = &r.models["m"]["1.0.0"]["vulkan"];
        assert_eq!((v.crashes, v.fallbacks), (64, 0));
        assert_eq!(v.crash_stages["load_method"], 64);
    }
}
