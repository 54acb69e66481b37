//! Field latency: the `inference` events devices send (one per model, method and variant that
//! ran since their last flush) aggregated per variant and per device class, as mergeable
//! DDSketches like load times, so every replica sees the whole fleet and restarts lose nothing.
//!
//! Each event is one device's window: its warm p50 and p95, its cold first call, how long it
//! ran without pause, and its most severe thermal state. The sketches hold those per-device
//! figures, so "p95 of warm p95s" is the 95th percentile across device windows.

use std::collections::BTreeMap;

use ferry_shared::wire::telemetry::{TelemetryEvent, Thermal};
use serde::{Deserialize, Serialize};

use crate::fleet::counts::sketches::LoadTimes;
use crate::fleet::devices::Devices;

/// A window of at least this many seconds of calls without a pause counts as sustained use.
pub const SUSTAINED_S: f64 = 60.0;

/// Longest method name kept in an event.
pub const MAX_METHOD: usize = 128;

/// Latency of one variant (or one device class of it).
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct Latency {
    /// `inference` events counted.
    pub events: u64,
    /// Calls they summarise.
    pub runs: u64,
    /// Of the events, those from the on-device probe (`probe: true`).
    #[serde(default)]
    pub probes: u64,
    /// Distinct devices that reported.
    pub devices: Devices,
    /// The devices' warm p50s (ms).
    pub warm_p50: LoadTimes,
    /// The devices' warm p95s (ms).
    pub warm_p95: LoadTimes,
    /// Cold first calls after a load (ms).
    pub first: LoadTimes,
    /// Warm p95s of windows with at least [`SUSTAINED_S`] of sustained use.
    pub sustained_p95: LoadTimes,
    /// Warm p95s by the most severe thermal state of the window (`nominal` … `critical`).
    pub by_thermal: BTreeMap<String, LoadTimes>,
}

impl std::fmt::Debug for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latency")
            .field("events", &self.events)
            .field("runs", &self.runs)
            .finish_non_exhaustive()
    }
}

fn sane(ms: Option<f64>) -> Option<f64> {
    ms.filter(|x| x.is_finite() && *x >= 0.0)
}

impl Latency {
    /// Counts one `inference` event of `device`.
    pub fn add(&mut self, e: &TelemetryEvent, device: u64) {
        let i = &e.inference;
        self.events += 1;
        self.runs = self.runs.saturating_add(i.runs.unwrap_or(0));
        if i.probe == Some(true) {
            self.probes += 1;
        }
        self.devices.insert(&device);
        if let Some(ms) = sane(i.p50_ms) {
            self.warm_p50.0.add(ms);
        }
        if let Some(ms) = sane(i.first_ms) {
            self.first.0.add(ms);
        }
        if let Some(ms) = sane(i.p95_ms) {
            self.warm_p95.0.add(ms);
            if i.sustained_s.is_some_and(|s| s >= SUSTAINED_S) {
                self.sustained_p95.0.add(ms);
            }
            if let Some(t) = i.thermal.filter(|t| *t != Thermal::Other) {
                self.by_thermal
                    .entry(t.as_str().to_string())
                    .or_default()
                    .0
                    .add(ms);
            }
        }
    }

    /// Adds `o` into `self` (sketches of another configuration are left out).
    pub fn merge(&mut self, o: &Latency) {
        self.events += o.events;
        self.runs = self.runs.saturating_add(o.runs);
        self.probes += o.probes;
        self.devices.merge(&o.devices);
        let _ = self.warm_p50.0.merge(&o.warm_p50.0);
        let _ = self.warm_p95.0.merge(&o.warm_p95.0);
        let _ = self.first.0.merge(&o.first.0);
        let _ = self.sustained_p95.0.merge(&o.sustained_p95.0);
        for (k, s) in &o.by_thermal {
            // At most the four known states: keys come from `Thermal::as_str`.
            if self.by_thermal.len() < 8 || self.by_thermal.contains_key(k) {
                let _ = self.by_thermal.entry(k.clone()).or_default().0.merge(&s.0);
            }
        }
    }

    /// Wide-ranging samples in every sketch, so that merging a damaged sketch with this one
    /// fails where the caller guards it (see `stored::probe_merge`).
    pub fn probe_samples(&mut self) {
        for s in [
            &mut self.warm_p50,
            &mut self.warm_p95,
            &mut self.first,
            &mut self.sustained_p95,
        ] {
            for ms in [0.001, 1.0, 1e6] {
                s.0.add(ms);
            }
        }
    }

