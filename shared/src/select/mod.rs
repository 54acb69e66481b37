//! Selection, the pure decisions: [`rollout`] plans and cohort bucketing, learned and operator
//! [`deny`] entries, [`operators`] sets and what a runtime lacks; and, in this file, variant
//! selection: which release and which variants a device should try, in what order.
//!
//! A pure function over the catalog's manifests and the device's capabilities. For each
//! release (newest first, or the one a rollout cohort names) every variant is checked against
//! the device: runtime range, app range, platform, OS minimum, RAM, SoC allow/deny lists,
//! registered backends, and any extra deny rule the caller supplies (learned from telemetry).
//! The first release with a compatible variant wins. Its compatible variants are ranked by the
//! delegate preference for the device's platform (default NPU > GPU > CPU), then XNNPACK
//! variants come last as the tested fallback. Portable-only variants are offered only when no
//! XNNPACK variant is compatible (they are slower and XNNPACK is the tested fallback).

pub mod deny;
pub mod operators;
pub mod rollout;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::manifest::{Delegate, ReleaseManifest, Variant, compare_dotted};
use crate::wire::resolve::{Explanation, ResolveRequest};

/// Delegate preference, by platform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preference {
    /// Order used where no platform entry exists.
    pub default: Vec<Delegate>,
    /// Platform-specific orders (platform name → delegates, best first).
    #[serde(default)]
    pub per_platform: BTreeMap<crate::manifest::Platform, Vec<Delegate>>,
}

impl Default for Preference {
    /// NPU > GPU > CPU > portable.
    fn default() -> Self {
        let mut default: Vec<Delegate> = Delegate::ALL.to_vec();
        default.sort_by_key(|d| d.hardware_class());
        Self {
            default,
            per_platform: BTreeMap::new(),
        }
    }
}

impl Preference {
    /// Rank of `d` on `platform`: lower is better; unlisted delegates rank after listed ones.
    pub fn position(&self, platform: &crate::manifest::Platform, d: &Delegate) -> usize {
        let order = self.per_platform.get(platform).unwrap_or(&self.default);
        order.iter().position(|x| x == d).unwrap_or(order.len())
    }
}

/// Why `v` cannot go to `device`; empty when it can.
pub fn incompatibilities(v: &Variant, device: &ResolveRequest) -> Vec<String> {
    check(v, device, true)
}

/// True when `v` can go to `device` (what [`incompatibilities`] checks, without the text).
pub fn fits(v: &Variant, device: &ResolveRequest) -> bool {
    check(v, device, false).is_empty()
}

