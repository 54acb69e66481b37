//! The checks that run after telemetry: halt a staged release over its thresholds, and deny a
//! variant to a device class whose fallback rate crosses the deny threshold.

use ferry_shared::ModelName;
use ferry_shared::select::rollout::{RolloutPlan, RolloutState};

use std::sync::Arc;

use crate::fleet::Fleet;
use crate::plans::rollout;
use crate::plans::rollout::RolloutError;
use crate::storage::revisions::now_text;

/// Evaluates the models telemetry asked for, as they are asked for; runs until the server stops.
pub async fn run_queue(fleet: Arc<Fleet>) {
    loop {
        fleet.evaluations.woken().await;
        // Every request counted here inserted its model before counting: the take below sees it.
        let upto = fleet.evaluations.asked();
        for model in fleet.evaluations.take() {
            evaluate(&fleet, &model).await;
        }
        fleet.evaluations.done_up_to(upto);
    }
}

/// Why the staged release should be halted, given its loads, failures and fallbacks since the
/// rollout's revision and the distinct devices that reported on it: `None` while it is within
/// the thresholds or has too few samples. The samples must come from enough devices that no
/// few of them can halt a rollout (each weighs at most `PER_DEVICE_EVENTS` an hour).
pub fn halt_reason(
    t: &ferry_shared::select::rollout::Thresholds,
    staged: &semver::Version,
    (loads, failures, fallbacks): (u64, u64, u64),
    devices: u64,
) -> Option<String> {
    let devices_needed = t
        .min_samples
        .div_ceil(u64::from(
            crate::fleet::intake::aggregate::PER_DEVICE_EVENTS,
        ))
        .max(1);
    if loads < t.min_samples || loads == 0 || devices < devices_needed {
        return None;
    }
    let fr = failures.min(loads) as f64 / loads as f64;
    let fb = fallbacks.min(loads) as f64 / loads as f64;
    // With sequential gates, over the limit beyond chance (however often this is checked).
    let beyond = |x: u64, max: f64| {
        !t.sequential || ferry_shared::experiment::gates::rate_above(x, loads, max)
    };
    let chance = if t.sequential { ", beyond chance" } else { "" };
    match (t.max_failure_rate, t.max_fallback_rate) {
        (Some(max), _) if fr > max && beyond(failures, max) => Some(format!(
            "load-failure rate {:.1}% of {staged} exceeds {:.1}% (n={loads}){chance}",
            fr * 100.0,
            max * 100.0
        )),
        (_, Some(max)) if fb > max && beyond(fallbacks, max) => Some(format!(
            "fallback rate {:.1}% of {staged} exceeds {:.1}% (n={loads}){chance}",
            fb * 100.0,
            max * 100.0
        )),
        _ => None,
    }
}

/// Why the crash gate halts `plan`'s staged release: its crashes since the plan's revision
/// (looked at only once the whole fleet view has enough crashed devices on it).
fn crash_reason(
    fleet: &Fleet,
    model: &ModelName,
    plan: &RolloutPlan,
    view: &crate::fleet::counts::rollup::Rollup,
) -> Option<String> {
    plan.thresholds.max_crash_rate?;
    let staged = plan.staged.as_ref()?.to_string();
    let (crashed, _) = view.release_crash_devices(model.as_str(), &staged);
    if crashed < ferry_shared::select::rollout::crash_devices_needed(&plan.thresholds) {
        return None;
    }
    let since =
        time::OffsetDateTime::parse(&plan.at, &time::format_description::well_known::Rfc3339)
            .map_or(0, time::OffsetDateTime::unix_timestamp);
    let (window, _) = fleet.telemetry.window(model.as_str(), since);
    let baseline = plan.baseline.as_ref().map(ToString::to_string);
    crate::fleet::counts::gates::crash_compare(
        &window,
        model.as_str(),
        &staged,
        baseline.as_deref(),
    )
    .halt_reason(&plan.thresholds, &staged)
}

