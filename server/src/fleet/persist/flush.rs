//! Flushing buffered raw events and this replica run's minute buckets to the store, reading
//! every replica's buckets back into the fleet-wide view; compaction (under a lease) is in
//! [`crate::fleet::persist::compact`] (see [`crate::fleet::persist::buckets`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use time::OffsetDateTime;

use crate::fleet::Fleet;
use crate::fleet::counts::rollup::Rollup;
use crate::fleet::persist::buckets::{self, BucketKey, Lease, Level};
use crate::fleet::persist::compact::compact;
use crate::fleet::persist::events::{self, RawEvent};
use crate::fleet::persist::seen::View;
use crate::fleet::persist::stored::{read_bucket, read_checked};
use crate::storage::StorageKey;

/// Flushes this replica's rollup to the store (and reads the others'), and writes the raw
/// events when they are due (see [`crate::fleet::persist::events`]).
pub async fn flush(fleet: &Fleet) {
    flush_with(fleet, false).await;
}

/// Flushes everything buffered, raw events included, and hands the compaction lease back:
/// for a graceful stop.
pub async fn flush_all(fleet: &Fleet) {
    flush_with(fleet, true).await;
    release_lease(fleet).await;
}

/// Deletes the compaction lease if this run holds it, so another replica compacts at once.
async fn release_lease(fleet: &Fleet) {
    use object_store::ObjectStoreExt as _;
    let path = buckets::lease_path();
    let Ok(got) = fleet.store.get(&path).await else {
        return;
    };
    let mine = got
        .bytes()
        .await
        .ok()
        .and_then(|b| serde_json::from_slice::<Lease>(&b).ok())
        .is_some_and(|l| l.holder == fleet.writer);
    if mine {
        let _ = fleet.store.delete(&path).await;
    }
}

async fn flush_with(fleet: &Fleet, force: bool) {
    // One flush at a time: what a flush says is written (the journal's watermarks) must not
    // pass what another flush still holds.
    let _one = fleet.flushing.lock().await;
    let now = OffsetDateTime::now_utc();
    let journal = fleet.journal.get();
    if let Some(j) = journal {
        j.rotate();
    }
    if let Some(j) = journal
        && !j.old_segments().is_empty()
    {
        crate::fleet::persist::journal::replay::replay(fleet, j).await;
    }
    let (raw, through) = fleet.telemetry.outbox().take_raw(force, &fleet.config, now);
    let unwritten = if raw.is_empty() {
        Vec::new()
    } else {
        write_events(fleet, raw, now).await
    };
    if unwritten.is_empty() {
        if let Some(j) = journal {
            j.raw_written(through);
        }
    } else {
        fleet.telemetry.outbox().restore_raw(unwritten);
    }
    flush_rollups_held(fleet).await;
}

/// Writes raw events as one Parquet file per day they arrived on; returns those that could not
/// be written (kept for the next flush).
async fn write_events(fleet: &Fleet, raw: Vec<RawEvent>, now: OffsetDateTime) -> Vec<RawEvent> {
    use object_store::{ObjectStoreExt as _, PutPayload};
    let mut unwritten = Vec::new();
    // Journaled events name the records they hold (a replay after a crash reads the names).
    let span = raw
        .iter()
        .filter(|e| e.seq > 0)
        .map(|e| e.seq)
        .fold(None, |s: Option<(u64, u64)>, q| {
            Some(s.map_or((q, q), |(a, b)| (a.min(q), b.max(q))))
        });
    for (day, part) in events::by_day(raw) {
        if !unwritten.is_empty() {
            unwritten.extend(part);
            continue;
        }
        let (part, encoded) = encode_off_thread(part, fleet.node.clone(), events::encode).await;
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
        let key = match span {
            Some((a, b)) => StorageKey::raw_events_journaled(&day, &fleet.writer, a, b),
            None => events::key(&day, &fleet.node, now),
        };
        if let Err(e) = fleet.store.put(&key, PutPayload::from(bytes)).await {
            tracing::warn!("telemetry flush failed, keeping {} events: {e}", part.len());
            unwritten.extend(part);
        }
    }
    unwritten
}

