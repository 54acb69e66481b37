//! The release manifest: what ops sign offline and every device verifies.
//!
//! A release is one version of one model. It lists *variants*: the same model exported for
//! different delegates, quantisations and runtime/app ranges. Each variant names its blob by
//! sha256 and size, so the blob itself may come from any mirror.
//!
//! Parsing is lenient about unknown fields (an older client can read a newer manifest), but
//! [`ReleaseManifest::validate`] enforces every structural rule and limit, and publishing
//! additionally refuses unknown fields (see [`ReleaseManifest::from_json_strict`]).

use crate::errors::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};

use semver::{Version, VersionReq};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::names::{BackendId, ModelName, NameError, Sha256Digest, VariantId};

pub mod chunks;
mod delegate;
mod evaluation;
mod metadata;

pub use delegate::{Delegate, HardwareClass, Platform, delegation_mismatch};
pub use evaluation::{
    BaselineRef, Evaluation, EvaluationOverride, EvaluationResult, MAX_EVALUATION_TEXT,
};
pub use metadata::{
    ColorOrder, Layout, MAX_CHANNELS, MAX_LABELS, MAX_LABELS_BYTES, MAX_PREPROCESS_VALUE,
    MAX_RESIZE, MIN_STD, Preprocess, Resize, ResizeFilter,
};

/// The DSSE payload type of a signed release manifest.
pub const RELEASE_PAYLOAD_TYPE: &str = "application/vnd.ferry.release+json";

/// Verifies a release envelope: payload type, and one valid signature by a trusted release key
/// (default limits). The bytes still need [`ReleaseManifest::from_json`] or `_strict`.
pub fn verify_release_envelope(
    env: &crate::trust::dsse::Envelope,
    ring: &crate::trust::dsse::KeyRing,
) -> Result<crate::trust::dsse::Verified<Vec<u8>>, crate::trust::dsse::DsseError> {
    crate::trust::dsse::verify(
        env,
        RELEASE_PAYLOAD_TYPE,
        ring,
        crate::trust::dsse::KeyRole::Release,
        1,
        &crate::trust::dsse::DsseLimits::default(),
    )
}

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

/// Documented limits for manifests; anything larger is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestLimits {
    /// Most variants in one release (default 64).
    pub max_variants: usize,
    /// Longest release notes in bytes (default 16 KiB).
    pub max_notes: usize,
    /// Most backends per variant (default 16).
    pub max_backends: usize,
    /// Most data files, and most assets, per variant (default 16 each).
    pub max_extra_files: usize,
    /// Most SoC entries per allow or deny list (default 512).
    pub max_socs: usize,
    /// Longest short string (quant label, SoC, OS version, file name; default 128 bytes).
    pub max_short_string: usize,
    /// Most golden tensor elements per variant, inputs and outputs of every method together
    /// (default 65,536).
    pub max_golden_elements: usize,
    /// Most methods besides `forward` with a golden, per variant (default 16).
    pub max_golden_methods: usize,
    /// Largest blob (default 16 GiB).
    pub max_blob_size: u64,
}

impl Default for ManifestLimits {
    fn default() -> Self {
        Self {
            max_variants: 64,
            max_notes: 16 * 1024,
            max_backends: 16,
            max_extra_files: 16,
            max_socs: 512,
            max_short_string: 128,
            max_golden_elements: 65_536,
            max_golden_methods: 16,
            max_blob_size: 16 << 30,
        }
    }
}

/// Why a manifest was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ManifestError {
    /// Not JSON, or JSON of the wrong shape.
    #[error("malformed release manifest: {0}")]
    Malformed(String),
    /// A field the schema does not know (strict parsing only).
    #[error("release manifest has an unknown field {field:?}")]
    UnknownField {
        /// Dotted path of the field.
        field: String,
    },
    /// A name inside it was invalid.
    #[error(transparent)]
    Name(#[from] NameError),
    /// A structural rule or limit was broken.
    #[error("invalid release manifest: {0}")]
    Invalid(String),
    /// The manifest is in a format this build cannot read.
    #[error(transparent)]
    Format(#[from] crate::wire::protocol::FormatError),
}

impl ManifestError {
    /// Stable machine-readable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ManifestError::Malformed(_) => ErrorCode::ManifestMalformed,
            ManifestError::UnknownField { .. } => ErrorCode::ManifestUnknownField,
            ManifestError::Name(_) => ErrorCode::ManifestInvalid,
            ManifestError::Invalid(_) => ErrorCode::ManifestInvalid,
            ManifestError::Format(_) => ErrorCode::FormatUnsupported,
        }
    }
}

