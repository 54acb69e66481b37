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
//! - no device class that has a compatible live variant before the change is left without one
//!   after it, in any cohort it can be in: `rollout_strands_devices`, naming the class.

use semver::Version;

use crate::errors::ErrorCode;
use crate::manifest::ReleaseManifest;
use crate::names::ModelName;
use crate::rollout::guard::check_strands;
use crate::rollout::ramp::Ramp;
use crate::rollout::{FULL, MAX_PINS, Pin, RolloutChange, RolloutPlan, RolloutState, Thresholds};

/// Longest reason kept in the history.
pub const MAX_REASON: usize = 1024;

/// What a transition is checked against.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The model.
    pub model: &'a ModelName,
    /// Every published release of the model (any order).
    pub published: &'a [&'a ReleaseManifest],
    /// The salt a new rollout gets (cohorts differ between rollouts).
    pub salt: &'a str,
    /// Who asks (token name, or `ferry` for automatic changes).
    pub actor: &'a str,
    /// When (RFC 3339).
    pub at: &'a str,
    /// The device classes of `published`, when the caller computed them once for several
    /// transitions (they are computed on demand otherwise).
    pub classes: Option<&'a [crate::rollout::DeviceClass]>,
}

impl Context<'_> {
    pub(crate) fn newest_first(&self) -> Vec<Version> {
        let mut v: Vec<Version> = self.published.iter().map(|m| m.version.clone()).collect();
        v.sort_by(|a, b| b.cmp(a));
        v
    }

    pub(crate) fn is_published(&self, v: &Version) -> bool {
        self.published.iter().any(|m| m.version == *v)
    }
}

/// Why a change was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TransitionError {
    /// The change is malformed (bad rate, missing or overlong reason, revert to a newer release).
    #[error("{0}")]
    Invalid(String),
    /// The release named is not published.
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
    /// `start` while another rollout is active or paused, without `supersede`.
    #[error(
        "{model} is rolling out {staged}; complete or roll it back first, or start a newer release with --supersede"
    )]
    InProgress {
        /// Model.
        model: ModelName,
        /// The release in progress.
        staged: Version,
    },
    /// The change needs an active rollout.
    #[error("{0}")]
    NotActive(String),
    /// `resume` of a rollout that is not paused or halted.
    #[error("the rollout of {0} is not paused or halted")]
    NotPaused(ModelName),
    /// A staged release must be newer than the baseline (and than what it supersedes).
    #[error(
        "{release} is not newer than {than} ({what}); stage a newer release, or move the baseline back with `ferry rollout revert --to VERSION --reason ...`"
    )]
    NotNewer {
        /// The release asked for.
        release: Version,
        /// The release it must be newer than.
        than: Version,
        /// `the baseline` or `the staged release`.
        what: &'static str,
    },
    /// The change would leave a device class without any compatible variant.
    #[error(
        "refused: {class} would be left with no compatible variant (today they get {had_release}/{had_variant})"
    )]
    Strands {
        /// The class.
        class: String,
        /// The release it gets today.
        had_release: Version,
        /// The variant it gets today.
        had_variant: String,
    },
}

impl TransitionError {
    /// The catalogue code.
    pub fn code(&self) -> ErrorCode {
        match self {
            TransitionError::Invalid(_) => ErrorCode::RolloutInvalid,
            TransitionError::ReleaseNotFound { .. } => ErrorCode::ReleaseNotFound,
            TransitionError::NotFound(_) => ErrorCode::RolloutNotFound,
            TransitionError::InProgress { .. } => ErrorCode::RolloutInProgress,
            TransitionError::NotActive(_) => ErrorCode::RolloutNotActive,
            TransitionError::NotPaused(_) => ErrorCode::RolloutNotPaused,
            TransitionError::NotNewer { .. } => ErrorCode::RolloutNotNewer,
            TransitionError::Strands { .. } => ErrorCode::RolloutStrandsDevices,
        }
    }
}

fn rate(name: &str, v: Option<f64>) -> Result<Option<f64>, TransitionError> {
    match v {
        Some(r) if !(0.0..=1.0).contains(&r) || r.is_nan() => Err(TransitionError::Invalid(
            format!("{name} must be between 0 and 1"),
        )),
        other => Ok(other),
    }
}

