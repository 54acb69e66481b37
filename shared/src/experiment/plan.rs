//! An experiment's plan: its arms, its share of the model's devices, its metrics, its state,
//! and the sticky assignment of a device to an arm.

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::VariantId;
use crate::select::rollout::{FULL, bucket};

/// One of the two arms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArmName {
    /// What devices get today.
    Control,
    /// What is tried.
    Treatment,
}

impl ArmName {
    /// Its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ArmName::Control => "control",
            ArmName::Treatment => "treatment",
        }
    }

    /// Reads a wire name.
    pub fn parse(s: &str) -> Option<ArmName> {
        match s {
            "control" => Some(ArmName::Control),
            "treatment" => Some(ArmName::Treatment),
            _ => None,
        }
    }
}

/// What an arm gets: a release, or one variant of a release (`1.2.0` or `1.2.0/xnnpack-int8`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Arm {
    /// The release.
    pub release: Version,
    /// The variant tried first (absent: the release's own ranking).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<VariantId>,
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.variant {
            Some(v) => write!(f, "{}/{v}", self.release),
            None => write!(f, "{}", self.release),
        }
    }
}

impl std::str::FromStr for Arm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (release, variant) = match s.split_once('/') {
            Some((r, v)) => (r, Some(v)),
            None => (s, None),
        };
        let release = Version::parse(release)
            .map_err(|e| format!("{s:?} is not RELEASE or RELEASE/VARIANT: {e}"))?;
        let variant = variant
            .map(VariantId::new)
            .transpose()
            .map_err(|e| format!("{s:?}: {e}"))?;
        Ok(Arm { release, variant })
    }
}

/// Which way a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Lower is better (failure rates, latency, bytes).
    Lower,
    /// Higher is better (an app's acceptance rate).
    Higher,
}

/// A metric an experiment compares.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MetricSpec {
    /// Its name: one of ferry's ([`crate::experiment::names::OWN`]) or an app metric.
    pub name: String,
    /// Which way is better.
    pub better: Better,
}

/// Longest app metric name.
pub const MAX_METRIC_NAME: usize = 64;

/// Checks an app metric name: 1–64 characters of `[a-z0-9_.-]`, starting with a letter.
pub fn check_metric_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_METRIC_NAME
        && name.as_bytes()[0].is_ascii_lowercase()
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "metric name {:?} must be 1-{MAX_METRIC_NAME} characters of a-z, 0-9, '_', '.', '-', \
             starting with a letter",
            name.chars().take(80).collect::<String>()
        ))
    }
}

impl std::str::FromStr for MetricSpec {
    type Err = String;
    /// `NAME`, `NAME:lower` or `NAME:higher` (an app metric is higher-is-better by default,
    /// ferry's own metrics lower-is-better).
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, dir) = match s.split_once(':') {
            Some((n, d)) => (n, Some(d)),
            None => (s, None),
        };
        check_metric_name(name)?;
        let own = crate::experiment::names::OWN.contains(&name);
        let better = match dir {
            None if own => Better::Lower,
            None => Better::Higher,
            Some("lower") => Better::Lower,
            Some("higher") => Better::Higher,
            Some(d) => return Err(format!("{s:?}: direction {d:?} is not lower or higher")),
        };
        if own && better == Better::Higher {
            return Err(format!("{name} is ferry's own metric: lower is better"));
        }
        Ok(MetricSpec {
            name: name.to_string(),
            better,
        })
    }
}

/// A device class dimension a breakdown may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassKey {
    /// The SoC.
    Soc,
    /// The device model.
    DeviceModel,
}

impl ClassKey {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            ClassKey::Soc => "soc",
            ClassKey::DeviceModel => "device_model",
        }
    }

    /// Reads a name.
    pub fn parse(s: &str) -> Option<ClassKey> {
        match s {
            "soc" => Some(ClassKey::Soc),
            "device_model" => Some(ClassKey::DeviceModel),
            _ => None,
        }
    }
}

/// Where an experiment is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum ExperimentState {
    /// Devices are assigned.
    Running,
    /// No device is assigned any more; results stay readable.
    Stopped {
        /// The arm the operator declared the winner, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        winner: Option<ArmName>,
        /// Whether the winner was rolled out (a rollout of its release was started).
        #[serde(default)]
        rolled_out: bool,
    },
}

