//! The manifest's types: a release, its variants, their files, constraints and goldens, and
//! the comparison of dotted OS versions.

use std::collections::BTreeMap;

use semver::{Version, VersionReq};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::names::{BackendId, ModelName, Sha256Digest, VariantId};

use crate::manifest::{Delegate, Evaluation, Platform, Preprocess};

/// A tensor given by value, for golden checks and fixture sidecars.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorValue {
    /// Element type, as PyTorch names it without the `torch.` prefix (`float32`, `int64`, ...).
    pub dtype: String,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Elements in row-major order.
    pub data: Vec<f64>,
}

/// A golden input and its expected output, checked on the device after load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Golden {
    /// The inputs of `forward`.
    pub input: Vec<TensorValue>,
    /// The expected outputs.
    pub output: Vec<TensorValue>,
    /// Largest allowed absolute difference per element (for every method).
    pub atol: f64,
    /// Inputs and expected outputs of other methods, by name (never `forward`, whose are
    /// `input` and `output`); each is checked when the method is first loaded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub methods: BTreeMap<String, MethodGolden>,
}

/// The golden input and expected output of one method other than `forward`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodGolden {
    /// The method's inputs.
    pub input: Vec<TensorValue>,
    /// Its expected outputs.
    pub output: Vec<TensorValue>,
}

impl Golden {
    /// The inputs and expected outputs for `method`, if the golden has them.
    pub fn for_method(&self, method: &str) -> Option<(&[TensorValue], &[TensorValue])> {
        if method == "forward" {
            return Some((&self.input, &self.output));
        }
        self.methods
            .get(method)
            .map(|m| (m.input.as_slice(), m.output.as_slice()))
    }
}

/// A file that a variant needs besides its `.pte`: a data file (an external weights `.ptd`)
/// the runtime loads, or an asset the app reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtraFile {
    /// The name the runtime looks the file up by.
    pub name: String,
    /// Content digest.
    pub sha256: Sha256Digest,
    /// Exact size in bytes.
    pub size: u64,
    /// Its chunk index, for delta updates (files of at least
    /// [`crate::manifest::chunks::CHUNKED_FILE_MIN`] bytes signed by a ferry that makes them; absent
    /// otherwise, and then the file is downloaded whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_index: Option<crate::manifest::chunks::ChunkIndexRef>,
}

/// Which devices a variant may go to, besides runtime and app ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceConstraints {
    /// Allowed platforms; empty means any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub platforms: Vec<Platform>,
    /// Lowest OS version (dotted numbers, compared numerically), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_os_version: Option<String>,
    /// Least device RAM in MiB, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ram_mb: Option<u64>,
    /// SoCs the variant may go to (case-insensitive); empty means any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub soc_allow: Vec<String>,
    /// SoCs the variant must never go to (case-insensitive).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub soc_deny: Vec<String>,
}

