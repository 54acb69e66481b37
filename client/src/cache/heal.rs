//! The cache heals: when the index was lost (unreadable and set aside, or deleted), each
//! model's last known good is found again from what the cache still holds: the signed release
//! envelopes under `releases/sha256/` (each verified again against the trusted release keys)
//! and the program files under `blobs/sha256/` (hashed again when loaded, as always). The
//! newest release with a variant whose files are all there and that fits this app and runtime
//! becomes the model's last known good. Revocation lists and replay floors were in the lost
//! index: they are learned again at the next answer from the server.

use std::collections::BTreeMap;

use ferry_shared::manifest::ReleaseManifest;
use ferry_shared::trust::dsse::Envelope;

use crate::Client;
use crate::cache::ModelEntry;
use crate::trust::verify::verify_release;

impl Client {
    /// Finds a last known good again for each model the cache holds releases of but no entry
    /// for; returns how many were found. A failure here never fails the client.
    pub(crate) fn heal_last_good(&self) -> usize {
        let dir = self.cache().root().join("releases/sha256");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return 0;
        };
        let ring = self.trust().ring_at(self.now());
        // Per model, every release the cache holds with its envelope, newest first.
        let mut by_model: BTreeMap<String, Vec<(ReleaseManifest, Envelope)>> = BTreeMap::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(digest) = name
                .strip_suffix(".json")
                .and_then(|h| h.parse::<ferry_shared::Sha256Digest>().ok())
            else {
                continue;
            };
            let Some(env) = self.cache().release(&digest) else {
                continue;
            };
            if let Ok(m) = verify_release(&env, &ring) {
                let m = m.into_inner();
                by_model
                    .entry(m.model.to_string())
                    .or_default()
                    .push((m, env));
            }
        }
        let mut found = 0;
        for (model, mut releases) in by_model {
            if self.cache().last_good(&model).is_some() {
                continue;
            }
            releases.sort_by(|a, b| b.0.version.cmp(&a.0.version));
            let chosen = releases.iter().find_map(|(m, env)| {
                m.variants
                    .iter()
                    .find(|v| self.files_present(v) && self.unfit_for_app(v).is_empty())
                    .map(|v| (m, env, v))
            });
            let Some((m, env, v)) = chosen else { continue };
            let entry = ModelEntry {
                release: m.version.to_string(),
                variant: v.id.to_string(),
                delegate: v.delegate.to_string(),
                sha256: v.sha256,
                size: v.size,
                data: v.side_files().map(|f| f.sha256).collect(),
                release_envelope: env.clone(),
                incompatible: None,
                receipt: None,
            };
            if self.cache().set_last_good(&model, entry).is_ok() {
                found += 1;
            }
        }
        found
    }

    /// Whether the program and every side file of `v` are in the cache (their bytes are
    /// checked when loaded).
    fn files_present(&self, v: &ferry_shared::manifest::Variant) -> bool {
        let cache = self.cache();
        std::iter::once(v.sha256)
            .chain(v.side_files().map(|f| f.sha256))
            .all(|d| cache.blob_path(&d).is_file())
    }
}
