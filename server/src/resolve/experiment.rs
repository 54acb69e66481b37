//! The experiment arm of a device, as a pure function: who takes part (a running experiment,
//! a device in no staged cohort and with no pin, its install id inside the share, able to run
//! both arms), and what its arm offers.
//!
//! May import `resolve::releases`, `snapshot` and `storage` types and `ferry-shared`.

use std::sync::Arc;

use ferry_shared::experiment::{Arm, ArmName, ExperimentPlan};
use ferry_shared::manifest::ReleaseManifest;
use ferry_shared::select::{self, DenyRule, Preference, Selection};
use ferry_shared::wire::resolve::{ExperimentArm, Explanation, ResolveRequest};

use crate::snapshot::Revocations;
use crate::storage::catalog::Release;

/// What an arm offers `device`: an arm that names a variant gets that variant, then the
/// release's tested fallback (last in resolve's ranking) if it is another one, nothing else; an
/// arm that is a whole release gets the release ranked as resolve ranks it (the other arm is
/// then another release: start refuses a release against one of its own variants). `None`
/// when the release is missing or revoked, or the device cannot run the arm's variant.
fn offer<'a>(
    device: &ResolveRequest,
    arm: &Arm,
    all: &'a [Arc<Release>],
    revocations: Option<&Revocations>,
    pref: &Preference,
    deny: DenyRule<'_>,
) -> Option<Selection<'a>> {
    let release = all.iter().find(|r| r.manifest.version == arm.release)?;
    if revocations.is_some_and(|r| r.list.revokes(&arm.release).is_some()) {
        return None;
    }
    let manifests: [&ReleaseManifest; 1] = [&release.manifest];
    let mut selection = select::select(&manifests, device, pref, deny).ok()?;
    if let Some(mine) = &arm.variant {
        let first = *selection.candidates.iter().find(|v| &v.id == mine)?;
        let fallback = selection
            .candidates
            .last()
            .copied()
            .filter(|v| &v.id != mine);
        selection.candidates = std::iter::once(first).chain(fallback).collect();
    }
    (!selection.candidates.is_empty()).then_some(selection)
}

/// Whether `device` takes part in an experiment: its arm and what the arm offers, or why not.
pub enum Part<'a> {
    /// In the arm, with what it offers.
    In(ExperimentArm, Selection<'a>),
    /// In the experiment's share by hash, but left out: why (for `explain`).
    Out(String),
    /// No running experiment, or outside its share.
    None,
}

/// The arm `device` is in and what it offers: `staged_or_pinned` says the rollout stages or
/// pins it (then it takes no part); the experiment must be running; the install id must fall
/// inside the share; and the device must be able to run both arms (analysed by intention to
/// treat from then on: a device that falls back stays in its arm).
pub fn pick<'a>(
    device: &ResolveRequest,
    plan: Option<&ExperimentPlan>,
    staged_or_pinned: Option<&str>,
    all: &'a [Arc<Release>],
    revocations: Option<&Revocations>,
    pref: &Preference,
    deny: DenyRule<'_>,
) -> Part<'a> {
    let Some(plan) = plan.filter(|p| p.is_running()) else {
        return Part::None;
    };
    let Some(arm) = plan.bucket_arm(&device.install_id) else {
        return Part::None;
    };
    let out = |why: String| {
        Part::Out(format!(
            "experiment {}: this install id falls in the {} arm but takes no part: {why}",
            plan.id,
            arm.as_str()
        ))
    };
    if let Some(why) = staged_or_pinned {
        return out(why.to_string());
    }
    let (mine, theirs) = match arm {
        ArmName::Control => (&plan.control, &plan.treatment),
        ArmName::Treatment => (&plan.treatment, &plan.control),
    };
    let Some(selection) = offer(device, mine, all, revocations, pref, deny) else {
        return out(format!("it cannot get its arm, {mine}"));
    };
    if offer(device, theirs, all, revocations, pref, deny).is_none() {
        return out(format!("it cannot get the other arm, {theirs}"));
    }
    Part::In(
        ExperimentArm {
            id: plan.id.clone(),
            arm: arm.as_str().to_string(),
            salt: plan.salt.clone(),
            basis_points: plan.basis_points,
        },
        selection,
    )
}

/// The selection for `device`: its experiment arm's (with the arm) when it takes part, else
/// resolve's own over `manifests` (the releases its cohort may get); the explanation of the
/// chosen release says which arm, or why the device takes no part though in the share. `Err`:
/// nothing fits (why each variant was left out).
pub fn select_with<'a>(
    device: &ResolveRequest,
    plan: Option<&ExperimentPlan>,
    staged_or_pinned: Option<&str>,
    (all, manifests): (&'a [Arc<Release>], &[&'a ReleaseManifest]),
    revocations: Option<&Revocations>,
    pref: &Preference,
    deny: DenyRule<'_>,
) -> Result<(Option<ExperimentArm>, Selection<'a>), Vec<Explanation>> {
    let (arm, mut selection, note) =
        match pick(device, plan, staged_or_pinned, all, revocations, pref, deny) {
            Part::In(arm, selection) => {
                let note = format!(
                    "experiment {}: the {} arm ({}), by intention to treat",
                    arm.id,
                    arm.arm,
                    selection
                        .candidates
                        .iter()
                        .map(|v| v.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                (Some(arm), selection, Some(note))
            }
            other => {
                let selection = select::select(manifests, device, pref, deny)?;
                let note = match other {
                    Part::Out(why) => Some(why),
                    _ => None,
                };
                (None, selection, note)
            }
        };
    // Said once, on the variant the device tries first.
    if let Some(note) = note {
        let release = selection.manifest.version.clone();
        let first = selection.candidates.first().map(|v| v.id.clone());
        if let Some(e) = selection
            .explain
            .iter_mut()
            .find(|e| e.release == release && Some(&e.variant) == first.as_ref())
        {
            e.reasons.push(note);
        }
    }
    Ok((arm, selection))
}
