//! What the cache index records per model besides its files: last known good, versions
//! seen, incompatible marks, decision sequences, revocations, releases and keyrings.

use super::*;

impl Cache {
    /// Marks a blob as just used (LRU).
    pub fn mark_used(&mut self, d: &Sha256Digest, size: u64) -> Result<(), ClientError> {
        self.update(|i| i.touch(d, size))
    }

    /// Marks several blobs as just used, in one write of the index; no write at all when they
    /// are the most recently used already, all of them used after every other blob (an app
    /// that loads the same model at every start writes nothing for it; eviction, which goes
    /// by that order, would choose the same).
    pub fn mark_all_used(&mut self, used: &[(Sha256Digest, u64)]) -> Result<(), ClientError> {
        let keys: BTreeSet<String> = used.iter().map(|(d, _)| d.to_hex()).collect();
        let others = self
            .index
            .blobs
            .iter()
            .filter(|(k, _)| !keys.contains(*k))
            .map(|(_, b)| b.last_used)
            .max()
            .unwrap_or(0);
        let fresh = used.iter().all(|(d, size)| {
            self.index
                .blobs
                .get(&d.to_hex())
                .is_some_and(|b| b.size == *size && b.last_used > others)
        });
        if used.is_empty() || fresh {
            return Ok(());
        }
        self.update(|i| {
            for (d, size) in used {
                i.touch(d, *size);
            }
        })
    }

    /// Records `entry` as `model`'s last known good variant.
    pub fn set_last_good(&mut self, model: &str, entry: ModelEntry) -> Result<(), ClientError> {
        self.update(|i| {
            i.touch(&entry.sha256, entry.size);
            i.models.insert(model.to_string(), entry);
        })
    }

    /// The last known good variant of `model`.
    pub fn last_good(&self, model: &str) -> Option<&ModelEntry> {
        self.index.models.get(model)
    }

    /// The app and runtime versions the entries were last checked against.
    pub fn seen_versions(&self) -> Option<&(String, String)> {
        self.index.seen_versions.as_ref()
    }

    /// Records the app and runtime versions the entries were checked against.
    pub fn set_seen_versions(&mut self, seen: (String, String)) -> Result<(), ClientError> {
        self.update(|i| i.seen_versions = Some(seen))
    }

    /// Marks `model`'s entry as no longer fitting the app (`why`), or as fitting (`None`). A
    /// newly marked entry's files become the least recently used, so eviction takes them
    /// first.
    pub fn mark_incompatible(
        &mut self,
        model: &str,
        why: Option<String>,
    ) -> Result<(), ClientError> {
        self.update(|index| {
            let Some(entry) = index.models.get_mut(model) else {
                return;
            };
            let was = entry.incompatible.as_ref().map(|i| i.why.clone());
            if was == why {
                return;
            }
            entry.incompatible = why.map(|why| Incompatible {
                why,
                reported: false,
            });
            if entry.incompatible.is_some() {
                let files: Vec<Sha256Digest> = std::iter::once(entry.sha256)
                    .chain(entry.data.iter().copied())
                    .collect();
                for d in files {
                    if let Some(b) = index.blobs.get_mut(&d.to_hex()) {
                        b.last_used = 0;
                    }
                }
            }
        })
    }

    /// Entries marked incompatible that telemetry has not reported yet; marks them reported.
    pub fn take_unreported_incompatible(
        &mut self,
    ) -> Result<Vec<(String, ModelEntry)>, ClientError> {
        let pending = self
            .index
            .models
            .values()
            .any(|e| e.incompatible.as_ref().is_some_and(|i| !i.reported));
        if !pending {
            return Ok(Vec::new());
        }
        // Taken under the lock, so one process reports each entry.
        self.update(|index| {
            let mut out = Vec::new();
            for (model, entry) in &mut index.models {
                if let Some(i) = &mut entry.incompatible
                    && !i.reported
                {
                    i.reported = true;
                    out.push((model.clone(), entry.clone()));
                }
            }
            out
        })
    }

    /// Every model with a last known good variant.
    pub fn models(&self) -> impl Iterator<Item = (&String, &ModelEntry)> {
        self.index.models.iter()
    }

    /// The newest decision accepted for `model`: its keyring version and sequence (zeros if
    /// none).
    pub fn last_sequence(&self, model: &str) -> (u64, u64) {
        (
            self.index
                .sequence_keyrings
                .get(model)
                .copied()
                .unwrap_or(0),
            self.index.sequences.get(model).copied().unwrap_or(0),
        )
    }

