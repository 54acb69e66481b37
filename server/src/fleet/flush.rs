//! Flushing buffered raw events and this replica's rollup to the store, and reading the other
//! replicas' rollups back (see [`crate::fleet::rollup`]).

use time::OffsetDateTime;

use crate::app::AppState;
use crate::fleet::events::{self, RawEvent};
use crate::fleet::rollup::Rollup;
use crate::storage::StorageKey;

/// With a stable node id, continues this replica's own rollup from the store (what its earlier
/// run flushed), so restarts do not leave one more file each time. Called once at start.
pub async fn resume_own_rollup(state: &AppState) {
    if state.config.node_id.is_none() {
        return;
    }
    match read_rollup(state, &StorageKey::telemetry_rollup(&state.node)).await {
        Ok(Some(r)) => state.telemetry.resume_local(r),
        Ok(None) => {}
        Err(e) => tracing::warn!("own rollup not continued, starting a new one: {e}"),
    }
}

/// Reads and checks one rollup object: `None` when it does not exist. A damaged object must
/// not take the replica down: the sketch and estimator parsers trust their input, so it is
/// size-capped, then parsed and merge-checked behind a panic guard.
async fn read_rollup(
    state: &AppState,
    key: &object_store::path::Path,
) -> Result<Option<Rollup>, String> {
    use object_store::ObjectStoreExt as _;
    let got = match state.store.get(key).await {
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
        let r = serde_json::from_slice::<Rollup>(&bytes).map_err(|e| e.to_string())?;
        probe_merge(&r);
        Ok::<_, String>(r)
    }) {
        Ok(Ok(r)) => Ok(Some(r)),
        Ok(Err(e)) => Err(format!("{key}: {e}")),
        Err(_) => Err(format!("{key} is damaged")),
    }
}

/// Largest rollup object read from the store.
pub const MAX_ROLLUP_BYTES: u64 = 64 << 20;

/// Flushes this replica's rollup to the store (and reads the others'), and writes the raw
/// events when they are due (see [`crate::fleet::events`]).
pub async fn flush(state: &AppState) {
    flush_with(state, false).await;
}

/// Flushes everything buffered, raw events included: for a graceful stop.
pub async fn flush_all(state: &AppState) {
    flush_with(state, true).await;
}

async fn flush_with(state: &AppState, force: bool) {
    state.telemetry.prune_limits();
    let now = OffsetDateTime::now_utc();
    let raw = state
        .telemetry
        .take_raw(force, &state.config.telemetry, now);
    if !raw.is_empty() {
        let unwritten = write_events(state, raw, now).await;
        if !unwritten.is_empty() {
            state.telemetry.restore_raw(unwritten);
        }
    }
    flush_rollups(state).await;
}

/// Writes raw events as one Parquet file per day they arrived on; returns those that could not
/// be written (kept for the next flush).
async fn write_events(state: &AppState, raw: Vec<RawEvent>, now: OffsetDateTime) -> Vec<RawEvent> {
    use object_store::{ObjectStoreExt as _, PutPayload};
    let mut unwritten = Vec::new();
    for (day, part) in events::by_day(raw) {
        if !unwritten.is_empty() {
            unwritten.extend(part);
            continue;
        }
        let node = state.node.clone();
        let (part, encoded) = match tokio::task::spawn_blocking(move || {
            let bytes = events::encode(&part, &node);
            (part, bytes)
        })
        .await
        {
            Ok(done) => done,
            Err(e) => {
                tracing::error!("raw telemetry encoding stopped: {e}");
                continue;
            }
        };
        let bytes = match encoded {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(
                    "raw telemetry cannot be encoded, keeping {} events: {e}",
                    part.len()
                );
                unwritten.extend(part);
                continue;
            }
        };
        let key = events::key(&day, &state.node, now);
        if let Err(e) = state.store.put(&key, PutPayload::from(bytes)).await {
            tracing::warn!("telemetry flush failed, keeping {} events: {e}", part.len());
            unwritten.extend(part);
        }
    }
    unwritten
}

/// Writes this replica's rollup (`telemetry/rollups/<node>.json`, which only it writes), then
/// reads every other rollup there (other replicas, and earlier runs of any replica) and keeps
/// their merge for the fleet-wide views. A rollup that cannot be read is skipped and logged;
/// the last good merge is kept when the store cannot be listed.
pub async fn flush_rollups(state: &AppState) {
    use futures_util::TryStreamExt as _;
    use object_store::{ObjectStoreExt as _, PutPayload};
    let own = StorageKey::telemetry_rollup(&state.node);
    let local = state.telemetry.local_rollup();
    if !local.models.is_empty() || !local.cohorts.is_empty() {
        match serde_json::to_vec(&local) {
            Ok(bytes) => {
                if let Err(e) = state.store.put(&own, PutPayload::from(bytes)).await {
                    tracing::warn!("rollup flush failed: {e}");
                }
            }
            Err(e) => tracing::error!("rollup cannot be encoded: {e}"),
        }
    }
    let listed: Result<Vec<_>, _> = state
        .store
        .list(Some(&StorageKey::telemetry_rollups()))
        .try_collect()
        .await;
    let metas = match listed {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("rollups cannot be listed, keeping the last merge: {e}");
            return;
        }
    };
    // Files that did not change since the last pass are not read again; one that cannot be
    // read (or parsed) keeps its last good copy, so a transient failure does not make its
    // history vanish and reappear.
    let mut cache = std::mem::take(&mut *state.telemetry.rollup_cache());
    let mut live = std::collections::HashSet::new();
    for meta in metas {
        if meta.location == own {
            continue;
        }
        let name = meta.location.to_string();
        let version = format!("{} {}", meta.last_modified.to_rfc3339(), meta.size);
        live.insert(name.clone());
        if cache.get(&name).is_some_and(|(seen, _)| *seen == version) {
            continue;
        }
        match read_rollup(state, &meta.location).await {
            Ok(Some(r)) => {
                cache.insert(name, (version, std::sync::Arc::new(r)));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("rollup skipped, keeping its last good copy if any: {e}"),
        }
    }
    cache.retain(|k, _| live.contains(k));
    let mut others = Rollup::default();
    for (name, (_, r)) in cache.iter() {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| others.merge(r))).is_err() {
            tracing::error!("rollup {name} could not be merged: it is damaged");
        }
    }
    *state.telemetry.rollup_cache() = cache;
    state.telemetry.set_others(others);
}

/// Merges `r` both ways with a rollup that has wide-ranging samples in each of its variants,
/// so a damaged sketch panics here (behind the caller's guard) rather than later in a view.
fn probe_merge(r: &Rollup) {
    let mut probe = Rollup::default();
    for (m, releases) in &r.models {
        for (rel, variants) in releases {
            for v in variants.keys() {
                let c = probe.variant_mut(m, rel, v);
                for ms in [0.001, 1.0, 1e6] {
                    c.load_ms.0.add(ms);
                }
            }
        }
    }
    let mut other = probe.clone();
    probe.merge(r);
    let mut copy = r.clone();
    copy.merge(&other);
    other.merge(&copy);
}
