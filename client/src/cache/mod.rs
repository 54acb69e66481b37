//! The content-addressed on-disk cache.
//!
//! ```text
//! <root>/blobs/sha256/<hex>          verified .pte bytes (only ever renamed in complete)
//! <root>/blobs/sha256/<hex>.part     a download in flight (resumed after a crash)
//! <root>/releases/sha256/<hex>.json  signed release envelopes, by the digest of their bytes
//! <root>/index.json                  which release/variant each model uses, LRU stamps
//! <root>/keyrings.json               a copy of the accepted keyring chain (for a lost index)
//! <root>/telemetry/queue.ndjson      queued telemetry events
//! <root>/flights/<random>.flight     the flight recorder's slots (crate::crash::flight)
//! <root>/crashes.json                variants that crashed this app (crate::crash::ledger)
//! ```
//!
//! Every file is written with [`write_durable`] (temporary file, fsync, rename, folder fsync),
//! so a crash at any point leaves the old or the new version. On open, stray temporary files
//! older than [`STALE_STAGING`] are removed, a corrupt index is set aside and rebuilt from the
//! blobs on disk, and index entries whose blob vanished are dropped. Eviction
//! ([`Cache::evict`]) is LRU under a byte budget and never removes a blob in use (in any
//! process) or a model's last known good variant.
//!
//! Several processes may share one cache (see [`crate::cache::locks`]): every change to the index is
//! a read-modify-write under the exclusive lock on `<root>/.lock`, and a process re-reads the
//! index whenever another one changed it, so no process's change is lost.

pub(crate) mod cached;
pub(crate) mod check;
mod heal;
pub(crate) mod in_use;
pub mod locks;
mod open;

pub use open::Recovery;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ferry_shared::Sha256Digest;
use ferry_shared::trust::dsse::Envelope;
use serde::{Deserialize, Serialize};

use crate::error::ClientError;

/// Staging files younger than this may belong to another process's write in flight and are
/// left alone when a cache is opened.
pub const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(600);

/// The copy of the accepted keyring chain kept beside the index (see
/// `Cache::record_keyrings`).
pub(crate) const KEYRINGS_FILE: &str = "keyrings.json";

/// The largest keyring chain copy read.
const MAX_KEYRINGS_BYTES: u64 = 1 << 20;

/// Most signed release manifests kept in `<root>/releases/sha256/`.
pub const MAX_RELEASES: usize = 64;

/// Writes `bytes` to `path` atomically and durably (see [`ferry_fs::write`]).
pub fn write_durable(path: &Path, bytes: &[u8]) -> Result<(), ClientError> {
    ferry_fs::write(path, bytes, ferry_fs::Mode::Public).map_err(|e| ClientError::io(path, e))
}

/// What the cache remembers about a model: its last known good variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelEntry {
    /// Release version.
    pub release: String,
    /// Variant id.
    pub variant: String,
    /// Delegate.
    pub delegate: String,
    /// Blob digest.
    pub sha256: Sha256Digest,
    /// Blob size.
    pub size: u64,
    /// Digests of the variant's data files (`.ptd`), kept with the program.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<Sha256Digest>,
    /// The signed release envelope, re-verified before any offline use.
    pub release_envelope: Envelope,
    /// Set when an app or runtime update left the entry outside its signed constraints: it is
    /// not loaded, no longer protected from eviction, and reported once in telemetry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incompatible: Option<Incompatible>,
    /// The receipt of the resolve answer it was chosen from, so that the crash of a load from
    /// the cache alone still counts on the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
}

/// Why a cached entry no longer fits the app (see [`ModelEntry::incompatible`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incompatible {
    /// Each signed constraint that no longer holds, with both values.
    pub why: String,
    /// Whether telemetry reported it already.
    pub reported: bool,
}

