//! `ferry sign`: build a release manifest from local `.pte` files and a VARIANTS.toml, and
//! sign it with an offline release key.
//!
//! ```toml
//! model = "demo-mlp"
//! version = "1.0.0"
//! notes = "first release"
//!
//! [[variant]]
//! id = "xnnpack-fp32"
//! file = "mlp-v1-xnnpack.pte"     # relative to this file
//! delegate = "xnnpack"            # xnnpack|coreml|mps|vulkan|qnn|mediatek|ethosu|portable
//! quant = "fp32"
//! runtime = ">=1.5.0, <2.0.0"     # ExecuTorch runtime versions that can load it
//! app = ">=1.0.0"                 # app versions it is meant for
//! platforms = ["android", "ios"]  # optional
//! min_ram_mb = 1024               # optional
//! socs = ["SM8550"]               # optional allow list
//! golden = "mlp-v1-xnnpack.json"  # optional: {"input": [...], "output": [...], "atol": 1e-5}
//! ```
//!
//! Every file is inspected while signing: a file that is not a `.pte`, or whose delegation
//! does not match its declared delegate, is refused before anything is signed.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use ferry_shared::dsse::Envelope;
use ferry_shared::manifest::{
    Delegate, DeviceConstraints, Golden, ManifestLimits, Platform, RELEASE_PAYLOAD_TYPE,
    ReleaseManifest, Variant,
};
use ferry_shared::{BackendId, ModelName, Sha256Digest, VariantId, pte};
use semver::{Version, VersionReq};
use serde::Deserialize;
use time::OffsetDateTime;

use crate::app::keys::RoleKey;

/// The VARIANTS.toml file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantsFile {
    /// Model name.
    pub model: ModelName,
    /// Release version.
    pub version: Version,
    /// Release notes.
    #[serde(default)]
    pub notes: String,
    /// The variants.
    #[serde(rename = "variant")]
    pub variants: Vec<VariantSpec>,
}

/// One `[[variant]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantSpec {
    /// Variant id.
    pub id: VariantId,
    /// The `.pte` file, relative to the VARIANTS.toml.
    pub file: PathBuf,
    /// Declared delegate.
    pub delegate: Delegate,
    /// Quantisation label.
    pub quant: String,
    /// ExecuTorch runtime range.
    pub runtime: VersionReq,
    /// App version range.
    pub app: VersionReq,
    /// Allowed platforms.
    #[serde(default)]
    pub platforms: Vec<Platform>,
    /// Lowest OS version.
    pub min_os_version: Option<String>,
    /// Least RAM in MiB.
    pub min_ram_mb: Option<u64>,
    /// SoC allow list.
    #[serde(default)]
    pub socs: Vec<String>,
    /// SoC deny list.
    #[serde(default)]
    pub deny_socs: Vec<String>,
    /// Golden check file (JSON with `input`, `output`, `atol`).
    pub golden: Option<PathBuf>,
}

/// A file the manifest refers to, for `ferry publish`.
#[derive(Debug, Clone)]
pub struct SignedFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its digest.
    pub sha256: Sha256Digest,
    /// Its size.
    pub size: u64,
}

