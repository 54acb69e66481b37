//! The guard every change passes (no device class loses its last variant) and the preview of
//! what a change does (the share of install ids whose release changes, exactly, from the
//! buckets).

use semver::Version;

use crate::select::rollout::change::{Context, TransitionError};
use crate::select::rollout::classes::{DeviceClass, classes};
use crate::select::rollout::{FULL, RolloutPlan, live_releases};
use crate::wire::resolve::Cohort;

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

/// The cohort a bucket is in under `plan`.
fn cohort_of(plan: Option<&RolloutPlan>, bucket: u32) -> Cohort {
    match plan {
        Some(p) if p.cohort_is_live() && bucket < p.basis_points => Cohort::Staged,
        _ => Cohort::Baseline,
    }
}

/// The (before, after) cohort pairs some install id goes through in this change.
///
/// A new salt is only drawn when no staged cohort is live before, so before the change every
/// install id is then in the baseline cohort; otherwise both plans share the salt and a
/// bucket's cohorts before and after are those of the same bucket.
fn cohort_moves(current: Option<&RolloutPlan>, next: &RolloutPlan) -> Vec<(Cohort, Cohort)> {
    let mut pairs = Vec::new();
    for b in 0..FULL {
        let pair = (cohort_of(current, b), cohort_of(Some(next), b));
        if !pairs.contains(&pair) {
            pairs.push(pair);
        }
    }
    pairs
}

/// Device classes that some install id moves from a cohort where they get a variant to one
/// where they get none, with what they got before.
fn stranded(
    current: Option<&RolloutPlan>,
    next: &RolloutPlan,
    ctx: &Context<'_>,
) -> Vec<(DeviceClass, (Version, String))> {
    let published = ctx.newest_first();
    let moves: Vec<(Vec<Version>, Vec<Version>)> = cohort_moves(current, next)
        .into_iter()
        .map(|(b, a)| {
            (
                live_releases(&published, current, b),
                live_releases(&published, Some(next), a),
            )
        })
        .collect();
    let mut out = Vec::new();
    let computed;
    let all = match ctx.classes {
        Some(c) => c,
        None => {
            computed = classes(ctx.model, ctx.published);
            &computed[..]
        }
    };
    for class in all {
        let lost = moves.iter().find_map(|(before, after)| {
            let had = class.first_served(ctx.published, before)?;
            (!class.served_by(ctx.published, after)).then_some(had)
        });
        if let Some(had) = lost {
            out.push((class.clone(), had));
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
    /// Device classes that would be left with no variant (a move forward is refused if any).
    pub stranded: Vec<String>,
    /// The same classes, each with its platform and what it gets today (to count the fleet's
    /// devices behind it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stranded_from: Vec<StrandedFrom>,
}

/// A stranded class's platform and the release and variant it gets today.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StrandedFrom {
    /// The class's platform.
    pub platform: String,
    /// The release it gets today.
    pub release: String,
    /// The variant it gets today.
    pub variant: String,
}

/// Previews going from `current` to `next`.
pub fn preview(current: Option<&RolloutPlan>, next: &RolloutPlan, ctx: &Context<'_>) -> Preview {
    let published = ctx.newest_first();
    let top = |plan: Option<&RolloutPlan>, cohort: Cohort| {
        live_releases(&published, plan, cohort).into_iter().next()
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
    if current.is_some_and(|p| p.ramp.is_some() && p.cohort_is_live()) && next.ramp.is_none() {
        moves.push("the ramp ends: the percentage is now set by hand".into());
    }
    let pins_before = current.map(|p| p.pins.as_slice()).unwrap_or_default();
    for p in &next.pins {
        if !pins_before.contains(p) {
            moves.push(format!(
                "install id {} is pinned to {}",
                p.install_id.escape_debug(),
                p.release
            ));
        }
    }
    for p in pins_before {
        if !next.pins.iter().any(|n| n.install_id == p.install_id) {
            moves.push(format!(
                "install id {} is unpinned",
                p.install_id.escape_debug()
            ));
        }
    }
    let lost = stranded(current, next, ctx);
    Preview {
        share_changing: f64::from(changing) / f64::from(FULL),
        moves,
        stranded: lost
            .iter()
            .map(|(c, (r, v))| format!("{} (gets {r}/{v} today)", c.describe()))
            .collect(),
        stranded_from: lost
            .iter()
            .map(|(c, (r, v))| StrandedFrom {
                platform: c.device.platform.to_string(),
                release: r.to_string(),
                variant: v.clone(),
            })
            .collect(),
    }
}
