//! Drives health-gated ramps and keeps rollout plans current: every `ramp_check_secs` each
//! replica re-reads the plans from the store, then asks the pure
//! [`ferry_shared::select::rollout::ramp::verdict`] about every ramping rollout and writes the
//! step or the halt it calls for.
//!
//! A step is written once however many replicas decide it at the same time: the write is the
//! next revision of the rollout log, computed only if the revision in force is still the one
//! the decision was made on (create-if-absent put); a replica that loses the race adopts the
//! winner's revision.
//!
//! Step health counts the fleet-wide telemetry (every replica's rollup, merged) since this
//! replica first saw the step (`marks.rs`).

use ferry_shared::ModelName;
use ferry_shared::select::rollout::ramp::{StepHealth, Verdict, advance, halt, verdict};
use ferry_shared::select::rollout::{RolloutPlan, RolloutState};
use time::OffsetDateTime;

use crate::fleet::Fleet;
use crate::plans::rollout::{self, RolloutError};
use crate::storage::revisions::now_text;
use crate::storage::{StorageKey, revisions};

/// What the ramp of `model` does now, as this replica sees it.
pub fn status(fleet: &Fleet, model: &ModelName, plan: &RolloutPlan) -> (Verdict, StepHealth) {
    let health = fleet.ramp_marks.step_health(&fleet.telemetry, model, plan);
    (verdict(plan, OffsetDateTime::now_utc(), &health), health)
}

/// Reloads the catalog when the store holds a different number of releases than this replica
/// knows (one list call; a release published through another replica is served here within
/// one pass instead of at the next full refresh).
async fn refresh_catalog_if_changed(fleet: &Fleet) {
    use futures_util::TryStreamExt as _;
    let listed: Result<Vec<_>, _> = fleet
        .store
        .list(Some(&StorageKey::releases_root()))
        .try_collect()
        .await;
    let Ok(listed) = listed else {
        return;
    };
    let in_store = listed
        .iter()
        .filter(|m| m.location.as_ref().ends_with(".json"))
        .count();
    let skipped = &fleet.ramp_marks.skipped_releases;
    let known = fleet.views.catalog.get().release_count()
        + skipped.load(std::sync::atomic::Ordering::Relaxed);
    if in_store == known {
        return;
    }
    match crate::storage::catalog::Catalog::refresh(
        &fleet.store,
        &fleet.views.keys.get().release_ring,
        &fleet.views.catalog.get(),
    )
    .await
    {
        Ok((c, s)) => {
            skipped.store(s.len(), std::sync::atomic::Ordering::Relaxed);
            fleet.views.catalog.replace(c);
        }
        Err(e) => tracing::warn!("catalog refresh failed: {e}"),
    }
}

/// One pass: re-reads every model's plans (its rollout plan, deny list and revocation lists, so
/// a change made through another replica is in force here within one pass), then acts on every
/// ramping rollout.
pub async fn tick(fleet: &Fleet) {
    // A keyring version another replica took (`ferry keys push`) comes into force here too.
    crate::fleet::refresh_keys(fleet).await;
    refresh_catalog_if_changed(fleet).await;
    let models = fleet.views.catalog.get().model_names();
    if let Err(e) = crate::fleet::load_state(fleet, models).await {
        tracing::warn!("plan refresh failed: {e}");
    }
    let plans = fleet.views.rollouts.get();
    for (model, plan) in plans.iter() {
        if plan.ramp.is_none() || plan.state != RolloutState::Active {
            continue;
        }
        let at = now_text();
        let (v, _) = status(fleet, model, plan);
        let make: Box<dyn Fn(&RolloutPlan) -> RolloutPlan + Send + Sync> = match v {
            Verdict::Advance { to } => Box::new(move |p| advance(p, to, &at)),
            Verdict::Halt { reason } => Box::new(move |p| halt(p, &reason, &at)),
            _ => continue,
        };
        let seen = plan.revision;
        let result = rollout::apply(&fleet.store, model, |cur| match cur {
            Some(p) if p.revision == seen => Ok(make(p)),
            _ => Err(RolloutError::Changed),
        })
        .await;
        match result {
            Ok(p) => {
                tracing::warn!(%model, action = p.action, reason = p.reason, "rollout ramp");
                fleet.set_rollout(model, p);
            }
            Err(RolloutError::Changed) => {
                // Another replica (or an operator) wrote first: adopt what is in force.
                match revisions::latest::<RolloutPlan>(
                    &fleet.store,
                    &StorageKey::rollout_log(model),
                )
                .await
                {
                    Ok(Some((_, p))) => fleet.set_rollout(model, p),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(%model, "rollout state reload failed: {e}"),
                }
            }
            Err(e) => tracing::error!(%model, "ramp step could not be written: {e}"),
        }
    }
}
