//! The rollout state machine: from the plan in force and an operator's change to the next plan,
//! or a refusal that says why. Pure: the published releases, the salt for a new rollout and the
//! time come in through [`Context`].
//!
//! | from (state, staged?) | `start V` | `set` | `pause` | `resume` | `rollback` | `complete` | `revert --to V` |
//! |---|---|---|---|---|---|---|---|
//! | no plan, or completed | active, V staged | refused | refused | refused | refused | refused | baseline V |
//! | active | only `supersede` | active | paused | refused | halted | completed | baseline V |
//! | paused | only `supersede` | refused | refused | active | halted | completed | baseline V |
//! | halted | active, V staged | refused | refused | active | refused | refused | baseline V |
//!
//! `pin` and `unpin` (a test device gets a named release first) are allowed whenever a plan
//! exists and change nothing else.
//!
//! Guards on every accepted change:
//! - a staged release is published and newer than the baseline (and than the release it
//!   supersedes): `rollout_not_newer`;
//! - the baseline only moves back through `revert`, to a published release older than it, with
//!   a reason;
//! - on a move forward (`start`, a larger `set`, `resume`, `complete`), no device class that has
//!   a compatible live variant before the change is left without one after it, in any cohort
//!   it can be in: `rollout_strands_devices`, naming the class, unless the change says
//!   `allow_strand` with a reason. The way back (`pause`, `rollback`, `revert`, a smaller
//!   `set`) is never refused for it: the classes it strands are in the preview.

use semver::Version;

use crate::names::ModelName;
use crate::select::rollout::Ramp;
pub use crate::select::rollout::change::{Context, MAX_REASON, TransitionError};
use crate::select::rollout::change::{baseline_of, rate};
use crate::select::rollout::guard::check_strands;
use crate::select::rollout::{
    FULL, MAX_PINS, Percent, Pin, RolloutChange, RolloutPlan, RolloutState, Thresholds,
};

/// Computes the plan that `change` makes of `current`, or refuses it.
pub fn transition(
    current: Option<&RolloutPlan>,
    change: &RolloutChange,
    ctx: &Context<'_>,
) -> Result<RolloutPlan, TransitionError> {
    let next = next_plan(current, change, ctx)?;
    // The way back is never blocked: in an incident an operator must always be able to pause,
    // roll back, shrink the share or revert. The classes that lose their variant on the way
    // are said (the preview's `stranded`), not forbidden. Pins touch test devices only.
    if way_back(current, change, &next) {
        return Ok(next);
    }
    if change.allows_strand() {
        if change.reason().is_none_or(|r| r.trim().is_empty()) {
            return Err(TransitionError::Invalid(
                "allow_strand needs a reason: it is the record of the device classes left \
                 without a variant"
                    .into(),
            ));
        }
    } else {
        check_strands(current, &next, ctx)?;
    }
    Ok(next)
}

/// Whether `change` takes devices back (or touches test devices only): pause, rollback,
/// revert, a smaller share, pins.
fn way_back(current: Option<&RolloutPlan>, change: &RolloutChange, next: &RolloutPlan) -> bool {
    match change {
        RolloutChange::Pause { .. }
        | RolloutChange::Pin { .. }
        | RolloutChange::Unpin { .. }
        | RolloutChange::Rollback { .. }
        | RolloutChange::Revert { .. } => true,
        RolloutChange::Set { .. } => current.is_some_and(|p| next.basis_points <= p.basis_points),
        _ => false,
    }
}

fn next_plan(
    current: Option<&RolloutPlan>,
    change: &RolloutChange,
    ctx: &Context<'_>,
) -> Result<RolloutPlan, TransitionError> {
    let model = ctx.model;
    let reason = change.reason().unwrap_or_default().to_string();
    if crate::names::longer_than(&reason, MAX_REASON) {
        return Err(TransitionError::Invalid(format!(
            "reason is at most {MAX_REASON} characters"
        )));
    }
    let mut next = match (change, current) {
        (RolloutChange::Start { .. }, _) => start(current, change, ctx)?,
        (RolloutChange::Revert { to, reason }, _) => revert(current, to, reason, ctx)?,
        (_, None) => return Err(TransitionError::NotFound(model.clone())),
        (
            RolloutChange::Pin {
                install_id,
                release,
                expires_secs,
                ..
            },
            Some(p),
        ) => pin(p, install_id, release, *expires_secs, ctx)?,
        (RolloutChange::Unpin { install_id, .. }, Some(p)) => unpin(p, install_id)?,
        (RolloutChange::Set { percent, .. }, Some(p)) => set(p, percent.basis_points(), model)?,
        (RolloutChange::Pause { .. }, Some(p)) => pause(p, model)?,
        (RolloutChange::Resume { .. }, Some(p)) => resume(p, ctx)?,
        (RolloutChange::Rollback { .. }, Some(p)) => rollback(p, model)?,
        (RolloutChange::Complete { .. }, Some(p)) => complete(p, model)?,
    };
    next.model = model.to_string();
    next.revision = current.map_or(1, |p| p.revision + 1);
    next.action = change.action().to_string();
    next.actor = ctx.actor.to_string();
    next.at = ctx.at.to_string();
    next.reason = reason;
    Ok(next)
}

