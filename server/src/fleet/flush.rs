//! Flushing buffered raw events and this replica run's minute buckets to the store, reading
//! every replica's buckets back into the fleet-wide view, and compacting old buckets (see
//! [`crate::fleet::buckets`]).

use time::OffsetDateTime;

use crate::app::AppState;
use crate::fleet::aggregate::View;
use crate::fleet::buckets::{self, Bucket, BucketKey, Lease, Level, Part};
use crate::fleet::events::{self, RawEvent};
use crate::fleet::rollup::Rollup;

/// Reads one JSON object of at most [`MAX_ROLLUP_BYTES`]: `None` when it does not exist. A
/// damaged object must not take the replica down: the sketch and estimator parsers trust their
/// input, so it is parsed and merge-checked behind a panic guard.
async fn read_checked<T: serde::de::DeserializeOwned>(
    state: &AppState,
    key: &object_store::path::Path,
    rollup_of: fn(&T) -> &Rollup,
) -> Result<Option<T>, String> {
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
        let v = serde_json::from_slice::<T>(&bytes).map_err(|e| e.to_string())?;
        probe_merge(rollup_of(&v));
        Ok::<_, String>(v)
    }) {
        Ok(Ok(v)) => Ok(Some(v)),
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

/// What a flush read from the store, by object name: its version (modification time, size)
/// and what it holds (`None`: unreadable, skipped until it changes).
pub type StoreCache = std::collections::HashMap<String, (String, Option<Cached>)>;

/// One object read from the store.
#[derive(Debug, Clone)]
pub enum Cached {
    /// A time bucket.
    Bucket(BucketKey, Bucket),
    /// A rollup written by an earlier version (`telemetry/rollups/<node>.json`): counted in
    /// the totals, in no window.
    Legacy(std::sync::Arc<Rollup>),
}

/// Writes this run's own minutes, reads every bucket that changed (and the rollups of earlier
/// versions), merges them into the view health, halts, ramps and deny entries read, and
/// compacts old buckets when this replica holds the lease. When the store cannot be listed
/// the last view is kept; an object that cannot be read keeps its last good copy.
pub async fn flush_rollups(state: &AppState) {
    use futures_util::TryStreamExt as _;
    use object_store::{ObjectStoreExt as _, PutPayload};
    let now = OffsetDateTime::now_utc().unix_timestamp();
    for (start, rollup, closed) in state.telemetry.minutes_to_write(now) {
        let key = BucketKey {
            level: Level::Minute,
            start,
            name: state.writer.clone(),
        };
        match serde_json::to_vec(&rollup) {
            Ok(bytes) => match state.store.put(&key.path(), PutPayload::from(bytes)).await {
                Ok(_) => state.telemetry.mark_written(start, closed),
                Err(e) => tracing::warn!("telemetry bucket flush failed, kept in memory: {e}"),
            },
            Err(e) => tracing::error!("telemetry bucket cannot be encoded: {e}"),
        }
    }
    let mut metas = Vec::new();
    for prefix in [buckets::PREFIX, "telemetry/rollups"] {
        let listed: Result<Vec<_>, _> = state
            .store
            .list(Some(&object_store::path::Path::from(prefix)))
            .try_collect()
            .await;
        match listed {
            Ok(m) => metas.extend(m),
            Err(e) => {
                tracing::warn!("telemetry buckets cannot be listed, keeping the last view: {e}");
                return;
            }
        }
    }
    let mut cache = std::mem::take(&mut *state.telemetry.store_cache());
    let mut live = std::collections::HashSet::new();
    for meta in metas {
        let name = meta.location.to_string();
        let version = format!("{} {}", meta.last_modified.to_rfc3339(), meta.size);
        live.insert(name.clone());
        if cache.get(&name).is_some_and(|(seen, _)| *seen == version) {
            continue;
        }
        let read = if let Some(key) = BucketKey::parse(&meta.location) {
            if key.level == Level::Minute {
                read_checked::<Rollup>(state, &meta.location, |r| r)
                    .await
                    .map(|r| r.map(|r| Cached::Bucket(key, Bucket::Minute(r.into()))))
            } else {
                read_checked::<Part>(state, &meta.location, |p| &p.rollup)
                    .await
                    .map(|p| p.map(|p| Cached::Bucket(key, Bucket::Part(p.into()))))
            }
        } else if name.starts_with("telemetry/rollups/") && name.ends_with(".json") {
            read_checked::<Rollup>(state, &meta.location, |r| r)
                .await
                .map(|r| r.map(|r| Cached::Legacy(r.into())))
        } else {
            Ok(None)
        };
        match read {
            Ok(Some(c)) => {
                cache.insert(name, (version, Some(c)));
            }
            Ok(None) => {
                cache.insert(name, (version, None));
            }
            Err(e) => {
                tracing::warn!("telemetry object skipped, keeping its last good copy if any: {e}");
                let last = cache.remove(&name).and_then(|(_, c)| c);
                cache.insert(name, (version, last));
            }
        }
    }
    cache.retain(|k, _| live.contains(k));
    let mut objects = std::collections::BTreeMap::new();
    let mut legacy = Vec::new();
    for (_, c) in cache.values() {
        match c {
            Some(Cached::Bucket(k, b)) => {
                objects.insert(k.clone(), b.clone());
            }
            Some(Cached::Legacy(r)) => legacy.push(r.clone()),
            None => {}
        }
    }
    *state.telemetry.store_cache() = cache;
    let own_key = |start: i64| BucketKey {
        level: Level::Minute,
        start,
        name: state.writer.clone(),
    };
    let in_memory = state
        .telemetry
        .settle_own(&|start| objects.contains_key(&own_key(start)));
    let covered = buckets::covered(&objects);
    let mut view = View::default();
    for (k, b) in buckets::counted(&objects, &covered) {
        if k.level == Level::Minute && k.name == state.writer && in_memory.contains(&k.start) {
            continue;
        }
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            view.total.merge(b.rollup())
        }))
        .is_err()
        {
            tracing::error!(
                "telemetry bucket {} could not be merged: it is damaged",
                k.path()
            );
            continue;
        }
        view.buckets.push((k.clone(), b.clone()));
    }
    for r in &legacy {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| view.total.merge(r))).is_err() {
            tracing::error!("an earlier rollup could not be merged: it is damaged");
        }
    }
    state.telemetry.set_view(view);
    let every = std::time::Duration::from_secs(state.config.telemetry.compact_secs.max(1));
    if state.telemetry.compaction_due(every) {
        compact(state, &objects, now).await;
    }
}

