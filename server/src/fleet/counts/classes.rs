//! The counts of one device class (a SoC, a device model, a platform, an app or runtime
//! version) within one variant: what health shows per class and what the learned deny list
//! reads.

use serde::{Deserialize, Serialize};

use crate::fleet::counts::sketches::LoadTimes;
use crate::fleet::devices::Devices;

/// Counts for a device class within a variant.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClassCounts {
    /// Load attempts.
    pub loads: u64,
    /// Failed loads.
    pub load_failures: u64,
    /// Fallbacks away from this variant.
    pub fallbacks: u64,
    /// Distinct devices.
    pub devices: Devices,
    /// Distinct client networks (IPv4 /24, IPv6 /48) the events came from.
    #[serde(default)]
    pub networks: Devices,
    /// The devices' warm p95 run times (ms) from `inference` events.
    #[serde(default)]
    pub warm_p95: LoadTimes,
    /// Distinct devices whose `inference` events gave `warm_p95` (SoC and device model only).
    #[serde(default)]
    pub latency_devices: Devices,
    /// The platform its devices report (the first seen; SoC and device model only), which
    /// decides the delegate preference resolve ranks them by.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub platform: String,
    /// Native crashes of this variant (`crash` events).
    #[serde(default)]
    pub crashes: u64,
    /// Distinct devices it crashed on (SoC and device model only).
    #[serde(default)]
    pub crash_devices: Devices,
    /// Distinct client networks those crash reports came from (SoC and device model only).
    #[serde(default)]
    pub crash_networks: Devices,
}

impl ClassCounts {
    pub(crate) fn merge(&mut self, o: &ClassCounts) {
        self.loads += o.loads;
        self.load_failures += o.load_failures;
        self.fallbacks += o.fallbacks;
        self.devices.merge(&o.devices);
        self.networks.merge(&o.networks);
        let _ = self.warm_p95.0.merge(&o.warm_p95.0);
        self.latency_devices.merge(&o.latency_devices);
        if self.platform.is_empty() {
            self.platform.clone_from(&o.platform);
        }
        self.crashes += o.crashes;
        self.crash_devices.merge(&o.crash_devices);
        self.crash_networks.merge(&o.crash_networks);
    }

    /// The share of the class's devices (those that reported the variant at all) it crashed
    /// on: never above 1.
    pub fn crash_share(&self) -> f64 {
        let all = self.devices.estimate().max(1) as f64;
        (self.crash_devices.estimate() as f64 / all).min(1.0)
    }

    /// Fallbacks per load, never above 1 whatever the events claim.
    pub fn fallback_rate(&self) -> f64 {
        if self.loads == 0 {
            0.0
        } else {
            self.fallbacks.min(self.loads) as f64 / self.loads as f64
        }
    }

    pub(crate) fn view(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "loads": self.loads,
            "load_failures": self.load_failures,
            "fallbacks": self.fallbacks,
            "crashes": self.crashes,
            "devices": self.devices.estimate(),
        });
        if self.crashes > 0 && self.crash_devices.estimate() > 0 {
            v["crash_devices"] = self.crash_devices.estimate().into();
        }
        if self.warm_p95.0.count() > 0 {
            let q = |p: f64| self.warm_p95.0.quantile(p).ok().flatten();
            v["warm_p95_ms"] = serde_json::json!({
                "p50": q(0.5), "p95": q(0.95), "samples": self.warm_p95.0.count(),
                "devices": self.latency_devices.estimate(),
            });
        }
        v
    }
}
