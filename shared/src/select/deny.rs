//! The deny list: entries that stop offering one variant of one release to a device class (a
//! SoC or a device model), learned from telemetry or set by ops, and the changes ops can make.
//!
//! An entry of kind [`DenyKind::Fallback`] in state [`DenyState::Deny`] excludes the variant for
//! matching devices at resolve time; one of kind [`DenyKind::SlowInField`] keeps it but ranks
//! the next candidate first (the variant runs, only slower there than it should).
//! [`DenyState::Allow`] is an ops override that telemetry will not turn back into an entry.

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

/// What an entry is about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenyKind {
    /// The variant fails (falls back) on the class: not offered there.
    #[default]
    Fallback,
    /// The variant is slow on the class (over its latency budget, or much slower than the next
    /// candidate): still offered, after the next candidate.
    SlowInField,
    /// The variant crashed the app natively on enough of the class's devices: still offered,
    /// after the next candidate (XNNPACK and portable variants too: a crash is not a decline).
    CrashedInField,
}

impl DenyKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DenyKind::Fallback => "fallback",
            DenyKind::SlowInField => "slow_in_field",
            DenyKind::CrashedInField => "crashed_in_field",
        }
    }
}

/// The field figures behind a [`DenyKind::SlowInField`] entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowFigures {
    /// The median of the class's device warm p95s for the variant (ms).
    pub p95_ms: f64,
    /// Distinct devices (with receipts) behind it.
    pub devices: u64,
    /// The variant's latency budget, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_ms: Option<f64>,
    /// The candidate ranked next on the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_variant: Option<String>,
    /// That candidate's median device warm p95 on the class, when enough devices reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_p95_ms: Option<f64>,
}

/// The field figures behind a [`DenyKind::CrashedInField`] entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrashFigures {
    /// Distinct devices (with receipts) of the class that reported a crash of the variant.
    pub devices: u64,
    /// Distinct devices of the class that reported on the variant at all.
    pub class_devices: u64,
    /// `devices` over `class_devices`.
    pub share: f64,
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
    /// What it is about (entries written before kinds existed are `fallback`).
    #[serde(default)]
    pub kind: DenyKind,
    /// For a `slow_in_field` entry learned from telemetry: the figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<SlowFigures>,
    /// For a `crashed_in_field` entry learned from telemetry: the figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash: Option<CrashFigures>,
}

impl DenyEntry {
    /// True when both entries are of one kind, about the same variant and device class value.
    pub fn same_target(&self, other: &DenyEntry) -> bool {
        self.kind == other.kind && self.same_class(other)
    }

    /// True when both entries are about the same variant and device class value, whatever
    /// their kinds.
    pub fn same_class(&self, other: &DenyEntry) -> bool {
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
        if self.kind == DenyKind::CrashedInField {
            return match &self.crash {
                Some(f) => format!(
                    "crashed_in_field: crashed natively on {} of {} devices ({:.0}%) on {}",
                    f.devices,
                    f.class_devices,
                    f.share * 100.0,
                    self.value
                ),
                None => format!(
                    "crashed_in_field: ranked after the next candidate on {} by {}",
                    self.value,
                    self.source.as_str()
                ),
            };
        }
        match (self.kind, &self.latency) {
            (DenyKind::Fallback, _) => format!(
                "denied by {}: {:.0}% fallback on {}, n={}",
                self.source.as_str(),
                self.fallback_rate * 100.0,
                self.value,
                self.samples
            ),
            (DenyKind::SlowInField | DenyKind::CrashedInField, None) => format!(
                "slow_in_field: ranked after the next candidate on {} by {}",
                self.value,
                self.source.as_str()
            ),
            (DenyKind::SlowInField | DenyKind::CrashedInField, Some(f)) => {
                let mut why = format!(
                    "slow_in_field: median warm p95 {:.1} ms on {}",
                    f.p95_ms, self.value
                );
                if let Some(b) = f.budget_ms {
                    why.push_str(&format!(", budget {b} ms"));
                }
                match (&f.next_variant, f.next_p95_ms) {
                    (Some(n), Some(ms)) => why.push_str(&format!(", {n} {ms:.1} ms")),
                    (Some(n), None) => why.push_str(&format!(", {n} not yet measured")),
                    _ => {}
                }
                why.push_str(&format!(", n={} devices", f.devices));
                why
            }
        }
    }

    /// True when the entry denies `variant` of `release` to this device.
    pub fn matches(&self, release: &str, variant: &str, soc: &str, device_model: &str) -> bool {
        self.kind == DenyKind::Fallback && self.applies(release, variant, soc, device_model)
    }

    /// True when the entry ranks `variant` of `release` after the next candidate on this
    /// device (a `slow_in_field` or `crashed_in_field` entry in force).
    pub fn demotes(&self, release: &str, variant: &str, soc: &str, device_model: &str) -> bool {
        matches!(self.kind, DenyKind::SlowInField | DenyKind::CrashedInField)
            && self.applies(release, variant, soc, device_model)
    }

    fn applies(&self, release: &str, variant: &str, soc: &str, device_model: &str) -> bool {
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
    /// Which kind of entry: for `override` and `clear`, absent means every entry on the target;
    /// for `deny`, absent means `fallback` (not offered) and `slow_in_field` ranks the variant
    /// after the next candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<DenyKind>,
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
            kind: DenyKind::Fallback,
            latency: None,
            crash: None,
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