/// Takes or renews the compaction lease: true when this run holds it.
async fn take_lease(state: &AppState, now: i64) -> bool {
    use object_store::{ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
    let path = buckets::lease_path();
    let mine = Lease {
        holder: state.writer.clone(),
        expires_at: now + buckets::LEASE_SECS,
    };
    let Ok(bytes) = serde_json::to_vec(&mine) else {
        return false;
    };
    let current = match state.store.get(&path).await {
        Ok(r) => match r.bytes().await {
            Ok(b) => serde_json::from_slice::<Lease>(&b).ok(),
            Err(_) => return false,
        },
        Err(object_store::Error::NotFound { .. }) => None,
        Err(_) => return false,
    };
    match current {
        Some(l) if l.holder == state.writer => {
            // Renew.
            state
                .store
                .put(&path, PutPayload::from(bytes))
                .await
                .is_ok()
        }
        Some(l) if l.expires_at > now => false,
        other => {
            if other.is_some() {
                // Expired: whoever deletes it and then creates it first takes it. Two takers
                // at once are harmless: parts are create-if-absent, so no bucket is merged
                // twice.
                let _ = state.store.delete(&path).await;
            }
            let opts = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            state
                .store
                .put_opts(&path, PutPayload::from(bytes), opts)
                .await
                .is_ok()
        }
    }
}

/// Compacts old buckets (see [`crate::fleet::buckets::plan`]) when this run holds the lease.
async fn compact(
    state: &AppState,
    objects: &std::collections::BTreeMap<BucketKey, Bucket>,
    now: i64,
) {
    use object_store::{ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
    let plan = buckets::plan(objects, now, state.config.telemetry.retention_days);
    if plan.merges.is_empty() && plan.deletes.is_empty() {
        return;
    }
    if !take_lease(state, now).await {
        return;
    }
    for merge in &plan.merges {
        let mut part = Part {
            sources: Vec::new(),
            rollup: Rollup::default(),
        };
        for s in &merge.sources {
            if let Some(b) = objects.get(s) {
                part.rollup.merge(b.rollup());
                part.sources.push(s.path().to_string());
            }
        }
        let Ok(bytes) = serde_json::to_vec(&part) else {
            continue;
        };
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match state
            .store
            .put_opts(&merge.target.path(), PutPayload::from(bytes), opts)
            .await
        {
            Ok(_) => {
                for s in &merge.sources {
                    let _ = state.store.delete(&s.path()).await;
                }
                tracing::info!(
                    "compacted {} telemetry buckets into {}",
                    merge.sources.len(),
                    merge.target.path()
                );
            }
            // Another compactor wrote this part first: the next pass sees it.
            Err(object_store::Error::AlreadyExists { .. }) => {}
            Err(e) => tracing::warn!("telemetry compaction stopped: {e}"),
        }
    }
    for d in &plan.deletes {
        match state.store.delete(&d.path()).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => tracing::warn!("telemetry bucket {} not deleted: {e}", d.path()),
        }
    }
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