/// The baseline in force: the plan's, or without one the newest published release.
fn baseline_of(current: Option<&RolloutPlan>, ctx: &Context<'_>) -> Option<Version> {
    match current {
        Some(p) => p.baseline.clone().or_else(|| {
            p.staged
                .as_ref()
                .and_then(|s| ctx.newest_first().into_iter().find(|v| v < s))
        }),
        None => ctx.newest_first().into_iter().next(),
    }
}

/// Computes the plan that `change` makes of `current`, or refuses it.
pub fn transition(
    current: Option<&RolloutPlan>,
    change: &RolloutChange,
    ctx: &Context<'_>,
) -> Result<RolloutPlan, TransitionError> {
    let next = next_plan(current, change, ctx)?;
    // Pausing freezes who gets what, and pins touch test devices only: neither can take a
    // variant away from a device class, and pausing must stay possible in an emergency.
    if !matches!(
        change,
        RolloutChange::Pause { .. } | RolloutChange::Pin { .. } | RolloutChange::Unpin { .. }
    ) {
        check_strands(current, &next, ctx)?;
    }
    Ok(next)
}

fn next_plan(
    current: Option<&RolloutPlan>,
    change: &RolloutChange,
    ctx: &Context<'_>,
) -> Result<RolloutPlan, TransitionError> {
    let model = ctx.model;
    let reason = change.reason().unwrap_or_default().to_string();
    if reason.len() > MAX_REASON {
        return Err(TransitionError::Invalid(format!(
            "reason is at most {MAX_REASON} bytes"
        )));
    }
    let baseline = baseline_of(current, ctx);
    let in_progress = current.filter(|p| p.cohort_is_live());
    let not_active = || TransitionError::NotActive(format!("the rollout of {model} is not active"));
    let mut next = match (change, current) {
        (
            RolloutChange::Start {
                release,
                percent,
                steps,
                every_secs,
                max_failure_rate,
                max_fallback_rate,
                min_samples,
                max_regression,
                supersede,
                ..
            },
            _,
        ) => {
            let defaults = Thresholds::default();
            if let Some(k) = max_regression
                && !(k.is_finite() && *k >= 1.0)
            {
                return Err(TransitionError::Invalid(
                    "max_regression must be a number of at least 1 (1.5 = 50% worse)".into(),
                ));
            }
            let thresholds = Thresholds {
                max_failure_rate: rate("max_failure_rate", *max_failure_rate)?
                    .or(defaults.max_failure_rate),
                max_fallback_rate: rate("max_fallback_rate", *max_fallback_rate)?
                    .or(defaults.max_fallback_rate),
                min_samples: min_samples.unwrap_or(defaults.min_samples),
                max_regression: *max_regression,
            };
            let (basis_points, ramp) = match (percent, steps, every_secs) {
                (Some(p), None, None) => (p.basis_points(), None),
                (None, Some(steps), Some(every)) => {
                    let bps: Vec<u32> = steps.iter().map(|p| p.basis_points()).collect();
                    Ramp::validate(&bps, *every).map_err(TransitionError::Invalid)?;
                    let ramp = Ramp {
                        steps: bps.clone(),
                        every_secs: *every,
                        step: 0,
                        step_started: ctx.at.to_string(),
                    };
                    (bps[0], Some(ramp))
                }
                (None, Some(_), None) => {
                    return Err(TransitionError::Invalid(
                        "a ramp needs --every (how long each step is in force)".into(),
                    ));
                }
                _ => {
                    return Err(TransitionError::Invalid(
                        "give either --percent, or --steps with --every".into(),
                    ));
                }
            };
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
            RolloutPlan {
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
            }
        }
        (RolloutChange::Revert { to, reason }, _) => {
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
            RolloutPlan {
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
            }
        }
        (_, None) => return Err(TransitionError::NotFound(model.clone())),
        (
            RolloutChange::Pin {
                install_id,
                release,
                expires_secs,
                ..
            },
            Some(p),
        ) => {
            if install_id.is_empty()
                || install_id.len() > 128
                || install_id.chars().any(char::is_control)
            {
                return Err(TransitionError::Invalid(
                    "install_id is 1 to 128 bytes without control characters".into(),
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
                    let now = time::OffsetDateTime::parse(
                        ctx.at,
                        &time::format_description::well_known::Rfc3339,
                    )
                    .map_err(|e| TransitionError::Invalid(format!("clock: {e}")))?;
                    let until = now
                        .checked_add(time::Duration::seconds(
                            i64::try_from(*secs).unwrap_or(i64::MAX),
                        ))
                        .filter(|_| (1..=365 * 86_400).contains(secs))
                        .ok_or_else(|| {
                            TransitionError::Invalid(
                                "a pin expires after 1 second to 365 days".into(),
                            )
                        })?;
                    Some(
                        until
                            .format(&time::format_description::well_known::Rfc3339)
                            .map_err(|e| TransitionError::Invalid(e.to_string()))?,
                    )
                }
            };
            let now =
                time::OffsetDateTime::parse(ctx.at, &time::format_description::well_known::Rfc3339)
                    .map_err(|e| TransitionError::Invalid(format!("clock: {e}")))?;
            let mut pins: Vec<Pin> = p
                .pins
                .iter()
                .filter(|x| x.install_id != *install_id && x.holds_at(now))
                .cloned()
                .collect();
            if pins.len() >= MAX_PINS {
                return Err(TransitionError::Invalid(format!(
                    "{model} already has {MAX_PINS} pins; unpin some first"
                )));
            }
            pins.push(Pin {
                install_id: install_id.clone(),
                release: release.clone(),
                expires,
            });
            RolloutPlan { pins, ..p.clone() }
        }
        (RolloutChange::Unpin { install_id, .. }, Some(p)) => {
            if !p.pins.iter().any(|x| x.install_id == *install_id) {
                return Err(TransitionError::Invalid(format!(
                    "no pin for install id {:?}",
                    install_id.chars().take(128).collect::<String>()
                )));
            }
            RolloutPlan {
                pins: p
                    .pins
                    .iter()
                    .filter(|x| x.install_id != *install_id)
                    .cloned()
                    .collect(),
                ..p.clone()
            }
        }
        (RolloutChange::Set { percent, .. }, Some(p)) => {
            if p.state != RolloutState::Active || p.staged.is_none() {
                return Err(TransitionError::NotActive(format!(
                    "the rollout of {model} is {}; only an active rollout's percentage can change",
                    p.state.as_str()
                )));
            }
            // A manual percentage takes the rollout off its ramp.
            RolloutPlan {
                basis_points: percent.basis_points(),
                ramp: None,
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
                return Err(TransitionError::NotPaused(model.clone()));
            }
            // A resumed ramp's step starts again: its time and samples count from now.
            let mut ramp = p.ramp.clone();
            if let Some(r) = ramp.as_mut() {
                r.step_started = ctx.at.to_string();
            }
            RolloutPlan {
                state: RolloutState::Active,
                ramp,
                withdrawn: p
                    .withdrawn
                    .iter()
                    .filter(|v| Some(*v) != p.staged.as_ref())
                    .cloned()
                    .collect(),
                ..p.clone()
            }
        }
        (RolloutChange::Rollback { .. }, Some(p)) => {
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
            RolloutPlan {
                state: RolloutState::Halted,
                withdrawn,
                ..p.clone()
            }
        }
        (RolloutChange::Complete { .. }, Some(p)) => {
            if !p.cohort_is_live() {
                return Err(not_active());
            }
            RolloutPlan {
                baseline: p.staged.clone(),
                staged: None,
                basis_points: FULL,
                state: RolloutState::Completed,
                ramp: None,
                ..p.clone()
            }
        }
    };
    next.model = model.to_string();
    next.revision = current.map_or(1, |p| p.revision + 1);
    next.action = change.action().to_string();
    next.actor = ctx.actor.to_string();
    next.at = ctx.at.to_string();
    next.reason = reason;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Platform;
    use crate::names::BackendId;
    use crate::resolve::Cohort;
    use crate::rollout::Percent;
    use crate::rollout::{live_releases, on_publish};
    use crate::select::{Preference, no_deny, select};
    use proptest::prelude::*;

    const RUNTIMES: [&str; 3] = [">=1.0.0", ">=1.5.0", ">=1.2.0, <1.6.0"];
    const APPS: [&str; 3] = ["*", ">=2.0.0", "<3.0.0"];
    const DELEGATES: [(&str, Option<&str>, &[&str]); 4] = [
        ("xnnpack", Some("XnnpackBackend"), &[]),
        ("vulkan", Some("VulkanBackend"), &["android", "linux"]),
        ("coreml", Some("CoreMLBackend"), &["ios", "macos"]),
        ("portable", None, &[]),
    ];

    /// A release from compact choices: for each delegate, `None` (absent) or the index of its
    /// runtime and app ranges.
    fn release(version: u64, shape: &[Option<(usize, usize)>]) -> ReleaseManifest {
        let variants: Vec<serde_json::Value> = DELEGATES
            .iter()
            .zip(shape)
            .filter_map(|((d, backend, platforms), s)| {
                s.map(|(r, a)| {
                    serde_json::json!({
                        "id": format!("{d}-fp32"), "delegate": d, "quant": "fp32",
                        "backends": backend.map(|b| vec![b]).unwrap_or_default(),
                        "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                        "size": 10, "runtime": RUNTIMES[r], "app": APPS[a],
                        "constraints": {"platforms": platforms},
                    })
                })
            })
            .collect();
        let json = serde_json::json!({
            "model": "m", "version": format!("{version}.0.0"),
            "created": "2026-12-01T00:00:00Z", "variants": variants,
        });
        ReleaseManifest::from_json(&serde_json::to_vec(&json).expect("json")).expect("valid")
    }

    fn shape() -> impl Strategy<Value = Vec<Option<(usize, usize)>>> {
        proptest::collection::vec(proptest::option::of((0usize..3, 0usize..3)), 4)
            .prop_filter("a release has a variant", |s| s.iter().any(Option::is_some))
    }

    fn action() -> impl Strategy<Value = RolloutChange> {
        prop_oneof![
            (1u64..=4, 0u32..=10_000, any::<bool>()).prop_map(|(r, bp, supersede)| {
                RolloutChange::Start {
                    release: Version::new(r, 0, 0),
                    percent: Percent::from_basis_points(bp),
                    steps: None,
                    every_secs: None,
                    max_failure_rate: None,
                    max_fallback_rate: None,
                    min_samples: None,
                    max_regression: None,
                    supersede,
                    reason: None,
                }
            }),
            (0u32..=10_000).prop_map(|bp| RolloutChange::Set {
                percent: Percent::from_basis_points(bp).expect("bp"),
                reason: None
            }),
            Just(RolloutChange::Pause { reason: None }),
            Just(RolloutChange::Resume { reason: None }),
            Just(RolloutChange::Rollback { reason: None }),
            Just(RolloutChange::Complete { reason: None }),
            (1u64..=4).prop_map(|r| RolloutChange::Revert {
                to: Version::new(r, 0, 0),
                reason: "test".into()
            }),
        ]
    }

    fn device() -> impl Strategy<Value = ResolveRequestParts> {
        (
            0usize..4,
            proptest::collection::vec(any::<bool>(), 3),
            (1u64..=2, 0u64..=9),
            (1u64..=3, 0u64..=2),
        )
    }

    type ResolveRequestParts = (usize, Vec<bool>, (u64, u64), (u64, u64));

    fn request(parts: &ResolveRequestParts) -> crate::resolve::ResolveRequest {
        let (p, b, (rmaj, rmin), (amaj, amin)) = parts;
        let platforms = [
            Platform::Android,
            Platform::Ios,
            Platform::Linux,
            Platform::Macos,
        ];
        let names = ["XnnpackBackend", "VulkanBackend", "CoreMLBackend"];
        crate::resolve::ResolveRequest {
            model: "m".parse().expect("name"),
            install_id: String::new(),
            app_version: Version::new(*amaj, *amin, 0),
            runtime_version: Version::new(*rmaj, *rmin, 0),
            backends: names
                .iter()
                .zip(b)
                .filter(|(_, on)| **on)
                .map(|(n, _)| BackendId::new(*n).expect("id"))
                .collect(),
            platform: platforms[*p].clone(),
            os_version: "14".into(),
            device_model: String::new(),
            soc: String::new(),
            ram_mb: 4096,
        }
    }

    /// Whether `device` gets a variant in `cohort` under `plan`.
    fn served(
        releases: &[&ReleaseManifest],
        plan: Option<&RolloutPlan>,
        cohort: Cohort,
        device: &crate::resolve::ResolveRequest,
    ) -> bool {
        let mut published: Vec<Version> = releases.iter().map(|m| m.version.clone()).collect();
        published.sort_by(|a, b| b.cmp(a));
        let live = live_releases(&published, plan, cohort);
        let manifests: Vec<&ReleaseManifest> = live
            .iter()
            .filter_map(|v| releases.iter().find(|m| m.version == *v).copied())
            .collect();
        select(&manifests, device, &Preference::default(), &no_deny).is_ok()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Over random releases, action sequences and devices: a staged release is always newer
        /// than the baseline; the baseline moves back only through `revert`; and no device that
        /// had a variant (in any cohort) loses it (in any cohort) through an accepted change.
        #[test]
        fn random_action_sequences_keep_the_invariants(
            shapes in proptest::collection::vec(shape(), 4),
            actions in proptest::collection::vec(action(), 1..24),
            devices in proptest::collection::vec(device(), 24),
        ) {
            let releases: Vec<ReleaseManifest> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| release(i as u64 + 1, s))
                .collect();
            let refs: Vec<&ReleaseManifest> = releases.iter().collect();
            let model: ModelName = "m".parse().expect("name");
            let ctx = Context { model: &model, published: &refs, salt: "s", actor: "t", at: "now", classes: None };
            let devices: Vec<_> = devices.iter().map(request).collect();
            let first = Version::new(1, 0, 0);
            let mut plan = on_publish(None, &first, false, &Context { published: &refs[..1], ..ctx });
            prop_assert_eq!(plan.as_ref().and_then(|p| p.baseline.clone()), Some(first));
            for a in &actions {
                let Ok(next) = transition(plan.as_ref(), a, &ctx) else { continue };
                if next.cohort_is_live() {
                    prop_assert!(next.staged > next.baseline, "{next:?}");
                }
                let was = plan.as_ref().and_then(|p| p.baseline.clone());
                if next.baseline < was {
                    prop_assert_eq!(next.action.as_str(), "revert");
                }
                let ids: Vec<String> = (0..64).map(|i| format!("install-{i}")).collect();
                for d in &devices {
                    let both = [Cohort::Baseline, Cohort::Staged];
                    let before: Vec<bool> =
                        both.iter().map(|c| served(&refs, plan.as_ref(), *c, d)).collect();
                    let after: Vec<bool> =
                        both.iter().map(|c| served(&refs, Some(&next), *c, d)).collect();
                    let index = |c: Cohort| usize::from(c == Cohort::Staged);
                    for id in &ids {
                        let cb = plan.as_ref().map_or(Cohort::Baseline, |p| p.cohort(id));
                        let ca = next.cohort(id);
                        prop_assert!(
                            !before[index(cb)] || after[index(ca)],
                            "{a:?} stranded {d:?} (install id {id}, {cb:?} -> {ca:?}): {plan:?} -> {next:?}"
                        );
                    }
                }
                plan = Some(next);
            }
        }
    }

    #[test]
    fn the_first_publish_is_live_and_later_ones_wait() {
        let v1 = release(1, &[Some((0, 0)), None, None, None]);
        let v2 = release(2, &[Some((0, 0)), None, None, None]);
        let model: ModelName = "m".parse().expect("name");
        let one = [&v1];
        let ctx = Context {
            model: &model,
            published: &[],
            salt: "s",
            actor: "t",
            at: "now",
            classes: None,
        };
        let first = on_publish(None, &v1.version, false, &ctx).expect("first is live");
        assert_eq!(first.baseline, Some(v1.version.clone()));
        let ctx = Context {
            published: &one,
            ..ctx
        };
        assert_eq!(on_publish(Some(&first), &v2.version, false, &ctx), None);
        let live = on_publish(Some(&first), &v2.version, true, &ctx).expect("goes live");
        assert_eq!(live.baseline, Some(v2.version.clone()));
        // A model published before plans existed keeps what devices had.
        let adopted = on_publish(None, &v2.version, false, &ctx).expect("adopts");
        assert_eq!(adopted.baseline, Some(v1.version.clone()));
    }
}