impl ModelEntry {
    /// Whether the entry needs the blob `d` (its program or one of its data files).
    pub fn uses(&self, d: &Sha256Digest) -> bool {
        self.sha256 == *d || self.data.contains(d)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct BlobEntry {
    size: u64,
    last_used: u64,
    /// When the file last matched its digest, and how a load checks it without hashing it
    /// whole (see `check.rs`). Absent: the next load hashes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checked: Option<check::Checked>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Index {
    version: u32,
    clock: u64,
    #[serde(default)]
    models: BTreeMap<String, ModelEntry>,
    #[serde(default)]
    blobs: BTreeMap<String, BlobEntry>,
    #[serde(default)]
    sequences: BTreeMap<String, u64>,
    /// The keyring version each recorded sequence belongs to (absent: 0).
    #[serde(default)]
    sequence_keyrings: BTreeMap<String, u64>,
    /// Keyring versions accepted so far, oldest first (walked again from the pinned root when
    /// the client starts).
    #[serde(default)]
    keyrings: Vec<Envelope>,
    /// The newest revocation list verified per model.
    #[serde(default)]
    revocations: BTreeMap<String, Envelope>,
    /// The keyring version under which each kept revocation list was verified.
    #[serde(default)]
    revocation_keyrings: BTreeMap<String, u64>,
    /// The app and runtime versions the entries were last checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seen_versions: Option<(String, String)>,
}

/// A cached blob whose bytes matched a signed digest and size when the cache handed it out.
/// Only the cache makes one (after hashing the file, or after a download that hashed every
/// byte), so a [`Runtime`](crate::Runtime) given a `VerifiedBlob` is given checked bytes. A
/// program's blob carries its data files (`.ptd`), verified the same way, when it has any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedBlob {
    path: PathBuf,
    sha256: Sha256Digest,
    size: u64,
    data: Vec<VerifiedBlob>,
    assets: Vec<VerifiedBlob>,
    /// Trusted by its stamp and head, its last full hash older than the client's
    /// `reverify_after`: the background pass hashes it after the load.
    recheck: bool,
    /// Trusted by its stamp and head, not hashed whole for this load: a runtime failure on it
    /// has it hashed whole at once (`recheck.rs`).
    by_stamp: bool,
    /// A shared lock on the file while any copy of this value lives: no process evicts a blob
    /// another one holds.
    held: Held,
}

/// A shared lock on a blob file, shared by the clones of a [`VerifiedBlob`].
#[derive(Debug, Clone, Default)]
struct Held {
    _lock: Option<std::sync::Arc<crate::cache::locks::FileLock>>,
}

impl PartialEq for Held {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Held {}

impl VerifiedBlob {
    /// The file in the cache.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The digest the bytes matched.
    pub fn sha256(&self) -> &Sha256Digest {
        &self.sha256
    }

    /// The size the file had.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The program's data files (`.ptd`), in the signed manifest's order; empty for a program
    /// that keeps all its tensors inside.
    pub fn data_files(&self) -> &[VerifiedBlob] {
        &self.data
    }

    /// The program's assets (files the app reads: labels, a tokenizer), in the signed
    /// manifest's order.
    pub fn assets(&self) -> &[VerifiedBlob] {
        &self.assets
    }

    /// The open file this value holds locked (the one that was checked), when it holds one.
    pub(crate) fn file(&self) -> Option<&std::fs::File> {
        self.held._lock.as_ref().map(|l| l.file())
    }

    /// This file and its side files that are due a background hash (see `check.rs`).
    pub(crate) fn due_for_recheck(&self) -> Vec<VerifiedBlob> {
        self.files_where(true, |b| b.recheck)
    }

    /// This file, its data files and (with `assets`) its assets that `keep` keeps, each alone.
    fn files_where(&self, assets: bool, keep: impl Fn(&VerifiedBlob) -> bool) -> Vec<VerifiedBlob> {
        let side = if assets { &self.assets[..] } else { &[] };
        std::iter::once(self)
            .chain(&self.data)
            .chain(side)
            .filter(|b| keep(b))
            .map(|b| VerifiedBlob {
                data: Vec::new(),
                assets: Vec::new(),
                ..b.clone()
            })
            .collect()
    }

    /// This program and its data files (what the runtime reads) that were trusted by their
    /// stamp for this load, not hashed whole.
    pub(crate) fn trusted_by_stamp(&self) -> Vec<VerifiedBlob> {
        self.files_where(false, |b| b.by_stamp)
    }