/// Checks `model`'s aggregates: halts a staged release over its thresholds and denies
/// variants to device classes over the fallback threshold. Errors are logged, never returned:
/// telemetry must not fail because state could not be written (the next batch retries).
pub async fn evaluate(fleet: &Fleet, model: &ModelName) {
    // One fleet-wide view for both checks.
    let view = fleet.telemetry.fleet(model.as_str());
    let plans = fleet.views.rollouts.get();
    if let Some(plan) = plans.get(model)
        && plan.state == RolloutState::Active
        && let Some(staged) = &plan.staged
    {
        // Since this revision began (a resume starts a fresh window), fleet-wide.
        let now = view.release_totals(model.as_str(), &staged.to_string());
        let (loads, failures, fallbacks) = fleet.ramp_marks.since_revision(model, plan, now);
        let devices = view.release_devices(model.as_str(), &staged.to_string());
        let why = crash_reason(fleet, model, plan, &view).or_else(|| {
            halt_reason(
                &plan.thresholds,
                staged,
                (loads, failures, fallbacks),
                devices,
            )
        });
        {
            if let Some(reason) = why {
                let at = now_text();
                // Written only over the revision the rates were counted for: a replica that has
                // not yet seen a later change (a resume, a new rollout) must not halt it.
                let seen = plan.revision;
                let result = rollout::apply(&fleet.store, model, |cur| match cur {
                    Some(p) if p.revision == seen && p.state == RolloutState::Active => {
                        Ok(RolloutPlan {
                            revision: p.revision + 1,
                            state: RolloutState::Halted,
                            action: "auto-halt".into(),
                            actor: "ferry".into(),
                            at: at.clone(),
                            reason: reason.clone(),
                            ..p.clone()
                        })
                    }
                    _ => Err(RolloutError::Changed),
                })
                .await;
                match result {
                    Ok(p) => {
                        tracing::warn!(%model, reason, "rollout halted automatically");
                        fleet.set_rollout(model, p);
                    }
                    Err(RolloutError::Changed) => {
                        // Another replica or an operator wrote first: adopt what is in force.
                        match crate::storage::revisions::latest::<RolloutPlan>(
                            &fleet.store,
                            &crate::storage::StorageKey::rollout_log(model),
                        )
                        .await
                        {
                            Ok(Some((_, p))) => fleet.set_rollout(model, p),
                            Ok(None) => {}
                            Err(e) => tracing::warn!(%model, "rollout state reload failed: {e}"),
                        }
                    }
                    Err(e) => tracing::error!(%model, "automatic halt could not be written: {e}"),
                }
            }
        }
    }
    crate::fleet::actions::learn::learn(fleet, model, &view).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_halt_needs_the_samples_from_enough_devices() {
        let t = ferry_shared::select::rollout::Thresholds {
            max_failure_rate: Some(0.05),
            max_fallback_rate: None,
            min_samples: 100,
            max_regression: None,
            max_latency_ratio: None,
            max_crash_rate: None,
            sequential: false,
        };
        let v = semver::Version::new(2, 0, 0);
        // 100 failing loads: from 12 devices (at most 8 an hour each, so over hours) they halt
        // nothing; from 13 they do.
        assert_eq!(halt_reason(&t, &v, (100, 100, 0), 12), None);
        let why = halt_reason(&t, &v, (100, 100, 0), 13).expect("halt");
        assert!(why.contains("load-failure rate 100.0%"), "{why}");
        // Too few samples, or within the threshold.
        assert_eq!(halt_reason(&t, &v, (99, 99, 0), 500), None);
        assert_eq!(halt_reason(&t, &v, (1000, 50, 0), 500), None);
    }

    #[test]
    fn sequential_gates_halt_on_a_rate_over_its_limit_beyond_chance_only() {
        let t = ferry_shared::select::rollout::Thresholds {
            max_fallback_rate: None,
            max_crash_rate: None,
            sequential: true,
            ..Default::default()
        };
        let v = semver::Version::new(2, 0, 0);
        // 8% of 100 loads is over 5% but within chance; the fixed gate halts on it.
        assert_eq!(halt_reason(&t, &v, (100, 8, 0), 500), None);
        let fixed = ferry_shared::select::rollout::Thresholds {
            sequential: false,
            ..t
        };
        assert!(halt_reason(&fixed, &v, (100, 8, 0), 500).is_some());
        // 30% of 200 is not chance.
        let why = halt_reason(&t, &v, (200, 60, 0), 500).expect("halt");
        assert!(why.contains("beyond chance"), "{why}");
    }
}
