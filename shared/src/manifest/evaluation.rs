//! The evaluation a release was signed with (`ferry evaluate`, run by `ferry sign` when the
//! VARIANTS.toml has an `[evaluation]` section): how each variant scored on a held-out set
//! through the real runtime, against a reference variant and the bound the team agreed.
//!
//! Every field is text or a number, never an enum: a manifest written by a newer signer with a
//! metric this reader does not know still parses (the device path tolerates unknown values).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Most characters of a reason, a `why_not` or another free-text field.
pub const MAX_EVALUATION_TEXT: usize = 1024;

/// A release's signed evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// SHA-256 (hex) of the `.safetensors` evaluation set.
    pub dataset_sha256: String,
    /// Samples the variants were scored on.
    pub samples: u64,
    /// Samples left out: the trailing partial batch.
    #[serde(default)]
    pub dropped: u64,
    /// `top1`, `agreement` or `max_abs_error`.
    pub metric: String,
    /// The variant the others are compared with.
    pub reference: String,
    /// For `top1` and `agreement`: the largest relative drop against the reference allowed
    /// (0.01 = 1%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_drop: Option<f64>,
    /// For `max_abs_error`: the largest difference from the reference's outputs allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_error: Option<f64>,
    /// The ExecuTorch runtime the programs ran in (`1.5.1`).
    pub runtime_version: String,
    /// Per variant id.
    pub results: BTreeMap<String, EvaluationResult>,
    /// The release whose recorded evaluation was compared too (`[evaluation] baseline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineRef>,
    /// Set when a variant failed its bound and the release was signed anyway
    /// (`ferry sign --allow-regression REASON`).
    #[serde(default, rename = "override", skip_serializing_if = "Option::is_none")]
    pub override_: Option<EvaluationOverride>,
}

/// How one variant did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationResult {
    /// The variant id.
    pub id: String,
    /// Whether it ran (a delegate this machine cannot run is listed, not evaluated).
    pub evaluated: bool,
    /// The metric (as [`Evaluation::metric`]).
    pub metric: String,
    /// Its value: top-1 accuracy or agreement as a fraction, or the largest absolute error.
    #[serde(default)]
    pub value: Option<f64>,
    /// For `top1` and `agreement`: `(reference - value) / reference` (negative: better).
    #[serde(default)]
    pub drop: Option<f64>,
    /// Within its bound (and, when a baseline was given, within it against the baseline too);
    /// `None` when it was not evaluated.
    #[serde(default)]
    pub passed: Option<bool>,
    /// Why it was not evaluated, or why it failed.
    #[serde(default)]
    pub why_not: Option<String>,
    /// The baseline release's recorded value for the same variant (or its reference).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_value: Option<f64>,
    /// The relative drop against [`Self::baseline_value`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_drop: Option<f64>,
}

/// The baseline release an evaluation was compared with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselineRef {
    /// Its version.
    pub version: String,
}

/// A failed bound signed anyway, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvaluationOverride {
    /// The reason given with `--allow-regression`.
    pub reason: String,
    /// The variants that failed.
    #[serde(default)]
    pub failed: Vec<String>,
}

impl Evaluation {
    /// Checks sizes and that every number is finite; `max_results` is the release's variant
    /// limit.
    pub fn validate(&self, max_results: usize) -> Result<(), String> {
        let text = |s: &str| s.len() <= MAX_EVALUATION_TEXT;
        if !text(&self.metric) || !text(&self.reference) || !text(&self.runtime_version) {
            return Err("evaluation: a field is too long".into());
        }
        if self.dataset_sha256.len() != 64
            || !self.dataset_sha256.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err("evaluation: dataset_sha256 is not a SHA-256".into());
        }
        if self.results.len() > max_results {
            return Err("evaluation: more results than variants allowed".into());
        }
        let finite = |x: Option<f64>| x.is_none_or(f64::is_finite);
        if !finite(self.max_drop) || !finite(self.max_error) {
            return Err("evaluation: a bound is not a finite number".into());
        }
        for r in self.results.values() {
            if !text(&r.id) || !text(&r.metric) || !r.why_not.as_deref().is_none_or(text) {
                return Err("evaluation: a result field is too long".into());
            }
            if !finite(r.value)
                || !finite(r.drop)
                || !finite(r.baseline_value)
                || !finite(r.baseline_drop)
            {
                return Err(format!(
                    "evaluation: {} has a value that is not finite",
                    r.id
                ));
            }
        }
        if let Some(o) = &self.override_
            && (!text(&o.reason) || o.failed.len() > max_results)
        {
            return Err("evaluation: the override is too long".into());
        }
        Ok(())
    }
}
