//! The deny list: learned or manual entries that stop offering a variant to a SoC or device
//! model, kept as a revision log in the store.

use ferry_shared::ModelName;
use serde::{Deserialize, Serialize};

use crate::api::error::ApiError;
use crate::storage::{Store, revisions};

/// A learned or manual deny-list entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenyEntry {
    /// Release.
    pub release: String,
    /// Variant.
    pub variant: String,
    /// `soc` or `device_model`.
    pub class: String,
    /// The SoC or device model.
    pub value: String,
    /// Fallback rate when denied.
    pub fallback_rate: f64,
    /// Attempts seen when denied.
    pub samples: u64,
    /// `telemetry` or `ops`.
    pub source: String,
    /// `deny`, or `allow` (an ops override telemetry will not undo).
    pub state: String,
}

impl DenyEntry {
    /// The sentence `explain` shows.
    pub fn reason(&self) -> String {
        format!(
            "denied by {}: {:.0}% fallback on {}, n={}",
            self.source,
            self.fallback_rate * 100.0,
            self.value,
            self.samples
        )
    }

    /// True when the entry applies to this device.
    pub fn matches(&self, release: &str, variant: &str, soc: &str, device_model: &str) -> bool {
        self.state == "deny"
            && self.release == release
            && self.variant == variant
            && match self.class.as_str() {
                "soc" => self.value.eq_ignore_ascii_case(soc),
                "device_model" => self.value == device_model,
                _ => false,
            }
    }
}
/// One revision of a model's deny list.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DenyList {
    /// The entries in force.
    pub entries: Vec<DenyEntry>,
    /// What changed (`telemetry`, `override`, `clear`, `deny`).
    pub action: String,
    /// Who.
    pub actor: String,
    /// When.
    pub at: String,
}

pub(crate) fn deny_prefix(model: &ModelName) -> String {
    format!("state/{model}/deny")
}

/// The deny list in force for `model`, if one was ever written.
pub async fn load(store: &Store, model: &ModelName) -> Result<Option<Vec<DenyEntry>>, ApiError> {
    Ok(revisions::latest::<DenyList>(store, &deny_prefix(model))
        .await?
        .map(|(_, list)| list.entries))
}
