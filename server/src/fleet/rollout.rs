//! Rollout state in the object store: an append-only log of immutable revisions.
//!
//! `state/<model>/rollout/<revision, 20 digits>.json` ([`StorageKey::rollout_log`]) holds one
//! [`RolloutPlan`] each, written
//! through [`revisions::append`] (create-if-absent, retried on a lost race): no update is ever
//! lost, on any backend, and the revisions are the history (who, when, what, why).

use std::collections::BTreeMap;
use std::sync::Arc;

use ferry_shared::ModelName;
use ferry_shared::errors::ErrorCode;
use ferry_shared::resolve::Cohort;
use ferry_shared::rollout::{FULL, RolloutChange, RolloutPlan, RolloutState, Thresholds};
use semver::Version;

use crate::storage::catalog::{Catalog, Release};
use crate::storage::{StorageKey, Store, StoreError, revisions};

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

/// Longest reason kept in the history.
pub const MAX_REASON: usize = 1024;

/// Why a rollout change was refused.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// The change is malformed (bad rate, reason too long).
    #[error("{0}")]
    Invalid(String),
    /// `start` names a release that is not published.
    #[error("{model} {release} is not published")]
    ReleaseNotFound {
        /// Model.
        model: ModelName,
        /// Release.
        release: Version,
    },
    /// The model has no rollout to change.
    #[error("{0} has no rollout")]
    NotFound(ModelName),
    /// `start` while another rollout is active or paused.
    #[error("{0} already has a rollout in progress; complete or roll it back first")]
    InProgress(ModelName),
    /// The change needs an active rollout.
    #[error("{0}")]
    NotActive(String),
    /// `resume` of a rollout that is not paused or halted.
    #[error("the rollout of {0} is not paused or halted")]
    NotPaused(ModelName),
    /// The plan changed while an automatic change was being made.
    #[error("the rollout changed meanwhile")]
    Changed,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl RolloutError {
    /// The catalogue code.
    pub fn code(&self) -> ErrorCode {
        match self {
            RolloutError::Invalid(_) => ErrorCode::RolloutInvalid,
            RolloutError::ReleaseNotFound { .. } => ErrorCode::ReleaseNotFound,
            RolloutError::NotFound(_) => ErrorCode::RolloutNotFound,
            RolloutError::InProgress(_) => ErrorCode::RolloutInProgress,
            RolloutError::NotActive(_) => ErrorCode::RolloutNotActive,
            RolloutError::NotPaused(_) => ErrorCode::RolloutNotPaused,
            RolloutError::Changed => ErrorCode::RolloutChanged,
            RolloutError::Store(e) => e.code(),
        }
    }
}

/// Every revision of `model`'s plan, oldest first.
pub async fn history(store: &Store, model: &ModelName) -> Result<Vec<RolloutPlan>, StoreError> {
    Ok(revisions::all(store, &StorageKey::rollout_log(model))
        .await?
        .into_iter()
        .map(|(_, p)| p)
        .collect())
}

/// The newest plan of each model in `models`.
pub async fn load_all<'a>(
    store: &Store,
    models: impl Iterator<Item = &'a ModelName>,
) -> Result<BTreeMap<ModelName, RolloutPlan>, StoreError> {
    let mut out = BTreeMap::new();
    for m in models {
        if let Some((_, p)) =
            revisions::latest::<RolloutPlan>(store, &StorageKey::rollout_log(m)).await?
        {
            out.insert(m.clone(), p);
        }
    }
    Ok(out)
}

