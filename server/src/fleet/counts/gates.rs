//! Gates computed from field latency over a whole rollup: the share of device windows over a
//! variant's budget in a health view, and the staged release's latency against the baseline's,
//! SoC by SoC, that a ramp's latency gate reads.

use std::collections::BTreeMap;

use crate::fleet::counts::latency::share_over;
use crate::fleet::counts::rollup::Rollup;
use crate::fleet::counts::sketches::LoadTimes;
use crate::fleet::devices::Devices;

/// Adds each budgeted variant's `budget_ms` and `over_budget` (the share of device windows
/// whose warm p95 was over it) to a health view `h` made from `r`: in the variant's
/// `inference`, and in its SoC and device-model classes' `warm_p95_ms`.
pub fn add_budgets(
    h: &mut serde_json::Value,
    r: &Rollup,
    model: &str,
    budget: &dyn Fn(&str, &str) -> Option<f64>,
) {
    for rel in h["releases"].as_array_mut().into_iter().flatten() {
        let release = rel["release"].as_str().unwrap_or("").to_string();
        for v in rel["variants"].as_array_mut().into_iter().flatten() {
            let id = v["variant"].as_str().unwrap_or("").to_string();
            let (Some(b), Some(counts)) = (
                budget(&release, &id),
                r.models
                    .get(model)
                    .and_then(|m| m.get(&release))
                    .and_then(|m| m.get(&id)),
            ) else {
                continue;
            };
            if v["inference"].is_object() {
                v["inference"]["budget_ms"] = serde_json::json!(b);
                v["inference"]["over_budget"] =
                    serde_json::json!(share_over(&counts.latency.warm_p95, b));
            }
            for (key, map) in [
                ("by_soc", &counts.by_soc),
                ("by_device_model", &counts.by_device_model),
            ] {
                for (class, c) in map {
                    let view = &mut v[key][class]["warm_p95_ms"];
                    if view.is_object() {
                        view["over_budget"] = serde_json::json!(share_over(&c.warm_p95, b));
                    }
                }
            }
        }
    }
}

/// The staged and baseline releases' crashed and reporting devices in `r` (a window since the
/// plan's revision), which the crash gate reads.
pub fn crash_compare(
    r: &Rollup,
    model: &str,
    staged: &str,
    baseline: Option<&str>,
) -> ferry_shared::select::rollout::ramp::CrashCompare {
    ferry_shared::select::rollout::ramp::CrashCompare::new(
        r.release_crash_devices(model, staged),
        baseline.map_or((0, 0), |b| r.release_crash_devices(model, b)),
    )
}

/// Per SoC, the warm p95 sketch of all of `release`'s variants together.
fn by_soc(r: &Rollup, model: &str, release: &str) -> BTreeMap<String, LoadTimes> {
    let mut out: BTreeMap<String, LoadTimes> = BTreeMap::new();
    let variants = r.models.get(model).and_then(|m| m.get(release));
    for v in variants.into_iter().flat_map(|v| v.values()) {
        for (soc, c) in &v.by_soc {
            if c.warm_p95.0.count() > 0 {
                let _ = out.entry(soc.clone()).or_default().0.merge(&c.warm_p95.0);
            }
        }
    }
    out
}

/// Fewest distinct devices with `inference` data each release needs before the latency gate
/// compares them (one outlier device must not halt a ramp).
pub const MIN_GATE_DEVICES: u64 = 5;

/// Distinct devices that sent `inference` events for any variant of `release`.
fn devices(r: &Rollup, model: &str, release: &str) -> u64 {
    let mut all = Devices::default();
    for v in r
        .models
        .get(model)
        .and_then(|m| m.get(release))
        .into_iter()
        .flat_map(|v| v.values())
    {
        all.merge(&v.latency.devices);
    }
    all.estimate() as u64
}

/// The staged and baseline releases' field latency on the SoCs both have data for: per SoC,
/// the staged median device warm p95 over the baseline's, and the median of those ratios (so
/// a staged share that sits on faster phones does not look faster); `None` when they share
/// no SoC or either has fewer than [`MIN_GATE_DEVICES`] reporting devices.
pub fn compare(
    r: &Rollup,
    model: &str,
    staged: &str,
    baseline: &str,
) -> Option<ferry_shared::select::rollout::ramp::LatencyCompare> {
    let staged_devices = devices(r, model, staged);
    if staged_devices < MIN_GATE_DEVICES || devices(r, model, baseline) < MIN_GATE_DEVICES {
        return None;
    }
    let (s, b) = (by_soc(r, model, staged), by_soc(r, model, baseline));
    let median = |t: &LoadTimes| t.0.quantile(0.5).ok().flatten();
    let (mut sm, mut bm) = (LoadTimes::default(), LoadTimes::default());
    let mut ratios = Vec::new();
    for (soc, sk) in &s {
        if let Some(bk) = b.get(soc)
            && let (Some(x), Some(y)) = (median(sk), median(bk))
            && y > 0.0
        {
            ratios.push(x / y);
            let _ = sm.0.merge(&sk.0);
            let _ = bm.0.merge(&bk.0);
        }
    }
    ratios.sort_by(f64::total_cmp);
    let ratio = *ratios.get(ratios.len().checked_sub(1)? / 2)?;
    Some(ferry_shared::select::rollout::ramp::LatencyCompare {
        staged_ms: median(&sm)?,
        baseline_ms: median(&bm)?,
        ratio,
        socs: ratios.len() as u64,
        devices: staged_devices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_shared::wire::telemetry::TelemetryEvent;

    fn window(r: &mut Rollup, release: &str, device: u64, soc: &str, p95: f64) {
        let e: TelemetryEvent = serde_json::from_value(serde_json::json!({
            "kind": "inference", "model": "m", "release": release, "variant": "v",
            "delegate": "xnnpack", "outcome": "ok", "install_id": "i", "platform": "android",
            "soc": soc, "device_model": "d", "os_version": "", "app_version": "",
            "runtime_version": "", "at": "2026-12-01T00:00:00Z", "method": "forward",
            "runs": 10, "p95_ms": p95,
        }))
        .expect("event");
        r.variant_mut("m", release, "v").add(&e, device, 0);
    }

    #[test]
    fn the_gate_compares_soc_by_soc_and_needs_devices_on_both_sides() {
        let mut r = Rollup::default();
        // Baseline: 10 ms on the fast SoC, 100 ms on the slow one, most devices slow.
        for d in 0..5 {
            window(&mut r, "1", d, "FAST", 10.0);
        }
        for d in 0..15 {
            window(&mut r, "1", 100 + d, "SLOW", 100.0);
        }
        // Staged: 1.5x slower on each SoC, but most of its devices on the fast SoC.
        for d in 0..4 {
            window(&mut r, "2", 200 + d, "FAST", 15.0);
        }
        assert_eq!(
            compare(&r, "m", "2", "1"),
            None,
            "4 staged devices are too few"
        );
        for d in 4..20 {
            window(&mut r, "2", 200 + d, "FAST", 15.0);
        }
        window(&mut r, "2", 300, "SLOW", 150.0);
        let c = compare(&r, "m", "2", "1").expect("compared");
        assert_eq!(c.socs, 2);
        assert!((c.ratio - 1.5).abs() < 0.05, "{c:?}");
        // Merged over the two SoCs, the staged release would look faster than the baseline.
        assert!(c.staged_ms < c.baseline_ms, "{c:?}");
    }
}
