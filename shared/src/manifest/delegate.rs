//! Delegates (what a variant was lowered to, and the hardware class each targets) and the
//! device platforms a variant can be constrained to.
//!
//! Both are *open* sets (protocol v1, `docs/protocol.md`): the values ferry knows have their
//! own variants, and any other well-formed value is kept as text ([`Delegate::Other`] holds
//! an ExecuTorch backend id, [`Platform::Unknown`] a platform token), so a manifest or a
//! request naming a delegate or platform this build has never heard of still parses. Unknown
//! values are limited in length and charset like every other device string.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::names::BackendId;

/// The delegate a variant was lowered to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Delegate {
    /// XNNPACK on any CPU: the tested fallback.
    Xnnpack,
    /// Apple Core ML (Neural Engine / GPU / CPU).
    Coreml,
    /// Apple Metal Performance Shaders.
    Mps,
    /// Vulkan compute on GPUs (mostly Android).
    Vulkan,
    /// Qualcomm QNN (Hexagon NPU).
    Qnn,
    /// MediaTek NeuroPilot NPU.
    Mediatek,
    /// Arm Ethos-U microNPU.
    Ethosu,
    /// No delegate: ExecuTorch's portable (or optimized) CPU kernels only.
    Portable,
    /// Any other ExecuTorch backend, named by the backend id it registers and writes into
    /// `.pte` files (`OpenvinoBackend`, `EnnBackend`, `NeutronBackend`, ...; such a name
    /// starts with an uppercase letter, so a misspelt known name like `vulcan` is an error,
    /// not a new delegate). Ranked after the known NPU and GPU delegates and before XNNPACK
    /// unless the preference lists it.
    Other(BackendId),
}

/// Broad class of hardware a delegate runs on; used for default preference order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HardwareClass {
    /// A neural processing unit.
    Npu,
    /// A GPU.
    Gpu,
    /// An accelerator ferry does not classify (a backend outside the known set).
    Accelerator,
    /// Vectorised CPU kernels.
    Cpu,
    /// Plain portable kernels.
    Portable,
}

impl Delegate {
    /// Every delegate ferry knows by name, in declaration order.
    pub const ALL: [Delegate; 8] = [
        Delegate::Xnnpack,
        Delegate::Coreml,
        Delegate::Mps,
        Delegate::Vulkan,
        Delegate::Qnn,
        Delegate::Mediatek,
        Delegate::Ethosu,
        Delegate::Portable,
    ];

    /// The name used in manifests and on the command line: lowercase for the known delegates,
    /// the backend id for the others.
    pub fn as_str(&self) -> &str {
        match self {
            Delegate::Xnnpack => "xnnpack",
            Delegate::Coreml => "coreml",
            Delegate::Mps => "mps",
            Delegate::Vulkan => "vulkan",
            Delegate::Qnn => "qnn",
            Delegate::Mediatek => "mediatek",
            Delegate::Ethosu => "ethosu",
            Delegate::Portable => "portable",
            Delegate::Other(id) => id.as_str(),
        }
    }

    /// True for a delegate ferry knows by name (not [`Delegate::Other`]).
    pub fn is_known(&self) -> bool {
        !matches!(self, Delegate::Other(_))
    }

    /// The backend id ExecuTorch registers for this delegate and writes into `.pte` files;
    /// `None` for [`Delegate::Portable`].
    pub fn backend_id(&self) -> Option<&str> {
        match self {
            Delegate::Xnnpack => Some("XnnpackBackend"),
            Delegate::Coreml => Some("CoreMLBackend"),
            Delegate::Mps => Some("MPSBackend"),
            Delegate::Vulkan => Some("VulkanBackend"),
            Delegate::Qnn => Some("QnnBackend"),
            Delegate::Mediatek => Some("NeuropilotBackend"),
            Delegate::Ethosu => Some("EthosUBackend"),
            Delegate::Portable => None,
            Delegate::Other(id) => Some(id.as_str()),
        }
    }

    /// The delegate whose backend id is `id`: a known one, else [`Delegate::Other`] when `id`
    /// is a well-formed backend id starting with an uppercase letter.
    pub fn from_backend_id(id: &str) -> Option<Delegate> {
        Delegate::ALL
            .into_iter()
            .find(|d| d.backend_id() == Some(id))
            .or_else(|| {
                id.starts_with(|c: char| c.is_ascii_uppercase())
                    .then(|| BackendId::new(id).ok().map(Delegate::Other))
                    .flatten()
            })
    }

    /// The hardware class used by the default preference order (NPU > GPU > other
    /// accelerators > CPU > portable).
    pub fn hardware_class(&self) -> HardwareClass {
        match self {
            Delegate::Coreml | Delegate::Qnn | Delegate::Mediatek | Delegate::Ethosu => {
                HardwareClass::Npu
            }
            Delegate::Vulkan | Delegate::Mps => HardwareClass::Gpu,
            Delegate::Other(_) => HardwareClass::Accelerator,
            Delegate::Xnnpack => HardwareClass::Cpu,
            Delegate::Portable => HardwareClass::Portable,
        }
    }
}

impl fmt::Display for Delegate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Delegate {
    type Err = String;
    /// A known name (`xnnpack`, ...), a known backend id (`XnnpackBackend` is
    /// [`Delegate::Xnnpack`]), or any other backend id (`[A-Za-z0-9_]`, 1–64 characters).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Delegate::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .or_else(|| Delegate::from_backend_id(s))
            .ok_or_else(|| {
                format!(
                    "unknown delegate {s:?}; expected one of xnnpack, coreml, mps, vulkan, qnn, \
                     mediatek, ethosu, portable, or an ExecuTorch backend id such as \
                     OpenvinoBackend (letters, digits and '_')"
                )
            })
    }
}

