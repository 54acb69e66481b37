//! Rollout state in the object store: an append-only log of immutable revisions.
//!
//! `state/<model>/rollout/<revision, 20 digits>.json` holds one [`RolloutPlan`] each, written
//! through [`revisions::append`] (create-if-absent, retried on a lost race): no update is ever
//! lost, on any backend, and the revisions are the history (who, when, what, why).

use std::collections::BTreeMap;
use std::sync::Arc;

use actix_web::http::StatusCode;
use ferry_shared::ModelName;
use ferry_shared::resolve::Cohort;
use ferry_shared::rollout::{FULL, RolloutPlan, RolloutState, Thresholds};
use semver::Version;
use serde::Deserialize;

use crate::api::error::ApiError;
use crate::storage::catalog::{Catalog, Release};
use crate::storage::{Store, revisions};

/// The releases a device in `cohort` may get, in the order to try them.
///
/// Without a plan: every release, newest first. With one: a staged device tries the staged
/// release first; everyone then gets the baseline (or, if the device cannot use it, an older
/// release). Releases newer than the baseline that are not staged are not live.
pub fn releases_for(
    all: &[Arc<Release>],
    plan: Option<&RolloutPlan>,
    cohort: Cohort,
) -> Vec<Arc<Release>> {
    let Some(plan) = plan else {
        return all.to_vec();
    };
    let ceiling = plan.baseline.clone().or_else(|| {
        plan.staged.as_ref().and_then(|s| {
            all.iter()
                .map(|r| r.manifest.version.clone())
                .find(|v| v < s)
        })
    });
    let mut out: Vec<Arc<Release>> = Vec::new();
    if cohort == Cohort::Staged
        && let Some(staged) = &plan.staged
        && let Some(r) = all.iter().find(|r| &r.manifest.version == staged)
    {
        out.push(r.clone());
    }
    out.extend(
        all.iter()
            .filter(|r| ceiling.as_ref().is_some_and(|c| r.manifest.version <= *c))
            .filter(|r| Some(&r.manifest.version) != plan.staged.as_ref())
            .cloned(),
    );
    out
}
fn prefix(model: &ModelName) -> String {
    format!("state/{model}/rollout")
}

/// Every revision of `model`'s plan, oldest first.
pub async fn history(store: &Store, model: &ModelName) -> Result<Vec<RolloutPlan>, ApiError> {
    Ok(revisions::all(store, &prefix(model))
        .await?
        .into_iter()
        .map(|(_, p)| p)
        .collect())
}

/// The newest plan of each model in `models`.
pub async fn load_all<'a>(
    store: &Store,
    models: impl Iterator<Item = &'a ModelName>,
) -> Result<BTreeMap<ModelName, RolloutPlan>, ApiError> {
    let mut out = BTreeMap::new();
    for m in models {
        if let Some((_, p)) = revisions::latest::<RolloutPlan>(store, &prefix(m)).await? {
            out.insert(m.clone(), p);
        }
    }
    Ok(out)
}

/// A requested change.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeRequest {
    /// `start`, `set`, `pause`, `resume`, `rollback` or `complete`.
    pub action: String,
    /// For `start`: the release to roll out.
    #[serde(default)]
    pub release: Option<String>,
    /// For `start` and `set`: percentage as text (`"0.5"`) or number.
    #[serde(default)]
    pub percent: Option<serde_json::Value>,
    /// For `start`: thresholds.
    #[serde(default)]
    pub max_failure_rate: Option<f64>,
    /// For `start`.
    #[serde(default)]
    pub max_fallback_rate: Option<f64>,
    /// For `start`.
    #[serde(default)]
    pub min_samples: Option<u64>,
    /// Why (kept in the history).
    #[serde(default)]
    pub reason: Option<String>,
}

fn conflict(code: &'static str, msg: String) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, code, msg)
}

fn percent(v: &Option<serde_json::Value>) -> Result<u32, ApiError> {
    let text = match v {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        _ => {
            return Err(ApiError::bad_request(
                "rollout_invalid",
                "percent is required",
            ));
        }
    };
    ferry_shared::rollout::parse_percent(&text)
        .map_err(|m| ApiError::bad_request("rollout_invalid", m))
}

fn rate(name: &str, v: Option<f64>) -> Result<Option<f64>, ApiError> {
    match v {
        Some(r) if !(0.0..=1.0).contains(&r) || r.is_nan() => Err(ApiError::bad_request(
            "rollout_invalid",
            format!("{name} must be between 0 and 1"),
        )),
        other => Ok(other),
    }
}

fn salt() -> String {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    hex::encode(b)
}