/// The checks behind [`incompatibilities`] and [`fits`]; the reasons are only formatted when
/// `explain` (an empty string stands for each failed check otherwise).
fn check(v: &Variant, device: &ResolveRequest, explain: bool) -> Vec<String> {
    let mut why: Vec<String> = Vec::new();
    let mut add = |reason: &dyn Fn() -> String| {
        why.push(if explain { reason() } else { String::new() });
    };
    if !v.runtime.matches(&device.runtime_version) {
        add(&|| {
            format!(
                "needs ExecuTorch runtime {}, device has {}",
                v.runtime, device.runtime_version
            )
        });
    }
    if !v.app.matches(&device.app_version) {
        add(&|| format!("needs app {}, app is {}", v.app, device.app_version));
    }
    let c = &v.constraints;
    if !c.platforms.is_empty() && !c.platforms.contains(&device.platform) {
        let list: Vec<&str> = c.platforms.iter().map(|p| p.as_str()).collect();
        add(&|| {
            format!(
                "platform {} is not one of {}",
                device.platform,
                list.join(", ")
            )
        });
    }
    if let Some(min) = &c.min_os_version
        && compare_dotted(&device.os_version, min).is_lt()
    {
        add(&|| {
            format!(
                "needs OS {min} or later, device has {}",
                if device.os_version.is_empty() {
                    "none reported"
                } else {
                    &device.os_version
                }
            )
        });
    }
    if let Some(min) = c.min_ram_mb
        && device.ram_mb < min
    {
        add(&|| format!("needs {min} MiB RAM, device has {}", device.ram_mb));
    }
    let soc = device.soc.to_ascii_lowercase();
    if !c.soc_allow.is_empty() && !c.soc_allow.iter().any(|s| s.to_ascii_lowercase() == soc) {
        add(&|| format!("SoC {:?} is not on the variant's allow list", device.soc));
    }
    if c.soc_deny.iter().any(|s| s.to_ascii_lowercase() == soc) {
        add(&|| format!("SoC {} is on the variant's deny list", device.soc));
    }
    if let Some(sealing) = &v.sealed
        && !device.seal_schemes.contains(&sealing.scheme)
    {
        add(&|| {
            if device.seal_schemes.is_empty() {
                format!(
                    "sealed ({}): this client cannot open sealed variants (a ferry client \
                     before sealing, or a runtime without a data loader)",
                    sealing.scheme
                )
            } else {
                format!(
                    "sealed with {}, the client opens {}",
                    sealing.scheme,
                    device.seal_schemes.join(", ")
                )
            }
        });
    }
    let missing: Vec<&str> = v
        .backends
        .iter()
        .filter(|b| !device.backends.contains(b))
        .map(|b| b.as_str())
        .collect();
    if !missing.is_empty() {
        let have: Vec<&str> = device.backends.iter().map(|b| b.as_str()).collect();
        add(&|| {
            format!(
                "needs backend {}, device registers {}",
                missing.join(", "),
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            )
        });
    }
    why
}

/// The outcome of a successful selection.
#[derive(Debug, Clone)]
pub struct Selection<'a> {
    /// The chosen release.
    pub manifest: &'a ReleaseManifest,
    /// Variants to try, best first.
    pub candidates: Vec<&'a Variant>,
    /// Why each variant of each release considered was chosen or excluded.
    pub explain: Vec<Explanation>,
}

/// What an extra rule says about a variant for a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Not offered, for this reason.
    Exclude(String),
    /// Offered, ranked after the next candidate, for this reason (field latency).
    Demote(String),
}

/// An extra rule that can exclude or demote a variant for a device (for example a deny list
/// learned from telemetry); `None` leaves the variant as it is.
pub type DenyRule<'r> = &'r dyn Fn(&ReleaseManifest, &Variant, &ResolveRequest) -> Option<Rule>;

/// Moves each demoted variant behind the next candidate that is not demoted (so a slow GPU
/// variant goes after XNNPACK, and a slow NPU variant after the GPU one but before XNNPACK);
/// the others keep their order.
fn demote<T>(ranked: Vec<(T, bool)>) -> Vec<T> {
    let mut out = Vec::with_capacity(ranked.len());
    let mut waiting = Vec::new();
    for (v, demoted) in ranked {
        if demoted {
            waiting.push(v);
        } else {
            out.push(v);
            out.append(&mut waiting);
        }
    }
    out.append(&mut waiting);
    out
}

/// Where resolve ranks `v`, the `index`-th variant of its release, on `platform` (lower
/// first): accelerated delegates in the platform's preference order, then XNNPACK, then
/// portable kernels; ties in the release's order. The field-latency learner orders candidates
/// with it too, so that its "next candidate" is the one resolve puts next.
pub fn rank_key(
    pref: &Preference,
    platform: &crate::manifest::Platform,
    v: &Variant,
    index: usize,
) -> (u8, usize, usize) {
    let group = match v.delegate {
        Delegate::Xnnpack => 1,
        Delegate::Portable => 2,
        _ => 0,
    };
    (group, pref.position(platform, &v.delegate), index)
}