    /// This program with its verified data files and assets.
    pub(crate) fn with_side_files(
        mut self,
        data: Vec<VerifiedBlob>,
        assets: Vec<VerifiedBlob>,
    ) -> Self {
        self.data = data;
        self.assets = assets;
        self
    }
}

/// The cache.
#[derive(Debug)]
pub struct Cache {
    root: PathBuf,
    budget: u64,
    index: Index,
    /// The index file as this process last read or wrote it (size, modification time,
    /// inode): when the file no longer matches, another process changed it.
    stamp: Option<(u64, std::time::SystemTime, u64)>,
    /// Files found corrupt (and removed) since telemetry last took them ([`Cache::take_corrupt_of`]).
    corrupt: Vec<Sha256Digest>,
    /// How old a file's last full hash may be before a load that trusted its stamp has it
    /// hashed again in the background.
    reverify_after: std::time::Duration,
}

/// The default of `ClientBuilder::reverify_after`: a day.
pub const REVERIFY_AFTER: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

impl Index {
    fn touch(&mut self, d: &Sha256Digest, size: u64) {
        self.clock += 1;
        let clock = self.clock;
        let e = self.blobs.entry(d.to_hex()).or_default();
        e.size = size;
        e.last_used = clock;
    }
}

/// The index file's identity now (see [`Cache::stamp`]).
fn stamp_of(path: &Path) -> Option<(u64, std::time::SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let ino = 0;
    Some((m.len(), m.modified().ok()?, ino))
}

impl Cache {
    /// The cache's root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Writes the index (the caller holds the index lock).
    fn save(&mut self) -> Result<(), ClientError> {
        let path = self.root.join("index.json");
        let bytes = serde_json::to_vec_pretty(&self.index).map_err(|e| ClientError::CacheIo {
            path: path.clone(),
            message: e.to_string(),
        })?;
        write_durable(&path, &bytes)?;
        self.stamp = stamp_of(&path);
        Ok(())
    }

    /// Reads the index again when another process changed it since this one last did, or
    /// always with `force` (the caller holds the index lock, shared or exclusive). An
    /// unreadable file keeps what this process holds.
    fn reload(&mut self, force: bool) {
        let path = self.root.join("index.json");
        let now = stamp_of(&path);
        if now.is_none() || (!force && now == self.stamp) {
            return;
        }
        if let Ok(bytes) = std::fs::read(&path)
            && let Ok(index) = serde_json::from_slice::<Index>(&bytes)
        {
            self.index = index;
            self.stamp = now;
        }
    }

    /// Takes up what other processes changed in the index since this one last read it.
    pub fn refresh(&mut self) -> Result<(), ClientError> {
        if stamp_of(&self.root.join("index.json")) == self.stamp {
            return Ok(());
        }
        let _lock = crate::cache::locks::shared(&self.root.join(".lock"))?;
        self.reload(false);
        Ok(())
    }

    /// Changes the index as one read-modify-write under the exclusive index lock: the newest
    /// index on disk (another process's changes included), `change`, then a durable write.
    fn update<R>(&mut self, change: impl FnOnce(&mut Index) -> R) -> Result<R, ClientError> {
        let _lock = crate::cache::locks::exclusive(&self.root.join(".lock"))?;
        // Always read under the lock: a rewrite of equal size within the file system's time
        // resolution would look unchanged, and this change must not undo it.
        self.reload(true);
        let out = change(&mut self.index);
        self.save()?;
        Ok(out)
    }

    /// Where a verified blob lives.
    pub fn blob_path(&self, d: &Sha256Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(d.to_hex())
    }

    /// The lock file that the process downloading blob `d` holds.
    /// (In a folder of their own, so the blob folder holds only blobs and downloads.)
    pub(crate) fn download_lock_path(&self, d: &Sha256Digest) -> PathBuf {
        self.root.join("locks").join(format!("{}.lock", d.to_hex()))
    }

    /// Where this process downloads blob `d` when another process kept its download lock
    /// longer than it would wait (a file of its own, so the two never write one file).
    pub(crate) fn private_part_path(&self, d: &Sha256Digest) -> PathBuf {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.root.join("blobs/sha256").join(format!(
            "{}.{}-{n}.part",
            d.to_hex(),
            std::process::id()
        ))
    }

    /// Where a download in flight lives.
    pub fn part_path(&self, d: &Sha256Digest) -> PathBuf {
        self.root
            .join("blobs/sha256")
            .join(format!("{}.part", d.to_hex()))
    }

    /// Moves `part`, a completed download whose bytes were hashed against the signed digest
    /// and size, into place as the blob `d` and records it.
    pub(crate) fn commit_file(
        &mut self,
        part: &Path,
        d: &Sha256Digest,
        size: u64,
    ) -> Result<VerifiedBlob, ClientError> {
        let dest = self.blob_path(d);
        // Another process may have committed the same file meanwhile (it waited no longer, or
        // finished first): its file stays, so the shared locks others hold on it keep guarding
        // the file its path names, and this process's copy goes.
        let held = match crate::cache::locks::shared_existing(&dest)? {
            Some(existing) if existing.file().metadata().map(|m| m.len()).ok() == Some(size) => {
                let _ = std::fs::remove_file(part);
                Some(existing)
            }
            _ => {
                ferry_fs::commit(part, &dest).map_err(|e| ClientError::io(&dest, e))?;
                crate::cache::locks::shared_existing(&dest)?
            }
        };
        // Its stamp and head now, so that later loads need not hash it whole.
        let checked = held.as_ref().and_then(|l| {
            let stamp = check::Stamp::of(l.file()).ok()?;
            let head = check::head_of(l.file(), size).ok()?;
            Some(check::Checked {
                stamp,
                head,
                hashed_at: check::now_secs(),
            })
        });
        self.update(|i| {
            i.touch(d, size);
            if let Some(e) = i.blobs.get_mut(&d.to_hex()) {
                e.checked = checked;
            }
        })?;
        Ok(VerifiedBlob {
            path: dest,
            sha256: *d,
            size,
            data: Vec::new(),
            assets: Vec::new(),
            recheck: false,
            by_stamp: false,
            held: Held {
                _lock: held.map(std::sync::Arc::new),
            },
        })
    }

