//! Device classes: the groups of devices that the published releases treat alike, used to
//! refuse a rollout change that would leave some device with no compatible variant.
//!
//! A device's chance of getting a variant depends only on the facts that variants constrain:
//! platform, registered backends, runtime and app versions, OS version, RAM and SoC. The
//! probes are every combination of the boundary values those constraints mention (each
//! version a range names, the versions just below and above it, each RAM and OS minimum and
//! just below it, each SoC on an allow or deny list and an unlisted one, each variant's backend
//! set and their union). Probes that are compatible with exactly the same variants form one
//! class. Between boundaries nothing changes, so checking every class checks every device.

use std::collections::{BTreeMap, BTreeSet};

use semver::{Comparator, Version, VersionReq};

use crate::manifest::{Platform, ReleaseManifest};
use crate::names::{BackendId, ModelName};
use crate::select::fits;
use crate::wire::resolve::ResolveRequest;

/// Most probes examined; manifests whose constraints would need more are checked on the
/// platform, backend and version dimensions only (RAM, OS and SoC at permissive values).
pub const MAX_PROBES: usize = 200_000;

/// The OS version of a probe no OS minimum excludes.
const ANY_OS: &str = "9999";

/// The RAM of a probe no RAM minimum excludes.
const ANY_RAM: u64 = 1 << 30;

/// One class of devices, described by a representative device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceClass {
    /// A device of the class.
    pub device: ResolveRequest,
    /// Which variants (release index, variant index into the manifests given) it can use.
    compatible: BTreeSet<(usize, usize)>,
}

impl DeviceClass {
    /// A one-line description, for error messages: platform, backends and versions, plus the
    /// OS, RAM and SoC when they matter.
    pub fn describe(&self) -> String {
        let d = &self.device;
        let backends: Vec<&str> = d.backends.iter().map(|b| b.as_str()).collect();
        let mut text = format!(
            "{} devices with backends [{}], ExecuTorch runtime {}, app {}",
            d.platform,
            backends.join(", "),
            d.runtime_version,
            d.app_version
        );
        // The OS, RAM and SoC of a probe are permissive unless a constraint made them matter.
        if d.os_version != ANY_OS {
            text.push_str(&format!(", OS {}", d.os_version));
        }
        if d.ram_mb != ANY_RAM {
            text.push_str(&format!(", {} MiB RAM", d.ram_mb));
        }
        if !d.soc.is_empty() {
            text.push_str(&format!(", SoC {}", d.soc));
        }
        text
    }

    /// True when some variant of a release in `live` (versions) fits the class.
    pub fn served_by(&self, releases: &[&ReleaseManifest], live: &[Version]) -> bool {
        self.compatible
            .iter()
            .any(|(r, _)| live.contains(&releases[*r].version))
    }

    /// The first live release (in `live` order) with a fitting variant, and that variant's id.
    pub fn first_served(
        &self,
        releases: &[&ReleaseManifest],
        live: &[Version],
    ) -> Option<(Version, String)> {
        live.iter().find_map(|v| {
            self.compatible
                .iter()
                .find(|(r, _)| releases[*r].version == *v)
                .map(|(r, i)| (v.clone(), releases[*r].variants[*i].id.to_string()))
        })
    }
}

fn comparator_version(c: &Comparator) -> Version {
    Version::new(c.major, c.minor.unwrap_or(0), c.patch.unwrap_or(0))
}

fn below(v: &Version) -> Option<Version> {
    if v.patch > 0 {
        Some(Version::new(v.major, v.minor, v.patch - 1))
    } else if v.minor > 0 {
        Some(Version::new(v.major, v.minor - 1, 9999))
    } else if v.major > 0 {
        Some(Version::new(v.major - 1, 9999, 9999))
    } else {
        None
    }
}

/// Versions around every boundary the requirements name, plus a low and a high one.
fn version_points<'a>(reqs: impl Iterator<Item = &'a VersionReq>) -> Vec<Version> {
    let mut out = BTreeSet::from([Version::new(0, 0, 0), Version::new(9999, 0, 0)]);
    for r in reqs {
        for c in &r.comparators {
            let v = comparator_version(c);
            if let Some(b) = below(&v) {
                out.insert(b);
            }
            out.insert(Version::new(v.major, v.minor, v.patch + 1));
            out.insert(Version::new(v.major, v.minor + 1, 0));
            out.insert(Version::new(v.major + 1, 0, 0));
            out.insert(v);
        }
    }
    out.into_iter().collect()
}

