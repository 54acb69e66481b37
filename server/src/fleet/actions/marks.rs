//! Where each ramp step and each plan revision began in this replica's telemetry: the
//! totals when it first saw them, so step health and automatic halts count from there.

use std::collections::HashMap;
use std::sync::Mutex;

use ferry_shared::ModelName;
use ferry_shared::select::rollout::RolloutPlan;
use ferry_shared::select::rollout::ramp::StepHealth;
use time::OffsetDateTime;

use crate::fleet::intake::aggregate::Telemetry;

/// Loads, failures and fallbacks.
type Counts = (u64, u64, u64);

/// Totals of the staged and the baseline release.
type Totals = [Counts; 2];

/// Per step (model, salt, step index, when the step began — a `resume` begins it again): the
/// totals when this replica first saw the step.
#[derive(Debug, Default)]
pub struct RampMarks {
    marks: Mutex<HashMap<(String, String, usize, String), Totals>>,
    /// Per model: the plan revision this replica saw last and the staged release's totals
    /// when it first saw it (automatic halts count from there, so a `resume` or `set` starts
    /// a fresh window instead of being halted again by the counts that halted it).
    revisions: Mutex<HashMap<String, (u64, Counts)>>,
    /// Release files the last catalog reload skipped (unreadable or untrusted), so that they
    /// do not make every pass reload the catalog.
    pub(crate) skipped_releases: std::sync::atomic::AtomicUsize,
}

impl RampMarks {
    /// Notes that `plan` is in force for `model`: takes the staged release's totals as the
    /// start of its window when the revision is new to this replica.
    pub fn note_revision(&self, telemetry: &Telemetry, model: &ModelName, plan: &RolloutPlan) {
        let mut marks = ferry_shared::sync::lock(&self.revisions);
        if marks
            .get(model.as_str())
            .is_some_and(|(rev, _)| *rev == plan.revision)
        {
            return;
        }
        let totals = plan.staged.as_ref().map_or((0, 0, 0), |v| {
            telemetry.release_totals(model.as_str(), &v.to_string())
        });
        marks.insert(model.to_string(), (plan.revision, totals));
    }

    /// The staged release's loads, failures and fallbacks since this replica first saw
    /// `plan`'s revision, given its totals `now` (everything, when it has not seen it yet).
    pub fn since_revision(&self, model: &ModelName, plan: &RolloutPlan, now: Counts) -> Counts {
        let mark = ferry_shared::sync::lock(&self.revisions)
            .get(model.as_str())
            .copied();
        match mark {
            Some((rev, m)) if rev == plan.revision => (
                now.0.saturating_sub(m.0),
                now.1.saturating_sub(m.1),
                now.2.saturating_sub(m.2),
            ),
            _ => now,
        }
    }

    /// The health of `plan`'s current step: totals now minus the totals at the step's mark
    /// (taken now when this is the first look at the step).
    pub fn step_health(
        &self,
        telemetry: &Telemetry,
        model: &ModelName,
        plan: &RolloutPlan,
    ) -> StepHealth {
        let Some(ramp) = plan.ramp.as_ref() else {
            return StepHealth::default();
        };
        let version = |v: &Option<semver::Version>| v.as_ref().map(ToString::to_string);
        let totals = |v: Option<String>| {
            v.map_or((0, 0, 0), |v| telemetry.release_totals(model.as_str(), &v))
        };
        let now: Totals = [
            totals(version(&plan.staged)),
            totals(version(&plan.baseline)),
        ];
        let key = (
            model.to_string(),
            plan.salt.clone(),
            ramp.step,
            ramp.step_started.clone(),
        );
        let mark = {
            let mut g = ferry_shared::sync::lock(&self.marks);
            if g.len() > 10_000 {
                g.clear();
            }
            *g.entry(key).or_insert(now)
        };
        let d = |i: usize| {
            (
                now[i].0.saturating_sub(mark[i].0),
                now[i].1.saturating_sub(mark[i].1),
                now[i].2.saturating_sub(mark[i].2),
            )
        };
        let (s, b) = (d(0), d(1));
        // Field latency since this revision (a resume starts afresh), only when the ramp
        // has a latency gate.
        let since = OffsetDateTime::parse(&plan.at, &time::format_description::well_known::Rfc3339)
            .map_or(0, OffsetDateTime::unix_timestamp);
        let wants_window =
            plan.thresholds.max_latency_ratio.is_some() || plan.thresholds.max_crash_rate.is_some();
        let window = wants_window.then(|| telemetry.window(model.as_str(), since).0);
        let latency = match (
            plan.thresholds.max_latency_ratio,
            version(&plan.staged),
            version(&plan.baseline),
            &window,
        ) {
            (Some(_), Some(staged), Some(baseline), Some(w)) => {
                crate::fleet::counts::gates::compare(w, model.as_str(), &staged, &baseline)
            }
            _ => None,
        };
        let crash = match (
            plan.thresholds.max_crash_rate,
            version(&plan.staged),
            &window,
        ) {
            (Some(_), Some(staged), Some(w)) => Some(crate::fleet::counts::gates::crash_compare(
                w,
                model.as_str(),
                &staged,
                version(&plan.baseline).as_deref(),
            )),
            _ => None,
        };
        StepHealth {
            loads: s.0,
            failures: s.1,
            fallbacks: s.2,
            baseline_loads: b.0,
            baseline_failures: b.1,
            baseline_fallbacks: b.2,
            latency,
            crash,
        }
    }
}
