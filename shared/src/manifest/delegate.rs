//! Delegates (what a variant was lowered to, and the hardware class each targets) and the
//! device platforms a variant can be constrained to.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The delegate a variant was lowered to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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
}

/// Broad class of hardware a delegate runs on; used for default preference order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HardwareClass {
    /// A neural processing unit.
    Npu,
    /// A GPU.
    Gpu,
    /// Vectorised CPU kernels.
    Cpu,
    /// Plain portable kernels.
    Portable,
}

impl Delegate {
    /// Every delegate, in declaration order.
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

    /// The lowercase name used in manifests and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Delegate::Xnnpack => "xnnpack",
            Delegate::Coreml => "coreml",
            Delegate::Mps => "mps",
            Delegate::Vulkan => "vulkan",
            Delegate::Qnn => "qnn",
            Delegate::Mediatek => "mediatek",
            Delegate::Ethosu => "ethosu",
            Delegate::Portable => "portable",
        }
    }

    /// The backend id ExecuTorch registers for this delegate and writes into `.pte` files;
    /// `None` for [`Delegate::Portable`].
    pub fn backend_id(self) -> Option<&'static str> {
        match self {
            Delegate::Xnnpack => Some("XnnpackBackend"),
            Delegate::Coreml => Some("CoreMLBackend"),
            Delegate::Mps => Some("MPSBackend"),
            Delegate::Vulkan => Some("VulkanBackend"),
            Delegate::Qnn => Some("QnnBackend"),
            Delegate::Mediatek => Some("NeuropilotBackend"),
            Delegate::Ethosu => Some("EthosUBackend"),
            Delegate::Portable => None,
        }
    }

    /// The delegate whose backend id is `id`, if any.
    pub fn from_backend_id(id: &str) -> Option<Delegate> {
        Delegate::ALL
            .into_iter()
            .find(|d| d.backend_id() == Some(id))
    }

    /// The hardware class used by the default preference order (NPU > GPU > CPU > portable).
    pub fn hardware_class(self) -> HardwareClass {
        match self {
            Delegate::Coreml | Delegate::Qnn | Delegate::Mediatek | Delegate::Ethosu => {
                HardwareClass::Npu
            }
            Delegate::Vulkan | Delegate::Mps => HardwareClass::Gpu,
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
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Delegate::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown delegate {s:?}; expected one of xnnpack, coreml, mps, vulkan, qnn, \
                     mediatek, ethosu, portable"
                )
            })
    }
}

/// A device platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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
    /// Anything else.
    Other,
}

impl Platform {
    /// The lowercase name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Android => "android",
            Platform::Ios => "ios",
            Platform::Linux => "linux",
            Platform::Macos => "macos",
            Platform::Windows => "windows",
            Platform::Other => "other",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
