//! Flushing buffered raw events and this replica's rollup to the store, and reading the other
//! replicas' rollups back (see [`crate::fleet::rollup`]).

use time::OffsetDateTime;

use crate::app::AppState;
use crate::fleet::rollup::Rollup;
use crate::storage::StorageKey;

/// Flushes buffered raw events and rollups to the store.
pub async fn flush(state: &AppState) {
    use object_store::{ObjectStoreExt as _, PutPayload};
    let lines = state.telemetry.take_raw();
    if !lines.is_empty() {
        let now = OffsetDateTime::now_utc();
        let key = StorageKey::telemetry_raw(now, &state.node);
        let mut text = lines.join("\n");
        text.push('\n');
        if let Err(e) = state
            .store
            .put(&key, PutPayload::from(text.into_bytes()))
            .await
        {
            tracing::warn!(
                "telemetry flush failed, keeping {} events: {e}",
                lines.len()
            );
            state.telemetry.restore_raw(lines);
        }
    }
    flush_rollups(state).await;
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
    let mut others = Rollup::default();
    for meta in metas {
        if meta.location == own {
            continue;
        }
        let bytes = match state.store.get(&meta.location).await {
            Ok(r) => match r.bytes().await {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!("rollup {} unreadable: {e}", meta.location);
                    continue;
                }
            },
            Err(e) => {
                tracing::warn!("rollup {} unreadable: {e}", meta.location);
                continue;
            }
        };
        match serde_json::from_slice::<Rollup>(&bytes) {
            Ok(r) => others.merge(&r),
            Err(e) => tracing::warn!("skipping rollup {}: {e}", meta.location),
        }
    }
    state.telemetry.set_others(others);
}
