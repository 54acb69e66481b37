//! Health-gated ramps: a rollout that moves through percentage steps by itself, one step after
//! another, only while the staged release stays healthy.
//!
//! A step advances when all of these hold: it has been in force for `every_secs`; the staged
//! release has at least `min_samples` loads in this step; its load-failure and fallback rates
//! are within the plan's thresholds; and, with `max_regression`, neither rate is worse than
//! that multiple of the baseline's rate in the same window. A rate over a gate halts the
//! rollout with the reason. [`verdict`] decides; the server only gathers the numbers and writes
//! the revision (once, whatever the number of replicas: see `revisions::append`).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::experiment::gates;
use crate::select::rollout::{RolloutPlan, RolloutState, format_percent};

/// Load counts of the staged and baseline releases since the step in force began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepHealth {
    /// Staged loads (successful and failed).
    pub loads: u64,
    /// Staged load failures.
    pub failures: u64,
    /// Staged fallbacks.
    pub fallbacks: u64,
    /// Baseline loads in the same window.
    pub baseline_loads: u64,
    /// Baseline load failures.
    pub baseline_failures: u64,
    /// Baseline fallbacks.
    pub baseline_fallbacks: u64,
    /// Field latency of both releases, where they have it on common SoCs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyCompare>,
    /// Native crashes of both releases since the plan's revision, when the plan has a crash
    /// gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash: Option<CrashCompare>,
}

/// Distinct devices that crashed natively on the staged and baseline releases, of the devices
/// that reported on each, since the plan's revision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CrashCompare {
    /// Staged devices that crashed.
    pub staged_crashed: u64,
    /// Staged devices that reported.
    pub staged_devices: u64,
    /// Their share (what the gate uses).
    pub staged_rate: f64,
    /// Baseline devices that crashed.
    pub baseline_crashed: u64,
    /// Baseline devices that reported.
    pub baseline_devices: u64,
    /// Their share, for people.
    pub baseline_rate: f64,
}

impl CrashCompare {
    /// The figures of `(crashed, devices)` of each release, with their shares.
    pub fn new(staged: (u64, u64), baseline: (u64, u64)) -> Self {
        let share = |(c, d): (u64, u64)| {
            if d == 0 {
                0.0
            } else {
                c.min(d) as f64 / d as f64
            }
        };
        Self {
            staged_crashed: staged.0,
            staged_devices: staged.1,
            staged_rate: share(staged),
            baseline_crashed: baseline.0,
            baseline_devices: baseline.1,
            baseline_rate: share(baseline),
        }
    }

    /// Why the crash gate of `t` halts `staged`: `None` without the gate, while fewer devices
    /// crashed than [`crash_devices_needed`](crate::select::rollout::crash_devices_needed), or
    /// while the share is within it.
    pub fn halt_reason(
        &self,
        t: &crate::select::rollout::Thresholds,
        staged: &str,
    ) -> Option<String> {
        let max = t.max_crash_rate?;
        if self.staged_crashed < crate::select::rollout::crash_devices_needed(t)
            || self.staged_rate <= max
        {
            return None;
        }
        Some(format!(
            "crash rate {:.1}% of {staged} ({} of {} devices crashed natively) exceeds \
             max_crash_rate {:.1}% (baseline {:.1}%, {} of {} devices)",
            self.staged_rate * 100.0,
            self.staged_crashed,
            self.staged_devices,
            max * 100.0,
            self.baseline_rate * 100.0,
            self.baseline_crashed,
            self.baseline_devices
        ))
    }
}

/// The staged and baseline releases' field latency on the SoCs both have `inference` data
/// for, since the plan's revision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyCompare {
    /// Staged median device warm p95 over those SoCs (ms), for people.
    pub staged_ms: f64,
    /// Baseline median device warm p95 over those SoCs (ms), for people.
    pub baseline_ms: f64,
    /// The median over those SoCs of staged/baseline median warm p95: what the gate uses.
    pub ratio: f64,
    /// SoCs both releases have data for.
    pub socs: u64,
    /// Distinct staged devices that reported runs.
    pub devices: u64,
}

