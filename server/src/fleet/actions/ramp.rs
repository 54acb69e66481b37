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
//! replica first saw the step (the marks below).

use std::collections::HashMap;
use std::sync::Mutex;

use ferry_shared::ModelName;
use ferry_shared::select::rollout::ramp::{StepHealth, Verdict, advance, halt, verdict};
use ferry_shared::select::rollout::{RolloutPlan, RolloutState};
use time::OffsetDateTime;

use crate::fleet::Fleet;
use crate::plans::rollout::{self, RolloutError};
use crate::storage::revisions::now_text;
use crate::storage::{StorageKey, revisions};

/// Loads, failures and fallbacks.
type Counts = (u64, u64, u64);

/// Totals of the staged and the baseline release.
type Totals = [Counts; 2];

/// Per step (model, salt, step index, when the step began — a `resume` begins it again): the
/// totals when this replica first saw the step.
#[derive(Debug, Default)]
pub struct RampMarks {
    marks: Mutex<HashMap<(String, String, usize, String), Totals>>,
    /// Per model: the plan revision this replica saw last and the staged release's totals
    /// when it first saw it (automatic halts count from there, so a `resume` or `set` starts
    /// a fresh window instead of being halted again by the counts that halted it).
    revisions: Mutex<HashMap<String, (u64, Counts)>>,
    /// Release files the last catalog reload skipped (unreadable or untrusted), so that they
    /// do not make every pass reload the catalog.
    skipped_releases: std::sync::atomic::AtomicUsize,
}

impl RampMarks {
    /// Notes that `plan` is in force for `model`: takes the staged release's totals as the
    /// start of its window when the revision is new to this replica.
    pub fn note_revision(
        &self,
        telemetry: &crate::fleet::intake::aggregate::Telemetry,
        model: &ModelName,
        plan: &RolloutPlan,
    ) {
        let mut marks = ferry_shared::sync::lock(&self.revisions);
        if marks
            .get(model.as_str())
            .is_some_and(|(rev, _)| *rev == plan.revision)
        {
            return;
        }
        let totals = plan.staged.as_ref().map_or((0, 0, 0), |v| {
            telemetry.release_totals(model.as_str(), &v.to_string())
        });
        marks.insert(model.to_string(), (plan.revision, totals));
    }

    /// The staged release's loads, failures and fallbacks since this replica first saw
    /// `plan`'s revision, given its totals `now` (everything, when it has not seen it yet).
    pub fn since_revision(&self, model: &ModelName, plan: &RolloutPlan, now: Counts) -> Counts {
        let mark = ferry_shared::sync::lock(&self.revisions)
            .get(model.as_str())
            .copied();
        match mark {
            Some((rev, m)) if rev == plan.revision => (
                now.0.saturating_sub(m.0),
                now.1.saturating_sub(m.1),
                now.2.saturating_sub(m.2),
            ),
            _ => now,
        }
    }

    /// The health of `plan`'s current step: totals now minus the totals at the step's mark
    /// (taken now when this is the first look at the step).
    pub fn step_health(&self, fleet: &Fleet, model: &ModelName, plan: &RolloutPlan) -> StepHealth {
        let Some(ramp) = plan.ramp.as_ref() else {
            return StepHealth::default();
        };
        let version = |v: &Option<semver::Version>| v.as_ref().map(ToString::to_string);
        let totals = |v: Option<String>| {
            v.map_or((0, 0, 0), |v| {
                fleet.telemetry.release_totals(model.as_str(), &v)
            })
        };
        let now: Totals = [
            totals(version(&plan.staged)),
            totals(version(&plan.baseline)),
        ];
        let key = (
            model.to_string(),
            plan.salt.clone(),
            ramp.step,
            ramp.step_started.clone(),
        );
        let mark = {
            let mut g = ferry_shared::sync::lock(&self.marks);
            if g.len() > 10_000 {
                g.clear();
            }
            *g.entry(key).or_insert(now)
        };
        let d = |i: usize| {
            (
                now[i].0.saturating_sub(mark[i].0),
                now[i].1.saturating_sub(mark[i].1),
                now[i].2.saturating_sub(mark[i].2),
            )
        };
        let (s, b) = (d(0), d(1));
        // Field latency since this revision (a resume starts afresh), only when the ramp
        // has a latency gate.
        let since = OffsetDateTime::parse(&plan.at, &time::format_description::well_known::Rfc3339)
            .map_or(0, OffsetDateTime::unix_timestamp);
        let latency = match (
            plan.thresholds.max_latency_ratio,
            version(&plan.staged),
            version(&plan.baseline),
        ) {
            (Some(_), Some(staged), Some(baseline)) => crate::fleet::counts::gates::compare(
                &fleet.telemetry.window(model.as_str(), since).0,
                model.as_str(),
                &staged,
                &baseline,
            ),
            _ => None,
        };
        StepHealth {
            loads: s.0,
            failures: s.1,
            fallbacks: s.2,
            baseline_loads: b.0,
            baseline_failures: b.1,
            baseline_fallbacks: b.2,
            latency,
        }
    }
}

/// What the ramp of `model` does now, as this replica sees it.
pub fn status(fleet: &Fleet, model: &ModelName, plan: &RolloutPlan) -> (Verdict, StepHealth) {
    let health = fleet.ramp_marks.step_health(fleet, model, plan);
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
