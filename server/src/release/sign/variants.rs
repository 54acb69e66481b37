//! The VARIANTS.toml file `ferry sign` reads, and the files it names once read.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use ferry_shared::manifest::{Delegate, Platform};
use ferry_shared::{ModelName, Sha256Digest, VariantId};
use semver::{Version, VersionReq};
use serde::Deserialize;

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
    /// `[evaluation]`: score the variants on a held-out set through the real runtime before
    /// signing, and refuse a variant past its bound (see [`crate::release::evaluate`]).
    #[serde(default)]
    pub evaluation: Option<crate::release::evaluate::EvaluationSpec>,
    /// Every variant's labels file (one label per line, in output order), signed as an asset;
    /// a variant's own `labels` replaces it (see [`crate::release::sign::metadata`]).
    #[serde(default)]
    pub labels: Option<PathBuf>,
    /// Files every variant's app reads (a tokenizer, a config), signed as assets.
    #[serde(default)]
    pub assets: Vec<PathBuf>,
    /// `[preprocess]`: how the app prepares the first input, for every variant; a variant's
    /// own replaces it whole.
    #[serde(default)]
    pub preprocess: Option<toml::Value>,
    /// Every variant's latency budget: the warm p95 (ms) it should run in on a device; a
    /// variant's own replaces it. Signed per variant as `latency_budget_ms`.
    #[serde(default)]
    pub latency_budget_ms: Option<f64>,
    /// `sealed = true`: every variant's files are sealed (encrypted; a device needs a key
    /// release to load them) unless a variant says `sealed = false`.
    #[serde(default)]
    pub sealed: Option<bool>,
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
    /// Data files (`.ptd`) the program is loaded with, relative to the VARIANTS.toml; the
    /// runtime finds tensors in them by name, so their order does not matter.
    #[serde(default)]
    pub data: Vec<PathBuf>,
    /// Its labels file, replacing the release-wide one.
    #[serde(default)]
    pub labels: Option<PathBuf>,
    /// Files its app reads besides the release-wide ones, signed as assets.
    #[serde(default)]
    pub assets: Vec<PathBuf>,
    /// Its own `[variant.preprocess]`, replacing the release-wide one.
    #[serde(default)]
    pub preprocess: Option<toml::Value>,
    /// Its own latency budget (ms), replacing the release-wide one.
    #[serde(default)]
    pub latency_budget_ms: Option<f64>,
    /// Whether its files are sealed, replacing the release-wide `sealed`.
    #[serde(default)]
    pub sealed: Option<bool>,
}

impl VariantSpec {
    /// Whether this variant is sealed in the release `spec`.
    pub fn is_sealed(&self, spec: &VariantsFile) -> bool {
        self.sealed.or(spec.sealed).unwrap_or(false)
    }
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
    /// For a program: its data files, in the manifest's order.
    pub data: Vec<SignedFile>,
    /// For a program: its assets, in the manifest's order.
    pub assets: Vec<SignedFile>,
}

/// Reads and parses a VARIANTS.toml.
pub fn read_variants(path: &Path) -> anyhow::Result<VariantsFile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    toml::from_str(&text)
        .with_context(|| format!("{} is not a valid VARIANTS.toml", path.display()))
}