fn rate(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        (n.min(of)) as f64 / of as f64
    }
}

/// What the ramp should do now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// The plan has no ramp, or is not active.
    NotRamping,
    /// The last step is in force.
    Done,
    /// Not yet: what the step waits for.
    Wait {
        /// One line per unmet condition.
        waiting_for: Vec<String>,
        /// The next step, in basis points.
        next: u32,
    },
    /// Move to the next step.
    Advance {
        /// The next step, in basis points.
        to: u32,
    },
    /// Halt: a gate failed.
    Halt {
        /// Which gate, with the numbers.
        reason: String,
    },
}

/// The load-failure, fallback and regression gates of `plan` over the step's health: `Err`
/// with the halt's reason, or what the step waits for (with sequential gates, a rate over its
/// limit that is not yet beyond chance holds the step).
fn rate_gates(plan: &RolloutPlan, h: &StepHealth, staged: &str) -> Result<Vec<String>, String> {
    let t = plan.thresholds;
    let mut waits = Vec::new();
    if !(h.loads >= t.min_samples && h.loads > 0) {
        return Ok(waits);
    }
    let step = format_percent(plan.basis_points);
    let (fr, fb) = (rate(h.failures, h.loads), rate(h.fallbacks, h.loads));
    for (what, limit, x, r) in [
        ("load-failure", t.max_failure_rate, h.failures, fr),
        ("fallback", t.max_fallback_rate, h.fallbacks, fb),
    ] {
        let Some(max) = limit.filter(|max| r > *max) else {
            continue;
        };
        if !t.sequential || gates::rate_above(x, h.loads, max) {
            return Err(format!(
                "ramp step {step}%: {what} rate {:.1}% of {staged} exceeds {:.1}% (n={}){}",
                r * 100.0,
                max * 100.0,
                h.loads,
                if t.sequential { ", beyond chance" } else { "" }
            ));
        }
        waits.push(format!(
            "{what} rate {:.1}% is over {:.1}% but not beyond chance yet (n={})",
            r * 100.0,
            max * 100.0,
            h.loads
        ));
    }
    let Some(k) = t
        .max_regression
        .filter(|_| h.baseline_loads >= t.min_samples)
    else {
        return Ok(waits);
    };
    for (what, x, xb) in [
        ("load-failure", h.failures, h.baseline_failures),
        ("fallback", h.fallbacks, h.baseline_fallbacks),
    ] {
        let (s, b) = (rate(x, h.loads), rate(xb, h.baseline_loads));
        if !(s > 0.0 && s > k * b) {
            continue;
        }
        if !t.sequential || gates::rate_above_multiple(x, h.loads, xb, h.baseline_loads, k) {
            return Err(format!(
                "ramp step {step}%: {what} rate {:.1}% of {staged} is over {k}x the baseline's {:.1}% (n={}, baseline n={}){}",
                s * 100.0,
                b * 100.0,
                h.loads,
                h.baseline_loads,
                if t.sequential { ", beyond chance" } else { "" }
            ));
        }
        waits.push(format!(
            "{what} rate {:.1}% is over {k}x the baseline's {:.1}% but not beyond chance yet",
            s * 100.0,
            b * 100.0
        ));
    }
    Ok(waits)
}