fn is_dotted_version(s: &str) -> bool {
    !s.is_empty()
        && s.split('.')
            .all(|p| !p.is_empty() && p.len() <= 9 && p.bytes().all(|b| b.is_ascii_digit()))
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

impl ReleaseManifest {
    /// True when `other` describes the same release: everything equal but the time it was
    /// built (`created`), as when the same inputs are signed again.
    pub fn same_content(&self, other: &ReleaseManifest) -> bool {
        let mut a = self.clone();
        a.created = other.created;
        a == *other
    }

    /// Parses JSON leniently (unknown fields are ignored), then validates with default limits.
    pub fn from_json(bytes: &[u8]) -> Result<Self, ManifestError> {
        crate::wire::protocol::check_format("release manifest", bytes)?;
        let m: ReleaseManifest =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Malformed(e.to_string()))?;
        m.validate(&ManifestLimits::default())?;
        Ok(m)
    }

    /// Parses JSON and refuses any field the schema does not define (what publishing uses).
    pub fn from_json_strict(bytes: &[u8]) -> Result<Self, ManifestError> {
        let m = Self::from_json(bytes)?;
        if let Some(field) = crate::wire::protocol::unknown_field_path(bytes, &m) {
            return Err(ManifestError::UnknownField { field });
        }
        Ok(m)
    }

    /// Serialises to pretty JSON (the bytes that get signed).
    pub fn to_json(&self) -> Vec<u8> {
        // A manifest is plain data: serialisation cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// The variant with id `id`.
    pub fn variant(&self, id: &VariantId) -> Option<&Variant> {
        self.variants.iter().find(|v| &v.id == id)
    }

    /// The variant whose id is `id` as text (as telemetry and deny lists name it).
    pub fn variant_named(&self, id: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.id.as_str() == id)
    }

    /// Checks every structural rule and limit.
    pub fn validate(&self, limits: &ManifestLimits) -> Result<(), ManifestError> {
        let bad = |s: String| Err(ManifestError::Invalid(s));
        if self.variants.is_empty() {
            return bad("a release needs at least one variant".into());
        }
        if self.variants.len() > limits.max_variants {
            return bad(format!(
                "{} variants; at most {} are allowed",
                self.variants.len(),
                limits.max_variants
            ));
        }
        if let Some(e) = &self.evaluation
            && let Err(why) = e.validate(limits.max_variants)
        {
            return bad(why);
        }
        if self.notes.len() > limits.max_notes {
            return bad(format!(
                "notes are {} bytes; at most {} are allowed",
                self.notes.len(),
                limits.max_notes
            ));
        }
        let mut ids = BTreeSet::new();
        for v in &self.variants {
            let ctx = format!("variant {}", v.id);
            if !ids.insert(&v.id) {
                return bad(format!("{ctx}: duplicate variant id"));
            }
            short(&ctx, "quant", &v.quant, limits)?;
            if v.size == 0 || v.size > limits.max_blob_size {
                return bad(format!(
                    "{ctx}: size {} is outside 1..={}",
                    v.size, limits.max_blob_size
                ));
            }
            check_backends(&ctx, v, limits)?;
            if let Some(Err(why)) = v.chunk_index.map(|r| r.validate()) {
                return bad(format!("{ctx}: {why}"));
            }
            if let Some(ops) = &v.operators
                && let Err(e) = crate::select::operators::check_list(ops)
            {
                return bad(format!("{ctx}: {e}"));
            }
            if let Some(methods) = &v.methods {
                let too_many = methods.len() > MAX_CONTRACT_METHODS
                    || methods.iter().any(|(name, sig)| {
                        name.len() > limits.max_short_string
                            || sig.inputs.len() + sig.outputs.len() > MAX_CONTRACT_VALUES
                            || sig.inputs.iter().chain(&sig.outputs).any(|t| {
                                t.shape.len() > 16 || t.dim_order.len() > 16 || t.dtype.len() > 32
                            })
                    });
                if too_many {
                    return bad(format!("{ctx}: the method contract is larger than allowed"));
                }
            }
            metadata::check_files(&ctx, "extra file", &v.extra_files, limits)?;
            metadata::check_metadata(&ctx, v, limits)?;
            if let Some(b) = v.latency_budget_ms
                && !(b.is_finite() && b > 0.0 && b <= MAX_LATENCY_BUDGET_MS)
            {
                return bad(format!(
                    "{ctx}: latency_budget_ms {b} is outside (0, {MAX_LATENCY_BUDGET_MS}]"
                ));
            }
            let c = &v.constraints;
            if let Some(os) = &c.min_os_version {
                short(&ctx, "min_os_version", os, limits)?;
                if !is_dotted_version(os) {
                    return bad(format!(
                        "{ctx}: min_os_version {os:?} must be dotted numbers like 14.2"
                    ));
                }
            }
            for list in [&c.soc_allow, &c.soc_deny] {
                if list.len() > limits.max_socs {
                    return bad(format!("{ctx}: too many SoC entries"));
                }
                for soc in list {
                    short(&ctx, "soc", soc, limits)?;
                    if soc.is_empty() {
                        return bad(format!("{ctx}: empty SoC entry"));
                    }
                }
            }
            if let Some(g) = &v.golden {
                if g.methods.len() > limits.max_golden_methods {
                    return bad(format!(
                        "{ctx}: goldens for {} methods; at most {} are allowed",
                        g.methods.len(),
                        limits.max_golden_methods
                    ));
                }
                for name in g.methods.keys() {
                    short(&ctx, "golden method name", name, limits)?;
                    if name.is_empty() || name == "forward" {
                        return bad(format!(
                            "{ctx}: golden methods must name a method other than forward \
                             (forward's golden is input and output), not {name:?}"
                        ));
                    }
                }
                let mut elements = 0usize;
                let others = g
                    .methods
                    .values()
                    .flat_map(|m| m.input.iter().chain(&m.output));
                for t in g.input.iter().chain(&g.output).chain(others) {
                    short(&ctx, "golden dtype", &t.dtype, limits)?;
                    let n = t
                        .shape
                        .iter()
                        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                        .unwrap_or(u64::MAX);
                    if n != t.data.len() as u64 {
                        return bad(format!(
                            "{ctx}: golden tensor of shape {:?} has {} elements",
                            t.shape,
                            t.data.len()
                        ));
                    }
                    elements = elements.saturating_add(t.data.len());
                }
                if elements > limits.max_golden_elements {
                    return bad(format!(
                        "{ctx}: golden tensors have {elements} elements; at most {} are allowed",
                        limits.max_golden_elements
                    ));
                }
                if !(g.atol.is_finite() && g.atol >= 0.0) {
                    return bad(format!("{ctx}: golden atol must be a finite number >= 0"));
                }
            }
        }
        Ok(())
    }
}

