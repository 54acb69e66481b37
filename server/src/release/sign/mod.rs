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
//! data = ["weights.ptd"]          # optional: data files (.ptd) the program loads with
//! ```
//!
//! Every file is inspected while signing: a file that is not a `.pte`, or whose delegation
//! does not match its declared delegate, is refused before anything is signed; so is a data
//! file that is not a `.ptd`, and a program that keeps tensors outside the file (exported
//! with `external_constants=True`) whose data files do not provide every one of them.

use std::path::Path;

use anyhow::{Context as _, bail};
use ferry_shared::manifest::{
    DeviceConstraints, ExtraFile, Golden, ManifestLimits, RELEASE_PAYLOAD_TYPE, ReleaseManifest,
    Variant,
};
use ferry_shared::trust::dsse::Envelope;
use ferry_shared::{BackendId, pte};
use time::OffsetDateTime;

use crate::keys::signer::Signer;

pub mod chunks;
pub mod files;
pub mod metadata;
pub mod seal;
pub mod variants;

pub use variants::{SignedFile, VariantSpec, VariantsFile, read_variants};

/// What `ferry sign` warns about in a manifest's method contracts: an input whose sizes are
/// unbounded (the runtime cannot plan its memory; any size reaches the program), and one whose
/// dim order is not the contiguous one (an export-time accident that lowers fine and then fails
/// every execute).
pub fn contract_warnings(manifest: &ReleaseManifest) -> Vec<String> {
    let mut out = Vec::new();
    for v in &manifest.variants {
        for (method, sig) in v.methods.iter().flatten() {
            for (i, t) in sig.inputs.iter().enumerate() {
                if t.dynamism == pte::Dynamism::Unbounded {
                    out.push(format!(
                        "variant {} {method} input {i}: unbounded sizes ({}); export with a \
                         bounded dynamic dimension",
                        v.id,
                        t.describe()
                    ));
                }
                if t.dim_order
                    .iter()
                    .enumerate()
                    .any(|(k, d)| usize::from(*d) != k)
                {
                    out.push(format!(
                        "variant {} {method} input {i}: dim order {:?} is not contiguous; such a \
                         program often fails every execute",
                        v.id, t.dim_order
                    ));
                }
            }
        }
    }
    out
}

/// Builds (but does not sign) the manifest. `read` loads a file named in the spec, relative
/// to `base`; `now` stamps `created`. The files come back one per variant, in order.
pub fn build_manifest(
    spec: &VariantsFile,
    base: &Path,
    read: &dyn Fn(&Path) -> anyhow::Result<Vec<u8>>,
    now: OffsetDateTime,
) -> anyhow::Result<(ReleaseManifest, Vec<SignedFile>)> {
    build(spec, base, read, now).map(|b| (b.manifest, b.files))
}

/// A manifest built from a VARIANTS.toml, with its files and what is likely wrong in it.
#[derive(Debug)]
pub struct Built {
    /// The manifest, not signed yet.
    pub manifest: ReleaseManifest,
    /// Each variant's files, in order.
    pub files: Vec<SignedFile>,
    /// What `ferry sign` warns about (the metadata against the program; see also
    /// [`contract_warnings`]).
    pub warnings: Vec<String>,
    /// Each variant's inspection, in order (signed into a sealed variant, whose program the
    /// server cannot read).
    pub reports: Vec<pte::PteReport>,
}

