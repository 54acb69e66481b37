//! What one device reported, folded per period, and the one number per metric it contributes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::experiment::plan::ArmName;

pub use crate::experiment::names::{CRASH, DOWNLOAD_BYTES, FALLBACK, LATENCY, LOAD_FAILURE, OWN};

/// App metric names one device may hold per period (more are dropped and counted).
pub const MAX_APP_METRICS: usize = 32;

/// One device's events in one period, folded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Period {
    /// Events of any kind.
    pub events: u64,
    /// Load events.
    pub loads: u64,
    /// Failed load events.
    pub load_failures: u64,
    /// Fallback events.
    pub fallbacks: u64,
    /// Crash events.
    pub crashes: u64,
    /// Inference summaries with a warm p95 (the probe's excluded).
    pub latency_n: u64,
    /// Their sum (ms).
    pub latency_sum: f64,
    /// Bytes fetched by download events.
    pub bytes: u64,
    /// App metrics: count and sum of the values, by name.
    pub app: BTreeMap<String, (u64, f64)>,
}

/// What [`Period::add_row`] reads of one event (as the raw event log stores it).
#[derive(Debug, Clone, Copy, Default)]
pub struct Row<'a> {
    /// Its kind, as on the wire (`load`, `metric`, ...).
    pub kind: &'a str,
    /// Its outcome was `failed`.
    pub failed: bool,
    /// Its warm p95 (inference events).
    pub p95_ms: Option<f64>,
    /// Timed by the on-device probe.
    pub probe: bool,
    /// Bytes fetched (download events).
    pub bytes_fetched: Option<u64>,
    /// The app metric's name and value (metric events).
    pub metric: Option<(&'a str, f64)>,
}

impl Period {
    /// Folds one event's row in; false when an app metric was dropped (too many names).
    pub fn add_row(&mut self, r: &Row<'_>) -> bool {
        self.events += 1;
        match r.kind {
            "load" => {
                self.loads += 1;
                self.load_failures += u64::from(r.failed);
            }
            "fallback" => self.fallbacks += 1,
            "crash" => self.crashes += 1,
            "inference" if !r.probe => {
                if let Some(p) = r.p95_ms.filter(|p| p.is_finite() && *p >= 0.0) {
                    self.latency_n += 1;
                    self.latency_sum += p;
                }
            }
            "download" => self.bytes = self.bytes.saturating_add(r.bytes_fetched.unwrap_or(0)),
            "metric" => {
                let Some((name, value)) = r.metric.filter(|(_, v)| v.is_finite()) else {
                    return true;
                };
                if !self.app.contains_key(name) && self.app.len() >= MAX_APP_METRICS {
                    return false;
                }
                let slot = self.app.entry(name.to_string()).or_default();
                slot.0 += 1;
                slot.1 += value;
            }
            _ => {}
        }
        true
    }

    /// Adds `other` (the same device's events read elsewhere); the app metric names dropped
    /// (past [`MAX_APP_METRICS`]).
    pub fn merge(&mut self, other: &Period) -> u64 {
        self.events += other.events;
        self.loads += other.loads;
        self.load_failures += other.load_failures;
        self.fallbacks += other.fallbacks;
        self.crashes += other.crashes;
        self.latency_n += other.latency_n;
        self.latency_sum += other.latency_sum;
        self.bytes = self.bytes.saturating_add(other.bytes);
        let mut dropped = 0;
        for (name, (n, sum)) in &other.app {
            if !self.app.contains_key(name) && self.app.len() >= MAX_APP_METRICS {
                dropped += n;
                continue;
            }
            let slot = self.app.entry(name.clone()).or_default();
            slot.0 += n;
            slot.1 += sum;
        }
        dropped
    }

    /// The device's one number for `metric` in this period (`None`: it reported nothing that
    /// bears on it).
    pub fn value(&self, metric: &str) -> Option<f64> {
        match metric {
            LOAD_FAILURE => (self.loads > 0).then(|| self.load_failures as f64 / self.loads as f64),
            FALLBACK => (self.loads > 0).then(|| f64::from(u8::from(self.fallbacks > 0))),
            CRASH => (self.events > 0).then(|| f64::from(u8::from(self.crashes > 0))),
            LATENCY => (self.latency_n > 0).then(|| self.latency_sum / self.latency_n as f64),
            DOWNLOAD_BYTES => (self.events > 0).then_some(self.bytes as f64),
            app => self
                .app
                .get(app)
                .filter(|(n, _)| *n > 0)
                .map(|(n, s)| s / *n as f64),
        }
    }
}

/// One device in an experiment: its arm (none: it was never given one, its past only counts),
/// its class, and its periods.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceRecord {
    /// The arm its receipts named during the experiment.
    pub arm: Option<ArmName>,
    /// Its SoC as last reported.
    pub soc: String,
    /// Its device model as last reported.
    pub device_model: String,
    /// Before the experiment (or before its first answer in an arm).
    pub pre: Period,
    /// In its arm.
    pub during: Period,
}

impl DeviceRecord {
    /// Adds `other` (the same device's events read from another file): the arm any of them
    /// names, the class it reports in its arm (its history's until then); the app metric
    /// values dropped.
    pub fn merge(&mut self, other: DeviceRecord) -> u64 {
        if other.arm.is_some() || self.arm.is_none() {
            if !other.soc.is_empty() {
                self.soc = other.soc;
            }
            if !other.device_model.is_empty() {
                self.device_model = other.device_model;
            }
        }
        self.arm = other.arm.or(self.arm);
        self.pre.merge(&other.pre) + self.during.merge(&other.during)
    }
}