fn rate(name: &str, v: Option<f64>) -> Result<Option<f64>, RolloutError> {
    match v {
        Some(r) if !(0.0..=1.0).contains(&r) || r.is_nan() => Err(RolloutError::Invalid(format!(
            "{name} must be between 0 and 1"
        ))),
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
    change: &RolloutChange,
    model: &ModelName,
    catalog: &Catalog,
    actor: &str,
    at: &str,
) -> Result<RolloutPlan, RolloutError> {
    let reason = change.reason().unwrap_or_default().to_string();
    if reason.len() > MAX_REASON {
        return Err(RolloutError::Invalid(format!(
            "reason is at most {MAX_REASON} bytes"
        )));
    }
    let in_progress = current.is_some_and(|p| {
        p.staged.is_some() && matches!(p.state, RolloutState::Active | RolloutState::Paused)
    });
    let not_active = || RolloutError::NotActive(format!("the rollout of {model} is not active"));
    let mut next = match (change, current) {
        (
            RolloutChange::Start {
                release,
                percent,
                max_failure_rate,
                max_fallback_rate,
                min_samples,
                ..
            },
            _,
        ) => {
            if in_progress {
                return Err(RolloutError::InProgress(model.clone()));
            }
            if catalog.release(model, release).is_none() {
                return Err(RolloutError::ReleaseNotFound {
                    model: model.clone(),
                    release: release.clone(),
                });
            }
            // The baseline: what a completed rollout made the baseline, else the newest
            // release older than the staged one.
            let baseline = current
                .filter(|p| p.state == RolloutState::Completed)
                .and_then(|p| p.baseline.clone())
                .filter(|b| b < release)
                .or_else(|| {
                    catalog
                        .releases_newest_first(model)
                        .iter()
                        .map(|r| r.manifest.version.clone())
                        .find(|v| v < release)
                });
            let defaults = Thresholds::default();
            RolloutPlan {
                model: model.to_string(),
                revision: 0,
                baseline,
                staged: Some(release.clone()),
                basis_points: percent.basis_points(),
                salt: salt(),
                state: RolloutState::Active,
                thresholds: Thresholds {
                    max_failure_rate: rate("max_failure_rate", *max_failure_rate)?
                        .or(defaults.max_failure_rate),
                    max_fallback_rate: rate("max_fallback_rate", *max_fallback_rate)?
                        .or(defaults.max_fallback_rate),
                    min_samples: min_samples.unwrap_or(defaults.min_samples),
                },
                action: String::new(),
                actor: String::new(),
                at: String::new(),
                reason: String::new(),
            }
        }
        (_, None) => return Err(RolloutError::NotFound(model.clone())),
        (RolloutChange::Set { percent, .. }, Some(p)) => {
            if p.state != RolloutState::Active || p.staged.is_none() {
                return Err(RolloutError::NotActive(format!(
                    "the rollout of {model} is {:?}; only an active rollout's percentage can change",
                    p.state
                )));
            }
            RolloutPlan {
                basis_points: percent.basis_points(),
                ..p.clone()
            }
        }
        (RolloutChange::Pause { .. }, Some(p)) => {
            if p.state != RolloutState::Active || p.staged.is_none() {
                return Err(not_active());
            }
            RolloutPlan {
                state: RolloutState::Paused,
                ..p.clone()
            }
        }
        (RolloutChange::Resume { .. }, Some(p)) => {
            if !matches!(p.state, RolloutState::Paused | RolloutState::Halted) || p.staged.is_none()
            {
                return Err(RolloutError::NotPaused(model.clone()));
            }
            RolloutPlan {
                state: RolloutState::Active,
                ..p.clone()
            }
        }
        (RolloutChange::Rollback { .. }, Some(p)) => {
            if p.staged.is_none() || p.state == RolloutState::Completed {
                return Err(RolloutError::NotActive(format!(
                    "{model} has nothing to roll back"
                )));
            }
            RolloutPlan {
                state: RolloutState::Halted,
                ..p.clone()
            }
        }
        (RolloutChange::Complete { .. }, Some(p)) => {
            if !matches!(p.state, RolloutState::Active | RolloutState::Paused) || p.staged.is_none()
            {
                return Err(not_active());
            }
            RolloutPlan {
                baseline: p.staged.clone(),
                staged: None,
                basis_points: FULL,
                state: RolloutState::Completed,
                ..p.clone()
            }
        }
    };
    next.revision = current.map_or(1, |p| p.revision + 1);
    next.action = change.action().to_string();
    next.actor = actor.to_string();
    next.at = at.to_string();
    next.reason = reason;
    Ok(next)
}

/// Applies a change with optimistic concurrency (see [`revisions::append`]).
pub async fn apply(
    store: &Store,
    model: &ModelName,
    compute: impl Fn(Option<&RolloutPlan>) -> Result<RolloutPlan, RolloutError>,
) -> Result<RolloutPlan, RolloutError> {
    let (_, plan) = revisions::append(store, &StorageKey::rollout_log(model), |cur| {
        compute(cur.map(|(_, p)| p))
    })
    .await?;
    Ok(plan)
}
