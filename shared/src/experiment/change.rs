//! Starting and stopping an experiment, as pure functions of the plan in force and the
//! releases published: the server writes what they return as the next revision.

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::errors::ErrorCode;
use crate::experiment::plan::{
    Arm, ArmName, ClassKey, ExperimentPlan, ExperimentState, MetricSpec, check_experiment_id,
};
use crate::manifest::ReleaseManifest;
use crate::select::rollout::FULL;

/// App metrics one experiment may name.
pub const MAX_METRICS: usize = 16;
/// The longest history CUPED may read before the start, in days.
pub const MAX_LOOKBACK_DAYS: u32 = 30;
/// The default effect of interest (5% of the control's mean).
pub const DEFAULT_EFFECT: f64 = 0.05;
/// The default days of history before the start.
pub const DEFAULT_LOOKBACK_DAYS: u32 = 7;

/// What `ferry experiment start` asks for (the body of the admin start call).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartExperiment {
    /// The control arm: `RELEASE` or `RELEASE/VARIANT`.
    pub control: String,
    /// The treatment arm.
    pub treatment: String,
    /// The share of the model's devices that take part, in percent (default 100).
    #[serde(default)]
    pub share: Option<f64>,
    /// App metrics (`NAME`, `NAME:lower`, `NAME:higher`).
    #[serde(default)]
    pub metrics: Vec<String>,
    /// Breakdown dimensions (`soc`, `device_model`).
    #[serde(default)]
    pub classes: Vec<String>,
    /// The effect of interest, relative to the control's mean (default 0.05).
    #[serde(default)]
    pub effect: Option<f64>,
    /// Days of history before the start CUPED reads (default 7).
    #[serde(default)]
    pub lookback_days: Option<u32>,
    /// Why.
    #[serde(default)]
    pub reason: String,
}

/// What a stop asks for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopExperiment {
    /// The arm declared the winner, if any.
    #[serde(default)]
    pub winner: Option<ArmName>,
    /// Roll the winner's release out (a rollout to 100% from the baseline; an arm that is a
    /// variant rolls out its release).
    #[serde(default)]
    pub roll_out: bool,
    /// Why.
    #[serde(default)]
    pub reason: String,
}

/// Why a change was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExperimentError {
    /// The request is malformed or names what cannot be compared.
    #[error("{0}")]
    Invalid(String),
    /// An experiment of the model is running.
    #[error("experiment {0} of this model is running: stop it first (ferry experiment stop)")]
    Running(String),
    /// No experiment of the model is running.
    #[error("no experiment of this model is running")]
    NotRunning,
}

impl ExperimentError {
    /// The catalogue code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ExperimentError::Invalid(_) => ErrorCode::ExperimentInvalid,
            ExperimentError::Running(_) => ErrorCode::ExperimentRunning,
            ExperimentError::NotRunning => ErrorCode::ExperimentNotFound,
        }
    }
}

/// Who, when and with which randomness a change is made.
#[derive(Debug, Clone, Copy)]
pub struct Made<'a> {
    /// The model.
    pub model: &'a str,
    /// Who.
    pub actor: &'a str,
    /// When (RFC 3339).
    pub at: &'a str,
    /// A fresh random hex string (the experiment's id and salt are cut from it).
    pub random: &'a str,
}

fn invalid(m: impl Into<String>) -> ExperimentError {
    ExperimentError::Invalid(m.into())
}