/// [`build_manifest`], keeping the warnings.
pub fn build(
    spec: &VariantsFile,
    base: &Path,
    read: &dyn Fn(&Path) -> anyhow::Result<Vec<u8>>,
    now: OffsetDateTime,
) -> anyhow::Result<Built> {
    let mut variants = Vec::new();
    let mut files = Vec::new();
    let mut warnings = Vec::new();
    let mut reports = Vec::new();
    for v in &spec.variants {
        let path = base.join(&v.file);
        let limits = pte::PteLimits::default();
        let file = files::describe(&path, read, &|head| {
            pte::required_prefix(head, &limits).ok()
        })
        .with_context(|| format!("variant {}: cannot read {}", v.id, path.display()))?;
        let bytes = &file.bytes;
        if pte::is_ptd(bytes) {
            bail!(
                "variant {}: {} is a data file (.ptd), not a program: give the program as file \
                 and list the data file with data = [\"NAME.ptd\"]",
                v.id,
                path.display()
            );
        }
        let report = pte::inspect_prefix(bytes, file.size, &limits).map_err(|e| {
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
        if let Some(why) = ferry_shared::manifest::delegation_mismatch(
            v.id.as_str(),
            &v.delegate,
            &backends,
            &report,
        ) {
            bail!("{why}");
        }
        let (extra_files, extra_signed) = data_files(v, base, read, &report)?;
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
        let forward = report
            .methods
            .iter()
            .find(|m| m.name == "forward")
            .map(|m| &m.signature);
        let meta = metadata::variant_metadata(spec, v, base, read, forward)?;
        let sha256 = file.sha256;
        files.push(SignedFile {
            path: path.clone(),
            sha256,
            size: file.size,
            data: extra_signed,
            assets: meta.signed,
        });
        warnings.extend(meta.warnings);
        variants.push(Variant {
            id: v.id.clone(),
            delegate: v.delegate.clone(),
            backends,
            operators: Some(ferry_shared::select::operators::normalize(
                report
                    .methods
                    .iter()
                    .flat_map(|m| m.kernel_calls.keys().map(String::as_str)),
            )),
            quant: v.quant.clone(),
            methods: Some(
                report
                    .methods
                    .iter()
                    .map(|m| (m.name.clone(), m.signature.clone()))
                    .collect(),
            ),
            sha256,
            size: file.size,
            extra_files,
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
            assets: meta.assets,
            preprocess: meta.preprocess,
            labels: meta.labels,
            latency_budget_ms: v.latency_budget_ms.or(spec.latency_budget_ms),
            sealed: None,
            chunk_index: None,
        });
        reports.push(report);
    }
    let mut manifest = ReleaseManifest {
        format: 1,
        model: spec.model.clone(),
        version: spec.version.clone(),
        notes: spec.notes.clone(),
        created: now,
        variants,
        evaluation: None,
    };
    chunks::attach(&mut manifest, &files)?;
    manifest.validate(&ManifestLimits::default())?;
    warnings.extend(contract_warnings(&manifest));
    Ok(Built {
        manifest,
        files,
        warnings,
        reports,
    })
}

/// Reads, inspects and describes a variant's data files; refuses a file that is not a `.ptd`,
/// two files with one name, and a program with tensors outside the file that none of its data
/// files provides.
fn data_files(
    v: &VariantSpec,
    base: &Path,
    read: &dyn Fn(&Path) -> anyhow::Result<Vec<u8>>,
    report: &pte::PteReport,
) -> anyhow::Result<(Vec<ExtraFile>, Vec<SignedFile>)> {
    let mut extra = Vec::new();
    let mut signed = Vec::new();
    let mut reports = Vec::new();
    for d in &v.data {
        let path = base.join(d);
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| {
                format!(
                    "variant {}: data file {} has no usable file name",
                    v.id,
                    path.display()
                )
            })?
            .to_string();
        if extra.iter().any(|e: &ExtraFile| e.name == name) {
            bail!(
                "variant {}: two data files are named {name}; each data file of a variant needs \
                 its own name",
                v.id
            );
        }
        let file = files::describe(&path, read, &|head| pte::ptd_required_prefix(head).ok())
            .with_context(|| {
                format!("variant {}: cannot read data file {}", v.id, path.display())
            })?;
        let ptd = pte::inspect_ptd_prefix(&file.bytes, file.size).map_err(|e| {
            anyhow::anyhow!(
                "variant {}: data file {} is not a valid .ptd ({}): {e}",
                v.id,
                path.display(),
                e.code()
            )
        })?;
        reports.push((name.clone(), ptd));
        let (sha256, size) = (file.sha256, file.size);
        extra.push(ExtraFile {
            name,
            sha256,
            size,
            chunk_index: None,
        });
        signed.push(SignedFile {
            path,
            sha256,
            size,
            data: Vec::new(),
            assets: Vec::new(),
        });
    }
    let named: Vec<(&str, &pte::PtdReport)> =
        reports.iter().map(|(n, r)| (n.as_str(), r)).collect();
    let problems = pte::check_data_files(report, &named);
    if let Some(first) = problems.conflicts.first() {
        bail!(
            "variant {}: its data files do not fit {} ({} problem(s)): {first}{}",
            v.id,
            base.join(&v.file).display(),
            problems.conflicts.len(),
            if problems.conflicts.len() > 1 {
                "; ..."
            } else {
                ""
            }
        );
    }
    let missing = problems.missing;
    if !missing.is_empty() {
        let shown: Vec<&str> = missing.iter().take(5).map(String::as_str).collect();
        let more = if missing.len() > shown.len() {
            ", ..."
        } else {
            ""
        };
        if v.data.is_empty() {
            bail!(
                "variant {}: {} keeps {} tensor(s) in a separate data file (.ptd): {}{more}; \
                 list the data file with data = [\"NAME.ptd\"] in the variant",
                v.id,
                base.join(&v.file).display(),
                missing.len(),
                shown.join(", ")
            );
        }
        bail!(
            "variant {}: its data files do not provide {} tensor(s) that {} needs: {}{more}",
            v.id,
            missing.len(),
            base.join(&v.file).display(),
            shown.join(", ")
        );
    }
    Ok((extra, signed))
}

/// Parses a golden file: any JSON object with `input`, `output` and `atol` (fixture sidecars
/// qualify; their other fields are ignored).
pub fn parse_golden(bytes: &[u8]) -> anyhow::Result<Golden> {
    let g: Golden =
        serde_json::from_slice(bytes).context("expected JSON with input, output and atol")?;
    Ok(g)
}

/// Signs a manifest with a release key (a key file of another role is refused).
pub fn sign(manifest: &ReleaseManifest, key: &dyn Signer) -> anyhow::Result<Envelope> {
    if let Some(role) = key.role()
        && role != ferry_shared::trust::dsse::KeyRole::Release
    {
        bail!("releases must be signed with a release key; this is a {role} key");
    }
    crate::keys::signer::sign_envelope(key, RELEASE_PAYLOAD_TYPE, &manifest.to_json())
}
