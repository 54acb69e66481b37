//! Opening the cache: repairing what a crash left (stray staging files, an unreadable or
//! missing index, entries whose files vanished) under the index lock.

use std::collections::BTreeSet;
use std::path::Path;

use ferry_shared::trust::dsse::Envelope;

use super::{BlobEntry, Cache, Index, KEYRINGS_FILE, MAX_KEYRINGS_BYTES, STALE_STAGING};
use crate::error::ClientError;

/// Whether a staging file was left long enough ago that no live write can own it.
fn stale(e: &std::fs::DirEntry) -> bool {
    e.metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age >= STALE_STAGING)
}

/// What [`Cache::open`] had to repair.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Temporary files removed.
    pub removed_temp: usize,
    /// The index was unreadable and was rebuilt.
    pub rebuilt_index: bool,
    /// Index entries dropped because their blob was missing.
    pub dropped_entries: usize,
    /// There was no index although the cache holds files (it was deleted).
    pub index_missing: bool,
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Cache {
    /// Opens (creating) a cache at `root` with a byte budget, repairing what a crash left.
    pub fn open(root: &Path, budget: u64) -> Result<(Cache, Recovery), ClientError> {
        let blobs = root.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).map_err(|e| ClientError::io(&blobs, e))?;
        let locks = root.join("locks");
        std::fs::create_dir_all(&locks).map_err(|e| ClientError::io(&locks, e))?;
        // Repairs happen under the index lock, so no other process writes the index meanwhile.
        let _lock = crate::cache::locks::exclusive(&root.join(".lock"))?;
        let mut rec = Recovery::default();
        for dir in [
            root.to_path_buf(),
            blobs.clone(),
            root.join("releases/sha256"),
            root.join("chunks"),
        ] {
            if let Ok(rd) = std::fs::read_dir(&dir) {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    // `.tmp-` is how clients before ferry-fs named their staging files.
                    // Only old ones: a younger one may be another process's write in flight.
                    if (ferry_fs::is_staging_name(&name)
                        || (name.starts_with('.') && name.contains(".tmp-"))
                        || (name.ends_with(".part") && name.matches('.').count() > 1))
                        && stale(&e)
                    {
                        let _ = std::fs::remove_file(e.path());
                        rec.removed_temp += 1;
                    }
                }
            }
        }
        let index_path = root.join("index.json");
        let mut index = match std::fs::read(&index_path) {
            Ok(bytes) => match serde_json::from_slice::<Index>(&bytes) {
                Ok(i) => i,
                Err(_) => {
                    let _ = std::fs::rename(&index_path, root.join("index.json.corrupt"));
                    rec.rebuilt_index = true;
                    Index::default()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                rec.index_missing = std::fs::read_dir(root.join("releases/sha256"))
                    .is_ok_and(|mut d| d.next().is_some());
                Index::default()
            }
            Err(e) => return Err(ClientError::io(&index_path, e)),
        };
        // What the file held: written back only when opening changed it (most starts change
        // nothing and need no write, nor its two fsyncs).
        let as_read = index.clone();
        index.version = 1;
        // A lost index: the keyring chain from its copy (walked from the pinned root again
        // before any use).
        if index.keyrings.is_empty() {
            use std::io::Read as _;
            let mut bytes = Vec::new();
            let read = std::fs::File::open(root.join(KEYRINGS_FILE))
                .and_then(|f| f.take(MAX_KEYRINGS_BYTES).read_to_end(&mut bytes));
            if read.is_ok()
                && let Ok(chain) = serde_json::from_slice::<Vec<Envelope>>(&bytes)
            {
                index.keyrings = chain;
            }
        }
        // Blobs on disk that the index does not know (a crash between rename and index write).
        if let Ok(rd) = std::fs::read_dir(&blobs) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if is_hex64(&name) && !index.blobs.contains_key(&name) {
                    let size = e.metadata().map(|m| m.len()).unwrap_or(0);
                    index.blobs.insert(
                        name,
                        BlobEntry {
                            size,
                            last_used: 0,
                            checked: None,
                        },
                    );
                }
            }
        }
        let before = index.blobs.len() + index.models.len();
        index.blobs.retain(|hex, _| blobs.join(hex).is_file());
        let present: BTreeSet<String> = index.blobs.keys().cloned().collect();
        index.models.retain(|_, m| {
            std::iter::once(&m.sha256)
                .chain(&m.data)
                .all(|d| present.contains(&d.to_hex()))
        });
        rec.dropped_entries = before - index.blobs.len() - index.models.len();
        let mut cache = Cache {
            root: root.to_path_buf(),
            budget,
            index,
            stamp: None,
            corrupt: Vec::new(),
            reverify_after: super::REVERIFY_AFTER,
        };
        if cache.index == as_read && index_path.is_file() {
            cache.stamp = super::stamp_of(&index_path);
        } else {
            cache.save()?;
        }
        Ok((cache, rec))
    }
}
