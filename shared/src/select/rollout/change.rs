//! What a rollout change is checked against ([`Context`]) and why one is refused
//! ([`TransitionError`]): the types the state machine and its guard share.

use semver::Version;

use crate::errors::ErrorCode;
use crate::manifest::ReleaseManifest;
use crate::names::ModelName;
use crate::select::rollout::RolloutPlan;

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
    pub classes: Option<&'a [crate::select::rollout::DeviceClass]>,
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
        "refused: {class} would be left with no compatible variant (today they get {had_release}/{had_variant}); the way back (pause, rollback, a smaller share) is always allowed, and allow_strand with a reason (--allow-strand --reason) accepts it"
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

pub(crate) fn rate(name: &str, v: Option<f64>) -> Result<Option<f64>, TransitionError> {
    match v {
        Some(r) if !(0.0..=1.0).contains(&r) || r.is_nan() => Err(TransitionError::Invalid(
            format!("{name} must be between 0 and 1"),
        )),
        other => Ok(other),
    }
}

/// The baseline in force: the plan's, or without one the newest published release.
pub(crate) fn baseline_of(current: Option<&RolloutPlan>, ctx: &Context<'_>) -> Option<Version> {
    match current {
        Some(p) => p.baseline.clone().or_else(|| {
            p.staged
                .as_ref()
                .and_then(|s| ctx.newest_first().into_iter().find(|v| v < s))
        }),
        None => ctx.newest_first().into_iter().next(),
    }
}
