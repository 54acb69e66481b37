//! The fleet: what devices report and what the server does about it, in rooms by concern,
//! from the bottom up (a room may import the rooms before it):
//!
//! - [`config`]: the `[telemetry]` section every room is configured by;
//! - [`devices`]: the pinned hash of an install id and the distinct-device sketch;
//! - [`census`]: clients by protocol and SDK, runtimes by their operator sets;
//! - [`counts`]: the mergeable rollups (carrying the census maps), field latency and its gates;
//! - [`persist`]: the outbox of what waits to be written, what this run has seen of the store,
//!   time buckets, flushes, compaction and the raw Parquet event log;
//! - [`intake`]: validation, rate limits, receipts, and `Telemetry` (counting into the outbox,
//!   the views over the outbox and the store);
//! - [`actions`]: halts, ramps and learned deny entries;
//! - [`experiments`]: experiments' results, read from the raw event log.
//!
//! The plans those actions change (rollout, deny, revocation) are model state, not
//! telemetry: they live in [`crate::plans`]. The decisions themselves (bucketing, selection,
//! ramp verdicts) are pure functions in `ferry-shared`; this module gathers their inputs from
//! telemetry and stores their outputs. This file holds the [`Fleet`] handle the jobs (flushes,
//! evaluations, ramps, reloads) take, made of the rooms' parts.
//!
//! May import `plans`, `keyring`, `snapshot`, `metrics`, `storage` and `ferry-shared`; never
//! the HTTP state; errors carry their catalogue code.

pub mod actions;
pub mod census;
pub mod config;
pub mod counts;
pub mod devices;
pub mod experiments;
pub mod intake;
pub mod persist;

use std::sync::Arc;

use ferry_shared::ModelName;
use ferry_shared::select::rollout::RolloutPlan;

use crate::keyring::Ring;
use crate::metrics::Metrics;
use crate::snapshot::Views;
use crate::storage::Store;

/// What the fleet jobs (flushes, evaluations, ramps, reloads) work with: the store, the views,
/// the telemetry aggregates and this replica's names. The HTTP layer holds one and hands it to
/// the jobs; nothing here knows of HTTP.
#[derive(Debug)]
pub struct Fleet {
    /// The shared store.
    pub store: Store,
    /// The views resolve reads.
    pub views: Arc<Views>,
    /// The keyring handle (newer keyrings adopted by the jobs).
    pub ring: Ring,
    /// Telemetry aggregates.
    pub telemetry: intake::aggregate::Telemetry,
    /// Where each ramp step began in this replica's telemetry.
    pub ramp_marks: actions::marks::RampMarks,
    /// The metrics registry (store health, flush figures).
    pub metrics: Arc<Metrics>,
    /// The `[telemetry]` config section.
    pub config: config::TelemetryConfig,
    /// The delegate preference resolve ranks by (the field-latency learner orders candidates
    /// the same way).
    pub preference: ferry_shared::select::Preference,
    /// This replica's id in telemetry file names.
    pub node: String,
    /// This run's name in the telemetry buckets: `<node>.<random>`, new at every start, so
    /// that a restart never overwrites what the previous run wrote.
    pub writer: String,
    /// Models telemetry asked to evaluate (drained by a background task).
    pub evaluations: actions::queue::Queue,
    /// What the last flush read from the store.
    pub store_cache: std::sync::Mutex<persist::store_cache::StoreCache>,
    /// The operator sets devices' runtimes reported, by digest.
    pub operators: census::operators::OperatorSets,
    /// The telemetry journal (set once at start; none when another server on this data
    /// directory holds it, or in tests without one).
    pub journal: std::sync::OnceLock<persist::journal::Journal>,
    /// Held by the flush in progress (one at a time).
    pub flushing: tokio::sync::Mutex<()>,
    /// Experiments' devices folded from the raw event log.
    pub experiments: experiments::Experiments,
}

impl Fleet {
    /// What the last flush read from the store (a panicked flush leaves what it held).
    pub fn store_cache(&self) -> std::sync::MutexGuard<'_, persist::store_cache::StoreCache> {
        ferry_shared::sync::lock(&self.store_cache)
    }

    /// Puts one model's plan in force (noting where its staged release's window starts).
    pub fn set_rollout(&self, model: &ModelName, plan: RolloutPlan) {
        self.ramp_marks.note_revision(&self.telemetry, model, &plan);
        self.views.rollouts.update(|held| {
            let mut next = held.clone();
            next.insert(model.clone(), plan);
            Some(next)
        });
    }

    /// Puts every model's plan in force.
    pub fn replace_rollouts(&self, plans: std::collections::BTreeMap<ModelName, RolloutPlan>) {
        for (m, p) in &plans {
            self.ramp_marks.note_revision(&self.telemetry, m, p);
        }
        self.views.rollouts.replace(plans);
    }
}

/// Loads the rollout plans, deny lists and revocation lists of `models` into memory.
pub async fn load_state(
    fleet: &Fleet,
    models: Vec<ModelName>,
) -> Result<(), crate::storage::StoreError> {
    let plans = crate::plans::rollout::load_all(&fleet.store, models.iter()).await?;
    fleet.replace_rollouts(plans);
    let views = &fleet.views;
    for plan in crate::plans::experiment::load_all(&fleet.store, models.iter())
        .await?
        .into_values()
    {
        views.set_experiment(plan);
    }
    for m in &models {
        if let Some((revision, entries)) = crate::plans::deny::load(&fleet.store, m).await? {
            views.set_deny(m, revision, entries);
        }
        if let Some((list, env, signed)) =
            crate::plans::revocation::load(&fleet.store, &views.keys.get().release_ring, m).await?
        {
            views.set_revocations(list, signed.then_some(env));
        }
    }
    Ok(())
}

/// Reads the catalog and the rollout state again under the keyring in force, as a restart
/// would: releases a newly trusted key signed are served, and those only a retired key signed
/// are not.
pub async fn reload_under_keys(fleet: &Fleet) {
    let ring = fleet.views.keys.get().release_ring.clone();
    match crate::storage::catalog::Catalog::load(&fleet.store, &ring).await {
        Ok((catalog, skipped)) => {
            for s in skipped {
                tracing::warn!("skipped {}: {}", s.key, s.why);
            }
            let models = catalog.model_names();
            fleet.views.catalog.replace(catalog);
            if let Err(e) = load_state(fleet, models).await {
                tracing::warn!("rollout state refresh failed: {e}");
            }
        }
        Err(e) => tracing::warn!("catalog reload under the new keyring failed: {e}"),
    }
}

/// Adopts the keyring versions the store holds beyond this replica's and, when one came into
/// force, reads the catalog and rollout state again under it. True when one did.
pub async fn refresh_keys(fleet: &Fleet) -> bool {
    let adopted = crate::keyring::refresh(&fleet.ring).await;
    if adopted {
        reload_under_keys(fleet).await;
    }
    adopted
}
