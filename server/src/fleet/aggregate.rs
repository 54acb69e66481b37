//! Telemetry ingestion, fleet health, the learned deny list and the automatic halt.
//!
//! `POST /v1/telemetry` takes `{"events": [...]}`. Each event is validated on its own; bad ones
//! are listed in the answer with their index and code, the rest are kept. Accepted events are
//! aggregated in memory per model / release / variant, and per SoC and device model within a
//! variant (loads, failures, fallbacks with their targets and error codes, load times), and
//! buffered as NDJSON lines flushed to `telemetry/raw/date=YYYY-MM-DD/hour=HH/` in the store;
//! rollups go to `telemetry/rollup/<model>/<node>.json`. Ingestion never takes a lock that
//! resolve takes: resolve reads only the rollout and deny snapshots.
//!
//! After each batch the aggregates are checked: a staged release over its rollout's thresholds
//! (with at least `min_samples` loads) is halted; a variant whose fallback rate on one SoC or
//! device model crosses the deny threshold (with enough samples) is denied to that class.

use ferry_shared::errors::ErrorCode;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use ferry_shared::telemetry::{EventKind, Outcome, TelemetryEvent};
use serde::Serialize;
use time::OffsetDateTime;

use crate::fleet::ingest::{EventError, MAX_DEVICES, MAX_SAMPLES, TelemetryConfig, validate};
use crate::fleet::limits::Limiter;
use ferry_shared::deny::{DenyEntry, DenySource, DenyState, DeviceClass};

/// Counts for a device class within a variant.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClassCounts {
    /// Load attempts.
    pub loads: u64,
    /// Failed loads.
    pub load_failures: u64,
    /// Fallbacks away from this variant.
    pub fallbacks: u64,
    /// Distinct devices seen (counted up to [`CLASS_DEVICES`]).
    pub devices: u64,
    #[serde(skip)]
    device_ids: HashSet<u64>,
}

/// Distinct devices counted per device class: enough to compare with any sensible minimum.
pub const CLASS_DEVICES: usize = 1000;

impl ClassCounts {
    fn note_device(&mut self, id: u64) {
        if self.device_ids.len() < CLASS_DEVICES && self.device_ids.insert(id) {
            self.devices = self.device_ids.len() as u64;
        }
    }

    fn fallback_rate(&self) -> f64 {
        if self.loads == 0 {
            0.0
        } else {
            // A rate never exceeds 1, whatever the events claim (a fallback follows a load).
            self.fallbacks.min(self.loads) as f64 / self.loads as f64
        }
    }
}

/// Aggregates of one variant of one release.
#[derive(Debug, Clone, Default)]
pub struct VariantAgg {
    delegate: String,
    devices: HashSet<u64>,
    /// Events counted per device (see [`PER_DEVICE_EVENTS`]).
    per_device: HashMap<u64, u8>,
    loads_ok: u64,
    load_failures: u64,
    fallbacks: u64,
    fallback_to: BTreeMap<String, u64>,
    error_codes: BTreeMap<String, u64>,
    downloads_failed: u64,
    verify_failed: u64,
    load_ms: Vec<f64>,
    by_soc: BTreeMap<String, ClassCounts>,
    by_device_model: BTreeMap<String, ClassCounts>,
    by_platform: BTreeMap<String, ClassCounts>,
}

pub(crate) fn hash_id(s: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted.get(idx).copied()
}

/// Most events one device adds to one variant's counts: a device (even one with a real
/// receipt) weighs at most this much in rates, halts, ramps and deny decisions, however many
/// events it sends; more are kept in the raw log only.
pub const PER_DEVICE_EVENTS: u8 = 8;

