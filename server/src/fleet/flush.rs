//! Flushing buffered raw events and rollups to the store.

use std::collections::BTreeMap;

use ferry_shared::ModelName;
use time::OffsetDateTime;

use crate::app::AppState;
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
    let models: Vec<ModelName> = state.catalog().models().map(|(m, _)| m.clone()).collect();
    let mut rollups = BTreeMap::new();
    for m in models {
        let h = state.telemetry.health(m.as_str());
        if h["releases"].as_array().is_some_and(|r| !r.is_empty()) {
            rollups.insert(m, h);
        }
    }
    for (m, h) in rollups {
        let key = StorageKey::telemetry_rollup(&m, &state.node);
        if let Ok(bytes) = serde_json::to_vec(&h) {
            let _ = state.store.put(&key, PutPayload::from(bytes)).await;
        }
    }
}