/// The device classes of `releases` (every published release of one model).
pub fn classes(model: &ModelName, releases: &[&ReleaseManifest]) -> Vec<DeviceClass> {
    let variants = || releases.iter().flat_map(|m| m.variants.iter());
    let mut platforms: BTreeSet<Platform> = BTreeSet::new();
    for v in variants() {
        if v.constraints.platforms.is_empty() {
            platforms.extend(Platform::KNOWN);
        } else {
            platforms.extend(v.constraints.platforms.iter().cloned());
        }
    }
    let mut backend_sets: BTreeSet<Vec<BackendId>> = BTreeSet::new();
    let mut union: BTreeSet<BackendId> = BTreeSet::new();
    for v in variants() {
        let set: BTreeSet<BackendId> = v.backends.iter().cloned().collect();
        union.extend(set.iter().cloned());
        backend_sets.insert(set.into_iter().collect());
    }
    backend_sets.insert(union.into_iter().collect());
    let runtimes = version_points(variants().map(|v| &v.runtime));
    let apps = version_points(variants().map(|v| &v.app));
    let mut os: BTreeSet<String> = BTreeSet::from([ANY_OS.to_string()]);
    let mut ram: BTreeSet<u64> = BTreeSet::from([ANY_RAM]);
    let mut socs: BTreeSet<String> = BTreeSet::from([String::new()]);
    for v in variants() {
        let c = &v.constraints;
        if let Some(min) = &c.min_os_version {
            os.insert(min.clone());
            os.insert("0".into());
        }
        if let Some(min) = c.min_ram_mb {
            ram.insert(min);
            ram.insert(min.saturating_sub(1));
        }
        socs.extend(c.soc_allow.iter().map(|s| s.to_ascii_lowercase()));
        socs.extend(c.soc_deny.iter().map(|s| s.to_ascii_lowercase()));
    }
    let core = platforms.len() * backend_sets.len() * runtimes.len() * apps.len();
    if core.saturating_mul(os.len() * ram.len() * socs.len()) > MAX_PROBES {
        os = BTreeSet::from([ANY_OS.to_string()]);
        ram = BTreeSet::from([ANY_RAM]);
        socs = BTreeSet::from([String::new()]);
    }
    let flat: Vec<(usize, usize)> = releases
        .iter()
        .enumerate()
        .flat_map(|(r, m)| (0..m.variants.len()).map(move |i| (r, i)))
        .collect();
    let mut by_signature: BTreeMap<BTreeSet<(usize, usize)>, ResolveRequest> = BTreeMap::new();
    let mut probes = 0usize;
    'all: for p in &platforms {
        for b in &backend_sets {
            for rt in &runtimes {
                for app in &apps {
                    for o in &os {
                        for r in &ram {
                            for s in &socs {
                                probes += 1;
                                if probes > MAX_PROBES {
                                    break 'all;
                                }
                                let device = ResolveRequest {
                                    model: model.clone(),
                                    install_id: String::new(),
                                    app_version: app.clone(),
                                    runtime_version: rt.clone(),
                                    backends: b.clone(),
                                    platform: p.clone(),
                                    os_version: o.clone(),
                                    device_model: String::new(),
                                    soc: s.clone(),
                                    ram_mb: *r,
                                    nonce: None,
                                    operators_digest: None,
                                    operators: None,
                                    seal_schemes: Vec::new(),
                                };
                                let sig: BTreeSet<(usize, usize)> = flat
                                    .iter()
                                    .filter(|(ri, vi)| fits(&releases[*ri].variants[*vi], &device))
                                    .copied()
                                    .collect();
                                if !sig.is_empty() {
                                    by_signature.entry(sig).or_insert(device);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    by_signature
        .into_iter()
        .map(|(compatible, device)| DeviceClass { device, compatible })
        .collect()
}