    /// Records an accepted decision's keyring version and sequence for `model` (keeps the
    /// newest: higher keyring version first, then higher sequence).
    pub fn record_sequence(
        &mut self,
        model: &str,
        keyring: u64,
        seq: u64,
    ) -> Result<(), ClientError> {
        if (keyring, seq) <= self.last_sequence(model) {
            return Ok(());
        }
        // Kept the newest against what other processes recorded too.
        self.update(|i| {
            let held = (
                i.sequence_keyrings.get(model).copied().unwrap_or(0),
                i.sequences.get(model).copied().unwrap_or(0),
            );
            if (keyring, seq) > held {
                i.sequences.insert(model.to_string(), seq);
                i.sequence_keyrings.insert(model.to_string(), keyring);
            }
        })
    }

    /// The newest revocation list kept for `model`, with the keyring version it was verified
    /// under.
    pub fn revocations(&self, model: &str) -> Option<(&Envelope, u64)> {
        self.index.revocations.get(model).map(|e| {
            (
                e,
                self.index
                    .revocation_keyrings
                    .get(model)
                    .copied()
                    .unwrap_or(0),
            )
        })
    }

    /// Keeps `env` as `model`'s revocation list, verified under keyring version `keyring`
    /// (the caller checked that it replaces the one kept).
    pub fn record_revocations(
        &mut self,
        model: &str,
        env: Envelope,
        keyring: u64,
    ) -> Result<(), ClientError> {
        if self.index.revocations.get(model) == Some(&env) {
            return Ok(());
        }
        self.update(|i| {
            i.revocations.insert(model.to_string(), env);
            i.revocation_keyrings.insert(model.to_string(), keyring);
        })
    }

    /// The signed release envelope kept under `digest` (the SHA-256 of its bytes as served),
    /// if present and intact.
    pub fn release(&self, digest: &Sha256Digest) -> Option<Envelope> {
        let path = self.release_path(digest);
        let bytes = std::fs::read(path).ok()?;
        if Sha256Digest::of(&bytes) != *digest {
            return None;
        }
        serde_json::from_slice(&bytes).ok()
    }

    /// Keeps a release envelope's bytes under their digest (the caller checked it against a
    /// verified decision). At most [`MAX_RELEASES`] are kept: the least recently written go
    /// first, except those the models' last known good entries name.
    pub fn keep_release(&self, digest: &Sha256Digest, bytes: &[u8]) -> Result<(), ClientError> {
        let path = self.release_path(digest);
        let dir = self.root.join("releases/sha256");
        std::fs::create_dir_all(&dir).map_err(|e| ClientError::io(&dir, e))?;
        write_durable(&path, bytes)?;
        let mut kept: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                    .map(|e| {
                        let at = e
                            .metadata()
                            .and_then(|m| m.modified())
                            .unwrap_or(std::time::UNIX_EPOCH);
                        (at, e.path())
                    })
                    .collect()
            })
            .unwrap_or_default();
        if kept.len() > MAX_RELEASES {
            let pinned: BTreeSet<String> = self
                .index
                .models
                .values()
                .filter_map(|m| serde_json::to_vec(&m.release_envelope).ok())
                .map(|b| format!("{}.json", Sha256Digest::of(&b).to_hex()))
                .collect();
            kept.sort();
            let excess = kept.len() - MAX_RELEASES;
            for (_, p) in kept.into_iter().take(excess) {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if !pinned.contains(&name) && p != path {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
        Ok(())
    }

    fn release_path(&self, digest: &Sha256Digest) -> PathBuf {
        self.root
            .join("releases/sha256")
            .join(format!("{}.json", digest.to_hex()))
    }

    /// The keyrings accepted so far, oldest first.
    pub fn keyrings(&self) -> &[Envelope] {
        &self.index.keyrings
    }

    /// Keeps `chain` (keyrings just accepted, oldest first) for the next start.
    pub fn record_keyrings(&mut self, chain: Vec<Envelope>) -> Result<(), ClientError> {
        if chain != self.index.keyrings {
            // A copy beside the index, so that a lost index does not lose the keys the cached
            // releases were signed with (the chain is walked from the pinned root again).
            let copy =
                serde_json::to_vec(&chain).map_err(|e| ClientError::Config(e.to_string()))?;
            write_durable(&self.root.join(KEYRINGS_FILE), &copy)?;
            self.update(|i| i.keyrings = chain)?;
        }
        Ok(())
    }
}
