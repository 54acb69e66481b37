//! `ferry evaluate` and the accuracy gate of `ferry sign`: every variant this machine can run
//! is scored on a held-out set through the real ExecuTorch runtime, against a reference variant
//! and a bound the team agreed on (`[evaluation]` in VARIANTS.toml).
//!
//! ```toml
//! [evaluation]
//! dataset = "digits-test.safetensors"   # relative to VARIANTS.toml: input_0 ..., labels
//! metric = "top1"                        # top1 | agreement | max_abs_error
//! reference = "xnnpack-fp32"             # a variant id
//! max_drop = 0.01                        # top1/agreement: relative drop allowed (1%)
//! # max_error = 0.05                     # max_abs_error: absolute bound
//! # baseline = "../1.0.0/release.json"   # the release in force: its recorded result
//! ```
//!
//! [`dataset`] reads the set; [`score`] turns measurements into pass or fail (pure); `run`
//! (feature `executorch`) drives the runtime.

pub mod dataset;
#[cfg(feature = "executorch")]
pub mod run;
#[cfg(feature = "executorch")]
mod shapes;

use std::collections::BTreeMap;
use std::path::PathBuf;

use ferry_shared::VariantId;
use ferry_shared::manifest::{BaselineRef, Evaluation, EvaluationResult, ReleaseManifest};
use serde::{Deserialize, Serialize};

/// The `[evaluation]` section of VARIANTS.toml.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluationSpec {
    /// The `.safetensors` set, relative to the VARIANTS.toml.
    pub dataset: PathBuf,
    /// What is measured.
    pub metric: Metric,
    /// The variant the others are compared with.
    pub reference: VariantId,
    /// For `top1`/`agreement`: the largest relative drop allowed (0.01 = 1%).
    pub max_drop: Option<f64>,
    /// For `max_abs_error`: the largest absolute difference allowed.
    pub max_error: Option<f64>,
    /// The previous release's signed file, whose recorded result is compared too.
    pub baseline: Option<PathBuf>,
    /// The method evaluated (default `forward`).
    #[serde(default = "forward")]
    pub method: String,
}

fn forward() -> String {
    "forward".into()
}

/// What `ferry evaluate` measures, all on output 0 with the class axis last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Top-1 accuracy against `labels`.
    Top1,
    /// Top-1 agreement with the reference variant's outputs.
    Agreement,
    /// Largest absolute difference from the reference variant's outputs.
    MaxAbsError,
}

impl Metric {
    /// Its name in VARIANTS.toml and the manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Top1 => "top1",
            Self::Agreement => "agreement",
            Self::MaxAbsError => "max_abs_error",
        }
    }
}

impl EvaluationSpec {
    /// Checks the section against the release: the reference is one of its variants, and the
    /// bound fits the metric.
    pub fn check(&self, variants: &[VariantId]) -> anyhow::Result<()> {
        if !variants.contains(&self.reference) {
            anyhow::bail!(
                "[evaluation] reference {:?} is not a variant of this release",
                self.reference.as_str()
            );
        }
        let finite_positive = |x: f64| x.is_finite() && x >= 0.0;
        match (self.metric, self.max_drop, self.max_error) {
            (Metric::Top1 | Metric::Agreement, Some(d), None) if finite_positive(d) && d < 1.0 => {
                Ok(())
            }
            (Metric::MaxAbsError, None, Some(e)) if finite_positive(e) => Ok(()),
            (Metric::Top1 | Metric::Agreement, ..) => anyhow::bail!(
                "[evaluation] metric {} takes max_drop (a fraction from 0 to 1, relative: 0.01 \
                 = 1%) and no max_error",
                self.metric.as_str()
            ),
            (Metric::MaxAbsError, ..) => anyhow::bail!(
                "[evaluation] metric max_abs_error takes max_error (an absolute difference) and \
                 no max_drop"
            ),
        }
    }
}

/// What running one variant gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Measured {
    /// It ran on every evaluated sample.
    Ran {
        /// Samples whose argmax matched `labels`.
        correct: u64,
        /// Samples whose argmax matched the reference's.
        agree: u64,
        /// Largest absolute difference from the reference's outputs.
        max_error: f64,
        /// Samples scored.
        samples: u64,
    },
    /// This machine cannot run it (a delegate or kernels it lacks); listed, not scored.
    NotEvaluated(String),
    /// It could not be opened or executed, or a shape check failed.
    Failed(String),
}