fn not_active(model: &ModelName) -> TransitionError {
    TransitionError::NotActive(format!("the rollout of {model} is not active"))
}

/// `start`: thresholds and the first step checked, then the release against what is staged
/// and the baseline.
fn start(
    current: Option<&RolloutPlan>,
    change: &RolloutChange,
    ctx: &Context<'_>,
) -> Result<RolloutPlan, TransitionError> {
    let RolloutChange::Start {
        release,
        percent,
        steps,
        every_secs,
        max_failure_rate,
        max_fallback_rate,
        min_samples,
        max_regression,
        max_latency_ratio,
        max_crash_rate,
        sequential_gates,
        supersede,
        ..
    } = change
    else {
        return Err(TransitionError::Invalid("not a start".into()));
    };
    let model = ctx.model;
    let baseline = baseline_of(current, ctx);
    let in_progress = current.filter(|p| p.cohort_is_live());
    let thresholds = start_thresholds(
        *max_failure_rate,
        *max_fallback_rate,
        *min_samples,
        *max_regression,
        *max_latency_ratio,
        *max_crash_rate,
        *sequential_gates,
    )?;
    let (basis_points, ramp) = first_step(percent.as_ref(), steps.as_deref(), *every_secs, ctx)?;
    if !ctx.is_published(release) {
        return Err(TransitionError::ReleaseNotFound {
            model: model.clone(),
            release: release.clone(),
        });
    }
    let mut salt = ctx.salt.to_string();
    if let Some(p) = in_progress
        && let Some(staged) = &p.staged
    {
        if !supersede {
            return Err(TransitionError::InProgress {
                model: model.clone(),
                staged: staged.clone(),
            });
        }
        if release <= staged {
            return Err(TransitionError::NotNewer {
                release: release.clone(),
                than: staged.clone(),
                what: "the staged release it would supersede",
            });
        }
        salt = p.salt.clone();
    }
    if let Some(b) = &baseline
        && release == b
    {
        return Err(TransitionError::NotNewer {
            release: release.clone(),
            than: b.clone(),
            what: "it already is the baseline: every device not staged gets it",
        });
    }
    if let Some(b) = &baseline
        && release < b
    {
        return Err(TransitionError::NotNewer {
            release: release.clone(),
            than: b.clone(),
            what: "the baseline",
        });
    }
    // A release staged before and not completed is withdrawn as this one replaces it.
    let mut withdrawn = current.map(|p| p.withdrawn.clone()).unwrap_or_default();
    if let Some(p) = current
        && p.state != RolloutState::Completed
        && let Some(old) = &p.staged
        && old != release
        && !withdrawn.contains(old)
    {
        withdrawn.push(old.clone());
    }
    withdrawn.retain(|v| v != release);
    Ok(RolloutPlan {
        model: model.to_string(),
        revision: 0,
        baseline,
        staged: Some(release.clone()),
        basis_points,
        salt,
        state: RolloutState::Active,
        thresholds,
        ramp,
        pins: current.map(|p| p.pins.clone()).unwrap_or_default(),
        withdrawn,
        action: String::new(),
        actor: String::new(),
        at: String::new(),
        reason: String::new(),
    })
}

/// The health thresholds a `start` sets (defaults where not given).
fn start_thresholds(
    max_failure_rate: Option<f64>,
    max_fallback_rate: Option<f64>,
    min_samples: Option<u64>,
    max_regression: Option<f64>,
    max_latency_ratio: Option<f64>,
    max_crash_rate: Option<f64>,
    sequential: bool,
) -> Result<Thresholds, TransitionError> {
    let defaults = Thresholds::default();
    for (name, k) in [
        ("max_regression", max_regression),
        ("max_latency_ratio", max_latency_ratio),
    ] {
        if let Some(k) = k
            && !(k.is_finite() && (1.0..=1000.0).contains(&k))
        {
            return Err(TransitionError::Invalid(format!(
                "{name} must be a number from 1 to 1000 (1.5 = 50% worse)"
            )));
        }
    }
    Ok(Thresholds {
        max_failure_rate: rate("max_failure_rate", max_failure_rate)?.or(defaults.max_failure_rate),
        max_fallback_rate: rate("max_fallback_rate", max_fallback_rate)?
            .or(defaults.max_fallback_rate),
        min_samples: min_samples.unwrap_or(defaults.min_samples),
        max_regression,
        max_latency_ratio,
        max_crash_rate: rate("max_crash_rate", max_crash_rate)?.or(defaults.max_crash_rate),
        sequential,
    })
}

