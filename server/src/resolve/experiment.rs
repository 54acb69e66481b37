//! The experiment arm of a device, as a pure function: who takes part (a running experiment,
//! a device in no staged cohort and with no pin, its install id inside the share, able to run
//! both arms), and what its arm offers.
//!
//! May import `resolve::releases`, `snapshot` and `storage` types and `ferry-shared`.

use std::sync::Arc;

use ferry_shared::experiment::{Arm, ArmName, ExperimentPlan};
use ferry_shared::manifest::ReleaseManifest;
use ferry_shared::select::{self, DenyRule, Preference, Selection};
use ferry_shared::wire::resolve::{ExperimentArm, ResolveRequest};

use crate::snapshot::Revocations;
use crate::storage::catalog::Release;

/// What an arm offers `device`: the arm's release ranked as resolve ranks it, its variant (if
/// it names one) first, and the other arm's variant of the same release left out unless it is
/// the tested fallback (last). `None` when the release is missing or revoked, or the device
/// cannot run the arm's variant.
fn offer<'a>(
    device: &ResolveRequest,
    arm: &Arm,
    other: &Arm,
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
    // The tested fallback (last in resolve's ranking) stays last whatever the arms are: a
    // device whose arm fails falls back, and stays in its arm.
    let fallback = selection.candidates.last().map(|v| v.id.clone());
    if other.release == arm.release
        && let Some(theirs) = &other.variant
        && arm.variant.as_ref() != Some(theirs)
        && fallback.as_ref() != Some(theirs)
    {
        selection.candidates.retain(|v| &v.id != theirs);
    }
    if let Some(mine) = &arm.variant {
        let at = selection.candidates.iter().position(|v| &v.id == mine)?;
        let first = selection.candidates.remove(at);
        selection.candidates.insert(0, first);
    }
    (!selection.candidates.is_empty()).then_some(selection)
}

/// The arm `device` is in and what it offers, or `None` when the device takes no part:
/// `eligible` says it is in no staged cohort and has no pin; the experiment must be running;
/// the install id must fall inside the share; and the device must be able to run both arms
/// (analysed by intention to treat from then on: a device that falls back stays in its arm).
pub fn pick<'a>(
    device: &ResolveRequest,
    plan: Option<&ExperimentPlan>,
    eligible: bool,
    all: &'a [Arc<Release>],
    revocations: Option<&Revocations>,
    pref: &Preference,
    deny: DenyRule<'_>,
) -> Option<(ExperimentArm, Selection<'a>)> {
    let plan = plan.filter(|p| p.is_running() && eligible)?;
    let arm = plan.bucket_arm(&device.install_id)?;
    let (mine, theirs) = match arm {
        ArmName::Control => (&plan.control, &plan.treatment),
        ArmName::Treatment => (&plan.treatment, &plan.control),
    };
    let selection = offer(device, mine, theirs, all, revocations, pref, deny)?;
    offer(device, theirs, mine, all, revocations, pref, deny)?;
    Some((
        ExperimentArm {
            id: plan.id.clone(),
            arm: arm.as_str().to_string(),
            salt: plan.salt.clone(),
            basis_points: plan.basis_points,
        },
        selection,
    ))
}