impl Serialize for Delegate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Delegate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Longest platform name.
pub const MAX_PLATFORM: usize = 32;

/// A device platform.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Platform {
    /// Android.
    Android,
    /// iOS / iPadOS.
    Ios,
    /// Linux (embedded or desktop).
    Linux,
    /// macOS.
    Macos,
    /// Windows.
    Windows,
    /// `other`: a device that says it is none of the named platforms.
    Other,
    /// A platform this build does not know (`harmonyos`, ...), kept as sent: 1–32 characters
    /// of `[a-z0-9._-]`. It matches only variants without a platform restriction, or whose
    /// restriction names exactly this value.
    Unknown(String),
}

impl Platform {
    /// Every platform ferry knows by name.
    pub const KNOWN: [Platform; 6] = [
        Platform::Android,
        Platform::Ios,
        Platform::Linux,
        Platform::Macos,
        Platform::Windows,
        Platform::Other,
    ];

    /// The lowercase name used on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            Platform::Android => "android",
            Platform::Ios => "ios",
            Platform::Linux => "linux",
            Platform::Macos => "macos",
            Platform::Windows => "windows",
            Platform::Other => "other",
            Platform::Unknown(s) => s,
        }
    }

    /// True for a platform ferry knows by name.
    pub fn is_known(&self) -> bool {
        !matches!(self, Platform::Unknown(_))
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Platform {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(p) = Platform::KNOWN.into_iter().find(|p| p.as_str() == s) {
            return Ok(p);
        }
        let well_formed = !s.is_empty()
            && s.len() <= MAX_PLATFORM
            && s.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            });
        if well_formed {
            Ok(Platform::Unknown(s.to_string()))
        } else {
            Err(format!(
                "platform {:?} is not a platform name: android, ios, linux, macos, windows, \
                 other, or 1 to {MAX_PLATFORM} characters of a-z, 0-9, '.', '_' and '-'",
                s.chars().take(40).collect::<String>()
            ))
        }
    }
}

impl Serialize for Platform {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Platform {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Checks that a variant declared as `delegate` with backend list `declared` is what its
/// program really contains ("partitioners fail open": a variant labelled Vulkan may call no
/// Vulkan at all). Returns why not, for people, or `None` when it matches.
pub fn delegation_mismatch(
    variant: &str,
    delegate: &Delegate,
    declared: &[crate::names::BackendId],
    report: &crate::pte::PteReport,
) -> Option<String> {
    use std::collections::BTreeSet;
    let found: BTreeSet<String> = report.backends().into_iter().collect();
    let declared: BTreeSet<String> = declared.iter().map(|b| b.to_string()).collect();
    let summary = report
        .methods
        .iter()
        .map(|m| format!("{}: {}", m.name, m.summary))
        .collect::<Vec<_>>()
        .join("; ");
    let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
    match delegate.backend_id() {
        None if !found.is_empty() => {
            return Some(format!(
                "variant {variant} is declared portable but calls {} ({summary})",
                list(&found)
            ));
        }
        Some(id) if !found.contains(id) => {
            return Some(format!(
                "variant {variant} is declared {delegate} but its program never calls {id} \
                 ({summary}); the partitioner probably declined the graph"
            ));
        }
        _ => {}
    }
    if found != declared {
        return Some(format!(
            "variant {variant} lists backends [{}] but its program calls [{}]",
            list(&declared),
            list(&found)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_delegates_round_trip_by_name_and_by_backend_id() {
        for d in Delegate::ALL {
            let json = serde_json::to_string(&d).expect("ok");
            assert_eq!(serde_json::from_str::<Delegate>(&json).expect("ok"), d);
            if let Some(id) = d.backend_id() {
                assert_eq!(id.parse::<Delegate>().expect("ok"), d, "{id}");
            }
        }
    }

    #[test]
    fn an_unknown_backend_id_is_kept_and_ranks_as_an_accelerator() {
        let d: Delegate = serde_json::from_str("\"OpenvinoBackend\"").expect("ok");
        assert_eq!(d.as_str(), "OpenvinoBackend");
        assert_eq!(d.backend_id(), Some("OpenvinoBackend"));
        assert!(!d.is_known());
        assert_eq!(d.hardware_class(), HardwareClass::Accelerator);
        assert!(HardwareClass::Gpu < HardwareClass::Accelerator);
        assert!(HardwareClass::Accelerator < HardwareClass::Cpu);
        assert_eq!(
            serde_json::to_string(&d).expect("ok"),
            "\"OpenvinoBackend\""
        );
    }

    #[test]
    fn malformed_delegates_and_platforms_are_refused() {
        for bad in [
            "",
            "open vino",
            "a/b",
            &"X".repeat(65),
            "ümlaut",
            "vulcan",
            "cuda",
        ] {
            assert!(bad.parse::<Delegate>().is_err(), "{bad:?}");
        }
        for bad in ["", "Harmony OS", "HarmonyOS", &"x".repeat(33), "a\nb"] {
            assert!(bad.parse::<Platform>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_unknown_platform_is_kept_as_sent() {
        let p: Platform = serde_json::from_str("\"harmonyos\"").expect("ok");
        assert_eq!(p, Platform::Unknown("harmonyos".into()));
        assert_eq!(serde_json::to_string(&p).expect("ok"), "\"harmonyos\"");
        assert_eq!("other".parse::<Platform>().expect("ok"), Platform::Other);
    }
}