/// One variant's line in the report: its result plus what the run cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantReport {
    /// The result, as the manifest records it.
    #[serde(flatten)]
    pub result: EvaluationResult,
    /// Samples fed per execute (the method's leading dimension), when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// Time spent executing, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ms: Option<u64>,
    /// The bounded-shape checks run on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<ShapeCheck>,
}

/// One run of a method at a chosen input shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapeCheck {
    /// The method.
    pub method: String,
    /// The sizes of each input it was run with.
    pub shapes: Vec<Vec<u64>>,
    /// Whether it executed.
    pub ok: bool,
    /// The runtime's error, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The whole report (`ferry evaluate --json`), and what the manifest records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The signed form: dataset digest, samples, metric, reference, bound, runtime, results.
    #[serde(flatten)]
    pub evaluation: Evaluation,
    /// Per variant, in the release's order.
    pub variants: Vec<VariantReport>,
}

impl Report {
    /// Variants that failed their bound or could not execute.
    pub fn failed(&self) -> Vec<String> {
        self.variants
            .iter()
            .filter(|v| v.result.passed == Some(false))
            .map(|v| v.result.id.clone())
            .collect()
    }
}

/// The dataset-level facts a report carries.
#[derive(Debug, Clone)]
pub struct Run {
    /// SHA-256 of the set.
    pub dataset_sha256: String,
    /// Samples scored.
    pub samples: u64,
    /// Samples left out (the trailing partial batch).
    pub dropped: u64,
    /// The runtime's version.
    pub runtime_version: String,
}

/// Turns measurements (in the release's variant order) into results: each variant's value,
/// its drop against the reference, pass or fail against the bound and, when `baseline` is
/// given, against that release's recorded result on the same set.
pub fn score(
    spec: &EvaluationSpec,
    run: &Run,
    measured: Vec<(VariantId, Measured)>,
    baseline: Option<&ReleaseManifest>,
) -> Report {
    let reference_value = measured
        .iter()
        .find(|(id, _)| *id == spec.reference)
        .and_then(|(_, m)| value_of(spec.metric, m));
    let old = baseline.and_then(|b| b.evaluation.as_ref());
    let mut variants = Vec::new();
    for (id, m) in measured {
        let mut r = EvaluationResult {
            id: id.as_str().to_string(),
            evaluated: !matches!(m, Measured::NotEvaluated(_)),
            metric: spec.metric.as_str().to_string(),
            value: value_of(spec.metric, &m),
            drop: None,
            passed: None,
            why_not: None,
            baseline_value: None,
            baseline_drop: None,
        };
        match &m {
            Measured::NotEvaluated(why) => r.why_not = Some(format!("not evaluated: {why}")),
            Measured::Failed(why) => {
                r.passed = Some(false);
                r.why_not = Some(why.clone());
            }
            Measured::Ran { .. } => judge(spec, &mut r, reference_value),
        }
        if let (Some(old), Some(value)) = (old, r.value)
            && spec.metric != Metric::MaxAbsError
        {
            compare_baseline(spec, old, &mut r, value);
        }
        variants.push(VariantReport {
            result: r,
            batch: None,
            time_ms: None,
            shapes: Vec::new(),
        });
    }
    let results: BTreeMap<String, EvaluationResult> = variants
        .iter()
        .map(|v| (v.result.id.clone(), v.result.clone()))
        .collect();
    Report {
        evaluation: Evaluation {
            dataset_sha256: run.dataset_sha256.clone(),
            samples: run.samples,
            dropped: run.dropped,
            metric: spec.metric.as_str().to_string(),
            reference: spec.reference.as_str().to_string(),
            max_drop: spec.max_drop,
            max_error: spec.max_error,
            runtime_version: run.runtime_version.clone(),
            results,
            baseline: baseline.map(|b| BaselineRef {
                version: b.version.to_string(),
            }),
            override_: None,
        },
        variants,
    }
}

