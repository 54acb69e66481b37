//! Flushing buffered raw events and rollups to the store.

use std::collections::BTreeMap;

use ferry_shared::ModelName;
use time::OffsetDateTime;

use crate::app::AppState;

/// Flushes buffered raw events and rollups to the store.
pub async fn flush(state: &AppState) {
    use object_store::{ObjectStoreExt as _, PutPayload};
    let lines = state.telemetry.take_raw();
    if !lines.is_empty() {
        let now = OffsetDateTime::now_utc();
        let key = object_store::path::Path::from(format!(
            "telemetry/raw/date={:04}-{:02}-{:02}/hour={:02}/{}-{}.ndjson",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            state.node,
            now.unix_timestamp_nanos()
        ));
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
        let key =
            object_store::path::Path::from(format!("telemetry/rollup/{m}/{}.json", state.node));
        if let Ok(bytes) = serde_json::to_vec(&h) {
            let _ = state.store.put(&key, PutPayload::from(bytes)).await;
        }
    }
}
