//! Where an install id stands in a model's rollout, for `?explain=true`: the staged release,
//! its share, this install id's cohort and pin, and what that means in one sentence. Pure.

use ferry_shared::select::rollout::{Pin, RolloutPlan, RolloutState, format_percent};
use ferry_shared::wire::resolve::{Cohort, RolloutStance};

/// The stance of an install id in `cohort` (and `pin`) under `plan`, which gets `release`.
pub fn stance(
    plan: Option<&RolloutPlan>,
    cohort: Cohort,
    pin: Option<&Pin>,
    release: &str,
) -> RolloutStance {
    let cohort_name = match cohort {
        Cohort::Staged => "staged",
        Cohort::Baseline => "baseline",
    };
    let live = plan.filter(|p| p.cohort_is_live());
    let summary = match (live, pin) {
        (_, Some(pin)) => format!(
            "this install id is pinned to {} (a test device); it gets {release}",
            pin.release
        ),
        (Some(p), None) => format!(
            "{} is staged at {}% ({}); this install id is in the {cohort_name} cohort and gets \
             {release}",
            p.staged
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            format_percent(p.basis_points),
            p.state.as_str(),
        ),
        (None, None) => match plan {
            Some(p) if p.state == RolloutState::Halted && p.staged.is_some() => format!(
                "the rollout of {} is halted: every install id gets the baseline, {release}",
                p.staged
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ),
            _ => format!("nothing is staged: every install id gets {release}"),
        },
    };
    RolloutStance {
        state: plan.map(|p| p.state.as_str().to_string()),
        staged: live
            .and_then(|p| p.staged.as_ref())
            .map(ToString::to_string),
        percent: live.map(|p| format_percent(p.basis_points)),
        cohort,
        pinned: pin.map(|p| p.release.to_string()),
        summary,
    }
}
