//! Staged rollouts: plans, states, and the bucketing that puts a device in a cohort.
//!
//! A device's bucket is `bucket(salt, model, install_id)`: the first eight bytes of
//! `SHA-256(salt ‖ 0x00 ‖ model ‖ 0x00 ‖ install_id)` as a big-endian integer, modulo 10,000.
//! A device is in the staged cohort when its bucket is below the rollout's percentage in basis
//! points, so raising the percentage only ever adds devices (property-tested), and other
//! languages can reproduce the function from `tests/fixtures/bucket-vectors.json`.
//!
//! States: `active` (staged devices get the staged release), `paused` (no change of
//! percentage; devices already staged keep it), `halted` (everyone back on the baseline; set by
//! ops or automatically by telemetry thresholds), `completed` (the staged release became the
//! baseline for everyone).

use semver::Version;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::wire::resolve::Cohort;

mod change;
mod classes;
mod guard;
mod lifecycle;
mod machine;
pub mod ramp;

pub use classes::{DeviceClass, MAX_PROBES, classes};
pub use guard::{Preview, preview};
pub use lifecycle::on_publish;
pub use machine::{Context, TransitionError, transition};

/// Basis points in 100 %.
pub const FULL: u32 = 10_000;

/// The device's bucket in `[0, 10000)`.
pub fn bucket(salt: &str, model: &str, install_id: &str) -> u32 {
    let mut h = Sha256::new();
    h.update(salt.as_bytes());
    h.update([0u8]);
    h.update(model.as_bytes());
    h.update([0u8]);
    h.update(install_id.as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    (u64::from_be_bytes(first) % u64::from(FULL)) as u32
}

/// Parses a percentage like `5`, `0.5` or `12.25` into basis points (at most two decimals).
pub fn parse_percent(s: &str) -> Result<u32, String> {
    let s = s.trim().trim_end_matches('%');
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let bad = || format!("percent {s:?} must be a number from 0 to 100 with at most two decimals");
    if int.is_empty() && frac.is_empty()
        || frac.len() > 2
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let i: u32 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| bad())?
    };
    let f: u32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<2}").parse().map_err(|_| bad())?
    };
    let bp = i
        .checked_mul(100)
        .and_then(|x| x.checked_add(f))
        .ok_or_else(bad)?;
    if bp > FULL {
        return Err(bad());
    }
    Ok(bp)
}

/// Formats basis points as a percentage (`50` → `0.5`).
pub fn format_percent(bp: u32) -> String {
    if bp.is_multiple_of(100) {
        format!("{}", bp / 100)
    } else {
        let s = format!("{}.{:02}", bp / 100, bp % 100);
        s.trim_end_matches('0').to_string()
    }
}

/// Rollout state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutState {
    /// Staged devices get the staged release.
    Active,
    /// Frozen: staged devices keep it, the percentage does not move.
    Paused,
    /// Everyone is back on the baseline.
    Halted,
    /// The staged release is the baseline for everyone.
    Completed,
}

impl RolloutState {
    /// The wire name (`active`, `paused`, `halted`, `completed`).
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutState::Active => "active",
            RolloutState::Paused => "paused",
            RolloutState::Halted => "halted",
            RolloutState::Completed => "completed",
        }
    }
}

/// Thresholds for the automatic halt.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Largest acceptable load-failure rate of the staged release (0–1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failure_rate: Option<f64>,
    /// Largest acceptable fallback rate of the staged release (0–1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fallback_rate: Option<f64>,
    /// Loads needed before a rate counts.
    pub min_samples: u64,
    /// Halt a ramp when a staged rate is over this multiple of the baseline's rate in the same
    /// window (for example 1.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_regression: Option<f64>,
    /// Halt a ramp when the median of the staged release's device warm p95 run times, over
    /// the SoCs both releases have field latency for, is over this multiple of the baseline's
    /// (for example 1.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_latency_ratio: Option<f64>,
    /// Largest acceptable share of the staged release's devices that crashed natively on it
    /// (0–1; `crash` events since the plan's revision, counted once
    /// [`crash_devices_needed`] devices crashed). A plan written before this gate existed has
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_crash_rate: Option<f64>,
    /// The rate gates decide with the always-valid test of [`crate::experiment::gates`]: a
    /// rate halts only once over its limit beyond chance (else it holds a ramp's step).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sequential: bool,
}