/// One downloadable form of the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// Unique within the release.
    pub id: VariantId,
    /// The delegate it was lowered to.
    pub delegate: Delegate,
    /// Every backend id the program's methods call (must be registered in the runtime).
    #[serde(default)]
    pub backends: Vec<BackendId>,
    /// The operators (`namespace::name.overload`) its methods call outside delegates, sorted,
    /// each once: what the runtime must have registered (`[]` for a program that is one
    /// delegate call). Taken from the program at signing (`ferry sign`), never written by
    /// hand. `None` (absent) in manifests signed before ferry recorded them: unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operators: Option<Vec<String>>,
    /// Quantisation label (`fp32`, `int8`, ...).
    pub quant: String,
    /// Digest of the `.pte` bytes.
    pub sha256: Sha256Digest,
    /// Exact size of the `.pte` in bytes.
    pub size: u64,
    /// The program's chunk index, for delta updates (absent: downloaded whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_index: Option<crate::manifest::chunks::ChunkIndexRef>,
    /// Extra data files (`.ptd`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_files: Vec<ExtraFile>,
    /// The ExecuTorch runtime versions that can load this program.
    pub runtime: VersionReq,
    /// The app versions this variant is meant for.
    pub app: VersionReq,
    /// Device constraints.
    #[serde(default)]
    pub constraints: DeviceConstraints,
    /// Optional golden check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub golden: Option<Golden>,
    /// Each method's inputs and outputs as the program declares them (taken at signing,
    /// never written by hand): what the client checks an app's inputs against. `None` in
    /// manifests signed before ferry recorded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<BTreeMap<String, crate::pte::Signature>>,
    /// Files the app reads beside the program (a labels file, a tokenizer, a config):
    /// verified and cached like data files, never given to the runtime.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assets: Vec<ExtraFile>,
    /// How the app prepares the program's first input from an image, as the model was trained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preprocess: Option<Preprocess>,
    /// The asset that holds the class labels, one per line in output order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<String>,
    /// The warm run time (ms) the team wants at the 95th percentile on a device: when the
    /// field's median device p95 on a SoC or device model is over it, resolve ranks the next
    /// candidate first there (an additive v1 field; older clients ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_budget_ms: Option<f64>,
    /// Present when the variant's files are sealed (`sealed = true` in VARIANTS.toml): its
    /// `sha256` and `size` (and its side files') are then those of the sealed bytes, and a
    /// device needs a key release to load it. An additive v1 field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<crate::manifest::Sealing>,
}

/// Largest latency budget a variant may state (one hour).
pub const MAX_LATENCY_BUDGET_MS: f64 = 3_600_000.0;

/// Most methods a variant's contract lists.
pub const MAX_CONTRACT_METHODS: usize = 64;
/// Most inputs and outputs one method's contract lists.
pub const MAX_CONTRACT_VALUES: usize = 256;

impl Variant {
    /// Every file besides the program, data files first, then assets: what a device downloads
    /// with it and keeps in its cache.
    pub fn side_files(&self) -> impl Iterator<Item = &ExtraFile> {
        self.extra_files.iter().chain(&self.assets)
    }

    /// What a device without any of its files downloads for it: the program, data files and
    /// assets, each distinct file (by digest) counted once.
    pub fn download_bytes(&self) -> u64 {
        let mut seen = std::collections::BTreeSet::from([self.sha256]);
        self.side_files()
            .filter(|f| seen.insert(f.sha256))
            .fold(self.size, |sum, f| sum.saturating_add(f.size))
    }

    /// The digests of its files: the program, then each side file.
    pub fn file_digests(&self) -> Vec<Sha256Digest> {
        std::iter::once(self.sha256)
            .chain(self.side_files().map(|f| f.sha256))
            .collect()
    }

    /// The operators it needs as far as known: none when its manifest predates the list.
    pub fn operators_needed(&self) -> &[String] {
        self.operators.as_deref().unwrap_or_default()
    }
}

/// A signed-to-be description of one release of one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseManifest {
    /// The payload's format (absent: 1; see [`crate::wire::protocol::FORMAT`]).
    #[serde(
        default = "crate::wire::protocol::format_one",
        skip_serializing_if = "crate::wire::protocol::is_format_one"
    )]
    pub format: u32,
    /// The model.
    pub model: ModelName,
    /// The release version (immutable once published).
    pub version: Version,
    /// Free-form release notes.
    #[serde(default)]
    pub notes: String,
    /// When the manifest was built (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    pub created: OffsetDateTime,
    /// The variants, in the publisher's order.
    pub variants: Vec<Variant>,
    /// How the variants scored at signing (`[evaluation]` in VARIANTS.toml); absent when the
    /// release was signed without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<Evaluation>,
}

/// Compares two dotted numeric versions (`"14.2" < "14.10"`); non-numeric input sorts low.
pub fn compare_dotted(a: &str, b: &str) -> std::cmp::Ordering {
    let parse = |s: &str| -> Vec<u64> {
        s.split('.')
            .map(|p| p.trim().parse::<u64>().unwrap_or(0))
            .collect()
    };
    let (mut x, mut y) = (parse(a), parse(b));
    let n = x.len().max(y.len());
    x.resize(n, 0);
    y.resize(n, 0);
    x.cmp(&y)
}
