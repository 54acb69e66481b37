//! Reading the counts the store holds: bucket objects and the rollups of earlier versions,
//! each at most [`MAX_ROLLUP_BYTES`] and parsed behind a panic guard (a damaged object is
//! skipped, never fatal). Used by the flush and by compaction.

use std::sync::Arc;

use crate::fleet::Fleet;
use crate::fleet::counts::rollup::Rollup;
use crate::fleet::persist::buckets::{BucketKey, Level, Part};

/// Reads one JSON object of at most [`MAX_ROLLUP_BYTES`]: `None` when it does not exist. A
/// damaged object must not take the replica down: the sketch and estimator parsers trust their
/// input, so it is parsed and merge-checked behind a panic guard.
pub(crate) async fn read_checked<T: serde::de::DeserializeOwned + serde::Serialize>(
    fleet: &Fleet,
    key: &object_store::path::Path,
    rollup_of: fn(&T) -> &Rollup,
) -> Result<Option<T>, String> {
    Ok(read_whole(fleet, key, rollup_of, false)
        .await?
        .map(|(v, _)| v))
}

/// [`read_checked`], and with `whole`, also what writing the object back would lose (a field
/// a newer ferry server added; see `docs/protocol.md`): compaction leaves such objects alone.
pub(crate) async fn read_whole<T: serde::de::DeserializeOwned + serde::Serialize>(
    fleet: &Fleet,
    key: &object_store::path::Path,
    rollup_of: fn(&T) -> &Rollup,
    whole: bool,
) -> Result<Option<(T, Option<String>)>, String> {
    use object_store::ObjectStoreExt as _;
    let got = match fleet.store.get(key).await {
        Ok(r) => r,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(format!("{key} unreadable: {e}")),
    };
    if got.meta.size > MAX_ROLLUP_BYTES {
        return Err(format!(
            "{key} is {} bytes, over the {MAX_ROLLUP_BYTES}-byte limit",
            got.meta.size
        ));
    }
    let bytes = got
        .bytes()
        .await
        .map_err(|e| format!("{key} unreadable: {e}"))?;
    match std::panic::catch_unwind(|| {
        let v = serde_json::from_slice::<T>(&bytes).map_err(|e| e.to_string())?;
        probe_merge(rollup_of(&v));
        let lost = if whole {
            ferry_shared::wire::protocol::unknown_field_path(&bytes, &v)
        } else {
            None
        };
        Ok::<_, String>((v, lost))
    }) {
        Ok(Ok(v)) => Ok(Some(v)),
        Ok(Err(e)) => Err(format!("{key}: {e}")),
        Err(_) => Err(format!("{key} is damaged")),
    }
}

/// Largest rollup object read from the store.
pub const MAX_ROLLUP_BYTES: u64 = 64 << 20;

/// Reads one bucket object: its counts, and its sources when it is a part.
pub(crate) async fn read_bucket(
    fleet: &Fleet,
    key: &BucketKey,
) -> Result<Option<(Arc<Rollup>, Vec<String>)>, String> {
    Ok(read_bucket_whole(fleet, key, false)
        .await?
        .map(|(r, s, _)| (r, s)))
}

/// [`read_bucket`], and with `whole`, what writing its counts back would lose.
pub(crate) async fn read_bucket_whole(
    fleet: &Fleet,
    key: &BucketKey,
    whole: bool,
) -> Result<Option<(Arc<Rollup>, Vec<String>, Option<String>)>, String> {
    let path = key.path();
    if key.level == Level::Minute {
        Ok(read_whole::<Rollup>(fleet, &path, |r| r, whole)
            .await?
            .map(|(r, lost)| (Arc::new(r), Vec::new(), lost)))
    } else {
        Ok(read_whole::<Part>(fleet, &path, |p| &p.rollup, whole)
            .await?
            .map(|(p, lost)| (Arc::new(p.rollup), p.sources, lost)))
    }
}

/// Merges `r` both ways with a rollup that has wide-ranging samples in each of its variants,
/// so a damaged sketch panics here (behind the caller's guard) rather than later in a view.
pub(crate) fn probe_merge(r: &Rollup) {
    let mut probe = Rollup::default();
    for (m, releases) in &r.models {
        for (rel, variants) in releases {
            for v in variants.keys() {
                let c = probe.variant_mut(m, rel, v);
                for ms in [0.001, 1.0, 1e6] {
                    c.load_ms.0.add(ms);
                }
                c.latency.probe_samples();
            }
        }
    }
    let mut other = probe.clone();
    probe.merge(r);
    let mut copy = r.clone();
    copy.merge(&other);
    other.merge(&copy);
}