/// The share a `start` stages at first, and its ramp when it has steps.
fn first_step(
    percent: Option<&Percent>,
    steps: Option<&[Percent]>,
    every_secs: Option<u64>,
    ctx: &Context<'_>,
) -> Result<(u32, Option<Ramp>), TransitionError> {
    match (percent, steps, every_secs) {
        (Some(p), None, None) => Ok((p.basis_points(), None)),
        (None, Some(steps), Some(every)) => {
            let bps: Vec<u32> = steps.iter().map(|p| p.basis_points()).collect();
            Ramp::validate(&bps, every).map_err(TransitionError::Invalid)?;
            let ramp = Ramp {
                steps: bps.clone(),
                every_secs: every,
                step: 0,
                step_started: ctx.at.to_string(),
            };
            Ok((bps[0], Some(ramp)))
        }
        (None, Some(_), None) => Err(TransitionError::Invalid(
            "a ramp needs --every (how long each step is in force)".into(),
        )),
        _ => Err(TransitionError::Invalid(
            "give either --percent, or --steps with --every".into(),
        )),
    }
}

/// `revert --to V`: the baseline moves back to an older published release, with a reason.
fn revert(
    current: Option<&RolloutPlan>,
    to: &Version,
    reason: &str,
    ctx: &Context<'_>,
) -> Result<RolloutPlan, TransitionError> {
    let model = ctx.model;
    let baseline = baseline_of(current, ctx);
    if reason.trim().is_empty() {
        return Err(TransitionError::Invalid(
            "revert needs a reason: it is the record of the downgrade".into(),
        ));
    }
    if !ctx.is_published(to) {
        return Err(TransitionError::ReleaseNotFound {
            model: model.clone(),
            release: to.clone(),
        });
    }
    match &baseline {
        Some(b) if to < b => {}
        Some(b) => {
            return Err(TransitionError::Invalid(format!(
                "revert moves the baseline back: {to} is not older than the baseline {b}; to ship a newer release use `ferry rollout start`"
            )));
        }
        None => {
            return Err(TransitionError::Invalid(format!(
                "{model} has no baseline to revert"
            )));
        }
    }
    Ok(RolloutPlan {
        model: model.to_string(),
        revision: 0,
        baseline: Some(to.clone()),
        staged: None,
        basis_points: FULL,
        salt: current.map_or_else(|| ctx.salt.to_string(), |p| p.salt.clone()),
        state: RolloutState::Completed,
        thresholds: current.map(|p| p.thresholds).unwrap_or_default(),
        ramp: None,
        pins: current.map(|p| p.pins.clone()).unwrap_or_default(),
        withdrawn: current.map(|p| p.withdrawn.clone()).unwrap_or_default(),
        action: String::new(),
        actor: String::new(),
        at: String::new(),
        reason: String::new(),
    })
}

/// `pin`: a test device gets a named release first (until it expires).
fn pin(
    p: &RolloutPlan,
    install_id: &str,
    release: &Version,
    expires_secs: Option<u64>,
    ctx: &Context<'_>,
) -> Result<RolloutPlan, TransitionError> {
    let model = ctx.model;
    if install_id.is_empty()
        || crate::names::longer_than(install_id, 128)
        || install_id.chars().any(char::is_control)
    {
        return Err(TransitionError::Invalid(
            "install_id is 1 to 128 characters without control characters".into(),
        ));
    }
    if !ctx.is_published(release) {
        return Err(TransitionError::ReleaseNotFound {
            model: model.clone(),
            release: release.clone(),
        });
    }
    let expires = match expires_secs {
        None => None,
        Some(secs) => {
            let now =
                time::OffsetDateTime::parse(ctx.at, &time::format_description::well_known::Rfc3339)
                    .map_err(|e| TransitionError::Invalid(format!("clock: {e}")))?;
            let until = now
                .checked_add(time::Duration::seconds(
                    i64::try_from(secs).unwrap_or(i64::MAX),
                ))
                .filter(|_| (1..=365 * 86_400).contains(&secs))
                .ok_or_else(|| {
                    TransitionError::Invalid("a pin expires after 1 second to 365 days".into())
                })?;
            Some(
                until
                    .format(&time::format_description::well_known::Rfc3339)
                    .map_err(|e| TransitionError::Invalid(e.to_string()))?,
            )
        }
    };
    let now = time::OffsetDateTime::parse(ctx.at, &time::format_description::well_known::Rfc3339)
        .map_err(|e| TransitionError::Invalid(format!("clock: {e}")))?;
    let mut pins: Vec<Pin> = p
        .pins
        .iter()
        .filter(|x| x.install_id != install_id && x.holds_at(now))
        .cloned()
        .collect();
    if pins.len() >= MAX_PINS {
        return Err(TransitionError::Invalid(format!(
            "{model} already has {MAX_PINS} pins; unpin some first"
        )));
    }
    pins.push(Pin {
        install_id: install_id.to_string(),
        release: release.clone(),
        expires,
    });
    Ok(RolloutPlan { pins, ..p.clone() })
}