/// Fewest distinct devices that must have crashed on the staged release before the crash gate
/// can halt it, whatever `min_samples`: one or two crashes are not yet a pattern.
pub const MIN_CRASH_DEVICES: u64 = 3;

/// Distinct devices that must have crashed on the staged release before the crash gate of `t`
/// can halt it: as many as the other gates need reporting devices (`min_samples` / 8, the most
/// one device weighs in an hour, so that a few devices cannot halt a rollout), and at least
/// [`MIN_CRASH_DEVICES`].
pub fn crash_devices_needed(t: &Thresholds) -> u64 {
    t.min_samples.div_ceil(8).max(MIN_CRASH_DEVICES)
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            max_failure_rate: Some(0.05),
            max_fallback_rate: Some(0.25),
            min_samples: 100,
            max_regression: None,
            max_latency_ratio: None,
            max_crash_rate: Some(0.01),
            sequential: false,
        }
    }
}

/// Most steps in a ramp.
pub const MAX_STEPS: usize = 20;

/// Longest time between steps (30 days).
pub const MAX_EVERY_SECS: u64 = 30 * 86_400;

/// A ramp in a rollout plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ramp {
    /// The steps in basis points, strictly increasing.
    pub steps: Vec<u32>,
    /// Least time a step is in force before the next one, in seconds.
    pub every_secs: u64,
    /// Index of the step in force.
    pub step: usize,
    /// When the step in force began (RFC 3339).
    pub step_started: String,
}

impl Ramp {
    /// Checks steps and interval: 1 to [`MAX_STEPS`] strictly increasing steps of at most
    /// 100%, the first above 0; an interval from 1 s to [`MAX_EVERY_SECS`].
    pub fn validate(steps: &[u32], every_secs: u64) -> Result<(), String> {
        if steps.is_empty() || steps.len() > MAX_STEPS {
            return Err(format!("a ramp has 1 to {MAX_STEPS} steps"));
        }
        if steps[0] == 0 || steps.windows(2).any(|w| w[0] >= w[1]) {
            return Err("ramp steps must be above 0 and strictly increasing".into());
        }
        if steps.iter().any(|s| *s > FULL) {
            return Err("a ramp step is at most 100%".into());
        }
        if !(1..=MAX_EVERY_SECS).contains(&every_secs) {
            return Err(format!(
                "the ramp interval is 1 s to {} days",
                MAX_EVERY_SECS / 86_400
            ));
        }
        Ok(())
    }

    /// The step after the one in force, in basis points.
    pub fn next(&self) -> Option<u32> {
        self.steps.get(self.step + 1).copied()
    }
}

/// One revision of a model's rollout plan (revisions are immutable; the newest is in force).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutPlan {
    /// Model.
    pub model: String,
    /// Revision number (1, 2, ...).
    pub revision: u64,
    /// The release everyone not staged gets (`None`: the latest release older than the
    /// staged one, or the latest when nothing is staged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Version>,
    /// The release being rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<Version>,
    /// Share of devices in the staged cohort, in basis points.
    pub basis_points: u32,
    /// Bucketing salt (new per rollout, so cohorts differ between rollouts).
    pub salt: String,
    /// State.
    pub state: RolloutState,
    /// Automatic-halt thresholds.
    pub thresholds: Thresholds,
    /// The health-gated ramp, when the rollout moves through steps by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<Ramp>,
    /// Test devices pinned to a release (they get it first, whatever their cohort).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<Pin>,
    /// Releases whose rollout ended without completing (rolled back, or replaced while staged
    /// or halted): never offered as a fallback to devices the baseline does not fit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withdrawn: Vec<Version>,
    /// What this revision did (`start`, `set`, `pause`, `resume`, `rollback`, `complete`,
    /// `auto-halt`).
    pub action: String,
    /// Who did it (token name, or `ferry` for automatic actions).
    pub actor: String,
    /// When (RFC 3339).
    pub at: String,
    /// Why (free text; automatic halts say which threshold).
    #[serde(default)]
    pub reason: String,
}

impl RolloutPlan {
    /// True when the staged cohort gets the staged release (active or paused with one staged).
    pub fn cohort_is_live(&self) -> bool {
        self.staged.is_some() && matches!(self.state, RolloutState::Active | RolloutState::Paused)
    }

