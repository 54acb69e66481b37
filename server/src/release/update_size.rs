//! What a device on the previous release downloads for each variant of a newer one: files it
//! already holds cost nothing; a file with a chunk index costs its index and the chunks the
//! previous release's files do not hold; any other file costs its size. Shown by `ferry
//! releases` and the dashboard (`update_bytes`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use ferry_shared::Sha256Digest;
use ferry_shared::manifest::chunks::{ChunkIndex, ChunkIndexRef};
use ferry_shared::manifest::{ReleaseManifest, Variant};
use object_store::ObjectStoreExt as _;

use crate::storage::{StorageKey, Store};

/// Results kept per pair of releases (releases are immutable, so a result never changes);
/// the map is emptied when it grows past this many pairs.
const KEPT: usize = 4096;

type Key = (Sha256Digest, Sha256Digest);

fn kept() -> &'static Mutex<HashMap<Key, BTreeMap<String, u64>>> {
    static KEPT_RESULTS: OnceLock<Mutex<HashMap<Key, BTreeMap<String, u64>>>> = OnceLock::new();
    KEPT_RESULTS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Every file of a variant: the program, then its data files and assets, each with its size
/// and chunk index.
fn files(v: &Variant) -> impl Iterator<Item = (Sha256Digest, u64, Option<ChunkIndexRef>)> + '_ {
    std::iter::once((v.sha256, v.size, v.chunk_index))
        .chain(v.side_files().map(|f| (f.sha256, f.size, f.chunk_index)))
}

/// Chunk indexes read from the store, each once per computation.
struct Indexes<'a> {
    store: &'a Store,
    read: HashMap<Sha256Digest, Option<Arc<ChunkIndex>>>,
}

impl Indexes<'_> {
    /// The chunk index `r` of a file of `size` bytes (`None` when it cannot be read, is not
    /// the size the manifest signs, or does not fit the file).
    async fn get(&mut self, r: &ChunkIndexRef, size: u64) -> Option<Arc<ChunkIndex>> {
        if let Some(hit) = self.read.get(&r.sha256) {
            return hit.clone();
        }
        let got = read_index(self.store, r, size).await.map(Arc::new);
        self.read.insert(r.sha256, got.clone());
        got
    }

    /// Every chunk of the files of `held`.
    async fn chunks_of(&mut self, held: &[&Variant]) -> HashSet<Sha256Digest> {
        let mut chunks = HashSet::new();
        for (_, s, hr) in held.iter().flat_map(|h| files(h)) {
            if let Some(hr) = hr
                && let Some(i) = self.get(&hr, s).await
            {
                chunks.extend(i.chunks.iter().map(|c| c.sha256));
            }
        }
        chunks
    }
}

/// The chunk index `r` from the store, read only when it has the signed size.
async fn read_index(store: &Store, r: &ChunkIndexRef, size: u64) -> Option<ChunkIndex> {
    let key = StorageKey::blob(&r.sha256);
    if store.head(&key).await.ok()?.size != r.size {
        return None;
    }
    let bytes = store.get(&key).await.ok()?.bytes().await.ok()?;
    (Sha256Digest::of(&bytes) == r.sha256)
        .then(|| ChunkIndex::parse(&bytes, size).ok())
        .flatten()
}

/// Per variant of `new`, the bytes a device holding `old`'s files of the same variant id (or,
/// when `old` has no such variant, all of `old`'s files) downloads to update.
pub async fn update_bytes(
    store: &Store,
    new: &ReleaseManifest,
    old: &ReleaseManifest,
) -> BTreeMap<String, u64> {
    let key = (
        Sha256Digest::of(&new.to_json()),
        Sha256Digest::of(&old.to_json()),
    );
    if let Some(hit) = ferry_shared::sync::lock(kept()).get(&key) {
        return hit.clone();
    }
    let mut indexes = Indexes {
        store,
        read: HashMap::new(),
    };
    // The chunks a device holds, per held set (one variant of `old` by id, or all of them:
    // `None`), made once.
    let mut held_sets: HashMap<Option<&str>, Arc<HashSet<Sha256Digest>>> = HashMap::new();
    let mut out = BTreeMap::new();
    for v in &new.variants {
        let same = old.variant_named(v.id.as_str());
        let held: Vec<&Variant> = match same {
            Some(same) => vec![same],
            None => old.variants.iter().collect(),
        };
        let held_key = same.map(|s| s.id.as_str());
        let held_files: HashSet<Sha256Digest> =
            held.iter().flat_map(|h| files(h).map(|f| f.0)).collect();
        let mut total = 0u64;
        for (digest, size, r) in files(v) {
            if held_files.contains(&digest) {
                continue;
            }
            let Some(r) = r else {
                total += size;
                continue;
            };
            let Some(wanted) = indexes.get(&r, size).await else {
                total += size;
                continue;
            };
            let have = match held_sets.get(&held_key) {
                Some(h) => h.clone(),
                None => {
                    let h = Arc::new(indexes.chunks_of(&held).await);
                    held_sets.insert(held_key, h.clone());
                    h
                }
            };
            let missing: u64 = wanted
                .chunks
                .iter()
                .filter(|c| !have.contains(&c.sha256))
                .map(|c| c.size)
                .sum();
            // A device with none of the chunks downloads the index and then the whole file.
            total += r.size + missing;
        }
        out.insert(v.id.to_string(), total);
    }
    let mut map = ferry_shared::sync::lock(kept());
    if map.len() >= KEPT {
        map.clear();
    }
    map.insert(key, out.clone());
    out
}
