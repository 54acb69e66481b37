//! Parsing and validating a manifest: lenient and strict parsing, and every structural rule
//! and limit a manifest, its variants, their files and their signed metadata are held to.

use std::collections::BTreeSet;

use crate::names::VariantId;

use crate::manifest::error::{ManifestError, ManifestLimits};
use crate::manifest::metadata::MAX_LABELS_BYTES;
use crate::manifest::types::{
    ExtraFile, MAX_CONTRACT_METHODS, MAX_CONTRACT_VALUES, MAX_LATENCY_BUDGET_MS, ReleaseManifest,
    Variant,
};

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
            check_files(&ctx, "extra file", &v.extra_files, limits)?;
            check_metadata(&ctx, v, limits)?;
            if let Some(Err(why)) = v
                .sealed
                .as_ref()
                .map(|s| s.check(&v.file_digests(), limits.max_blob_size))
            {
                return bad(format!("{ctx}: {why}"));
            }
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

/// Checks one list of a variant's side files (data files or assets): bounded, plain unique
/// names, sizes within the blob limit.
fn check_files(
    ctx: &str,
    what: &str,
    files: &[ExtraFile],
    limits: &ManifestLimits,
) -> Result<(), ManifestError> {
    let bad = |s: String| Err(ManifestError::Invalid(s));
    if files.len() > limits.max_extra_files {
        return bad(format!(
            "{ctx}: {} {what}s; at most {} are allowed",
            files.len(),
            limits.max_extra_files
        ));
    }
    let mut names = std::collections::BTreeSet::new();
    for f in files {
        short(ctx, &format!("{what} name"), &f.name, limits)?;
        if !names.insert(f.name.as_str()) {
            return bad(format!("{ctx}: two {what}s are named {:?}", f.name));
        }
        if f.name.is_empty() || f.name.contains(['/', '\\', '\0']) || f.name.starts_with('.') {
            return bad(format!(
                "{ctx}: {what} name {:?} is not a plain name",
                f.name
            ));
        }
        // An asset's name is what the app asks for: keep it portable (no bidi controls,
        // colons or spaces that some filesystems and consoles treat specially).
        if what == "asset"
            && !f
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b))
        {
            return bad(format!(
                "{ctx}: asset name {:?} may hold only letters, digits and . _ - +",
                f.name
            ));
        }
        if f.size == 0 || f.size > limits.max_blob_size {
            return bad(format!("{ctx}: {what} {} has size {}", f.name, f.size));
        }
        if let Some(Err(why)) = f.chunk_index.map(|r| r.validate()) {
            return bad(format!("{ctx}: {what} {}: {why}", f.name));
        }
    }
    Ok(())
}

/// Checks a variant's metadata: its assets, that `labels` names one of them of at most
/// [`MAX_LABELS_BYTES`], and its preprocessing's values.
fn check_metadata(ctx: &str, v: &Variant, limits: &ManifestLimits) -> Result<(), ManifestError> {
    check_files(ctx, "asset", &v.assets, limits)?;
    if let Some(name) = &v.labels {
        match v.assets.iter().find(|a| &a.name == name) {
            None => {
                return Err(ManifestError::Invalid(format!(
                    "{ctx}: labels names {name:?}, which is not one of its assets"
                )));
            }
            Some(a) if a.size > MAX_LABELS_BYTES => {
                return Err(ManifestError::Invalid(format!(
                    "{ctx}: the labels file {name} is {} bytes; at most {MAX_LABELS_BYTES}",
                    a.size
                )));
            }
            Some(_) => {}
        }
    }
    if let Some(p) = &v.preprocess {
        p.check()
            .map_err(|e| ManifestError::Invalid(format!("{ctx}: {e}")))?;
    }
    Ok(())
}

fn is_dotted_version(s: &str) -> bool {
    !s.is_empty()
        && s.split('.')
            .all(|p| !p.is_empty() && p.len() <= 9 && p.bytes().all(|b| b.is_ascii_digit()))
}