fn value_of(metric: Metric, m: &Measured) -> Option<f64> {
    let Measured::Ran {
        correct,
        agree,
        max_error,
        samples,
    } = m
    else {
        return None;
    };
    let fraction = |k: u64| (*samples > 0).then(|| k as f64 / *samples as f64);
    match metric {
        Metric::Top1 => fraction(*correct),
        Metric::Agreement => fraction(*agree),
        Metric::MaxAbsError => Some(*max_error).filter(|e| e.is_finite()),
    }
}

/// Relative drop from `from` to `to` (0 when both are 0).
fn relative_drop(from: f64, to: f64) -> f64 {
    if from <= 0.0 { 0.0 } else { (from - to) / from }
}

/// Tolerance for comparing a measured fraction with a bound written in decimal.
const EPSILON: f64 = 1e-9;

fn judge(spec: &EvaluationSpec, r: &mut EvaluationResult, reference: Option<f64>) {
    let Some(value) = r.value else {
        r.passed = Some(false);
        r.why_not = Some("no value (no samples, or a difference that is not finite)".into());
        return;
    };
    match spec.metric {
        Metric::MaxAbsError => {
            let bound = spec.max_error.unwrap_or(0.0);
            let ok = value <= bound + EPSILON;
            r.passed = Some(ok);
            if !ok {
                r.why_not = Some(format!(
                    "largest difference from {} is {value:.6}, above max_error {bound}",
                    spec.reference.as_str()
                ));
            }
        }
        Metric::Top1 | Metric::Agreement => {
            let Some(reference) = reference else {
                r.passed = Some(false);
                r.why_not = Some(format!(
                    "the reference {} has no value to compare with",
                    spec.reference.as_str()
                ));
                return;
            };
            let drop = relative_drop(reference, value);
            let bound = spec.max_drop.unwrap_or(0.0);
            let ok = drop <= bound + EPSILON;
            r.drop = Some(drop);
            r.passed = Some(ok);
            if !ok {
                r.why_not = Some(format!(
                    "{} {:.4} against {:.4} for {}: a drop of {:.2}%, above max_drop {:.2}%",
                    spec.metric.as_str(),
                    value,
                    reference,
                    spec.reference.as_str(),
                    drop * 100.0,
                    bound * 100.0
                ));
            }
        }
    }
}

fn compare_baseline(spec: &EvaluationSpec, old: &Evaluation, r: &mut EvaluationResult, value: f64) {
    let recorded = old
        .results
        .get(&r.id)
        .filter(|o| o.evaluated)
        .or_else(|| old.results.get(&old.reference))
        .and_then(|o| o.value);
    let Some(before) = recorded else {
        return;
    };
    let drop = relative_drop(before, value);
    r.baseline_value = Some(before);
    r.baseline_drop = Some(drop);
    let bound = spec.max_drop.unwrap_or(0.0);
    if drop > bound + EPSILON {
        r.passed = Some(false);
        let why = format!(
            "{} {:.4} against {:.4} recorded for the baseline release: a drop of {:.2}%, above \
             max_drop {:.2}%",
            spec.metric.as_str(),
            value,
            before,
            drop * 100.0,
            bound * 100.0
        );
        r.why_not = Some(match r.why_not.take() {
            Some(w) => format!("{w}; {why}"),
            None => why,
        });
    }
}

/// Checks that `baseline` was evaluated on the same set with the same metric.
pub fn check_baseline(
    spec: &EvaluationSpec,
    dataset_sha256: &str,
    baseline: &ReleaseManifest,
) -> anyhow::Result<()> {
    let Some(old) = &baseline.evaluation else {
        anyhow::bail!(
            "the baseline release {} was signed without an evaluation",
            baseline.version
        );
    };
    if old.dataset_sha256 != dataset_sha256 {
        anyhow::bail!(
            "the baseline release {} was evaluated on another dataset (sha256 {}, this one {})",
            baseline.version,
            old.dataset_sha256,
            dataset_sha256
        );
    }
    if old.metric != spec.metric.as_str() {
        anyhow::bail!(
            "the baseline release {} was evaluated with metric {}, this one uses {}",
            baseline.version,
            old.metric,
            spec.metric.as_str()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
