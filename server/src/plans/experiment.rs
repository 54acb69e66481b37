//! Experiment plans in the object store: `state/<model>/experiment/<revision>.json`
//! ([`StorageKey::experiment_log`]), one [`ExperimentPlan`] per revision, written through
//! [`revisions::append`] like the rollout plans. The newest revision is the experiment in force
//! (running or stopped); all of them are the history (who started and stopped what, and why).

use std::collections::BTreeMap;

use ferry_shared::ModelName;
use ferry_shared::errors::ErrorCode;
use ferry_shared::experiment::ExperimentPlan;
use ferry_shared::experiment::change::{ExperimentError, Made};

use crate::storage::{StorageKey, Store, StoreError, revisions};

/// Why an experiment change failed.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The change was refused.
    #[error(transparent)]
    Refused(#[from] ExperimentError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl PlanError {
    /// The catalogue code.
    pub fn code(&self) -> ErrorCode {
        match self {
            PlanError::Refused(e) => e.code(),
            PlanError::Store(e) => e.code(),
        }
    }
}

/// Every revision of `model`'s experiment plans, oldest first.
pub async fn history(store: &Store, model: &ModelName) -> Result<Vec<ExperimentPlan>, StoreError> {
    Ok(revisions::all(store, &StorageKey::experiment_log(model))
        .await?
        .into_iter()
        .map(|(_, p)| p)
        .collect())
}

/// The newest plan of `model`.
pub async fn latest(
    store: &Store,
    model: &ModelName,
) -> Result<Option<ExperimentPlan>, StoreError> {
    Ok(
        revisions::latest::<ExperimentPlan>(store, &StorageKey::experiment_log(model))
            .await?
            .map(|(_, p)| p),
    )
}

/// The newest plan of each model in `models` that has one.
pub async fn load_all<'a>(
    store: &Store,
    models: impl Iterator<Item = &'a ModelName>,
) -> Result<BTreeMap<ModelName, ExperimentPlan>, StoreError> {
    let mut out = BTreeMap::new();
    for m in models {
        if let Some(p) = latest(store, m).await? {
            out.insert(m.clone(), p);
        }
    }
    Ok(out)
}

/// Fresh randomness for an experiment's id and salt.
pub fn random() -> String {
    let mut b = [0u8; 16];
    let _ = getrandom::fill(&mut b);
    hex::encode(b)
}

/// Writes the next revision `compute` makes of the plan in force (retrying lost races, as the
/// rollout plans do); the revision number is the one it is stored under.
pub async fn apply(
    store: &Store,
    model: &ModelName,
    compute: impl Fn(Option<&ExperimentPlan>) -> Result<ExperimentPlan, ExperimentError>,
) -> Result<ExperimentPlan, PlanError> {
    revisions::append_plan(store, &StorageKey::experiment_log(model), |cur| {
        compute(cur).map_err(PlanError::from)
    })
    .await
}

/// Who makes a change, and when.
pub fn made<'a>(model: &'a ModelName, actor: &'a str, at: &'a str, random: &'a str) -> Made<'a> {
    Made {
        model: model.as_str(),
        actor,
        at,
        random,
    }
}
