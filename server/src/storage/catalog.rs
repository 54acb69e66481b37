//! The in-memory catalog of published releases.
//!
//! Loaded from the store at start-up (every signature verified again: the store is not
//! trusted more than the network), updated in place after each publish and refreshed
//! periodically so several replicas converge. Resolve reads only this, never storage.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferry_shared::ModelName;
use ferry_shared::dsse::{Envelope, KeyRing};
use ferry_shared::manifest::{ReleaseManifest, verify_release_envelope};
use futures_util::TryStreamExt as _;
use object_store::ObjectStoreExt as _;
use semver::Version;
use serde::Serialize;

use crate::storage::{StorageKey, Store};

/// One published release.
#[derive(Debug, Clone, Serialize)]
pub struct Release {
    /// The verified manifest.
    pub manifest: ReleaseManifest,
    /// The envelope exactly as ops signed it (embedded in resolve responses).
    pub envelope: Envelope,
    /// The inspector's report per variant id, as stored at publish time.
    pub inspection: Option<serde_json::Value>,
}

/// All releases of all models.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    models: BTreeMap<ModelName, BTreeMap<Version, Arc<Release>>>,
}

/// A release that could not be loaded (logged, skipped).
#[derive(Debug)]
pub struct Skipped {
    /// Its key.
    pub key: String,
    /// Why.
    pub why: String,
}

impl Catalog {
    /// Lists and verifies every release in `store`.
    pub async fn load(
        store: &Store,
        ring: &KeyRing,
    ) -> Result<(Catalog, Vec<Skipped>), object_store::Error> {
        let mut catalog = Catalog::default();
        let mut skipped = Vec::new();
        let metas: Vec<_> = store
            .list(Some(&StorageKey::releases_root()))
            .try_collect()
            .await?;
        for meta in metas {
            let key = meta.location.to_string();
            let Some((model, version)) = StorageKey::parse_release(&meta.location) else {
                skipped.push(Skipped {
                    key,
                    why: "not a release key".into(),
                });
                continue;
            };
            let bytes = store.get(&meta.location).await?.bytes().await?;
            match Self::decode(&bytes, ring, &model, &version) {
                Ok(mut release) => {
                    let ins_key = StorageKey::inspection(&model, &version);
                    if let Ok(got) = store.get(&ins_key).await
                        && let Ok(b) = got.bytes().await
                    {
                        release.inspection = serde_json::from_slice(&b).ok();
                    }
                    catalog.insert(release);
                }
                Err(why) => skipped.push(Skipped { key, why }),
            }
        }
        Ok((catalog, skipped))
    }

    /// Verifies and parses a stored release envelope.
    pub fn decode(
        bytes: &[u8],
        ring: &KeyRing,
        model: &ModelName,
        version: &Version,
    ) -> Result<Release, String> {
        let envelope: Envelope = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let verified = verify_release_envelope(&envelope, ring).map_err(|e| e.to_string())?;
        let manifest = ReleaseManifest::from_json(verified.value()).map_err(|e| e.to_string())?;
        if &manifest.model != model || &manifest.version != version {
            return Err(format!(
                "stored under {model}/{version} but signed as {}/{}",
                manifest.model, manifest.version
            ));
        }
        Ok(Release {
            manifest,
            envelope,
            inspection: None,
        })
    }

    /// Adds or replaces a release.
    pub fn insert(&mut self, release: Release) {
        let m = release.manifest.model.clone();
        let v = release.manifest.version.clone();
        self.models
            .entry(m)
            .or_default()
            .insert(v, Arc::new(release));
    }

    /// The releases of `model`, newest first.
    pub fn releases_newest_first(&self, model: &ModelName) -> Vec<Arc<Release>> {
        self.models
            .get(model)
            .map(|r| r.values().rev().cloned().collect())
            .unwrap_or_default()
    }

    /// One release.
    pub fn release(&self, model: &ModelName, version: &Version) -> Option<Arc<Release>> {
        self.models.get(model)?.get(version).cloned()
    }

    /// True when the model has at least one release.
    pub fn has_model(&self, model: &ModelName) -> bool {
        self.models.contains_key(model)
    }

    /// Model names with their release versions (oldest first).
    pub fn models(&self) -> impl Iterator<Item = (&ModelName, Vec<&Version>)> {
        self.models.iter().map(|(m, r)| (m, r.keys().collect()))
    }

    /// Number of releases over all models.
    pub fn release_count(&self) -> usize {
        self.models.values().map(BTreeMap::len).sum()
    }
}