impl VariantAgg {
    fn add(&mut self, e: &TelemetryEvent) {
        let id = hash_id(&e.install_id);
        if self.per_device.len() < MAX_DEVICES || self.per_device.contains_key(&id) {
            let n = self.per_device.entry(id).or_default();
            if *n >= PER_DEVICE_EVENTS {
                return;
            }
            *n += 1;
        }
        if self.devices.len() < MAX_DEVICES {
            self.devices.insert(id);
        }
        if self.delegate.is_empty() {
            self.delegate = e.delegate.clone();
        }
        let device = hash_id(&e.install_id);
        let classes = |agg: &mut Self, f: &dyn Fn(&mut ClassCounts)| {
            for (map, key) in [
                (&mut agg.by_soc, &e.soc),
                (&mut agg.by_device_model, &e.device_model),
                (&mut agg.by_platform, &e.platform),
            ] {
                if !key.is_empty() && (map.len() < 10_000 || map.contains_key(key)) {
                    let c = map.entry(key.clone()).or_default();
                    c.note_device(device);
                    f(c);
                }
            }
        };
        match (e.kind, e.outcome) {
            (EventKind::Load, Outcome::Ok) => {
                self.loads_ok += 1;
                if let Some(ms) = e.load_ms
                    && self.load_ms.len() < MAX_SAMPLES
                {
                    self.load_ms.push(ms);
                }
                classes(self, &|c| c.loads += 1);
            }
            (EventKind::Load, Outcome::Failed) => {
                self.load_failures += 1;
                if let Some(code) = &e.error_code {
                    *self.error_codes.entry(code.clone()).or_default() += 1;
                }
                classes(self, &|c| {
                    c.loads += 1;
                    c.load_failures += 1;
                });
            }
            (EventKind::Fallback, _) => {
                self.fallbacks += 1;
                if let Some(to) = &e.to_variant {
                    *self.fallback_to.entry(to.clone()).or_default() += 1;
                }
                classes(self, &|c| c.fallbacks += 1);
            }
            (EventKind::Download, Outcome::Failed) => self.downloads_failed += 1,
            (EventKind::Verify, Outcome::Failed) => self.verify_failed += 1,
            _ => {}
        }
    }

    fn loads(&self) -> u64 {
        self.loads_ok + self.load_failures
    }

    /// The JSON view for `health`.
    fn view(&self, variant: &str) -> serde_json::Value {
        let mut ms = self.load_ms.clone();
        ms.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let mut codes: Vec<(&String, &u64)> = self.error_codes.iter().collect();
        codes.sort_by(|a, b| b.1.cmp(a.1));
        let loads = self.loads();
        let rate = |n: u64| {
            if loads == 0 {
                0.0
            } else {
                n.min(loads) as f64 / loads as f64
            }
        };
        serde_json::json!({
            "variant": variant,
            "delegate": self.delegate,
            "devices": self.devices.len(),
            "loads": loads,
            "load_failures": self.load_failures,
            "failure_rate": rate(self.load_failures),
            "fallbacks": self.fallbacks,
            "fallback_rate": rate(self.fallbacks),
            "fallbacks_to": self.fallback_to,
            "top_error_codes": codes.iter().take(5).map(|(c, n)| serde_json::json!({"code": c, "count": n})).collect::<Vec<_>>(),
            "downloads_failed": self.downloads_failed,
            "verify_failed": self.verify_failed,
            "load_ms": {"p50": percentile(&ms, 0.5), "p95": percentile(&ms, 0.95)},
            "by_soc": self.by_soc,
            "by_device_model": self.by_device_model,
            "by_platform": self.by_platform,
        })
    }
}
/// The in-memory telemetry state of one server.
#[derive(Debug, Default)]
pub struct Telemetry {
    aggs: Mutex<BTreeMap<(String, String, String), VariantAgg>>,
    raw: Mutex<Vec<String>>,
    limiter: Mutex<Limiter>,
    cohorts: Mutex<BTreeMap<(String, String), HashSet<u64>>>,
    evaluated: Mutex<HashMap<String, Instant>>,
    dropped: std::sync::atomic::AtomicU64,
}

/// What one batch did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IngestReport {
    /// Events kept.
    pub accepted: usize,
    /// Accepted events without a valid receipt: kept in the raw log, counted nowhere else.
    pub unverified: usize,
    /// Events refused, with reasons.
    pub rejected: Vec<EventError>,
}

impl Telemetry {
    /// True when `addr` may make another request.
    pub fn allow_address(&self, addr: &str, cfg: &TelemetryConfig) -> bool {
        self.limiter
            .lock()
            .map(|mut l| l.take(&format!("addr:{addr}"), 1.0, cfg.per_address_per_minute))
            .unwrap_or(true)
    }

