//! The on-device probe ([`crate::Probe`]): once per release, time the decision's top
//! candidates on their signed golden inputs and report each as an `inference` event marked
//! `probe: true`, so a device class gets a first ranking before the fleet has data on it.

use std::fs::OpenOptions;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferry_shared::telemetry::{EventKind, TelemetryEvent};

use super::stamped;
use crate::Client;
use crate::inference::MethodTimes;
use crate::policy::{LoadOptions, Probe};
use crate::types::{DeviceInfo, ProbeReport, ProbeTiming};
use crate::verify::Plan;

impl Client {
    /// Runs the probe after a load from `plan`, when `opts` asks for one, the device is not
    /// saving power, and no probe of this release ran from this cache before. Errors end it
    /// quietly: the probe never fails a load.
    pub(crate) fn probe_after_load(
        &self,
        model: &str,
        device: &DeviceInfo,
        plan: &Plan,
        opts: &LoadOptions,
        spent: &mut u64,
    ) -> Option<ProbeReport> {
        let probe = opts.probe?;
        let skipped = |why: &str| {
            Some(ProbeReport {
                skipped: Some(why.to_string()),
                timed: Vec::new(),
            })
        };
        if opts.conditions.power_saver == Some(true) {
            return skipped("the device is in power-saving mode");
        }
        let release = plan.manifest.version.to_string();
        if !self.claim_probe(model, &release) {
            return skipped("this release was probed from this cache before");
        }
        let events = self.time_candidates(model, device, plan, opts, probe, spent);
        let timed = events
            .iter()
            .map(|e| ProbeTiming {
                variant: e.variant.clone(),
                delegate: e.delegate.clone(),
                runs: e.inference.runs.unwrap_or(0),
                first_ms: e.inference.first_ms,
                p50_ms: e.inference.p50_ms,
                p95_ms: e.inference.p95_ms,
            })
            .collect();
        let _ = self
            .telemetry
            .push(&stamped(events, plan.receipt.as_deref()));
        Some(ProbeReport {
            skipped: None,
            timed,
        })
    }

    /// Marks `release` of `model` as probed (a file in the cache, created once): true when
    /// this call made the mark, so one process probes once even if it crashes mid-way.
    fn claim_probe(&self, model: &str, release: &str) -> bool {
        let dir = ferry_shared::sync::lock(&self.cache).root().join("probes");
        if std::fs::create_dir_all(&dir).is_err() {
            return false;
        }
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(format!("{model}@{release}")))
            .is_ok()
    }

    /// Opens each of the top candidates that has a golden input for the method and times its
    /// runs within the probe's time; returns one event per candidate timed.
    fn time_candidates(
        &self,
        model: &str,
        device: &DeviceInfo,
        plan: &Plan,
        opts: &LoadOptions,
        probe: Probe,
        spent: &mut u64,
    ) -> Vec<TelemetryEvent> {
        let started = Instant::now();
        let release = plan.manifest.version.to_string();
        let top: Vec<_> = plan.candidates.iter().take(probe.candidates).collect();
        let mut events = Vec::new();
        for (i, c) in top.iter().enumerate() {
            let v = &c.variant;
            let Some((input, _)) = v.golden.as_ref().and_then(|g| g.for_method(&self.method))
            else {
                continue;
            };
            // Each candidate may use an equal share of what is left.
            let left = probe.max_time.saturating_sub(started.elapsed());
            let share = left / u32::try_from(top.len() - i).unwrap_or(1).max(1);
            if share < Duration::from_millis(1) || self.missing_operators(v).is_some() {
                continue;
            }
            let until = Instant::now() + share;
            let Ok((blob, _)) = self.ensure_blob(model, c, opts, spent) else {
                continue;
            };
            let Ok((mut program, _)) = self.open_and_check(&blob, v) else {
                continue;
            };
            let mut times = MethodTimes::new(&self.method);
            let thermal = self.inference.thermal.load(Ordering::Relaxed);
            for _ in 0..probe.runs {
                if Instant::now() >= until {
                    break;
                }
                let t = Instant::now();
                if program.run(&self.method, input).is_err() {
                    break;
                }
                times.record(t, t.elapsed(), thermal);
            }
            if let Some(mut fields) = times.take() {
                fields.probe = Some(true);
                events.push(TelemetryEvent {
                    inference: fields,
                    ..self.event(EventKind::Inference, &release, model, Some(v), device)
                });
            }
        }
        events
    }
}
