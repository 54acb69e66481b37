//! Collection of stored operator sets (`operators/sha256/<digest>.json`) that no device has
//! sent for `telemetry.operator_sets_unused_days`: the replica that holds the compaction lease
//! deletes, at most once an hour, each set that is older than that and whose digest is in no
//! runtime census of that window (every resolve with a known digest notes it there, see
//! [`crate::fleet::census::runtimes`]). Made-up sets stored by a flood go; a runtime still in
//! the field keeps its set. A device whose set was collected is asked for its list again at
//! its next resolve (`operators_wanted`), as when it was new.

use std::collections::HashSet;

use crate::fleet::Fleet;
use crate::fleet::counts::rollup::Rollup;

/// How often the lease holder looks for unused sets.
pub const EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// The digests (hex) devices sent in `rollup`: its list of digests in use, and its runtime
/// census (which folds keys past its bound, so it alone could miss one).
fn digests_in(rollup: &Rollup, into: &mut HashSet<String>) {
    into.extend(rollup.operator_digests.iter().cloned());
    for keys in rollup.runtimes.values() {
        for key in keys.keys() {
            if let Some((_, digest)) = key.split_once(' ') {
                into.insert(digest.to_string());
            }
        }
    }
}

/// The digests that devices sent in the counts that end after `since` (unix seconds): the
/// store's buckets as this run last read them, what it wrote since, and its outbox.
pub(crate) fn digests_in_use(fleet: &Fleet, since: i64) -> HashSet<String> {
    let mut used = HashSet::new();
    fleet.telemetry.seen().each_bucket(|start, len, r| {
        if start + len > since {
            digests_in(r, &mut used);
        }
    });
    fleet
        .telemetry
        .outbox()
        .each_minute(|_, r| digests_in(r, &mut used));
    used
}

/// The operator sets stored before `now - operator_sets_unused_days` (at most
/// `retention_days`, the counts it is judged by) whose digest no device sent since then.
pub(crate) async fn unused_sets(fleet: &Fleet, now: i64) -> Vec<object_store::path::Path> {
    use futures_util::TryStreamExt as _;
    let since = now - i64::from(unused_days(fleet)) * 86_400;
    let prefix = object_store::path::Path::from("operators/sha256");
    let metas: Vec<_> = match fleet.store.list(Some(&prefix)).try_collect().await {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("operator sets not listed for collection: {e}");
            return Vec::new();
        }
    };
    let old: Vec<_> = metas
        .into_iter()
        .filter(|m| m.last_modified.timestamp() <= since)
        .collect();
    if old.is_empty() {
        return Vec::new();
    }
    let used = digests_in_use(fleet, since);
    old.into_iter()
        .filter(|m| {
            m.location
                .filename()
                .and_then(|f| f.strip_suffix(".json"))
                .is_some_and(|digest| !used.contains(digest))
        })
        .map(|m| m.location)
        .collect()
}

/// The days a set may go unsent: `operator_sets_unused_days`, at most `retention_days`.
fn unused_days(fleet: &Fleet) -> u32 {
    fleet
        .config
        .operator_sets_unused_days
        .min(fleet.config.retention_days)
        .max(1)
}

/// Deletes `sets` (found by [`unused_sets`]); returns how many went.
pub(crate) async fn delete(fleet: &Fleet, sets: &[object_store::path::Path]) -> usize {
    use object_store::ObjectStoreExt as _;
    let mut deleted = 0;
    for path in sets {
        match fleet.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
            Err(e) => tracing::warn!("operator set {path} not deleted: {e}"),
        }
    }
    if deleted > 0 {
        tracing::info!(
            "deleted {deleted} operator sets no device sent for {} days",
            unused_days(fleet)
        );
    }
    deleted
}