    /// The cohort of `install_id` under this plan.
    pub fn cohort(&self, install_id: &str) -> Cohort {
        match (self.state, &self.staged) {
            (RolloutState::Active | RolloutState::Paused, Some(_))
                if bucket(&self.salt, &self.model, install_id) < self.basis_points =>
            {
                Cohort::Staged
            }
            _ => Cohort::Baseline,
        }
    }
}

/// The live releases a device in `cohort` may get under `plan`, in the order to try them, from
/// `published` (newest first).
///
/// Without a plan (a model published before plans were written at first publish): every
/// release. With one: a staged device tries the staged release first; everyone then gets the
/// baseline or, when the device cannot use it, an older release that was not withdrawn.
/// Releases newer than the baseline that are not staged are published but not live.
pub fn live_releases(
    published: &[Version],
    plan: Option<&RolloutPlan>,
    cohort: Cohort,
) -> Vec<Version> {
    let Some(plan) = plan else {
        return published.to_vec();
    };
    let ceiling = plan.baseline.clone().or_else(|| {
        plan.staged
            .as_ref()
            .and_then(|s| published.iter().find(|v| *v < s).cloned())
    });
    let mut out = Vec::new();
    if cohort == Cohort::Staged
        && plan.cohort_is_live()
        && let Some(staged) = &plan.staged
        && published.contains(staged)
    {
        out.push(staged.clone());
    }
    out.extend(
        published
            .iter()
            .filter(|v| ceiling.as_ref().is_some_and(|c| *v <= c))
            .filter(|v| Some(*v) != plan.staged.as_ref())
            .filter(|v| Some(*v) == plan.baseline.as_ref() || !plan.withdrawn.contains(v))
            .cloned(),
    );
    out
}

/// Most pins per model (every plan revision carries them, so they stay few).
pub const MAX_PINS: usize = 100;

/// A test device pinned to a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    /// The device's install id.
    pub install_id: String,
    /// The release it gets first.
    pub release: Version,
    /// When the pin lapses (RFC 3339); never when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
}

impl Pin {
    /// True while the pin holds at `now`.
    pub fn holds_at(&self, now: time::OffsetDateTime) -> bool {
        self.expires.as_deref().is_none_or(|e| {
            time::OffsetDateTime::parse(e, &time::format_description::well_known::Rfc3339)
                .is_ok_and(|t| now < t)
        })
    }
}

impl RolloutPlan {
    /// The release `install_id` is pinned to at `now`, if any.
    pub fn pinned(&self, install_id: &str, now: time::OffsetDateTime) -> Option<&Pin> {
        self.pins
            .iter()
            .find(|p| p.install_id == install_id && p.holds_at(now))
    }
}

/// A share of devices in basis points (`0..=10000`). On the wire it is the percentage as text
/// (`"0.5"`), and a JSON number is accepted too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Percent(u32);

impl Percent {
    /// From basis points; `None` above 10,000.
    pub fn from_basis_points(bp: u32) -> Option<Percent> {
        (bp <= FULL).then_some(Percent(bp))
    }

    /// The basis points.
    pub fn basis_points(self) -> u32 {
        self.0
    }
}

impl std::str::FromStr for Percent {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_percent(s).map(Percent)
    }
}

impl std::fmt::Display for Percent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_percent(self.0))
    }
}