    /// The JSON view for `health` (`null` when nothing was reported).
    pub fn view(&self) -> serde_json::Value {
        if self.events == 0 {
            return serde_json::Value::Null;
        }
        let q = |s: &LoadTimes| {
            let at = |p: f64| s.0.quantile(p).ok().flatten();
            serde_json::json!({"p50": at(0.5), "p95": at(0.95), "samples": s.0.count()})
        };
        serde_json::json!({
            "events": self.events,
            "runs": self.runs,
            "probes": self.probes,
            "devices": self.devices.estimate(),
            "warm_p50_ms": q(&self.warm_p50),
            "warm_p95_ms": q(&self.warm_p95),
            "cold_ms": q(&self.first),
            "sustained_p95_ms": q(&self.sustained_p95),
            "by_thermal": self.by_thermal.iter().map(|(k, s)| (k.clone(), q(s))).collect::<BTreeMap<_, _>>(),
        })
    }

    /// The median of the devices' warm p95s, when any reported.
    pub fn median_warm_p95(&self) -> Option<f64> {
        self.warm_p95.0.quantile(0.5).ok().flatten()
    }
}

/// Checks an `inference` event's own fields (the common ones are checked by ingest): a
/// method, at least one run, times within 0..=10,000,000 ms, p50 ≤ p95 ≤ max, sustained
/// use within a year.
pub fn check(e: &TelemetryEvent) -> Result<(), String> {
    let i = &e.inference;
    match &i.method {
        Some(m)
            if !m.is_empty()
                && !ferry_shared::names::longer_than(m, MAX_METHOD)
                && !m.chars().any(char::is_control) => {}
        _ => {
            return Err(format!(
                "an inference event needs method (1 to {MAX_METHOD} characters, no control \
                 characters)"
            ));
        }
    }
    if !i.runs.is_some_and(|n| (1..=1_000_000_000).contains(&n)) {
        return Err("an inference event needs runs between 1 and 1,000,000,000".into());
    }
    for (name, v) in [
        ("first_ms", i.first_ms),
        ("p50_ms", i.p50_ms),
        ("p95_ms", i.p95_ms),
        ("max_ms", i.max_ms),
    ] {
        if v.is_some_and(|x| !(x.is_finite() && (0.0..=1e7).contains(&x))) {
            return Err(format!("{name} must be between 0 and 10,000,000"));
        }
    }
    // Percentiles from a histogram are rounded: a little slack before calling them disordered.
    let ordered = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => a <= b * 1.1 + 1e-3,
        _ => true,
    };
    if !ordered(i.p50_ms, i.p95_ms) || !ordered(i.p95_ms, i.max_ms) {
        return Err("p50_ms, p95_ms and max_ms must not decrease".into());
    }
    if i.sustained_s
        .is_some_and(|s| !(s.is_finite() && (0.0..=31_536_000.0).contains(&s)))
    {
        return Err("sustained_s must be between 0 and 31,536,000".into());
    }
    Ok(())
}

/// The share of a sketch's samples over `budget` (found by bisection on its quantiles, so
/// within the sketch's accuracy), rounded to 0.1%.
pub fn share_over(s: &LoadTimes, budget: f64) -> Option<f64> {
    if s.0.count() == 0 {
        return None;
    }
    let at = |q: f64| s.0.quantile(q).ok().flatten();
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    if at(1.0)? <= budget {
        return Some(0.0);
    }
    if at(0.0)? > budget {
        return Some(1.0);
    }
    for _ in 0..30 {
        let mid = f64::midpoint(lo, hi);
        if at(mid)? > budget {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(((1.0 - hi) * 1000.0).round() / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_over_a_budget_follows_the_windows() {
        let mut s = LoadTimes::default();
        assert_eq!(share_over(&s, 10.0), None);
        for ms in 1..=100 {
            s.0.add(f64::from(ms));
        }
        assert_eq!(share_over(&s, 1000.0), Some(0.0));
        assert_eq!(share_over(&s, 0.5), Some(1.0));
        let over = share_over(&s, 80.0).expect("share");
        assert!((over - 0.2).abs() <= 0.02, "{over}");
    }
}
