//! The checks that run after telemetry: halt a staged release over its thresholds, and deny a
//! variant to a device class whose fallback rate crosses the deny threshold.

use actix_web::http::StatusCode;
use ferry_shared::ModelName;
use ferry_shared::rollout::{RolloutPlan, RolloutState};

use crate::api::error::ApiError;
use crate::app::AppState;
use crate::fleet::deny::{DenyEntry, DenyList, deny_prefix};
use crate::fleet::{now_text, rollout};
use crate::storage::revisions;

/// Checks `model`'s aggregates: halts a staged release over its thresholds and denies
/// variants to device classes over the fallback threshold. Errors are logged, never returned:
/// telemetry must not fail because state could not be written (the next batch retries).
pub async fn evaluate(state: &AppState, model: &ModelName) {
    let plans = state.rollouts();
    if let Some(plan) = plans.get(model)
        && plan.state == RolloutState::Active
        && let Some(staged) = &plan.staged
    {
        let (loads, failures, fallbacks) = state
            .telemetry
            .release_totals(model.as_str(), &staged.to_string());
        let t = plan.thresholds;
        if loads >= t.min_samples && loads > 0 {
            let fr = failures as f64 / loads as f64;
            let fb = fallbacks as f64 / loads as f64;
            let why = match (t.max_failure_rate, t.max_fallback_rate) {
                (Some(max), _) if fr > max => Some(format!(
                    "load-failure rate {:.1}% of {staged} exceeds {:.1}% (n={loads})",
                    fr * 100.0,
                    max * 100.0
                )),
                (_, Some(max)) if fb > max => Some(format!(
                    "fallback rate {:.1}% of {staged} exceeds {:.1}% (n={loads})",
                    fb * 100.0,
                    max * 100.0
                )),
                _ => None,
            };
            if let Some(reason) = why {
                let at = now_text();
                let staged = staged.clone();
                let result = rollout::apply(&state.store, model, |cur| match cur {
                    Some(p)
                        if p.state == RolloutState::Active
                            && p.staged.as_ref() == Some(&staged) =>
                    {
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
                    _ => Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "rollout_changed",
                        "the rollout changed meanwhile",
                    )),
                })
                .await;
                match result {
                    Ok(p) => {
                        tracing::warn!(%model, reason, "rollout halted automatically");
                        state.set_rollout(model, p);
                    }
                    Err(e) if e.code == "rollout_changed" => {}
                    Err(e) => tracing::error!(%model, "automatic halt could not be written: {e}"),
                }
            }
        }
    }
    let candidates = state
        .telemetry
        .deny_candidates(model.as_str(), &state.config.telemetry);
    if candidates.is_empty() {
        return;
    }
    let current = state.deny_lists().get(model).cloned().unwrap_or_default();
    let same = |a: &DenyEntry, b: &DenyEntry| {
        a.release == b.release && a.variant == b.variant && a.class == b.class && a.value == b.value
    };
    let fresh: Vec<DenyEntry> = candidates
        .into_iter()
        .filter(|c| !current.iter().any(|e| same(e, c)))
        .collect();
    if fresh.is_empty() {
        return;
    }
    let at = now_text();
    let result = revisions::append::<DenyList>(&state.store, &deny_prefix(model), |cur| {
        let mut entries = cur.map(|(_, l)| l.entries.clone()).unwrap_or_default();
        for c in &fresh {
            if !entries.iter().any(|e| same(e, c)) {
                entries.push(c.clone());
            }
        }
        Ok(DenyList {
            entries,
            action: "telemetry".into(),
            actor: "ferry".into(),
            at: at.clone(),
        })
    })
    .await;
    match result {
        Ok((_, list)) => {
            for c in &fresh {
                tracing::warn!(%model, "{} {}: {}", c.release, c.variant, c.reason());
            }
            state.set_deny(model, list.entries);
        }
        Err(e) => tracing::error!(%model, "deny list could not be written: {e}"),
    }
}