impl Serialize for Percent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_percent(self.0))
    }
}

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(serde_json::Number),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Text(t) => t,
            Raw::Number(n) => n.to_string(),
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A change an operator asks of a model's rollout (the body of
/// `POST /v1/admin/models/{model}/rollout`, tagged by `action`).
///
/// | action | allowed when | effect |
/// |---|---|---|
/// | `start` | no rollout is active or paused (or with `supersede`) | stage `release` to `percent` of devices |
/// | `set` | active | change the percentage |
/// | `pause` | active | freeze; staged devices keep the staged release |
/// | `resume` | paused or halted | active again |
/// | `rollback` | active, paused or halted | halted: everyone back on the baseline |
/// | `complete` | active or paused | the staged release becomes everyone's baseline |
/// | `revert` | always, to an older published release | that release becomes the baseline |
///
/// The guards (newer than the baseline, no stranded device class) are in [`transition`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "lowercase", deny_unknown_fields)]
pub enum RolloutChange {
    /// Stage a release to a share of devices, or through a health-gated ramp of shares.
    Start {
        /// The release to roll out.
        release: Version,
        /// Share of devices (give this or `steps`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        percent: Option<Percent>,
        /// Ramp steps, for example 1, 5, 25, 50, 100 (needs `every_secs`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        steps: Option<Vec<Percent>>,
        /// Least time each ramp step is in force, in seconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        every_secs: Option<u64>,
        /// Halt when the staged release's load-failure rate exceeds this (0–1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_failure_rate: Option<f64>,
        /// Halt when its fallback rate exceeds this (0–1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_fallback_rate: Option<f64>,
        /// Loads needed before the rates count (and, in a ramp, per step).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_samples: Option<u64>,
        /// Halt a ramp when a staged rate is over this multiple of the baseline's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_regression: Option<f64>,
        /// Halt a ramp when the staged release's field latency (median device warm p95 over
        /// the SoCs both releases have data for) is over this multiple of the baseline's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_latency_ratio: Option<f64>,
        /// Halt when more than this share of the staged release's devices crashed natively on
        /// it (0–1; default 0.01).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_crash_rate: Option<f64>,
        /// Gates decide with the always-valid test (see [`Thresholds::sequential`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        sequential_gates: bool,
        /// Replace a rollout in progress with this newer release, keeping its salt (so the
        /// devices that already moved stay first).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        supersede: bool,
        /// Accept leaving device classes without a variant (needs a reason).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        allow_strand: bool,
        /// Why (kept in the history).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Change the share of an active rollout.
    Set {
        /// New share of devices.
        percent: Percent,
        /// Accept leaving device classes without a variant on a larger share (needs a reason;
        /// a smaller share is always allowed).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        allow_strand: bool,
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Freeze the rollout.
    Pause {
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Continue a paused or halted rollout.
    Resume {
        /// Accept leaving device classes without a variant (needs a reason).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        allow_strand: bool,
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Send everyone back to the baseline.
    Rollback {
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Make the staged release everyone's baseline.
    Complete {
        /// Accept leaving device classes without a variant (needs a reason).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        allow_strand: bool,
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Pin a test device to a release (it gets that release first; replaces an earlier pin).
    Pin {
        /// The device's install id.
        install_id: String,
        /// The release.
        release: Version,
        /// How long the pin holds, in seconds (forever when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_secs: Option<u64>,
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Remove a device's pin.
    Unpin {
        /// The device's install id.
        install_id: String,
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Move the baseline back to an older published release (the only way to downgrade;
    /// cancels any staged release).
    Revert {
        /// The older release that becomes the baseline.
        to: Version,
        /// Why (required: it is the record of the downgrade).
        reason: String,
    },
}

impl RolloutChange {
    /// The action's name as on the wire and in the history.
    pub fn action(&self) -> &'static str {
        match self {
            RolloutChange::Start { .. } => "start",
            RolloutChange::Set { .. } => "set",
            RolloutChange::Pause { .. } => "pause",
            RolloutChange::Resume { .. } => "resume",
            RolloutChange::Rollback { .. } => "rollback",
            RolloutChange::Complete { .. } => "complete",
            RolloutChange::Revert { .. } => "revert",
            RolloutChange::Pin { .. } => "pin",
            RolloutChange::Unpin { .. } => "unpin",
        }
    }

    /// The operator's reason, if given.
    pub fn reason(&self) -> Option<&str> {
        match self {
            RolloutChange::Start { reason, .. }
            | RolloutChange::Set { reason, .. }
            | RolloutChange::Pause { reason }
            | RolloutChange::Resume { reason, .. }
            | RolloutChange::Rollback { reason }
            | RolloutChange::Complete { reason, .. }
            | RolloutChange::Pin { reason, .. }
            | RolloutChange::Unpin { reason, .. } => reason.as_deref(),
            RolloutChange::Revert { reason, .. } => Some(reason),
        }
    }

    /// Whether the change accepts leaving device classes without a variant (`allow_strand`).
    pub fn allows_strand(&self) -> bool {
        matches!(
            self,
            RolloutChange::Start {
                allow_strand: true,
                ..
            } | RolloutChange::Set {
                allow_strand: true,
                ..
            } | RolloutChange::Resume {
                allow_strand: true,
                ..
            } | RolloutChange::Complete {
                allow_strand: true,
                ..
            }
        )
    }
}

#[cfg(test)]
mod tests;
