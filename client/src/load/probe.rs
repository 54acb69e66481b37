//! The on-device probe ([`crate::Probe`]): once per release, time the decision's other top
//! candidates (the loaded one is timed by the app's own runs) on their signed golden inputs and
//! report each as an `inference` event marked `probe: true`, so a device class gets a first
//! ranking before the fleet has data on it.

use std::fs::OpenOptions;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferry_shared::wire::telemetry::{EventKind, TelemetryEvent};

use super::stamped;
use crate::Client;
use crate::policy::{LoadOptions, Probe};
use crate::run::inference::MethodTimes;
use crate::trust::verify::Plan;
use crate::types::{DeviceInfo, ProbeReport, ProbeTiming};

impl Client {
    /// Runs the probe after `loaded` (a variant of `plan`) loaded, when `opts` asks for one,
    /// the device is not saving power, and no probe of this release ran from this cache
    /// before. Errors end it quietly: the probe never fails a load.
    pub(crate) fn probe_after_load(
        &self,
        model: &str,
        device: &DeviceInfo,
        (plan, loaded): (&Plan, &str),
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
        match self.claim_probe(model, &release) {
            Ok(true) => {}
            Ok(false) => return skipped("this release was probed from this cache before"),
            Err(e) => {
                return skipped(&format!(
                    "the probe could not be recorded in the cache: {e}"
                ));
            }
        }
        let events = self.time_candidates(model, device, (plan, loaded), opts, probe, spent);
        let timed = events
            .iter()
            .map(|e| ProbeTiming {
                variant: e.variant.clone(),
                delegate: e.delegate.clone(),
                runs: e.inference.runs.unwrap_or(0),
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

    /// Marks `release` of `model` as probed (a file in the cache, created once): `Ok(true)`
    /// when this call made the mark, so one process probes once even if it crashes mid-way.
    fn claim_probe(&self, model: &str, release: &str) -> std::io::Result<bool> {
        let dir = ferry_shared::sync::lock(&self.cache).root().join("probes");
        std::fs::create_dir_all(&dir)?;
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(format!("{model}@{release}")))
        {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Opens each of the top candidates but the loaded one that has a golden input for the
    /// method and times its runs within the probe's time; returns one event per candidate
    /// timed. Its runs follow the load's golden check, so they are all warm: the events carry
    /// no cold time.
    fn time_candidates(
        &self,
        model: &str,
        device: &DeviceInfo,
        (plan, loaded): (&Plan, &str),
        opts: &LoadOptions,
        probe: Probe,
        spent: &mut u64,
    ) -> Vec<TelemetryEvent> {
        let started = Instant::now();
        let max_time = probe.max_time.min(MAX_PROBE_TIME);
        let release = plan.manifest.version.to_string();
        let crashes = self.known_crashes();
        let top: Vec<_> = plan
            .candidates
            .iter()
            .take(probe.candidates)
            .filter(|c| c.variant.id.as_str() != loaded)
            .collect();
        let mut events = Vec::new();
        for (i, c) in top.iter().enumerate() {
            let v = &c.variant;
            let Some((input, _)) = v.golden.as_ref().and_then(|g| g.for_method(&self.method))
            else {
                continue;
            };
            if started.elapsed() >= max_time
                || self.missing_operators(v).is_some()
                || self.crash_of(&crashes, &v.sha256, device).is_some()
            {
                continue;
            }
            let Ok((blob, _)) = self.ensure_blob(model, c, opts, spent) else {
                continue;
            };
            let record = self.flight_record(model, &release, v, plan.receipt.as_deref(), device);
            let Ok((mut program, _, mut flight, _)) =
                self.open_and_check(&blob, v, (&record, device, &plan.sealed_stopped), true)
            else {
                continue;
            };
            // Each candidate may use an equal share of what is left after its load.
            let left = max_time.saturating_sub(started.elapsed());
            let share = left / u32::try_from(top.len() - i).unwrap_or(1).max(1);
            let Some(until) = Instant::now().checked_add(share) else {
                continue;
            };
            let mut times = MethodTimes::new(&self.method);
            let thermal = self.inference.thermal.load(Ordering::Relaxed);
            if let Some(f) = &mut flight {
                f.mark(crate::error::Stage::Probe, false);
            }
            // MethodTimes keeps the first call apart as the cold one: this one is warm (the
            // golden check ran before), so it is run untimed-as-cold and left out below.
            for _ in 0..=probe.runs {
                if Instant::now() >= until {
                    break;
                }
                let t = Instant::now();
                if program.run(&self.method, input).is_err() {
                    break;
                }
                times.record(t, t.elapsed(), thermal);
            }
            if let Some(f) = &mut flight {
                f.clear(false);
            }
            if let Some(mut fields) = times.take()
                && fields.p95_ms.is_some()
            {
                fields.first_ms = None;
                fields.runs = fields.runs.map(|n| n.saturating_sub(1));
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

/// Longest a probe runs, whatever the options say.
pub const MAX_PROBE_TIME: Duration = Duration::from_secs(60);
