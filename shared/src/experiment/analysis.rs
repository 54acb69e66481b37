//! An experiment's results: per metric, the arms' means per device, the difference with its
//! always-valid interval, a decision, the devices still needed, and the same per device class
//! with the error rate divided among the classes looked at (Bonferroni).

use serde::{Deserialize, Serialize};

use crate::experiment::metrics::{DeviceRecord, OWN};
use crate::experiment::plan::{ArmName, Better, ClassKey, ExperimentPlan, MetricSpec};
use crate::experiment::stats::{Comparison, Unit, compare};

/// The error rate of every interval (95% intervals).
pub const ALPHA: f64 = 0.05;

/// Classes shown per dimension (the ones with the most devices).
pub const MAX_CLASSES: usize = 20;

/// What the data says of one metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The treatment is better, beyond chance.
    Better,
    /// The treatment is worse, beyond chance.
    Worse,
    /// Not yet known.
    Unknown,
}

/// Reads a comparison: better or worse only when both arms have enough devices and the
/// interval excludes zero.
pub fn verdict(c: &Comparison, better: Better) -> Verdict {
    if !c.enough || !c.interval.iter().all(|b| b.is_finite()) {
        return Verdict::Unknown;
    }
    let higher = if c.interval[0] > 0.0 {
        true
    } else if c.interval[1] < 0.0 {
        false
    } else {
        return Verdict::Unknown;
    };
    match (higher, better) {
        (true, Better::Higher) | (false, Better::Lower) => Verdict::Better,
        _ => Verdict::Worse,
    }
}

/// One class's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassResult {
    /// The dimension (`soc`, `device_model`).
    pub key: ClassKey,
    /// Its value.
    pub value: String,
    /// The comparison in it, at `alpha`.
    #[serde(flatten)]
    pub comparison: Comparison,
    /// The error rate used (0.05 divided by the classes looked at).
    pub alpha: f64,
    /// The decision.
    pub decision: Verdict,
}

/// One metric's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricResult {
    /// The metric.
    pub metric: String,
    /// Which way is better.
    pub better: Better,
    /// The comparison over every device.
    #[serde(flatten)]
    pub comparison: Comparison,
    /// The decision.
    pub decision: Verdict,
    /// Devices each arm still lacks for 80% power at the effect of interest.
    pub devices_more: Option<u64>,
    /// The breakdown by class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassResult>,
}

/// The metrics a plan compares: ferry's own, then the app metrics it names.
pub fn metrics_of(plan: &ExperimentPlan) -> Vec<MetricSpec> {
    let mut out: Vec<MetricSpec> = OWN
        .iter()
        .map(|n| MetricSpec {
            name: (*n).to_string(),
            better: Better::Lower,
        })
        .collect();
    for m in &plan.metrics {
        if !out.iter().any(|o| o.name == m.name) {
            out.push(m.clone());
        }
    }
    out
}

fn units<'a>(
    devices: impl Iterator<Item = &'a DeviceRecord>,
    metric: &str,
) -> (Vec<Unit>, Vec<Unit>) {
    let (mut c, mut t) = (Vec::new(), Vec::new());
    for d in devices {
        let Some(y) = d.during.value(metric) else {
            continue;
        };
        let u = Unit {
            y,
            x: d.pre.value(metric),
        };
        match d.arm {
            Some(ArmName::Control) => c.push(u),
            Some(ArmName::Treatment) => t.push(u),
            None => {}
        }
    }
    (c, t)
}

fn class_of(d: &DeviceRecord, key: ClassKey) -> &str {
    match key {
        ClassKey::Soc => &d.soc,
        ClassKey::DeviceModel => &d.device_model,
    }
}

/// The results of `plan` over `devices`.
pub fn analyse(plan: &ExperimentPlan, devices: &[DeviceRecord]) -> Vec<MetricResult> {
    // The classes looked at: per dimension, the most populous ones in an arm.
    let mut cells: Vec<(ClassKey, String)> = Vec::new();
    for key in &plan.classes {
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
        for d in devices.iter().filter(|d| d.arm.is_some()) {
            *counts.entry(class_of(d, *key)).or_default() += 1;
        }
        let mut by_size: Vec<(&str, usize)> = counts.into_iter().collect();
        by_size.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        cells.extend(
            by_size
                .into_iter()
                .take(MAX_CLASSES)
                .map(|(v, _)| (*key, v.to_string())),
        );
    }
    let class_alpha = ALPHA / cells.len().max(1) as f64;
    metrics_of(plan)
        .into_iter()
        .map(|spec| {
            let (c, t) = units(devices.iter(), &spec.name);
            let comparison = compare(&c, &t, plan.effect, ALPHA);
            let decision = verdict(&comparison, spec.better);
            let have = comparison.devices[0].min(comparison.devices[1]) as u64;
            let classes = cells
                .iter()
                .map(|(key, value)| {
                    let (c, t) = units(
                        devices.iter().filter(|d| class_of(d, *key) == value),
                        &spec.name,
                    );
                    let comparison = compare(&c, &t, plan.effect, class_alpha);
                    ClassResult {
                        key: *key,
                        value: value.clone(),
                        decision: verdict(&comparison, spec.better),
                        comparison,
                        alpha: class_alpha,
                    }
                })
                .collect();
            MetricResult {
                metric: spec.name,
                better: spec.better,
                devices_more: comparison.devices_needed.map(|n| n.saturating_sub(have)),
                comparison,
                decision,
                classes,
            }
        })
        .collect()
}