/// Ranks the variants of one release for `device`. Returns the candidates (possibly empty)
/// and an explanation for every variant.
pub fn rank<'a>(
    manifest: &'a ReleaseManifest,
    device: &ResolveRequest,
    pref: &Preference,
    deny: DenyRule<'_>,
) -> (Vec<&'a Variant>, Vec<Explanation>) {
    let mut demoted: Vec<Option<String>> = vec![None; manifest.variants.len()];
    let mut reasons: Vec<Vec<String>> = manifest
        .variants
        .iter()
        .zip(demoted.iter_mut())
        .map(|(v, slow)| {
            let mut why = incompatibilities(v, device);
            if why.is_empty() {
                match deny(manifest, v, device) {
                    Some(Rule::Exclude(r)) => why.push(r),
                    Some(Rule::Demote(r)) => *slow = Some(r),
                    None => {}
                }
            }
            why
        })
        .collect();
    let fallback = manifest
        .variants
        .iter()
        .zip(&reasons)
        .find(|(v, why)| v.delegate == Delegate::Xnnpack && why.is_empty())
        .map(|(v, _)| v.id.clone());
    if let Some(fb) = &fallback {
        for (v, why) in manifest.variants.iter().zip(reasons.iter_mut()) {
            if v.delegate == Delegate::Portable && why.is_empty() {
                why.push(format!(
                    "not offered: the XNNPACK variant {fb} is the tested fallback"
                ));
            }
        }
    }
    let mut chosen: Vec<(usize, &'a Variant)> = manifest
        .variants
        .iter()
        .enumerate()
        .filter(|(i, _)| reasons[*i].is_empty())
        .collect();
    chosen.sort_by_key(|(i, v)| rank_key(pref, &device.platform, v, *i));
    let chosen = demote(
        chosen
            .into_iter()
            .map(|(i, v)| ((i, v), demoted[i].is_some()))
            .collect(),
    );
    let explain = manifest
        .variants
        .iter()
        .zip(reasons)
        .zip(demoted)
        .map(|((v, why), slow)| {
            let rank = chosen.iter().position(|(_, c)| c.id == v.id);
            let mut reasons = match (rank, &v.delegate) {
                (Some(_), Delegate::Xnnpack) => {
                    vec!["XNNPACK: the tested CPU fallback".to_string()]
                }
                (Some(_), _) => Vec::new(),
                (None, _) => why,
            };
            if let (Some(_), Some(r)) = (rank, slow) {
                reasons.push(r);
            }
            Explanation {
                release: manifest.version.clone(),
                variant: v.id.clone(),
                delegate: v.delegate.clone(),
                rank,
                reasons,
            }
        })
        .collect();
    (chosen.into_iter().map(|(_, v)| v).collect(), explain)
}

/// Picks the first release (in the order given, newest first by convention) that has a
/// compatible variant for `device`, and ranks its variants. On failure returns the
/// explanations for every variant of every release considered.
pub fn select<'a>(
    releases: &[&'a ReleaseManifest],
    device: &ResolveRequest,
    pref: &Preference,
    deny: DenyRule<'_>,
) -> Result<Selection<'a>, Vec<Explanation>> {
    let mut explain = Vec::new();
    for m in releases {
        let (candidates, mut why) = rank(m, device, pref, deny);
        explain.append(&mut why);
        if !candidates.is_empty() {
            return Ok(Selection {
                manifest: m,
                candidates,
                explain,
            });
        }
    }
    Err(explain)
}

