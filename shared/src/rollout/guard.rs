//! The guard every change passes (no device class loses its last variant) and the preview of
//! what a change does (the share of install ids whose release changes, exactly, from the
//! buckets).

use semver::Version;

use crate::resolve::Cohort;
use crate::rollout::classes::{DeviceClass, classes};
use crate::rollout::machine::{Context, TransitionError};
use crate::rollout::{FULL, RolloutPlan, live_releases};

/// The cohorts a plan puts devices in (a cohort with no device is left out).
pub(crate) fn cohorts(plan: Option<&RolloutPlan>) -> Vec<Cohort> {
    match plan {
        Some(p) if p.cohort_is_live() && p.basis_points >= FULL => vec![Cohort::Staged],
        Some(p) if p.cohort_is_live() && p.basis_points > 0 => {
            vec![Cohort::Baseline, Cohort::Staged]
        }
        _ => vec![Cohort::Baseline],
    }
}

pub(crate) fn check_strands(
    current: Option<&RolloutPlan>,
    next: &RolloutPlan,
    ctx: &Context<'_>,
) -> Result<(), TransitionError> {
    match stranded(current, next, ctx).into_iter().next() {
        Some((class, (had_release, had_variant))) => Err(TransitionError::Strands {
            class: class.describe(),
            had_release,
            had_variant,
        }),
        None => Ok(()),
    }
}

/// Device classes served before (in some cohort) and not after (in some cohort), with what
/// each got before.
fn stranded(
    current: Option<&RolloutPlan>,
    next: &RolloutPlan,
    ctx: &Context<'_>,
) -> Vec<(DeviceClass, (Version, String))> {
    let published = ctx.newest_first();
    let before: Vec<Vec<Version>> = cohorts(current)
        .into_iter()
        .map(|c| live_releases(&published, current, c))
        .collect();
    let after: Vec<Vec<Version>> = cohorts(Some(next))
        .into_iter()
        .map(|c| live_releases(&published, Some(next), c))
        .collect();
    let mut out = Vec::new();
    for class in classes(ctx.model, ctx.published) {
        let had = before
            .iter()
            .find_map(|live| class.first_served(ctx.published, live));
        if let Some(had) = had
            && after
                .iter()
                .any(|live| !class.served_by(ctx.published, live))
        {
            out.push((class, had));
        }
    }
    out
}

/// What a change would do, shown before and after it is applied.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Preview {
    /// Share of install ids (0–1) whose release changes, for a device that can use every
    /// variant: exact, counted over the 10,000 buckets.
    pub share_changing: f64,
    /// The release each cohort gets before and after (`baseline`/`staged` → version).
    pub moves: Vec<String>,
    /// Device classes that would be left with no variant (the change is refused if any).
    pub stranded: Vec<String>,
}

/// Previews going from `current` to `next`.
pub fn preview(current: Option<&RolloutPlan>, next: &RolloutPlan, ctx: &Context<'_>) -> Preview {
    let published = ctx.newest_first();
    let top = |plan: Option<&RolloutPlan>, cohort: Cohort| {
        live_releases(&published, plan, cohort).into_iter().next()
    };
    let cohort_of = |plan: Option<&RolloutPlan>, b: u32| match plan {
        Some(p) if p.cohort_is_live() && b < p.basis_points => Cohort::Staged,
        _ => Cohort::Baseline,
    };
    // Cohorts are a function of the bucket under each plan's salt. A new salt is only drawn
    // when no staged cohort is live before, so before the change every bucket is in the
    // baseline cohort and counting buckets under the new salt is exact.
    let same_salt = current.is_none_or(|p| p.salt == next.salt || !p.cohort_is_live());
    let mut changing = 0u32;
    for b in 0..FULL {
        let before = top(
            current,
            cohort_of(current, if same_salt { b } else { FULL }),
        );
        let after = top(Some(next), cohort_of(Some(next), b));
        if before != after {
            changing += 1;
        }
    }
    let show = |v: Option<Version>| v.map_or_else(|| "nothing".to_string(), |v| v.to_string());
    let mut moves = Vec::new();
    for (name, cohort) in [("baseline", Cohort::Baseline), ("staged", Cohort::Staged)] {
        let (b, a) = (top(current, cohort), top(Some(next), cohort));
        if b != a {
            moves.push(format!("{name} cohort: {} -> {}", show(b), show(a)));
        }
    }
    Preview {
        share_changing: f64::from(changing) / f64::from(FULL),
        moves,
        stranded: stranded(current, next, ctx)
            .into_iter()
            .map(|(c, (r, v))| format!("{} (gets {r}/{v} today)", c.describe()))
            .collect(),
    }
}
