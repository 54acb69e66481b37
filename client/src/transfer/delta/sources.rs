//! The chunks the cache already holds: the chunk index kept for each cached blob (as fetched,
//! or made once from the blob's bytes), and the lookup of a new file's chunks among them.

use std::collections::{HashMap, HashSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};

use ferry_shared::Sha256Digest;
use ferry_shared::manifest::chunks::{
    CHUNK_AVG, CHUNK_MAX, CHUNK_MIN, CHUNKED_FILE_MIN, Chunk, ChunkIndex, MAX_CHUNK_INDEX_BYTES,
};

/// Format 1's chunker sizes.
fn sizes() -> ferry_fs::ChunkSizes {
    ferry_fs::ChunkSizes {
        min: CHUNK_MIN,
        avg: CHUNK_AVG,
        max: CHUNK_MAX,
    }
}

/// Where the cache keeps the chunk index of blob `d` (made once, from the blob or as fetched).
pub(super) fn memo_path(root: &Path, d: &Sha256Digest) -> PathBuf {
    root.join("chunks").join(format!("{}.json", d.to_hex()))
}

/// Keeps `index` as the chunk index of the cached blob `d` (best effort).
pub(crate) fn remember(root: &Path, d: &Sha256Digest, index: &ChunkIndex) {
    let path = memo_path(root, d);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = ferry_fs::write(&path, &index.to_bytes(), ferry_fs::Mode::Public);
}

/// Forgets the kept chunk index of blob `d` (a chunk it promised was not there): the next
/// delta cuts the blob again.
pub(super) fn forget(root: &Path, d: &Sha256Digest) {
    let _ = std::fs::remove_file(memo_path(root, d));
}

/// The bytes of a kept chunk index: a regular file (not a link, a pipe or a device) of at most
/// [`MAX_CHUNK_INDEX_BYTES`]; `None` otherwise.
fn read_memo(path: &Path) -> Option<Vec<u8>> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = opts.open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_CHUNK_INDEX_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_CHUNK_INDEX_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    (bytes.len() as u64 <= MAX_CHUNK_INDEX_BYTES).then_some(bytes)
}

/// The chunk index of the cached blob at `path` (`size` bytes): the one kept for it, or made
/// now from its bytes and kept.
fn index_of_cached(root: &Path, d: &Sha256Digest, path: &Path, size: u64) -> Option<ChunkIndex> {
    let memo = memo_path(root, d);
    if let Some(bytes) = read_memo(&memo)
        && let Ok(index) = ChunkIndex::parse(&bytes, size)
    {
        return Some(index);
    }
    let pieces = ferry_fs::chunk_file(path, sizes()).ok()?;
    let index = ChunkIndex::new(
        pieces
            .into_iter()
            .map(|(size, d)| Chunk {
                size,
                sha256: Sha256Digest::from_bytes(d),
            })
            .collect(),
    );
    if index.size != size {
        return None;
    }
    remember(root, d, &index);
    Some(index)
}

/// A chunk the cache holds: the file (blob `digest`) and where in it.
#[derive(Debug, Clone)]
pub(super) struct Source {
    pub(super) digest: Sha256Digest,
    pub(super) path: PathBuf,
    pub(super) offset: u64,
}

/// The largest file a client downloads ([`DownloadLimits::max_bytes`] at most): a larger
/// "blob" in the cache is not one, and is not cut into chunks.
const MAX_SOURCE_BYTES: u64 = 16 << 30;

/// Whether the cache holds any blob (besides `target`) large enough to have chunks worth
/// reusing: when not (a first install), the index is not even fetched.
pub(super) fn holds_candidates(root: &Path, target: &Sha256Digest) -> bool {
    std::fs::read_dir(root.join("blobs/sha256"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            Sha256Digest::from_hex(&e.file_name().to_string_lossy()).is_ok_and(|d| d != *target)
                && e.metadata().is_ok_and(|m| m.len() >= CHUNKED_FILE_MIN)
        })
}

/// Every chunk of `wanted` that some cached blob holds (blobs of at least
/// [`CHUNKED_FILE_MIN`] bytes; chunk indexes kept for blobs no longer cached are removed).
pub(super) fn local_sources(
    root: &Path,
    target: &Sha256Digest,
    wanted: &ChunkIndex,
) -> HashMap<Sha256Digest, Source> {
    let needed: HashSet<Sha256Digest> = wanted.chunks.iter().map(|c| c.sha256).collect();
    let mut found = HashMap::new();
    let blobs = root.join("blobs/sha256");
    let Ok(entries) = std::fs::read_dir(&blobs) else {
        return found;
    };
    let mut cached = HashSet::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(d) = Sha256Digest::from_hex(&name) else {
            continue;
        };
        cached.insert(d);
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        if d == *target
            || !(CHUNKED_FILE_MIN..=MAX_SOURCE_BYTES).contains(&size)
            || found.len() == needed.len()
        {
            continue;
        }
        let path = entry.path();
        let Some(index) = index_of_cached(root, &d, &path, size) else {
            continue;
        };
        for (offset, c) in index.with_offsets() {
            if needed.contains(&c.sha256) && !found.contains_key(&c.sha256) {
                found.insert(
                    c.sha256,
                    Source {
                        digest: d,
                        path: path.clone(),
                        offset,
                    },
                );
            }
        }
    }
    if let Ok(memos) = std::fs::read_dir(root.join("chunks")) {
        for memo in memos.flatten() {
            let name = memo.file_name().to_string_lossy().into_owned();
            let stale = name
                .strip_suffix(".json")
                .and_then(|hex| Sha256Digest::from_hex(hex).ok())
                .is_some_and(|d| !cached.contains(&d) && d != *target);
            if stale {
                let _ = std::fs::remove_file(memo.path());
            }
        }
    }
    found
}