/// `unpin`: the device follows its cohort again.
fn unpin(p: &RolloutPlan, install_id: &str) -> Result<RolloutPlan, TransitionError> {
    if !p.pins.iter().any(|x| x.install_id == install_id) {
        return Err(TransitionError::Invalid(format!(
            "no pin for install id {:?}",
            install_id.chars().take(128).collect::<String>()
        )));
    }
    Ok(RolloutPlan {
        pins: p
            .pins
            .iter()
            .filter(|x| x.install_id != install_id)
            .cloned()
            .collect(),
        ..p.clone()
    })
}

/// `set`: an active rollout's share changes (and leaves its ramp).
fn set(
    p: &RolloutPlan,
    basis_points: u32,
    model: &ModelName,
) -> Result<RolloutPlan, TransitionError> {
    if p.state != RolloutState::Active || p.staged.is_none() {
        return Err(TransitionError::NotActive(format!(
            "the rollout of {model} is {}; only an active rollout's percentage can change",
            p.state.as_str()
        )));
    }
    // A manual percentage takes the rollout off its ramp.
    Ok(RolloutPlan {
        basis_points,
        ramp: None,
        ..p.clone()
    })
}

/// `pause`: who gets what is frozen.
fn pause(p: &RolloutPlan, model: &ModelName) -> Result<RolloutPlan, TransitionError> {
    if p.state == RolloutState::Paused && p.staged.is_some() {
        return Err(TransitionError::NotActive(format!(
            "the rollout of {model} is already paused; `ferry rollout resume` continues it"
        )));
    }
    if p.state != RolloutState::Active || p.staged.is_none() {
        return Err(not_active(model));
    }
    Ok(RolloutPlan {
        state: RolloutState::Paused,
        ..p.clone()
    })
}

/// `resume`: a paused or halted rollout is active again; a ramp's step starts anew.
fn resume(p: &RolloutPlan, ctx: &Context<'_>) -> Result<RolloutPlan, TransitionError> {
    let model = ctx.model;
    if !matches!(p.state, RolloutState::Paused | RolloutState::Halted) || p.staged.is_none() {
        return Err(TransitionError::NotPaused(model.clone()));
    }
    // A resumed ramp's step starts again: its time and samples count from now.
    let mut ramp = p.ramp.clone();
    if let Some(r) = ramp.as_mut() {
        r.step_started = ctx.at.to_string();
    }
    Ok(RolloutPlan {
        state: RolloutState::Active,
        ramp,
        withdrawn: p
            .withdrawn
            .iter()
            .filter(|v| Some(*v) != p.staged.as_ref())
            .cloned()
            .collect(),
        ..p.clone()
    })
}

/// `rollback`: the staged release is withdrawn and the rollout halted.
fn rollback(p: &RolloutPlan, model: &ModelName) -> Result<RolloutPlan, TransitionError> {
    if !p.cohort_is_live() {
        return Err(TransitionError::NotActive(format!(
            "{model} has nothing to roll back"
        )));
    }
    let mut withdrawn = p.withdrawn.clone();
    if let Some(v) = &p.staged
        && !withdrawn.contains(v)
    {
        withdrawn.push(v.clone());
    }
    Ok(RolloutPlan {
        state: RolloutState::Halted,
        withdrawn,
        ..p.clone()
    })
}

/// `complete`: the staged release becomes the baseline for every device.
fn complete(p: &RolloutPlan, model: &ModelName) -> Result<RolloutPlan, TransitionError> {
    if !p.cohort_is_live() {
        return Err(not_active(model));
    }
    Ok(RolloutPlan {
        baseline: p.staged.clone(),
        staged: None,
        basis_points: FULL,
        state: RolloutState::Completed,
        ramp: None,
        ..p.clone()
    })
}

#[cfg(test)]
mod tests;