/// One revision of a model's experiment plan (`state/<model>/experiment/<revision>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentPlan {
    /// The model.
    pub model: String,
    /// The revision (1, 2, ...): every change writes a new one.
    pub revision: u64,
    /// The experiment's id (new at each start): the arm field of decisions and receipts.
    pub id: String,
    /// The assignment salt (its own, not the rollout's).
    pub salt: String,
    /// What the control arm gets.
    pub control: Arm,
    /// What the treatment arm gets.
    pub treatment: Arm,
    /// The share of the model's devices that take part, in basis points.
    pub basis_points: u32,
    /// The metrics compared (ferry's own are always compared too).
    #[serde(default)]
    pub metrics: Vec<MetricSpec>,
    /// The class dimensions of the breakdown.
    #[serde(default)]
    pub classes: Vec<ClassKey>,
    /// The effect of interest, relative to the control's mean (default 0.05).
    pub effect: f64,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// Days of each device's history before the start that CUPED reads.
    pub lookback_days: u32,
    /// Where it is.
    #[serde(flatten)]
    pub state: ExperimentState,
    /// What this revision did (`start`, `stop`, `revoked`).
    pub action: String,
    /// Who made it.
    pub actor: String,
    /// When (RFC 3339).
    pub at: String,
    /// Why.
    #[serde(default)]
    pub reason: String,
}

impl ExperimentPlan {
    /// True while devices are assigned.
    pub fn is_running(&self) -> bool {
        self.state == ExperimentState::Running
    }

    /// The arm's plan.
    pub fn arm(&self, arm: ArmName) -> &Arm {
        match arm {
            ArmName::Control => &self.control,
            ArmName::Treatment => &self.treatment,
        }
    }

    /// The arm `install_id` belongs to by hash alone (see [`assign`]). Who takes part also
    /// depends on the rollout and the device (see the resolve decision).
    pub fn bucket_arm(&self, install_id: &str) -> Option<ArmName> {
        assign(&self.salt, self.basis_points, &self.model, install_id)
    }

    /// The tag decisions and receipts carry for a device in `arm`.
    pub fn tag(&self, arm: ArmName) -> ArmTag {
        ArmTag {
            id: self.id.clone(),
            arm,
        }
    }
}

/// The arm `install_id` of `model` belongs to in an experiment of `salt` taking
/// `basis_points` of the devices: inside the share
/// (`bucket(salt, model, install_id) < basis_points`), one half each by a second bucket
/// (`bucket(salt + "/arm", model, install_id) < 5000`: control), so a device's arm does not
/// change when the share grows. Clients check a decision's arm with it.
pub fn assign(salt: &str, basis_points: u32, model: &str, install_id: &str) -> Option<ArmName> {
    if bucket(salt, model, install_id) >= basis_points.min(FULL) {
        return None;
    }
    let half = bucket(&format!("{salt}/arm"), model, install_id);
    Some(if half < FULL / 2 {
        ArmName::Control
    } else {
        ArmName::Treatment
    })
}

/// An experiment's arm as receipts name it (the additive `experiment` field).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArmTag {
    /// The experiment's id.
    pub id: String,
    /// The arm.
    pub arm: ArmName,
}

impl ArmTag {
    /// How a receipt's variant list names it: `@<id>=<arm>` (no variant id starts with `@`).
    pub fn receipt_entry(&self) -> String {
        format!("@{}={}", self.id, self.arm.as_str())
    }

    /// Reads a receipt list entry made by [`ArmTag::receipt_entry`].
    pub fn from_receipt_entry(entry: &str) -> Option<ArmTag> {
        let (id, arm) = entry.strip_prefix('@')?.split_once('=')?;
        check_experiment_id(id).ok()?;
        Some(ArmTag {
            id: id.to_string(),
            arm: ArmName::parse(arm)?,
        })
    }
}

/// Checks an experiment id: 1–32 characters of `[a-z0-9-]`.
pub fn check_experiment_id(id: &str) -> Result<(), String> {
    if !id.is_empty()
        && id.len() <= 32
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        Ok(())
    } else {
        Err(format!(
            "experiment id {id:?} must be 1-32 characters of a-z, 0-9 and '-'"
        ))
    }
}