    /// Validates a batch of raw JSON events, keeps the valid ones in the raw log, and adds to the
    /// aggregates (what halts, ramps, deny entries and health read) only those `verified`
    /// accepts (a valid receipt).
    pub fn ingest(
        &self,
        events: &[serde_json::Value],
        now: OffsetDateTime,
        cfg: &TelemetryConfig,
        verified: &dyn Fn(&TelemetryEvent) -> bool,
    ) -> IngestReport {
        let mut report = IngestReport::default();
        let mut good = Vec::new();
        for (i, v) in events.iter().enumerate() {
            match validate(v, now, cfg) {
                Ok(e) => good.push((i, e)),
                Err((code, message)) => report.rejected.push(EventError {
                    index: i,
                    code,
                    message,
                }),
            }
        }
        let mut kept = Vec::new();
        if let Ok(mut lim) = self.limiter.lock() {
            for (i, e) in good {
                // Only devices with a receipt get a per-install bucket: made-up install ids
                // must not fill (and so reset) the limiter. Unreceipted events are bounded by
                // the per-address limit and count toward nothing.
                let ok = verified(&e);
                if !ok {
                    kept.push((e, false));
                    continue;
                }
                if lim.take(
                    &format!("install:{}", e.install_id),
                    1.0,
                    cfg.per_install_per_minute,
                ) {
                    kept.push((e, true));
                } else {
                    report.rejected.push(EventError {
                        index: i,
                        code: ErrorCode::RateLimited,
                        message: format!(
                            "install {} sends more than {} events a minute",
                            e.install_id, cfg.per_install_per_minute
                        ),
                    });
                }
            }
        }
        report.rejected.sort_by_key(|e| e.index);
        report.accepted = kept.len();
        if let Ok(mut aggs) = self.aggs.lock() {
            for (e, ok) in &kept {
                if !ok {
                    report.unverified += 1;
                    continue;
                }
                aggs.entry((e.model.clone(), e.release.clone(), e.variant.clone()))
                    .or_default()
                    .add(e);
            }
        }
        if let Ok(mut raw) = self.raw.lock() {
            for (e, _) in &kept {
                if let Ok(line) = serde_json::to_string(e) {
                    raw.push(line);
                }
            }
            let cap = cfg.raw_buffer_events.max(1) * 5;
            if raw.len() > cap {
                let excess = raw.len() - cap;
                raw.drain(..excess);
                self.dropped
                    .fetch_add(excess as u64, std::sync::atomic::Ordering::Relaxed);
            }
        }
        report
    }

    /// True when enough raw events are buffered to flush before the timer.
    pub fn wants_flush(&self, cfg: &TelemetryConfig) -> bool {
        self.raw
            .lock()
            .map(|r| r.len() >= cfg.raw_buffer_events.max(1))
            .unwrap_or(false)
    }

    /// Raw events dropped because the store could not keep up.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// True when `model` is due for a threshold evaluation (and marks it evaluated).
    pub fn due(&self, model: &str, cfg: &TelemetryConfig) -> bool {
        let Ok(mut m) = self.evaluated.lock() else {
            return true;
        };
        let now = Instant::now();
        match m.get(model) {
            Some(t) if now.duration_since(*t).as_millis() < u128::from(cfg.evaluate_ms) => false,
            _ => {
                m.insert(model.to_string(), now);
                true
            }
        }
    }

    /// Notes that `install_id` was served `cohort` of `model` (for cohort sizes).
    pub fn record_cohort(&self, model: &str, cohort: &str, install_id: &str) {
        if let Ok(mut c) = self.cohorts.lock() {
            let set = c
                .entry((model.to_string(), cohort.to_string()))
                .or_default();
            if set.len() < MAX_DEVICES {
                set.insert(hash_id(install_id));
            }
        }
    }

    /// Takes the buffered raw lines (for a flush).
    pub fn take_raw(&self) -> Vec<String> {
        self.raw
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }

    /// Puts lines back after a failed flush.
    pub fn restore_raw(&self, mut lines: Vec<String>) {
        if let Ok(mut r) = self.raw.lock() {
            lines.append(&mut r);
            *r = lines;
        }
    }

