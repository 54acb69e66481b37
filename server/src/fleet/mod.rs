//! Fleet state: telemetry ingestion and aggregates, rate limits, the deny list, the checks that
//! halt a rollout or deny a variant, and rollout plans with their history.
//!
//! The decisions themselves (bucketing, selection) are pure functions in `ferry-shared`; this
//! module gathers their inputs from telemetry and stores their outputs as revision logs.

pub mod aggregate;
pub mod buckets;
pub mod clients;
pub mod deny;
pub mod evaluate;
pub mod events;
pub mod flush;
pub mod ingest;
pub mod limits;
pub mod ramp;
pub mod receipt;
pub mod revocation;
pub mod rollout;
pub mod rollup;

use ferry_shared::ModelName;
use time::OffsetDateTime;

use crate::app::AppState;

/// The current time as RFC 3339 text, for revision records.
pub(crate) fn now_text() -> String {
    OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Loads the rollout plans, deny lists and revocation lists of `models` into memory.
pub async fn load_state(
    state: &AppState,
    models: Vec<ModelName>,
) -> Result<(), crate::storage::StoreError> {
    let plans = rollout::load_all(&state.store, models.iter()).await?;
    state.replace_rollouts(plans);
    for m in &models {
        if let Some((revision, entries)) = deny::load(&state.store, m).await? {
            state.set_deny(m, revision, entries);
        }
        if let Some((list, env, signed)) =
            revocation::load(&state.store, &state.keys().release_ring, m).await?
        {
            state.set_revocations(list, signed.then_some(env));
        }
    }
    Ok(())
}
