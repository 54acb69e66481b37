//! The releases a device may get: those its rollout cohort (or its pin) names, in the order to
//! try them, revoked ones never. Pure functions over the catalog's releases and the model's
//! state.

use std::sync::Arc;

use ferry_shared::select::rollout::{Pin, RolloutPlan, live_releases};
use ferry_shared::wire::resolve::Cohort;
use semver::Version;

use crate::snapshot::Revocations;
use crate::storage::catalog::Release;

/// The releases a device in `cohort` may get, in the order to try them (see
/// [`live_releases`]).
pub fn releases_for(
    all: &[Arc<Release>],
    plan: Option<&RolloutPlan>,
    cohort: Cohort,
) -> Vec<Arc<Release>> {
    let versions: Vec<Version> = all.iter().map(|r| r.manifest.version.clone()).collect();
    live_releases(&versions, plan, cohort)
        .into_iter()
        .filter_map(|v| all.iter().find(|r| r.manifest.version == v).cloned())
        .collect()
}

/// What a device in `cohort` (with `pin`, if any) may get of `all` (every published release,
/// newest first) under `plan` and `revocations`, in the order to try them: revoked releases
/// left out, the cohort's releases ([`releases_for`]), and a pinned release first. `None` when
/// every release is revoked.
pub fn offered(
    all: &[Arc<Release>],
    plan: Option<&RolloutPlan>,
    revocations: Option<&Revocations>,
    cohort: Cohort,
    pin: Option<&Pin>,
) -> Option<Vec<Arc<Release>>> {
    let mut all = all.to_vec();
    if let Some(r) = revocations {
        all.retain(|rel| r.list.revokes(&rel.manifest.version).is_none());
        if all.is_empty() {
            return None;
        }
    }
    let mut releases = releases_for(&all, plan, cohort);
    if let Some(pin) = pin
        && let Some(r) = all.iter().find(|r| r.manifest.version == pin.release)
    {
        releases.retain(|x| x.manifest.version != pin.release);
        releases.insert(0, r.clone());
    }
    Some(releases)
}