/// Builds (but does not sign) the manifest. `read` loads a file named in the spec, relative
/// to `base`; `now` stamps `created`.
pub fn build_manifest(
    spec: &VariantsFile,
    base: &Path,
    read: &dyn Fn(&Path) -> anyhow::Result<Vec<u8>>,
    now: OffsetDateTime,
) -> anyhow::Result<(ReleaseManifest, Vec<SignedFile>)> {
    let mut variants = Vec::new();
    let mut files = Vec::new();
    for v in &spec.variants {
        let path = base.join(&v.file);
        let bytes = read(&path)
            .with_context(|| format!("variant {}: cannot read {}", v.id, path.display()))?;
        let report = pte::inspect(&bytes).map_err(|e| {
            anyhow::anyhow!(
                "variant {}: {} is not a valid .pte ({}): {e}",
                v.id,
                path.display(),
                e.code()
            )
        })?;
        let backends: Vec<BackendId> = report
            .backends()
            .into_iter()
            .map(BackendId::new)
            .collect::<Result<_, _>>()
            .with_context(|| format!("variant {}: odd backend id in {}", v.id, path.display()))?;
        if let Some(why) = pte::delegation_mismatch(v.id.as_str(), v.delegate, &backends, &report) {
            bail!("{why}");
        }
        // A program whose weights live in a separate data file (.ptd) cannot load without
        // it, and releases do not carry data files yet: refuse rather than publish a variant
        // no device can load.
        if let Some(m) = report
            .methods
            .iter()
            .find(|m| !m.external_tensors.is_empty())
        {
            let shown: Vec<&str> = m
                .external_tensors
                .iter()
                .take(5)
                .map(String::as_str)
                .collect();
            bail!(
                "variant {}: {} keeps {} tensor(s) of method {} in a separate data file (.ptd): \
                 {}{}; ferry does not deliver data files with a variant yet, so no device could \
                 load it: export it without external_constants",
                v.id,
                path.display(),
                m.external_tensors.len(),
                m.name,
                shown.join(", "),
                if m.external_tensors.len() > shown.len() {
                    ", ..."
                } else {
                    ""
                }
            );
        }
        let golden = match &v.golden {
            Some(g) => {
                let gp = base.join(g);
                let text = read(&gp).with_context(|| {
                    format!("variant {}: cannot read golden {}", v.id, gp.display())
                })?;
                Some(
                    parse_golden(&text)
                        .with_context(|| format!("variant {}: golden {}", v.id, gp.display()))?,
                )
            }
            None => None,
        };
        let sha256 = Sha256Digest::of(&bytes);
        files.push(SignedFile {
            path: path.clone(),
            sha256,
            size: bytes.len() as u64,
        });
        variants.push(Variant {
            id: v.id.clone(),
            delegate: v.delegate,
            backends,
            quant: v.quant.clone(),
            sha256,
            size: bytes.len() as u64,
            extra_files: Vec::new(),
            runtime: v.runtime.clone(),
            app: v.app.clone(),
            constraints: DeviceConstraints {
                platforms: v.platforms.clone(),
                min_os_version: v.min_os_version.clone(),
                min_ram_mb: v.min_ram_mb,
                soc_allow: v.socs.clone(),
                soc_deny: v.deny_socs.clone(),
            },
            golden,
        });
    }
    let manifest = ReleaseManifest {
        model: spec.model.clone(),
        version: spec.version.clone(),
        notes: spec.notes.clone(),
        created: now,
        variants,
    };
    manifest.validate(&ManifestLimits::default())?;
    Ok((manifest, files))
}

/// Parses a golden file: any JSON object with `input`, `output` and `atol` (fixture sidecars
/// qualify; their other fields are ignored).
pub fn parse_golden(bytes: &[u8]) -> anyhow::Result<Golden> {
    let g: Golden =
        serde_json::from_slice(bytes).context("expected JSON with input, output and atol")?;
    Ok(g)
}

/// Signs a manifest with a release key.
pub fn sign(manifest: &ReleaseManifest, key: &RoleKey) -> anyhow::Result<Envelope> {
    if key.role != ferry_shared::dsse::KeyRole::Release {
        bail!(
            "releases must be signed with a release key; this is a {} key",
            key.role
        );
    }
    Ok(key.pair.sign(RELEASE_PAYLOAD_TYPE, &manifest.to_json()))
}

/// Reads and parses a VARIANTS.toml.
pub fn read_variants(path: &Path) -> anyhow::Result<VariantsFile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    toml::from_str(&text)
        .with_context(|| format!("{} is not a valid VARIANTS.toml", path.display()))
}