/// Decides what the ramp of `plan` does at `now`, given the step's health.
pub fn verdict(plan: &RolloutPlan, now: OffsetDateTime, h: &StepHealth) -> Verdict {
    let Some(ramp) = plan.ramp.as_ref() else {
        return Verdict::NotRamping;
    };
    if plan.state != RolloutState::Active || plan.staged.is_none() {
        return Verdict::NotRamping;
    }
    let t = plan.thresholds;
    let staged = plan
        .staged
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    // A crash is worse than a failure, and a device that crashed may never report a load:
    // this gate does not wait for the samples.
    if let Some(c) = h.crash
        && let Some(why) = c.halt_reason(&t, &staged)
    {
        return Verdict::Halt {
            reason: format!("ramp step {}%: {why}", format_percent(plan.basis_points)),
        };
    }
    let gate_waits = match rate_gates(plan, h, &staged) {
        Ok(waits) => waits,
        Err(reason) => return Verdict::Halt { reason },
    };
    if let (Some(k), Some(l)) = (t.max_latency_ratio, h.latency)
        && l.ratio > k
    {
        return Verdict::Halt {
            reason: format!(
                "ramp step {}%: field latency of {staged} is {:.2}x the baseline's (median \
                 device warm p95 {:.2} ms against {:.2} ms), over {k}x, on the {} SoC(s) both \
                 have data for ({} staged devices)",
                format_percent(plan.basis_points),
                l.ratio,
                l.staged_ms,
                l.baseline_ms,
                l.socs,
                l.devices
            ),
        };
    }
    let Some(next) = ramp.next() else {
        return Verdict::Done;
    };
    let mut waiting_for = gate_waits;
    let started = OffsetDateTime::parse(
        &ramp.step_started,
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap_or(now);
    let elapsed = (now - started).whole_seconds().max(0) as u64;
    if elapsed < ramp.every_secs {
        waiting_for.push(format!(
            "time: {}s of {}s in this step ({}s left)",
            elapsed,
            ramp.every_secs,
            ramp.every_secs - elapsed
        ));
    }
    if h.loads < t.min_samples {
        waiting_for.push(format!(
            "samples: {} of {} staged loads in this step",
            h.loads, t.min_samples
        ));
    }
    if waiting_for.is_empty() {
        Verdict::Advance { to: next }
    } else {
        Verdict::Wait { waiting_for, next }
    }
}

/// The plan after an `Advance { to }` verdict at `at`.
pub fn advance(plan: &RolloutPlan, to: u32, at: &str) -> RolloutPlan {
    let mut next = plan.clone();
    next.revision = plan.revision + 1;
    next.basis_points = to;
    next.action = "ramp".into();
    next.actor = "ferry".into();
    next.at = at.to_string();
    next.reason = format!(
        "ramp: {}% -> {}%",
        format_percent(plan.basis_points),
        format_percent(to)
    );
    if let Some(r) = next.ramp.as_mut() {
        r.step += 1;
        r.step_started = at.to_string();
    }
    next
}

/// The plan after a `Halt { reason }` verdict at `at`.
pub fn halt(plan: &RolloutPlan, reason: &str, at: &str) -> RolloutPlan {
    let mut next = plan.clone();
    next.revision = plan.revision + 1;
    next.state = RolloutState::Halted;
    next.action = "auto-halt".into();
    next.actor = "ferry".into();
    next.at = at.to_string();
    next.reason = reason.to_string();
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::rollout::Thresholds;
    use crate::select::rollout::{MAX_EVERY_SECS, Ramp};
    use semver::Version;

    fn plan(bp: u32, started: &str) -> RolloutPlan {
        RolloutPlan {
            model: "m".into(),
            revision: 2,
            baseline: Some(Version::new(1, 0, 0)),
            staged: Some(Version::new(2, 0, 0)),
            basis_points: bp,
            salt: "s".into(),
            state: RolloutState::Active,
            thresholds: Thresholds {
                max_failure_rate: Some(0.05),
                max_fallback_rate: Some(0.2),
                min_samples: 50,
                max_regression: Some(1.5),
                max_latency_ratio: Some(1.3),
                max_crash_rate: Some(0.01),
                sequential: false,
            },
            ramp: Some(Ramp {
                steps: vec![100, 500, 2500],
                every_secs: 600,
                step: 0,
                step_started: started.into(),
            }),
            pins: Vec::new(),
            withdrawn: Vec::new(),
            action: "start".into(),
            actor: "t".into(),
            at: started.into(),
            reason: String::new(),
        }
    }

    fn at(s: &str) -> OffsetDateTime {
        OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).expect("time")
    }

    #[test]
    fn waits_for_time_and_samples_then_advances_then_is_done() {
        let p = plan(100, "2026-12-03T00:00:00Z");
        let healthy = StepHealth {
            loads: 60,
            failures: 1,
            fallbacks: 2,
            baseline_loads: 600,
            baseline_failures: 10,
            baseline_fallbacks: 30,
            latency: None,
            crash: None,
        };
        match verdict(&p, at("2026-12-03T00:05:00Z"), &healthy) {
            Verdict::Wait { waiting_for, next } => {
                assert_eq!(next, 500);
                assert_eq!(waiting_for.len(), 1, "{waiting_for:?}");
                assert!(waiting_for[0].contains("300s left"), "{waiting_for:?}");
            }
            other => panic!("{other:?}"),
        }
        let few = StepHealth {
            loads: 10,
            ..healthy
        };
        match verdict(&p, at("2026-12-03T00:11:00Z"), &few) {
            Verdict::Wait { waiting_for, .. } => {
                assert_eq!(waiting_for, ["samples: 10 of 50 staged loads in this step"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            verdict(&p, at("2026-12-03T00:11:00Z"), &healthy),
            Verdict::Advance { to: 500 }
        );
        let mut last = advance(&advance(&p, 500, "x"), 2500, "2026-12-03T01:00:00Z");
        assert_eq!(last.ramp.as_ref().map(|r| r.step), Some(2));
        assert_eq!(
            verdict(&last, at("2026-12-04T00:00:00Z"), &healthy),
            Verdict::Done
        );
        last.state = RolloutState::Paused;
        assert_eq!(
            verdict(&last, at("2026-12-04T00:00:00Z"), &healthy),
            Verdict::NotRamping
        );
    }

    #[test]
    fn the_crash_gate_halts_without_waiting_for_samples_once_enough_devices_crashed() {
        let p = plan(100, "2026-12-03T00:00:00Z");
        let now = at("2026-12-03T00:01:00Z");
        let with = |staged, baseline| StepHealth {
            loads: 3,
            crash: Some(CrashCompare::new(staged, baseline)),
            ..StepHealth::default()
        };
        // The plan's 50 samples ask for 7 devices, as the other gates do: 6 crashed devices
        // are not enough, whatever the share.
        assert_eq!(
            crate::select::rollout::crash_devices_needed(&p.thresholds),
            7
        );
        assert!(matches!(
            verdict(&p, now, &with((6, 10), (0, 100))),
            Verdict::Wait { .. }
        ));
        let Verdict::Halt { reason } = verdict(&p, now, &with((7, 100), (1, 1000))) else {
            panic!("7% of devices crashing is over the 1% gate");
        };
        assert!(
            reason.starts_with("ramp step 1%: crash rate 7.0% of 2.0.0"),
            "{reason}"
        );
        assert!(reason.contains("max_crash_rate 1.0%"), "{reason}");
        assert!(reason.contains("baseline 0.1%, 1 of 1000"), "{reason}");
        // Within the gate: 8 of 1000.
        assert!(!matches!(
            verdict(&p, now, &with((8, 1000), (0, 10))),
            Verdict::Halt { .. }
        ));
        // A plan without the gate never halts on crashes.
        let mut off = p.clone();
        off.thresholds.max_crash_rate = None;
        assert!(!matches!(
            verdict(&off, now, &with((50, 60), (0, 10))),
            Verdict::Halt { .. }
        ));
        // The floor: a plan that asks for few samples still needs 3 crashed devices.
        off.thresholds.max_crash_rate = Some(0.01);
        off.thresholds.min_samples = 1;
        assert_eq!(
            crate::select::rollout::crash_devices_needed(&off.thresholds),
            3
        );
    }

    #[test]
    fn sequential_gates_hold_the_step_on_noise_and_halt_beyond_chance() {
        let mut p = plan(100, "2026-12-03T00:00:00Z");
        p.thresholds.sequential = true;
        p.thresholds.max_regression = None;
        let now = at("2026-12-03T01:00:00Z");
        // 6 of 100 is over 5% but not beyond chance: the step waits and says why.
        let noisy = StepHealth {
            loads: 100,
            failures: 6,
            ..StepHealth::default()
        };
        let Verdict::Wait { waiting_for, .. } = verdict(&p, now, &noisy) else {
            panic!(
                "a noisy rate holds the step: {:?}",
                verdict(&p, now, &noisy)
            );
        };
        assert!(
            waiting_for.iter().any(|w| w.contains("not beyond chance")),
            "{waiting_for:?}"
        );
        let real = StepHealth {
            loads: 400,
            failures: 60,
            ..StepHealth::default()
        };
        let Verdict::Halt { reason } = verdict(&p, now, &real) else {
            panic!("15% of 400 halts");
        };
        assert!(reason.contains("beyond chance"), "{reason}");
        let within = StepHealth {
            loads: 400,
            failures: 8,
            ..StepHealth::default()
        };
        assert!(matches!(verdict(&p, now, &within), Verdict::Advance { .. }));
    }

    #[test]
    fn halts_on_each_gate_with_the_numbers() {
        let p = plan(100, "2026-12-03T00:00:00Z");
        let now = at("2026-12-03T00:01:00Z");
        let base = StepHealth {
            loads: 100,
            baseline_loads: 1000,
            baseline_failures: 10,
            baseline_fallbacks: 100,
            ..StepHealth::default()
        };
        let failing = StepHealth {
            failures: 6,
            ..base
        };
        let Verdict::Halt { reason } = verdict(&p, now, &failing) else {
            panic!("failure rate over 5% must halt");
        };
        assert!(reason.contains("load-failure rate 6.0%"), "{reason}");
        let falling_back = StepHealth {
            fallbacks: 21,
            ..base
        };
        assert!(matches!(
            verdict(&p, now, &falling_back),
            Verdict::Halt { .. }
        ));
        // 4% failures is under the 5% gate but 4x the baseline's 1%: over the 1.5x regression.
        let regressed = StepHealth {
            failures: 4,
            ..base
        };
        let Verdict::Halt { reason } = verdict(&p, now, &regressed) else {
            panic!("a regression over 1.5x must halt");
        };
        assert!(reason.contains("1.5x the baseline"), "{reason}");
        // Too few samples: no gate applies yet.
        let early = StepHealth {
            loads: 10,
            failures: 10,
            ..base
        };
        assert!(matches!(verdict(&p, now, &early), Verdict::Wait { .. }));
        // Field latency: 1.25x the baseline is within the 1.3x gate, 1.4x is not; it applies
        // whatever the number of loads (it counts devices' windows, not loads).
        let slow = |staged_ms: f64| StepHealth {
            latency: Some(LatencyCompare {
                staged_ms,
                baseline_ms: 10.0,
                ratio: staged_ms / 10.0,
                socs: 3,
                devices: 40,
            }),
            ..early
        };
        assert!(matches!(
            verdict(&p, now, &slow(12.5)),
            Verdict::Wait { .. }
        ));
        let Verdict::Halt { reason } = verdict(&p, now, &slow(14.0)) else {
            panic!("a staged release 1.4x slower must halt");
        };
        assert!(
            reason.contains("is 1.40x the baseline's (median device warm p95 14.00 ms against 10.00 ms), over 1.3x, on the 3 SoC(s)"),
            "{reason}"
        );
    }

    #[test]
    fn steps_and_intervals_are_validated() {
        assert!(Ramp::validate(&[100, 500, 10_000], 60).is_ok());
        for (steps, every) in [
            (&[][..], 60),
            (&[0, 100][..], 60),
            (&[500, 500][..], 60),
            (&[500, 100][..], 60),
            (&[100, 10_001][..], 60),
            (&[100][..], 0),
            (&[100][..], MAX_EVERY_SECS + 1),
        ] {
            assert!(
                Ramp::validate(steps, every).is_err(),
                "{steps:?} every {every}"
            );
        }
    }
}
