//! The in-memory catalog of published releases.
//!
//! Loaded from the store at start-up (every signature verified again: the store is not
//! trusted more than the network), updated in place after each publish and refreshed
//! periodically so several replicas converge. Resolve reads only this, never storage.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferry_shared::ModelName;
use ferry_shared::manifest::{ReleaseManifest, verify_release_envelope};
use ferry_shared::trust::dsse::{Envelope, KeyRing};
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
    /// The envelope exactly as ops signed it.
    pub envelope: Envelope,
    /// The inspector's report per variant id, as stored at publish time (held when this server
    /// published it; otherwise read from the store when asked for).
    pub inspection: Option<serde_json::Value>,
    /// The envelope as served at `GET /v1/releases/sha256/{hex}` (compact JSON).
    #[serde(skip)]
    pub envelope_json: bytes::Bytes,
    /// SHA-256 of [`Release::envelope_json`] (named by every decision about this release).
    #[serde(skip)]
    pub envelope_sha256: ferry_shared::Sha256Digest,
}

impl Release {
    /// A release from its verified manifest and envelope.
    pub fn new(
        manifest: ReleaseManifest,
        envelope: Envelope,
        inspection: Option<serde_json::Value>,
    ) -> Self {
        let json = serde_json::to_vec(&envelope).unwrap_or_default();
        Self {
            envelope_sha256: ferry_shared::Sha256Digest::of(&json),
            envelope_json: bytes::Bytes::from(json),
            manifest,
            envelope,
            inspection,
        }
    }
}

/// Release files read at once when loading the catalog.
const CONCURRENT_READS: usize = 16;

/// All releases of all models.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    models: BTreeMap<ModelName, BTreeMap<Version, Arc<Release>>>,
    by_digest: std::collections::HashMap<ferry_shared::Sha256Digest, Arc<Release>>,
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
        Self::load_from(store, ring, None).await
    }

    /// The catalog as `store` holds it now, reusing what `known` already holds: releases are
    /// immutable, so only keys new since are read and verified (the steady state of a
    /// refresh is one listing).
    pub async fn refresh(
        store: &Store,
        ring: &KeyRing,
        known: &Catalog,
    ) -> Result<(Catalog, Vec<Skipped>), object_store::Error> {
        Self::load_from(store, ring, Some(known)).await
    }

    async fn load_from(
        store: &Store,
        ring: &KeyRing,
        known: Option<&Catalog>,
    ) -> Result<(Catalog, Vec<Skipped>), object_store::Error> {
        use futures_util::StreamExt as _;
        let mut catalog = Catalog::default();
        let mut skipped = Vec::new();
        let metas: Vec<_> = store
            .list(Some(&StorageKey::releases_root()))
            .try_collect()
            .await?;
        let mut todo = Vec::new();
        for meta in metas {
            let key = meta.location.to_string();
            let Some((model, version)) = StorageKey::parse_release(&meta.location) else {
                skipped.push(Skipped {
                    key,
                    why: "not a release key".into(),
                });
                continue;
            };
            match known.and_then(|k| k.models.get(&model).and_then(|v| v.get(&version))) {
                Some(r) => catalog.insert_shared(r.clone()),
                None => todo.push((meta.location, model, version)),
            }
        }
        // New releases are read several at a time: against a remote store each read is a
        // round trip, and a cold start may have thousands.
        let fetched: Vec<_> = futures_util::stream::iter(todo)
            .map(|(location, model, version)| async move {
                let bytes = store.get(&location).await?.bytes().await?;
                Ok::<_, object_store::Error>((location, model, version, bytes))
            })
            .buffer_unordered(CONCURRENT_READS)
            .collect()
            .await;
        for item in fetched {
            let (location, model, version, bytes) = item?;
            match Self::decode(&bytes, ring, &model, &version) {
                // The inspector's report stays in the store until asked for.
                Ok(release) => catalog.insert(release),
                Err(why) => skipped.push(Skipped {
                    key: location.to_string(),
                    why,
                }),
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
        Ok(Release::new(manifest, envelope, None))
    }

    /// Adds or replaces a release.
    pub fn insert(&mut self, release: Release) {
        self.insert_shared(Arc::new(release));
    }

    /// Adds or replaces a release held elsewhere too.
    pub fn insert_shared(&mut self, release: Arc<Release>) {
        let m = release.manifest.model.clone();
        let v = release.manifest.version.clone();
        if let Some(old) = self.models.entry(m).or_default().insert(v, release.clone()) {
            self.by_digest.remove(&old.envelope_sha256);
        }
        self.by_digest.insert(release.envelope_sha256, release);
    }

    /// The release whose served envelope hashes to `digest`.
    pub fn by_digest(&self, digest: &ferry_shared::Sha256Digest) -> Option<Arc<Release>> {
        self.by_digest.get(digest).cloned()
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

    /// The release of `model` whose version is `version` as text (as telemetry and deny lists
    /// name it); `None` when it does not parse or is not published.
    pub fn release_named(&self, model: &ModelName, version: &str) -> Option<Arc<Release>> {
        self.release(model, &version.parse().ok()?)
    }

    /// How many releases `model` has.
    pub fn release_count_of(&self, model: &ModelName) -> usize {
        self.models.get(model).map_or(0, BTreeMap::len)
    }

    /// True when the model has at least one release.
    pub fn has_model(&self, model: &ModelName) -> bool {
        self.models.contains_key(model)
    }

    /// Model names with their release versions (oldest first).
    pub fn models(&self) -> impl Iterator<Item = (&ModelName, Vec<&Version>)> {
        self.models.iter().map(|(m, r)| (m, r.keys().collect()))
    }

    /// The names of every model with a release.
    pub fn model_names(&self) -> Vec<ModelName> {
        self.models.keys().cloned().collect()
    }

    /// Number of releases over all models.
    pub fn release_count(&self) -> usize {
        self.models.values().map(BTreeMap::len).sum()
    }
}

/// The release envelope stored for `model` `version`, whether or not a current release key
/// verifies it: `None` when nothing is stored, `Some(None)` when the file is not an envelope.
pub async fn stored_envelope(
    store: &Store,
    model: &ModelName,
    version: &Version,
) -> Result<Option<Option<Envelope>>, crate::storage::StoreError> {
    let key = StorageKey::release(model, version);
    let got = match store.get(&key).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let bytes = got.bytes().await?;
    Ok(Some(serde_json::from_slice::<Envelope>(&bytes).ok()))
}