/// Encodes one day's events on a blocking thread and hands them back whatever happens: an
/// encoder that fails or panics (or a task that is cancelled) leaves the events with the
/// caller, kept for the next flush, never dropped.
async fn encode_off_thread<E>(
    part: Vec<RawEvent>,
    node: String,
    encode: fn(&[RawEvent], &str) -> Result<Vec<u8>, E>,
) -> (Vec<RawEvent>, Result<Vec<u8>, String>)
where
    E: std::fmt::Display + Send + 'static,
{
    let part = Arc::new(part);
    let held = Arc::clone(&part);
    let done = tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| encode(&held, &node)))
    })
    .await;
    let encoded = match done {
        Ok(Ok(Ok(bytes))) => Ok(bytes),
        Ok(Ok(Err(e))) => Err(e.to_string()),
        Ok(Err(_)) => Err("the Parquet encoder panicked".to_string()),
        Err(e) => Err(format!("the encoding task stopped: {e}")),
    };
    // The task has ended (its clone is gone), so the events are ours alone again.
    let part = Arc::try_unwrap(part).unwrap_or_else(|shared| (*shared).clone());
    (part, encoded)
}

/// Writes what this run counted since the last flush, one new object per minute; what cannot
/// be written stays in memory for the next flush.
async fn write_pending(fleet: &Fleet) {
    use object_store::{ObjectStoreExt as _, PutPayload};
    let mut unwritten = Vec::new();
    let (taken, applied) = fleet.telemetry.outbox().take_pending();
    for (start, rollup, span) in taken {
        if span.is_none()
            && rollup.models.is_empty()
            && rollup.cohorts.is_empty()
            && rollup.clients.is_empty()
            && rollup.clocks.is_empty()
            && rollup.runtimes.is_empty()
            && rollup.sdks.is_empty()
            && rollup.operator_digests.is_empty()
        {
            continue;
        }
        // Counts of journal records name them (a replay after a crash reads the names).
        let name = match span {
            Some((a, b)) => format!("{}-j{a}-{b}", fleet.writer),
            None => fleet.telemetry.seen().next_object_name(&fleet.writer),
        };
        let key = BucketKey {
            level: Level::Minute,
            start,
            name,
        };
        match serde_json::to_vec(&rollup) {
            Ok(bytes) => match fleet.store.put(&key.path(), PutPayload::from(bytes)).await {
                Ok(_) => fleet.telemetry.seen().note_written(
                    key.path().to_string(),
                    start,
                    Arc::new(rollup),
                ),
                Err(e) => {
                    tracing::warn!("telemetry bucket flush failed, kept in memory: {e}");
                    unwritten.push((start, rollup, span));
                }
            },
            Err(e) => tracing::error!("telemetry bucket cannot be encoded: {e}"),
        }
    }
    if unwritten.is_empty() {
        if let Some(j) = fleet.journal.get() {
            j.counts_written(applied);
        }
    } else {
        fleet.telemetry.outbox().restore_pending(unwritten);
    }
}

/// Every bucket object and earlier rollup in the store; `None` when the store cannot list.
async fn list_buckets(fleet: &Fleet) -> Option<Vec<object_store::ObjectMeta>> {
    use futures_util::TryStreamExt as _;
    let mut metas = Vec::new();
    for prefix in [buckets::PREFIX, StorageKey::LEGACY_ROLLUPS] {
        let listed: Result<Vec<_>, _> = fleet
            .store
            .list(Some(&object_store::path::Path::from(prefix)))
            .try_collect()
            .await;
        match listed {
            Ok(m) => metas.extend(m),
            Err(e) => {
                tracing::warn!("telemetry buckets cannot be listed, keeping the last view: {e}");
                return None;
            }
        }
    }
    Some(metas)
}