/// Checks an arm against the published releases and the revoked ones.
fn check_arm(
    which: &str,
    arm: &Arm,
    published: &[&ReleaseManifest],
    revoked: &dyn Fn(&Version) -> bool,
) -> Result<(), ExperimentError> {
    let Some(m) = published.iter().find(|m| m.version == arm.release) else {
        return Err(invalid(format!(
            "{which} {arm}: release {} is not published",
            arm.release
        )));
    };
    if revoked(&arm.release) {
        return Err(invalid(format!(
            "{which} {arm}: release {} is revoked",
            arm.release
        )));
    }
    if let Some(v) = &arm.variant
        && !m.variants.iter().any(|x| &x.id == v)
    {
        return Err(invalid(format!(
            "{which} {arm}: release {} has no variant {v} (it has {})",
            arm.release,
            m.variants
                .iter()
                .map(|x| x.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}

/// A reason is kept in the history and printed: at most 1000 bytes, no control characters.
fn check_reason(reason: &str) -> Result<(), ExperimentError> {
    if reason.len() > 1000 || reason.chars().any(char::is_control) {
        return Err(invalid(
            "reason must be at most 1000 bytes without control characters (line breaks, \
             escapes)",
        ));
    }
    Ok(())
}

/// The plan `req` starts, after the plan in force `current`.
pub fn start(
    current: Option<&ExperimentPlan>,
    req: &StartExperiment,
    published: &[&ReleaseManifest],
    revoked: &dyn Fn(&Version) -> bool,
    made: Made<'_>,
) -> Result<ExperimentPlan, ExperimentError> {
    if let Some(c) = current.filter(|c| c.is_running()) {
        return Err(ExperimentError::Running(c.id.clone()));
    }
    let control: Arm = req.control.parse().map_err(invalid)?;
    let treatment: Arm = req.treatment.parse().map_err(invalid)?;
    if control == treatment {
        return Err(invalid("control and treatment are the same"));
    }
    check_arm("control", &control, published, revoked)?;
    check_arm("treatment", &treatment, published, revoked)?;
    if control.release == treatment.release
        && control.variant.is_none() != treatment.variant.is_none()
    {
        return Err(invalid(format!(
            "{control} against {treatment}: one arm is release {} and the other one of its \
             variants, so the release arm holds the other arm; compare two variants \
             (RELEASE/VARIANT on both sides) or two releases",
            control.release
        )));
    }
    let share = req.share.unwrap_or(100.0);
    if !(share.is_finite() && (0.01..=100.0).contains(&share)) {
        return Err(invalid(format!(
            "share {share} must be a percent from 0.01 (one device in 10,000) to 100"
        )));
    }
    let basis_points = ((share * 100.0).round() as u32).clamp(1, FULL);
    if req.metrics.len() > MAX_METRICS {
        return Err(invalid(format!("at most {MAX_METRICS} metrics")));
    }
    let mut metrics: Vec<MetricSpec> = Vec::new();
    for m in &req.metrics {
        let spec: MetricSpec = m.parse().map_err(invalid)?;
        if metrics.iter().any(|x| x.name == spec.name) {
            return Err(invalid(format!("metric {} is named twice", spec.name)));
        }
        metrics.push(spec);
    }
    let mut classes: Vec<ClassKey> = Vec::new();
    for c in &req.classes {
        let key = ClassKey::parse(c)
            .ok_or_else(|| invalid(format!("class {c:?} is not soc or device_model")))?;
        if !classes.contains(&key) {
            classes.push(key);
        }
    }
    let effect = req.effect.unwrap_or(DEFAULT_EFFECT);
    if !(effect.is_finite() && effect > 0.0 && effect <= 1.0) {
        return Err(invalid(format!(
            "effect {effect} must be above 0 and at most 1 (a share of the control's mean)"
        )));
    }
    let lookback_days = req.lookback_days.unwrap_or(DEFAULT_LOOKBACK_DAYS);
    if lookback_days > MAX_LOOKBACK_DAYS {
        return Err(invalid(format!(
            "lookback_days must be at most {MAX_LOOKBACK_DAYS}"
        )));
    }
    check_reason(&req.reason)?;
    let random: String = made
        .random
        .chars()
        .filter(char::is_ascii_hexdigit)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if random.len() < 16 {
        return Err(invalid("not enough randomness for an id and a salt"));
    }
    let id = format!("x{}", &random[..8]);
    check_experiment_id(&id).map_err(invalid)?;
    Ok(ExperimentPlan {
        model: made.model.to_string(),
        revision: current.map_or(0, |c| c.revision) + 1,
        id,
        salt: random[8..].to_string(),
        control,
        treatment,
        basis_points,
        metrics,
        classes,
        effect,
        started_at: made.at.to_string(),
        lookback_days,
        state: ExperimentState::Running,
        action: "start".into(),
        actor: made.actor.to_string(),
        at: made.at.to_string(),
        reason: req.reason.clone(),
    })
}

/// The plan a stop writes (`action`: `stop`, or `revoked` when an arm was revoked).
pub fn stop(
    current: Option<&ExperimentPlan>,
    req: &StopExperiment,
    action: &str,
    made: Made<'_>,
) -> Result<ExperimentPlan, ExperimentError> {
    let Some(cur) = current.filter(|c| c.is_running()) else {
        return Err(ExperimentError::NotRunning);
    };
    if req.roll_out && req.winner.is_none() {
        return Err(invalid(
            "a roll-out needs a winner: control or treatment (--winner)",
        ));
    }
    check_reason(&req.reason)?;
    Ok(ExperimentPlan {
        revision: cur.revision + 1,
        state: ExperimentState::Stopped {
            winner: req.winner,
            rolled_out: req.roll_out,
        },
        action: action.to_string(),
        actor: made.actor.to_string(),
        at: made.at.to_string(),
        reason: req.reason.clone(),
        ..cur.clone()
    })
}