    /// Loads, failures and fallbacks of all variants of `release` of `model`.
    pub fn release_totals(&self, model: &str, release: &str) -> (u64, u64, u64) {
        let Ok(aggs) = self.aggs.lock() else {
            return (0, 0, 0);
        };
        aggs.iter()
            .filter(|((m, r, _), _)| m == model && r == release)
            .fold((0, 0, 0), |(l, f, b), (_, a)| {
                (l + a.loads(), f + a.load_failures, b + a.fallbacks)
            })
    }

    /// Device classes of `model` over the deny threshold: (release, variant, class, value,
    /// fallback rate, samples).
    pub fn deny_candidates(&self, model: &str, cfg: &TelemetryConfig) -> Vec<DenyEntry> {
        let Ok(aggs) = self.aggs.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for ((m, release, variant), a) in aggs.iter() {
            if m != model {
                continue;
            }
            for (class, map) in [
                (DeviceClass::Soc, &a.by_soc),
                (DeviceClass::DeviceModel, &a.by_device_model),
            ] {
                for (value, c) in map {
                    if c.loads >= cfg.deny_min_samples
                        && c.devices >= cfg.deny_min_devices
                        && c.fallback_rate() >= cfg.deny_fallback_rate
                    {
                        out.push(DenyEntry {
                            release: release.clone(),
                            variant: variant.clone(),
                            class,
                            value: value.clone(),
                            fallback_rate: c.fallback_rate(),
                            samples: c.loads,
                            source: DenySource::Telemetry,
                            state: DenyState::Deny,
                        });
                    }
                }
            }
        }
        out
    }

