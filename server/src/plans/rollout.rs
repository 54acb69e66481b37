//! Rollout state in the object store: an append-only log of immutable revisions.
//!
//! `state/<model>/rollout/<revision, 20 digits>.json` ([`StorageKey::rollout_log`]) holds one
//! [`RolloutPlan`] each, written
//! through [`revisions::append`] (create-if-absent, retried on a lost race): no update is ever
//! lost, on any backend, and the revisions are the history (who, when, what, why).

use std::collections::BTreeMap;

use ferry_shared::ModelName;
use ferry_shared::errors::ErrorCode;
use ferry_shared::manifest::ReleaseManifest;
use ferry_shared::select::rollout::{
    Context, Preview, RolloutChange, RolloutPlan, TransitionError, classes, on_publish, preview,
    transition,
};
use semver::Version;

use crate::storage::catalog::Catalog;
use crate::storage::{StorageKey, Store, StoreError, revisions};

/// Why a rollout change was refused.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// The state machine refused it.
    #[error(transparent)]
    Refused(#[from] TransitionError),
    /// The plan changed while an automatic change was being made.
    #[error("the rollout changed meanwhile")]
    Changed,
    /// The change was made for another revision than the one in force (`if_revision`).
    #[error(
        "the rollout is at revision {now} now, not {expected} as when this change was previewed \
         (someone else changed it): look at it again and preview again"
    )]
    Stale {
        /// The revision the caller saw.
        expected: u64,
        /// The revision in force.
        now: u64,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl RolloutError {
    /// The catalogue code.
    pub fn code(&self) -> ErrorCode {
        match self {
            RolloutError::Refused(e) => e.code(),
            RolloutError::Changed | RolloutError::Stale { .. } => ErrorCode::RolloutChanged,
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

/// A fresh salt for a new rollout's cohorts.
pub fn salt() -> String {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    hex::encode(b)
}

/// How a change is made: `dry_run` computes and previews it without writing; `if_revision`
/// makes it only if the plan in force is still that revision (0: no plan yet), so a change
/// previewed on one screen is not applied over another operator's newer one.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChangeMode {
    /// Preview only.
    pub dry_run: bool,
    /// The revision the change was made for.
    pub if_revision: Option<u64>,
}

/// Refuses a change made for another revision than `cur`'s.
fn check_revision(cur: Option<&RolloutPlan>, mode: ChangeMode) -> Result<(), RolloutError> {
    let now = cur.map_or(0, |p| p.revision);
    match mode.if_revision {
        Some(expected) if expected != now => Err(RolloutError::Stale { expected, now }),
        _ => Ok(()),
    }
}

/// Applies `change` to `model`'s rollout through the state machine (with optimistic
/// concurrency: a lost race recomputes from the winner's revision), returning the plan written
/// and the preview of what it changed. With `mode.dry_run`, computes both from the plan in
/// force now and writes nothing.
pub async fn change(
    store: &Store,
    catalog: &Catalog,
    model: &ModelName,
    change: &RolloutChange,
    (actor, at): (&str, &str),
    mode: ChangeMode,
) -> Result<(RolloutPlan, Preview), RolloutError> {
    let salt = salt();
    let releases = catalog.releases_newest_first(model);
    let published: Vec<&ReleaseManifest> = releases.iter().map(|r| &r.manifest).collect();
    let classes = classes(model, &published);
    let ctx = Context {
        model,
        published: &published,
        salt: &salt,
        actor,
        at,
        classes: Some(&classes),
    };
    if mode.dry_run {
        let current = revisions::latest::<RolloutPlan>(store, &StorageKey::rollout_log(model))
            .await?
            .map(|(_, p)| p);
        check_revision(current.as_ref(), mode)?;
        let next = transition(current.as_ref(), change, &ctx)?;
        let preview = preview(current.as_ref(), &next, &ctx);
        return Ok((next, preview));
    }
    let previous = std::sync::Mutex::new(None);
    let plan = apply(store, model, |cur| {
        check_revision(cur, mode)?;
        let next = transition(cur, change, &ctx)?;
        *ferry_shared::sync::lock(&previous) = cur.cloned();
        Ok(next)
    })
    .await?;
    let before = previous
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let preview = preview(before.as_ref(), &plan, &ctx);
    Ok((plan, preview))
}

/// Writes the plan revision that publishing `version` calls for (see [`on_publish`]): the first
/// release of a model becomes its baseline; later ones are published but not live unless
/// `goes_live`. Called before the release itself is stored, so no device is ever offered a
/// release the plan does not make live. Returns the revision written, if any.
pub async fn record_publish(
    store: &Store,
    catalog: &Catalog,
    model: &ModelName,
    version: &Version,
    goes_live: bool,
    actor: &str,
    at: &str,
) -> Result<Option<RolloutPlan>, StoreError> {
    let salt = salt();
    let releases = catalog.releases_newest_first(model);
    let published: Vec<&ReleaseManifest> = releases.iter().map(|r| &r.manifest).collect();
    let ctx = Context {
        model,
        published: &published,
        salt: &salt,
        actor,
        at,
        classes: None,
    };
    match apply(store, model, |cur| {
        on_publish(cur, version, goes_live, &ctx).ok_or(RolloutError::Changed)
    })
    .await
    {
        Ok(p) => Ok(Some(p)),
        Err(RolloutError::Changed | RolloutError::Stale { .. } | RolloutError::Refused(_)) => {
            Ok(None)
        }
        Err(RolloutError::Store(e)) => Err(e),
    }
}

/// Applies a change with optimistic concurrency (see [`revisions::append`]).
pub async fn apply(
    store: &Store,
    model: &ModelName,
    compute: impl Fn(Option<&RolloutPlan>) -> Result<RolloutPlan, RolloutError>,
) -> Result<RolloutPlan, RolloutError> {
    revisions::append_plan(store, &StorageKey::rollout_log(model), compute).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_shared::select::rollout::Thresholds;

    fn plan(at: &str) -> RolloutPlan {
        serde_json::from_value(serde_json::json!({
            "model": "m", "revision": 0, "baseline": "1.0.0", "staged": null,
            "basis_points": 0, "salt": "00", "state": "completed",
            "thresholds": serde_json::to_value(Thresholds::default()).expect("json"),
            "ramp": null, "pins": [], "withdrawn": [], "action": "set", "actor": "t",
            "at": at, "reason": "",
        }))
        .expect("a plan")
    }

    #[tokio::test]
    async fn revision_times_never_go_back() {
        let store: Store = std::sync::Arc::new(object_store::memory::InMemory::new());
        let model: ModelName = "m".parse().expect("name");
        // A replica whose clock is ahead wrote revision 1; a change first tried earlier (and
        // retried after losing the race to it) is not written as older.
        let ahead = "2026-12-07T10:00:00Z";
        apply(&store, &model, |_| Ok(plan(ahead))).await.expect("1");
        let second = apply(&store, &model, |_| Ok(plan("2026-12-07T09:59:59.999Z")))
            .await
            .expect("2");
        assert_eq!((second.revision, second.at.as_str()), (2, ahead));
        // A later time is kept as it is (fractions of a second compared as times).
        let later = "2026-12-07T10:00:00.5Z";
        let third = apply(&store, &model, |_| Ok(plan(later))).await.expect("3");
        assert_eq!(third.at, later);
        assert!(revisions::earlier("2026-12-07T10:00:00Z", later));
        assert!(!revisions::earlier(later, "2026-12-07T10:00:00Z"));
        assert!(!revisions::earlier("not a time", later));
    }
}
