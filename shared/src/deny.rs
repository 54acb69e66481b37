//! The deny list: entries that stop offering one variant of one release to a device class (a
//! SoC or a device model), learned from telemetry or set by ops, and the changes ops can make.
//!
//! An entry in state [`DenyState::Deny`] excludes the variant for matching devices at resolve
//! time; [`DenyState::Allow`] is an ops override that telemetry will not turn back into a deny.

use serde::{Deserialize, Serialize};

/// Which device attribute an entry matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceClass {
    /// The system on chip (matched case-insensitively).
    Soc,
    /// The device model (matched exactly).
    DeviceModel,
}

impl DeviceClass {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceClass::Soc => "soc",
            DeviceClass::DeviceModel => "device_model",
        }
    }
}

/// Who made an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenySource {
    /// Learned from fleet telemetry.
    Telemetry,
    /// Set by an operator.
    Ops,
}

impl DenySource {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DenySource::Telemetry => "telemetry",
            DenySource::Ops => "ops",
        }
    }
}

/// Whether an entry denies or explicitly allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenyState {
    /// The variant is not offered to the class.
    Deny,
    /// An ops override: offered despite telemetry.
    Allow,
}

/// A learned or manual deny-list entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenyEntry {
    /// Release.
    pub release: String,
    /// Variant.
    pub variant: String,
    /// Which attribute `value` is.
    pub class: DeviceClass,
    /// The SoC or device model.
    pub value: String,
    /// Fallback rate when denied.
    pub fallback_rate: f64,
    /// Attempts seen when denied.
    pub samples: u64,
    /// Who made it.
    pub source: DenySource,
    /// Deny or allow.
    pub state: DenyState,
}

impl DenyEntry {
    /// True when both entries are about the same variant and device class value.
    pub fn same_target(&self, other: &DenyEntry) -> bool {
        self.release == other.release
            && self.variant == other.variant
            && self.class == other.class
            && match self.class {
                DeviceClass::Soc => self.value.eq_ignore_ascii_case(&other.value),
                DeviceClass::DeviceModel => self.value == other.value,
            }
    }

    /// The sentence `explain` shows.
    pub fn reason(&self) -> String {
        format!(
            "denied by {}: {:.0}% fallback on {}, n={}",
            self.source.as_str(),
            self.fallback_rate * 100.0,
            self.value,
            self.samples
        )
    }

    /// True when the entry denies `variant` of `release` to this device.
    pub fn matches(&self, release: &str, variant: &str, soc: &str, device_model: &str) -> bool {
        self.state == DenyState::Deny
            && self.release == release
            && self.variant == variant
            && match self.class {
                DeviceClass::Soc => self.value.eq_ignore_ascii_case(soc),
                DeviceClass::DeviceModel => self.value == device_model,
            }
    }
}

/// What an operator does to an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenyAction {
    /// Allow despite telemetry (the entry must exist).
    Override,
    /// Remove the entry (it must exist).
    Clear,
    /// Deny by hand (adds the entry or turns an override back into a deny).
    Deny,
}

impl DenyAction {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DenyAction::Override => "override",
            DenyAction::Clear => "clear",
            DenyAction::Deny => "deny",
        }
    }
}

/// The body of `POST /v1/admin/models/{model}/deny`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenyChange {
    /// What to do.
    pub action: DenyAction,
    /// Release.
    pub release: String,
    /// Variant.
    pub variant: String,
    /// Device class.
    pub class: DeviceClass,
    /// The SoC or device model.
    pub value: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(class: DeviceClass, value: &str) -> DenyEntry {
        DenyEntry {
            release: "1.0.0".into(),
            variant: "vulkan".into(),
            class,
            value: value.into(),
            fallback_rate: 0.5,
            samples: 40,
            source: DenySource::Telemetry,
            state: DenyState::Deny,
        }
    }

    #[test]
    fn wire_names_are_stable() {
        let json = serde_json::to_value(entry(DeviceClass::DeviceModel, "Pixel 8")).expect("json");
        assert_eq!(json["class"], "device_model");
        assert_eq!(json["source"], "telemetry");
        assert_eq!(json["state"], "deny");
        let bad = r#"{"action":"explode","release":"1","variant":"v","class":"soc","value":"x"}"#;
        assert!(serde_json::from_str::<DenyChange>(bad).is_err());
        let bad = r#"{"action":"deny","release":"1","variant":"v","class":"gpu","value":"x"}"#;
        assert!(serde_json::from_str::<DenyChange>(bad).is_err());
    }

    #[test]
    fn matching_follows_the_class() {
        let soc = entry(DeviceClass::Soc, "Tensor G3");
        assert!(soc.matches("1.0.0", "vulkan", "tensor g3", "Pixel 8"));
        assert!(!soc.matches("1.0.0", "xnnpack", "tensor g3", "Pixel 8"));
        let model = entry(DeviceClass::DeviceModel, "Pixel 8");
        assert!(!model.matches("1.0.0", "vulkan", "x", "pixel 8"));
        let mut allowed = model.clone();
        allowed.state = DenyState::Allow;
        assert!(!allowed.matches("1.0.0", "vulkan", "x", "Pixel 8"));
    }
}