/// Writes what this run counted since the last flush as new objects (one per minute, never
/// rewritten), reads every bucket object that is new (and the rollups of earlier versions),
/// merges them per bucket into the view health, halts, ramps and deny entries read, and
/// compacts old buckets when this replica holds the lease. When the store cannot be listed the
/// last view is kept; what could not be written stays in memory and is written later.
pub async fn flush_rollups(fleet: &Fleet) {
    let _one = fleet.flushing.lock().await;
    flush_rollups_held(fleet).await;
}

/// [`flush_rollups`] by a flush that holds the flush lock.
async fn flush_rollups_held(fleet: &Fleet) {
    let now = OffsetDateTime::now_utc().unix_timestamp();
    write_pending(fleet).await;
    let Some(metas) = list_buckets(fleet).await else {
        fleet.metrics.store_up(false);
        return;
    };
    fleet.metrics.store_up(true);
    let mut cache = std::mem::take(&mut *fleet.store_cache());
    // New or changed objects are read now; their counts are kept only until merged below.
    let mut fresh: HashMap<String, Arc<Rollup>> = HashMap::new();
    let mut listed: HashMap<String, BucketKey> = HashMap::new();
    let mut legacy_live = HashSet::new();
    for meta in &metas {
        let name = meta.location.to_string();
        let version = format!("{} {}", meta.last_modified.to_rfc3339(), meta.size);
        if let Some(key) = BucketKey::parse(&meta.location) {
            listed.insert(name.clone(), key.clone());
            if cache.objects.get(&name).is_some_and(|(v, _)| *v == version) {
                continue;
            }
            match read_bucket(fleet, &key).await {
                Ok(Some((rollup, sources))) => {
                    fresh.insert(name.clone(), rollup);
                    cache.objects.insert(name, (version, Some(sources)));
                }
                Ok(None) => {
                    listed.remove(&name);
                }
                Err(e) => {
                    tracing::warn!("telemetry bucket skipped until it changes: {e}");
                    cache.objects.insert(name, (version, None));
                }
            }
        } else if name
            .strip_prefix(StorageKey::LEGACY_ROLLUPS)
            .is_some_and(|rest| rest.starts_with('/') && rest.ends_with(".json"))
        {
            legacy_live.insert(name.clone());
            if cache.legacy.get(&name).is_some_and(|(v, _)| *v == version) {
                continue;
            }
            let read = read_checked::<Rollup>(fleet, &meta.location, |r| r).await;
            let last = cache.legacy.remove(&name).and_then(|(_, r)| r);
            let rollup = match read {
                Ok(r) => r.map(Arc::new),
                Err(e) => {
                    tracing::warn!("an earlier rollup skipped, keeping its last good copy: {e}");
                    last
                }
            };
            cache.legacy.insert(name, (version, rollup));
        }
    }
    cache.objects.retain(|k, _| listed.contains_key(k));
    cache.legacy.retain(|k, _| legacy_live.contains(k));
    // What each bucket counts: its readable objects that no part lists.
    let listing: buckets::Listing = listed
        .iter()
        .filter_map(|(name, key)| {
            let sources = cache.objects.get(name)?.1.clone()?;
            Some((key.clone(), sources))
        })
        .collect();
    let covered = buckets::covered(&listing);
    let mut wanted: HashMap<(Level, i64), BTreeSet<String>> = HashMap::new();
    for key in listing.keys() {
        let name = key.path().to_string();
        if !covered.contains(&name) {
            wanted
                .entry((key.level, key.start))
                .or_default()
                .insert(name);
        }
    }
    let mut next_buckets = HashMap::new();
    for (bucket, names) in wanted {
        let cached = cache.buckets.remove(&bucket);
        let merged = match cached {
            Some((had, rollup)) if had == names => Some(rollup),
            // Only new objects since: add them to what was merged.
            Some((had, rollup))
                if had.is_subset(&names)
                    && had.iter().all(|n| !fresh.contains_key(n))
                    && names.difference(&had).all(|n| fresh.contains_key(n)) =>
            {
                let mut r = (*rollup).clone();
                let ok = names.difference(&had).all(|n| {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.merge(&fresh[n])))
                        .is_ok()
                });
                ok.then(|| Arc::new(r))
            }
            _ => None,
        };
        let merged = match merged {
            Some(m) => m,
            // Anything else (an object gone or changed): merge the bucket again from its
            // objects, reading those not read in this pass.
            None => {
                let mut r = Rollup::default();
                for n in &names {
                    let part = match fresh.get(n) {
                        Some(f) => Some(f.clone()),
                        None => match read_bucket(fleet, &listed[n]).await {
                            Ok(got) => got.map(|(r, _)| r),
                            Err(e) => {
                                tracing::warn!("telemetry bucket skipped: {e}");
                                None
                            }
                        },
                    };
                    if let Some(p) = part
                        && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.merge(&p)))
                            .is_err()
                    {
                        tracing::error!("telemetry bucket {n} could not be merged: it is damaged");
                    }
                }
                Arc::new(r)
            }
        };
        next_buckets.insert(bucket, (names, merged));
    }
    cache.buckets = next_buckets;
    let mut view = View::default();
    for ((level, start), (_, r)) in &cache.buckets {
        view.total.merge(r);
        view.buckets.push((*level, *start, r.clone()));
    }
    view.buckets.sort_by_key(|(l, s, _)| (*s, *l));
    for (_, r) in cache.legacy.values() {
        if let Some(r) = r
            && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| view.total.merge(r)))
                .is_err()
        {
            tracing::error!("an earlier rollup could not be merged: it is damaged");
        }
    }
    *fleet.store_cache() = cache;
    fleet
        .telemetry
        .seen()
        .install_view(view, &|name| listed.contains_key(name));
    fleet.telemetry.refresh_vouched();
    let every = std::time::Duration::from_secs(fleet.config.compact_secs.max(1));
    if fleet.telemetry.seen().compaction_due(every) {
        compact(fleet, &listing, now).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_shared::wire::telemetry::TelemetryEvent;

    fn raw(n: usize) -> Vec<RawEvent> {
        (0..n)
            .map(|i| {
                let event: TelemetryEvent = serde_json::from_value(serde_json::json!({
                    "kind": "load", "model": "m", "release": "1.0.0", "variant": "v",
                    "delegate": "xnnpack", "outcome": "ok", "install_id": format!("i{i}"),
                    "platform": "android", "soc": "s", "device_model": "d", "os_version": "14",
                    "app_version": "1.0.0", "runtime_version": "1.5.1",
                    "at": "2026-12-01T00:00:00Z",
                }))
                .expect("event");
                RawEvent {
                    event,
                    received_at: OffsetDateTime::UNIX_EPOCH,
                    counted: true,
                    arm: None,
                    seq: 0,
                }
            })
            .collect()
    }

    fn panics(_: &[RawEvent], _: &str) -> Result<Vec<u8>, String> {
        panic!("an encoder bug")
    }

    fn fails(_: &[RawEvent], _: &str) -> Result<Vec<u8>, String> {
        Err("no space in the schema".into())
    }

    #[tokio::test]
    async fn an_encoder_that_panics_hands_every_event_back() {
        let (kept, encoded) = encode_off_thread(raw(250), "node-a".into(), panics).await;
        assert!(encoded.is_err_and(|e| e.contains("panicked")));
        assert_eq!(kept.len(), 250);
        let ids: Vec<&str> = kept.iter().map(|r| r.event.install_id.as_str()).collect();
        assert_eq!(ids[0], "i0");
        assert_eq!(ids[249], "i249");
    }

    #[tokio::test]
    async fn an_encoder_that_fails_hands_every_event_back() {
        let (kept, encoded) = encode_off_thread(raw(3), "node-a".into(), fails).await;
        assert_eq!(encoded, Err("no space in the schema".to_string()));
        assert_eq!(kept.len(), 3);
    }

    #[tokio::test]
    async fn encoded_events_come_back_with_their_bytes() {
        let (kept, encoded) = encode_off_thread(raw(10), "node-a".into(), events::encode).await;
        assert_eq!(kept.len(), 10);
        assert!(encoded.is_ok_and(|b| b.starts_with(b"PAR1")));
    }
}