/// A deny rule that denies nothing.
pub fn no_deny(_: &ReleaseManifest, _: &Variant, _: &ResolveRequest) -> Option<Rule> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Platform;
    use crate::names::BackendId;

    fn manifest(version: &str, runtime: &str) -> ReleaseManifest {
        let v = |id: &str, delegate: &str, backend: Option<&str>| {
            serde_json::json!({
                "id": id, "delegate": delegate, "quant": "fp32",
                "backends": backend.map(|b| vec![b]).unwrap_or_default(),
                "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                "size": 10, "runtime": runtime, "app": ">=1.0.0"
            })
        };
        let json = serde_json::json!({
            "model": "m", "version": version, "created": "2026-12-01T00:00:00Z",
            "variants": [
                v("portable", "portable", None),
                v("xnnpack", "xnnpack", Some("XnnpackBackend")),
                v("vulkan", "vulkan", Some("VulkanBackend")),
                v("coreml", "coreml", Some("CoreMLBackend")),
            ]
        });
        ReleaseManifest::from_json(&serde_json::to_vec(&json).expect("json")).expect("valid")
    }

    fn device(platform: Platform, backends: &[&str], runtime: &str) -> ResolveRequest {
        ResolveRequest {
            model: "m".parse().expect("name"),
            install_id: "i".into(),
            app_version: "1.2.0".parse().expect("version"),
            runtime_version: runtime.parse().expect("version"),
            backends: backends
                .iter()
                .map(|b| BackendId::new(*b).expect("id"))
                .collect(),
            platform,
            os_version: "14".into(),
            device_model: "x".into(),
            soc: "SM8550".into(),
            ram_mb: 4096,
            nonce: None,
            operators_digest: None,
            operators: None,
            seal_schemes: Vec::new(),
        }
    }

    fn ids(s: &Selection<'_>) -> Vec<String> {
        s.candidates.iter().map(|v| v.id.to_string()).collect()
    }

    #[test]
    fn gpu_before_cpu_and_xnnpack_last() {
        let m = manifest("1.0.0", ">=1.5.0");
        let d = device(
            Platform::Android,
            &["XnnpackBackend", "VulkanBackend", "CoreMLBackend"],
            "1.5.1",
        );
        let s = select(&[&m], &d, &Preference::default(), &no_deny).expect("selects");
        assert_eq!(ids(&s), ["coreml", "vulkan", "xnnpack"]);
    }

    #[test]
    fn per_platform_order_is_honoured() {
        let m = manifest("1.0.0", ">=1.5.0");
        let d = device(
            Platform::Android,
            &["XnnpackBackend", "VulkanBackend", "CoreMLBackend"],
            "1.5.1",
        );
        let mut pref = Preference::default();
        pref.per_platform
            .insert(Platform::Android, vec![Delegate::Vulkan, Delegate::Coreml]);
        let s = select(&[&m], &d, &pref, &no_deny).expect("selects");
        assert_eq!(ids(&s), ["vulkan", "coreml", "xnnpack"]);
    }

    #[test]
    fn portable_only_without_xnnpack() {
        let m = manifest("1.0.0", ">=1.5.0");
        let s = select(
            &[&m],
            &device(Platform::Linux, &[], "1.5.1"),
            &Preference::default(),
            &no_deny,
        )
        .expect("selects");
        assert_eq!(ids(&s), ["portable"]);
        let s = select(
            &[&m],
            &device(Platform::Linux, &["XnnpackBackend"], "1.5.1"),
            &Preference::default(),
            &no_deny,
        )
        .expect("selects");
        assert_eq!(ids(&s), ["xnnpack"]);
        let portable = s
            .explain
            .iter()
            .find(|e| e.variant.as_str() == "portable")
            .expect("explained");
        assert!(portable.reasons[0].contains("tested fallback"));
    }

    #[test]
    fn old_runtime_falls_back_to_an_older_release() {
        let new = manifest("2.0.0", ">=1.5.0");
        let old = manifest("1.0.0", ">=1.0.0");
        let d = device(Platform::Linux, &["XnnpackBackend"], "1.2.0");
        let s = select(&[&new, &old], &d, &Preference::default(), &no_deny).expect("selects");
        assert_eq!(s.manifest.version.to_string(), "1.0.0");
        let why = &s
            .explain
            .iter()
            .find(|e| e.release.to_string() == "2.0.0")
            .expect("2.0.0")
            .reasons;
        assert_eq!(why[0], "needs ExecuTorch runtime >=1.5.0, device has 1.2.0");
    }

    #[test]
    fn nothing_compatible_explains_every_variant() {
        let m = manifest("1.0.0", ">=1.5.0");
        let e = select(
            &[&m],
            &device(Platform::Ios, &[], "1.4.2"),
            &Preference::default(),
            &no_deny,
        )
        .expect_err("none");
        assert_eq!(e.len(), 4);
        assert!(e.iter().all(|x| x.rank.is_none() && !x.reasons.is_empty()));
    }

    #[test]
    fn constraints_exclude() {
        let mut m = manifest("1.0.0", ">=1.5.0");
        m.variants[2].constraints.min_ram_mb = Some(8192);
        m.variants[2].constraints.soc_deny = vec!["sm8550".into()];
        m.variants[3].constraints.platforms = vec![Platform::Ios, Platform::Macos];
        m.variants[3].constraints.min_os_version = Some("15.1".into());
        let d = device(
            Platform::Android,
            &["XnnpackBackend", "VulkanBackend", "CoreMLBackend"],
            "1.5.1",
        );
        let s = select(&[&m], &d, &Preference::default(), &no_deny).expect("selects");
        assert_eq!(ids(&s), ["xnnpack"]);
        let why = |id: &str| {
            s.explain
                .iter()
                .find(|e| e.variant.as_str() == id)
                .expect("explained")
                .reasons
                .join("; ")
        };
        assert!(why("vulkan").contains("needs 8192 MiB RAM, device has 4096"));
        assert!(why("vulkan").contains("deny list"));
        assert!(why("coreml").contains("platform android is not one of ios, macos"));
        assert!(why("coreml").contains("needs OS 15.1 or later, device has 14"));
    }

    #[test]
    fn deny_rule_applies() {
        let m = manifest("1.0.0", ">=1.5.0");
        let d = device(
            Platform::Android,
            &["XnnpackBackend", "VulkanBackend"],
            "1.5.1",
        );
        let deny = |_: &ReleaseManifest, v: &Variant, _: &ResolveRequest| {
            (v.delegate == Delegate::Vulkan).then(|| Rule::Exclude("denied by telemetry".into()))
        };
        let s = select(&[&m], &d, &Preference::default(), &deny).expect("selects");
        assert_eq!(ids(&s), ["xnnpack"]);
    }

    #[test]
    fn a_demoted_variant_goes_after_the_next_candidate_and_says_why() {
        let m = manifest("1.0.0", ">=1.5.0");
        let d = device(
            Platform::Android,
            &["XnnpackBackend", "VulkanBackend"],
            "1.5.1",
        );
        let slow = |_: &ReleaseManifest, v: &Variant, _: &ResolveRequest| {
            (v.delegate == Delegate::Vulkan).then(|| Rule::Demote("slow_in_field: 40 ms".into()))
        };
        let s = select(&[&m], &d, &Preference::default(), &slow).expect("selects");
        assert_eq!(ids(&s), ["xnnpack", "vulkan"]);
        let vulkan = s.explain.iter().find(|e| e.variant.as_str() == "vulkan");
        let vulkan = vulkan.expect("explained");
        assert_eq!(vulkan.rank, Some(1));
        assert_eq!(vulkan.reasons, ["slow_in_field: 40 ms"]);
        // Only the next candidate moves ahead: the rest keep their order.
        let ranked = demote(vec![("npu", true), ("gpu", false), ("xnnpack", false)]);
        assert_eq!(ranked, ["gpu", "npu", "xnnpack"]);
        let ranked = demote(vec![("npu", true), ("gpu", true), ("xnnpack", false)]);
        assert_eq!(ranked, ["xnnpack", "npu", "gpu"]);
        assert_eq!(demote(vec![("gpu", true)]), ["gpu"], "nothing to go behind");
    }
}
