//! What a publish does to a model's plan: the first release is live at once, later ones wait
//! (unless the server opts into `publish_goes_live`).

use semver::Version;

use crate::select::rollout::change::Context;
use crate::select::rollout::{FULL, RolloutPlan, RolloutState};

/// The plan revision a publish of `version` writes, if any: the first release of a model
/// becomes its baseline; a model published before plans existed adopts its newest release as
/// the baseline; with `goes_live`, a release newer than the baseline becomes the baseline when
/// nothing is staged. Otherwise the release is published but not live (`None`).
pub fn on_publish(
    current: Option<&RolloutPlan>,
    version: &Version,
    goes_live: bool,
    ctx: &Context<'_>,
) -> Option<RolloutPlan> {
    let fresh = |baseline: Version, reason: String| RolloutPlan {
        model: ctx.model.to_string(),
        revision: current.map_or(1, |p| p.revision + 1),
        baseline: Some(baseline),
        staged: None,
        basis_points: FULL,
        salt: current.map_or_else(|| ctx.salt.to_string(), |p| p.salt.clone()),
        state: RolloutState::Completed,
        thresholds: current.map(|p| p.thresholds).unwrap_or_default(),
        ramp: None,
        pins: current.map(|p| p.pins.clone()).unwrap_or_default(),
        withdrawn: current.map(|p| p.withdrawn.clone()).unwrap_or_default(),
        action: "publish".into(),
        actor: ctx.actor.to_string(),
        at: ctx.at.to_string(),
        reason,
    };
    let older = ctx.newest_first().into_iter().find(|v| v != version);
    match current {
        None => match older {
            None => Some(fresh(
                version.clone(),
                format!("{version} is the first release"),
            )),
            Some(newest) if goes_live && *version > newest => Some(fresh(
                version.clone(),
                format!("published with publish-goes-live on; {newest} was the newest"),
            )),
            Some(newest) => Some(fresh(
                newest.clone(),
                format!("{newest} was live before {version} was published"),
            )),
        },
        Some(p) => {
            let idle = p.staged.is_none() || p.state == RolloutState::Completed;
            let newer = p.baseline.as_ref().is_none_or(|b| version > b);
            (goes_live && idle && newer).then(|| RolloutPlan {
                staged: None,
                ..fresh(
                    version.clone(),
                    "published with publish-goes-live on and nothing staged".into(),
                )
            })
        }
    }
}