    /// The health view of `model` (releases newest first).
    pub fn health(&self, model: &str) -> serde_json::Value {
        let aggs = match self.aggs.lock() {
            Ok(a) => a,
            Err(p) => p.into_inner(),
        };
        let mut releases: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
        for ((m, release, variant), a) in aggs.iter() {
            if m == model {
                releases
                    .entry(release.clone())
                    .or_default()
                    .push(a.view(variant));
            }
        }
        let mut list: Vec<(semver::Version, String, Vec<serde_json::Value>)> = releases
            .into_iter()
            .map(|(r, v)| (r.parse().unwrap_or(semver::Version::new(0, 0, 0)), r, v))
            .collect();
        list.sort_by(|a, b| b.0.cmp(&a.0));
        let cohorts = self.cohorts.lock().map(|c| {
            c.iter()
                .filter(|((m, _), _)| m == model)
                .map(|((_, cohort), set)| (cohort.clone(), set.len()))
                .collect::<BTreeMap<_, _>>()
        });
        serde_json::json!({
            "releases": list.into_iter().map(|(_, r, v)| serde_json::json!({"release": r, "variants": v})).collect::<Vec<_>>(),
            "cohort_sizes": cohorts.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str, outcome: &str) -> serde_json::Value {
        serde_json::json!({
            "kind": kind, "model": "m", "release": "1.0.0", "variant": "vulkan", "delegate": "vulkan",
            "outcome": outcome, "install_id": "i1", "platform": "android", "soc": "SM8450",
            "device_model": "X", "os_version": "14", "app_version": "1.0.0", "runtime_version": "1.5.1",
            "at": "2026-12-02T10:00:00Z", "to_variant": "xnnpack", "error_code": "runtime_load_failed", "load_ms": 3.5,
            "future_field": {"ignored": true}
        })
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::parse(
            "2026-12-02T12:00:00Z",
            &time::format_description::well_known::Rfc3339,
        )
        .expect("time")
    }

    #[test]
    fn validation_errors_are_per_event() {
        let t = Telemetry::default();
        let cfg = TelemetryConfig::default();
        let mut missing = ev("load", "ok");
        missing
            .as_object_mut()
            .expect("object")
            .remove("install_id");
        let mut no_target = ev("fallback", "failed");
        no_target
            .as_object_mut()
            .expect("object")
            .remove("to_variant");
        let mut old = ev("load", "ok");
        old["at"] = "2020-01-01T00:00:00Z".into();
        let mut bad_model = ev("load", "ok");
        bad_model["model"] = "../x".into();
        let mut nan = ev("load", "ok");
        nan["load_ms"] = serde_json::json!(-1);
        let batch = vec![
            ev("load", "ok"),
            missing,
            no_target,
            old,
            bad_model,
            nan,
            serde_json::json!(42),
            ev("fallback", "failed"),
        ];
        let r = t.ingest(&batch, now(), &cfg, &|_| true);
        assert_eq!(r.accepted, 2);
        let codes: Vec<(usize, &str)> = r
            .rejected
            .iter()
            .map(|e| (e.index, e.code.as_str()))
            .collect();
        assert_eq!(
            codes,
            [
                (1, "event_invalid"),
                (2, "event_invalid"),
                (3, "event_out_of_range"),
                (4, "event_invalid"),
                (5, "event_invalid"),
                (6, "event_invalid")
            ]
        );
        let (loads, failures, fallbacks) = t.release_totals("m", "1.0.0");
        assert_eq!((loads, failures, fallbacks), (1, 0, 1));
    }

    #[test]
    fn per_install_rate_limit() {
        let t = Telemetry::default();
        let cfg = TelemetryConfig {
            per_install_per_minute: 3,
            ..TelemetryConfig::default()
        };
        let batch: Vec<_> = (0..5).map(|_| ev("load", "ok")).collect();
        let r = t.ingest(&batch, now(), &cfg, &|_| true);
        assert_eq!(r.accepted, 3);
        assert!(r.rejected.iter().all(|e| e.code == ErrorCode::RateLimited));
    }

    #[test]
    fn deny_candidates_need_samples_and_rate() {
        let t = Telemetry::default();
        let cfg = TelemetryConfig {
            deny_min_samples: 10,
            per_install_per_minute: 100_000,
            ..TelemetryConfig::default()
        };
        let mut batch = Vec::new();
        for i in 0..20 {
            let mut f = ev("load", "failed");
            f["install_id"] = format!("d{i}").into();
            let mut fb = ev("fallback", "failed");
            fb["install_id"] = format!("d{i}").into();
            batch.push(f);
            batch.push(fb);
        }
        t.ingest(&batch, now(), &cfg, &|_| true);
        let c = t.deny_candidates("m", &cfg);
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(
            c.iter()
                .any(|d| d.class == DeviceClass::Soc && d.value == "SM8450" && d.samples == 20)
        );
        assert_eq!(
            c[0].reason(),
            format!("denied by telemetry: 100% fallback on {}, n=20", c[0].value)
        );
        let h = t.health("m");
        assert_eq!(h["releases"][0]["variants"][0]["devices"], 20);
        assert_eq!(
            h["releases"][0]["variants"][0]["fallbacks_to"]["xnnpack"],
            20
        );
    }

    #[test]
    fn one_device_cannot_deny_a_class_however_much_it_sends() {
        let cfg = TelemetryConfig {
            deny_min_samples: 10,
            per_install_per_minute: 100_000,
            ..TelemetryConfig::default()
        };
        let batch = |devices: usize| -> Vec<serde_json::Value> {
            (0..200)
                .flat_map(|i| {
                    let id = format!("d{}", i % devices);
                    let mut f = ev("load", "failed");
                    f["install_id"] = id.clone().into();
                    let mut fb = ev("fallback", "failed");
                    fb["install_id"] = id.into();
                    [f, fb]
                })
                .collect()
        };
        let one = Telemetry::default();
        one.ingest(&batch(1), now(), &cfg, &|_| true);
        assert!(
            one.deny_candidates("m", &cfg).is_empty(),
            "one device denied a class"
        );
        let (loads, failures, fallbacks) = one.release_totals("m", "1.0.0");
        assert_eq!(
            (loads, failures, fallbacks),
            (4, 4, 4),
            "one device weighs at most {PER_DEVICE_EVENTS} events per variant"
        );
        let few = Telemetry::default();
        few.ingest(&batch(19), now(), &cfg, &|_| true);
        assert!(
            few.deny_candidates("m", &cfg).is_empty(),
            "19 devices denied a class"
        );
        let many = Telemetry::default();
        many.ingest(&batch(20), now(), &cfg, &|_| true);
        assert!(
            !many.deny_candidates("m", &cfg).is_empty(),
            "20 devices are enough"
        );
    }
}