    /// Bytes of verified blobs in the cache.
    pub fn used_bytes(&self) -> u64 {
        self.index.blobs.values().map(|b| b.size).sum()
    }

    /// Evicts least recently used blobs until the cache fits its budget, never touching
    /// `in_use`, a blob another process holds (a shared lock on the blob file: it has it
    /// loaded), or any model's last known good blob. Returns the digests removed.
    pub fn evict(
        &mut self,
        in_use: &BTreeSet<Sha256Digest>,
    ) -> Result<Vec<Sha256Digest>, ClientError> {
        let budget = self.budget;
        self.evict_below(in_use, budget)
    }

    /// [`Cache::evict`] down to `limit` bytes instead of the budget (to free space for a
    /// download).
    pub(crate) fn evict_below(
        &mut self,
        in_use: &BTreeSet<Sha256Digest>,
        limit: u64,
    ) -> Result<Vec<Sha256Digest>, ClientError> {
        let _lock = crate::cache::locks::exclusive(&self.root.join(".lock"))?;
        self.reload(true);
        // A model's last known good files are kept, unless an app or runtime update left them
        // outside their signed constraints.
        let protected: BTreeSet<String> = self
            .index
            .models
            .values()
            .filter(|m| m.incompatible.is_none())
            .flat_map(|m| std::iter::once(&m.sha256).chain(&m.data))
            .chain(in_use)
            .map(Sha256Digest::to_hex)
            .collect();
        let mut total: u64 = self.index.blobs.values().map(|b| b.size).sum();
        let mut candidates: Vec<(String, u64, u64)> = self
            .index
            .blobs
            .iter()
            .filter(|(k, _)| !protected.contains(*k))
            .map(|(k, v)| (k.clone(), v.size, v.last_used))
            .collect();
        candidates.sort_by_key(|c| c.2);
        let mut removed = Vec::new();
        for (hex, size, _) in candidates {
            if total <= limit {
                break;
            }
            let Ok(d) = Sha256Digest::from_hex(&hex) else {
                continue;
            };
            let path = self.blob_path(&d);
            match crate::cache::locks::try_exclusive_existing(&path)? {
                // Loaded by another process: it stays.
                crate::cache::locks::Exclusive::Held => continue,
                crate::cache::locks::Exclusive::Missing => {}
                crate::cache::locks::Exclusive::Locked(held) => {
                    match std::fs::remove_file(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(ClientError::io(&path, e)),
                    }
                    drop(held);
                }
            }
            self.index.blobs.remove(&hex);
            total = total.saturating_sub(size);
            removed.push(d);
        }
        if !removed.is_empty() {
            self.save()?;
        }
        Ok(removed)
    }
}

/// Pure LRU planning: which blobs to drop (oldest first) so the rest fit `budget`, skipping
/// protected ones. `blobs` yields (key, size, last_used).
pub fn eviction_plan(
    blobs: impl Iterator<Item = (String, u64, u64)>,
    protected: &BTreeSet<String>,
    budget: u64,
) -> Vec<String> {
    let mut all: Vec<(String, u64, u64)> = blobs.collect();
    let mut total: u64 = all.iter().map(|b| b.1).sum();
    all.sort_by_key(|b| b.2);
    let mut out = Vec::new();
    for (key, size, _) in all {
        if total <= budget {
            break;
        }
        if protected.contains(&key) {
            continue;
        }
        total -= size;
        out.push(key);
    }
    out
}

/// SHA-256 of a file.
pub fn hash_file(path: &Path) -> Result<Sha256Digest, ClientError> {
    ferry_fs::sha256_file(path)
        .map(Sha256Digest::from_bytes)
        .map_err(|e| ClientError::io(path, e))
}

mod recheck;
mod records;
mod verify;

#[cfg(test)]
mod tests;