/// Computes the next plan from the current one (pure but for the salt of a new rollout).
pub fn next_plan(
    current: Option<&RolloutPlan>,
    req: &ChangeRequest,
    model: &ModelName,
    catalog: &Catalog,
    actor: &str,
    at: &str,
) -> Result<RolloutPlan, ApiError> {
    let reason = req.reason.clone().unwrap_or_default();
    if reason.len() > 1024 {
        return Err(ApiError::bad_request(
            "rollout_invalid",
            "reason is at most 1024 bytes",
        ));
    }
    let in_progress = current.is_some_and(|p| {
        p.staged.is_some() && matches!(p.state, RolloutState::Active | RolloutState::Paused)
    });
    let mut next = match (req.action.as_str(), current) {
        ("start", _) => {
            if in_progress {
                return Err(conflict(
                    "rollout_in_progress",
                    format!(
                        "{model} already has a rollout in progress; complete or roll it back first"
                    ),
                ));
            }
            let release: Version = req
                .release
                .as_deref()
                .ok_or_else(|| ApiError::bad_request("rollout_invalid", "release is required"))?
                .parse()
                .map_err(|e| ApiError::bad_request("rollout_invalid", format!("release: {e}")))?;
            if catalog.release(model, &release).is_none() {
                return Err(ApiError::not_found(
                    "release_not_found",
                    format!("{model} {release} is not published"),
                ));
            }
            // The baseline: what a completed rollout made the baseline, else the newest
            // release older than the staged one.
            let baseline = current
                .filter(|p| p.state == RolloutState::Completed)
                .and_then(|p| p.baseline.clone())
                .filter(|b| *b < release)
                .or_else(|| {
                    catalog
                        .releases_newest_first(model)
                        .iter()
                        .map(|r| r.manifest.version.clone())
                        .find(|v| *v < release)
                });
            let defaults = Thresholds::default();
            RolloutPlan {
                model: model.to_string(),
                revision: 0,
                baseline,
                staged: Some(release),
                basis_points: percent(&req.percent)?,
                salt: salt(),
                state: RolloutState::Active,
                thresholds: Thresholds {
                    max_failure_rate: rate("max_failure_rate", req.max_failure_rate)?
                        .or(defaults.max_failure_rate),
                    max_fallback_rate: rate("max_fallback_rate", req.max_fallback_rate)?
                        .or(defaults.max_fallback_rate),
                    min_samples: req.min_samples.unwrap_or(defaults.min_samples),
                },
                action: String::new(),
                actor: String::new(),
                at: String::new(),
                reason: String::new(),
            }
        }
        (_, None) => {
            return Err(ApiError::not_found(
                "rollout_not_found",
                format!("{model} has no rollout"),
            ));
        }
        ("set", Some(p)) => {
            if p.state != RolloutState::Active || p.staged.is_none() {
                return Err(conflict(
                    "rollout_not_active",
                    format!(
                        "the rollout of {model} is {:?}; only an active rollout's percentage can change",
                        p.state
                    ),
                ));
            }
            RolloutPlan {
                basis_points: percent(&req.percent)?,
                ..p.clone()
            }
        }
        ("pause", Some(p)) => {
            if p.state != RolloutState::Active || p.staged.is_none() {
                return Err(conflict(
                    "rollout_not_active",
                    format!("the rollout of {model} is not active"),
                ));
            }
            RolloutPlan {
                state: RolloutState::Paused,
                ..p.clone()
            }
        }
        ("resume", Some(p)) => {
            if !matches!(p.state, RolloutState::Paused | RolloutState::Halted) || p.staged.is_none()
            {
                return Err(conflict(
                    "rollout_not_paused",
                    format!("the rollout of {model} is not paused or halted"),
                ));
            }
            RolloutPlan {
                state: RolloutState::Active,
                ..p.clone()
            }
        }
        ("rollback", Some(p)) => {
            if p.staged.is_none() || p.state == RolloutState::Completed {
                return Err(conflict(
                    "rollout_not_active",
                    format!("{model} has nothing to roll back"),
                ));
            }
            RolloutPlan {
                state: RolloutState::Halted,
                ..p.clone()
            }
        }
        ("complete", Some(p)) => {
            if !matches!(p.state, RolloutState::Active | RolloutState::Paused) || p.staged.is_none()
            {
                return Err(conflict(
                    "rollout_not_active",
                    format!("the rollout of {model} is not active"),
                ));
            }
            RolloutPlan {
                baseline: p.staged.clone(),
                staged: None,
                basis_points: FULL,
                state: RolloutState::Completed,
                ..p.clone()
            }
        }
        (other, Some(_)) => {
            return Err(ApiError::bad_request(
                "rollout_invalid",
                format!(
                    "unknown action {other:?}; use start, set, pause, resume, rollback or complete"
                ),
            ));
        }
    };
    next.revision = current.map_or(1, |p| p.revision + 1);
    next.action = req.action.clone();
    next.actor = actor.to_string();
    next.at = at.to_string();
    next.reason = reason;
    Ok(next)
}

/// Applies a change with optimistic concurrency (see [`revisions::append`]).
pub async fn apply(
    store: &Store,
    model: &ModelName,
    compute: impl Fn(Option<&RolloutPlan>) -> Result<RolloutPlan, ApiError>,
) -> Result<RolloutPlan, ApiError> {
    let (_, plan) =
        revisions::append(store, &prefix(model), |cur| compute(cur.map(|(_, p)| p))).await?;
    Ok(plan)
}