/// A variant's backends: bounded, each once, and the delegate's own among them (none for a
/// portable variant).
fn check_backends(ctx: &str, v: &Variant, limits: &ManifestLimits) -> Result<(), ManifestError> {
    if v.backends.len() > limits.max_backends {
        return Err(ManifestError::Invalid(format!("{ctx}: too many backends")));
    }
    let unique: BTreeSet<_> = v.backends.iter().collect();
    if unique.len() != v.backends.len() {
        return Err(ManifestError::Invalid(format!(
            "{ctx}: a backend is listed twice"
        )));
    }
    match v.delegate.backend_id() {
        None if !v.backends.is_empty() => {
            return Err(ManifestError::Invalid(format!(
                "{ctx}: a portable variant calls no backend, but lists {}",
                v.backends
                    .iter()
                    .map(|b| b.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Some(id) if !v.backends.iter().any(|b| b.as_str() == id) => {
            return Err(ManifestError::Invalid(format!(
                "{ctx}: delegate {} needs backend {id} in its backends list",
                v.delegate
            )));
        }
        _ => {}
    }
    Ok(())
}

fn short(ctx: &str, what: &str, s: &str, limits: &ManifestLimits) -> Result<(), ManifestError> {
    if s.len() > limits.max_short_string {
        return Err(ManifestError::Invalid(format!(
            "{ctx}: {what} is {} bytes; at most {} are allowed",
            s.len(),
            limits.max_short_string
        )));
    }
    if s.chars().any(char::is_control) {
        return Err(ManifestError::Invalid(format!(
            "{ctx}: {what} contains control characters"
        )));
    }
    Ok(())
}

/// Finds a key present in `original` but absent from `canonical` (the re-serialised value).
#[cfg(test)]
pub(crate) mod tests;
