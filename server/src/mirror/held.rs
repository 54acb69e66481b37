//! What a site mirror holds: content-addressed files (blobs, and signed release manifests,
//! which are named by their SHA-256 too), each fetched from the origin once and verified against
//! its digest before any byte of it is served.
//!
//! - One fetch per file: requests for a file the mirror lacks wait for the one fetch running
//!   (a per-digest lock), then serve the verified file.
//! - A fetch streams into `<file>.part`, hashing as it goes; only a file whose SHA-256 is its
//!   name is renamed into place. A fetch that fails leaves nothing the mirror would serve.
//! - Files are checked again whenever they may have changed: the mirror keeps, per file, the
//!   length, inode, modification and change times it had when it was verified, and hashes a
//!   file again before serving it when any of them differ (after a restart, every file once). A
//!   file that no longer hashes to its name is deleted and fetched again: an altered file is
//!   never served.

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ferry_shared::Sha256Digest;
use sha2::{Digest as _, Sha256};

/// What kind of content-addressed file, and so where it lives on the origin and on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A blob: `/v1/blobs/sha256/<hex>`.
    Blob,
    /// A signed release manifest: `/v1/releases/sha256/<hex>`.
    Release,
}

impl Kind {
    /// The route's folder name (`blobs`, `releases`).
    pub fn folder(self) -> &'static str {
        match self {
            Kind::Blob => "blobs",
            Kind::Release => "releases",
        }
    }
}

/// The file-system facts a verification is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    inode: u64,
    modified_ns: i128,
    changed_ns: i128,
}

fn stamp_of(meta: &std::fs::Metadata) -> Stamp {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        Stamp {
            len: meta.len(),
            inode: meta.ino(),
            modified_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            changed_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }
    #[cfg(not(unix))]
    {
        Stamp {
            len: meta.len(),
            inode: 0,
            modified_ns: meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i128),
            changed_ns: 0,
        }
    }
}

/// Why a file could not be had.
#[derive(Debug, thiserror::Error)]
pub enum HeldError {
    /// The origin does not have it (404 or 410).
    #[error("the origin has no {0}")]
    NotAtOrigin(String),
    /// The origin could not be reached or failed (the message says how).
    #[error("the origin is unreachable: {0}")]
    Unreachable(String),
    /// The origin sent bytes that do not hash to the name, or more than the bound.
    #[error("the origin sent a wrong file: {0}")]
    Wrong(String),
    /// The mirror's disk failed.
    #[error("the mirror's disk: {0}")]
    Disk(String),
}

/// Counts for `GET /v1/admin/mirror` and `/metrics`.
#[derive(Debug, Default)]
pub struct HeldCounts {
    /// Requests served from a file already held.
    pub hits: std::sync::atomic::AtomicU64,
    /// Requests that needed a fetch from the origin.
    pub misses: std::sync::atomic::AtomicU64,
    /// Bytes fetched from the origin (verified or not).
    pub origin_bytes: std::sync::atomic::AtomicU64,
    /// Files found altered on disk (deleted, fetched again).
    pub altered: std::sync::atomic::AtomicU64,
    /// Files deleted to stay within the disk budget (fetched again when asked for).
    pub evicted: std::sync::atomic::AtomicU64,
}

/// What is held, by file: its size and when it was last served (a counter), for the totals
/// and for evicting the file served longest ago when the disk budget is passed.
#[derive(Debug, Default)]
struct Usage {
    tick: u64,
    files: HashMap<(Kind, Sha256Digest), (u64, u64)>,
    total: u64,
}

impl Usage {
    fn touch(&mut self, file: (Kind, Sha256Digest), size: u64) {
        self.tick += 1;
        if let Some((old, _)) = self.files.insert(file, (size, self.tick)) {
            self.total = self.total.saturating_sub(old);
        }
        self.total += size;
    }

    fn forget(&mut self, file: &(Kind, Sha256Digest)) {
        if let Some((size, _)) = self.files.remove(file) {
            self.total = self.total.saturating_sub(size);
        }
    }
}

/// The lock one file's fetch holds: requests for that file wait on it.
type FetchLock = Arc<tokio::sync::Mutex<()>>;

/// The files a mirror holds under its folder.
#[derive(Debug)]
pub struct Held {
    root: PathBuf,
    origin: String,
    agent: ureq::Agent,
    max_bytes: u64,
    verified: Mutex<HashMap<(Kind, Sha256Digest), Stamp>>,
    fetching: Mutex<HashMap<(Kind, Sha256Digest), FetchLock>>,
    usage: Mutex<Usage>,
    budget: Option<u64>,
    /// Hits, misses, bytes from the origin, altered and evicted files.
    pub counts: HeldCounts,
}

impl Held {
    /// Files under `root`, fetched from `origin` (a base URL) with `agent`, each at most
    /// `max_bytes`, all together at most `budget` (when set: the files served longest ago go
    /// first). What a previous run left is counted, oldest first by modification time.
    pub fn new(
        root: &Path,
        origin: &str,
        agent: ureq::Agent,
        max_bytes: u64,
        budget: Option<u64>,
    ) -> Self {
        let mut found = Vec::new();
        for kind in [Kind::Blob, Kind::Release] {
            let dir = root.join(kind.folder()).join("sha256");
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if let (Ok(d), Ok(m)) = (
                    Sha256Digest::from_hex(&e.file_name().to_string_lossy()),
                    e.metadata(),
                ) {
                    found.push((m.modified().ok(), (kind, d), m.len()));
                }
            }
        }
        found.sort_by_key(|(t, _, _)| *t);
        let mut usage = Usage::default();
        for (_, file, size) in found {
            usage.touch(file, size);
        }
        Held {
            root: root.to_path_buf(),
            origin: origin.trim_end_matches('/').to_string(),
            agent,
            max_bytes,
            verified: Mutex::new(HashMap::new()),
            fetching: Mutex::new(HashMap::new()),
            usage: Mutex::new(usage),
            budget,
            counts: HeldCounts::default(),
        }
    }

    /// Notes that `file` (of `size` bytes) was served now.
    fn used(&self, file: (Kind, Sha256Digest), size: u64) {
        ferry_shared::sync::lock(&self.usage).touch(file, size);
    }

    /// Deletes the files served longest ago (never `keep`) until the total is within the
    /// budget. A file being served stays readable to that answer (it holds it open).
    fn evict(&self, keep: (Kind, Sha256Digest)) {
        let Some(budget) = self.budget else {
            return;
        };
        let mut usage = ferry_shared::sync::lock(&self.usage);
        while usage.total > budget {
            let Some(oldest) = usage
                .files
                .iter()
                .filter(|(f, _)| **f != keep)
                .min_by_key(|(_, (_, last))| *last)
                .map(|(f, _)| *f)
            else {
                break;
            };
            let _ = std::fs::remove_file(self.path(oldest.0, &oldest.1));
            ferry_shared::sync::lock(&self.verified).remove(&oldest);
            usage.forget(&oldest);
            self.counts
                .evicted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Where file `digest` of `kind` is kept.
    pub fn path(&self, kind: Kind, digest: &Sha256Digest) -> PathBuf {
        self.root
            .join(kind.folder())
            .join("sha256")
            .join(digest.to_hex())
    }

    /// The disk budget, when there is one.
    pub fn budget(&self) -> Option<u64> {
        self.budget
    }

    /// The number of files and bytes held.
    pub fn totals(&self) -> (u64, u64) {
        let usage = ferry_shared::sync::lock(&self.usage);
        (usage.files.len() as u64, usage.total)
    }

    /// The path of file `digest`, verified: held already (checked again if it may have
    /// changed), or fetched from the origin now (once, however many ask at the same time).
    pub async fn ensure(
        self: &Arc<Self>,
        kind: Kind,
        digest: Sha256Digest,
    ) -> Result<PathBuf, HeldError> {
        let path = self.path(kind, &digest);
        if let Some(size) = self.still_verified(kind, &digest, &path) {
            self.hit(kind, digest, size);
            return Ok(path);
        }
        let lock = {
            let mut f = ferry_shared::sync::lock(&self.fetching);
            f.entry((kind, digest)).or_default().clone()
        };
        let _one = lock.lock().await;
        if let Some(size) = self.still_verified(kind, &digest, &path) {
            self.hit(kind, digest, size);
            return Ok(path);
        }
        let me = self.clone();
        // The fetch runs to its end even if the request that started it goes away, and then
        // lets go of its lock entry.
        tokio::task::spawn_blocking(move || {
            let got = me.check_or_fetch(kind, digest);
            ferry_shared::sync::lock(&me.fetching).remove(&(kind, digest));
            got
        })
        .await
        .map_err(|e| HeldError::Disk(e.to_string()))?
    }

    /// A request served from the file held (`size` bytes).
    fn hit(&self, kind: Kind, digest: Sha256Digest, size: u64) {
        self.counts
            .hits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.used((kind, digest), size);
    }

    /// True when `meta` (of a file just opened) is what file `digest` was verified as: the
    /// opened file is the verified one.
    pub fn is_verified(&self, kind: Kind, digest: &Sha256Digest, meta: &std::fs::Metadata) -> bool {
        ferry_shared::sync::lock(&self.verified)
            .get(&(kind, *digest))
            .is_some_and(|s| *s == stamp_of(meta))
    }

    /// The file's size when it is there with the stamp it was verified with.
    fn still_verified(&self, kind: Kind, digest: &Sha256Digest, path: &Path) -> Option<u64> {
        let meta = std::fs::metadata(path).ok()?;
        ferry_shared::sync::lock(&self.verified)
            .get(&(kind, *digest))
            .is_some_and(|s| *s == stamp_of(&meta))
            .then_some(meta.len())
    }

    /// On the blocking pool, under the file's lock: hashes a file that is there but not (or no
    /// longer) known good, deleting it when it does not match; fetches it when it is not there.
    fn check_or_fetch(&self, kind: Kind, digest: Sha256Digest) -> Result<PathBuf, HeldError> {
        let path = self.path(kind, &digest);
        if path.exists() {
            match hash_file(&path) {
                Ok((d, stamp)) if d == digest => {
                    ferry_shared::sync::lock(&self.verified).insert((kind, digest), stamp);
                    self.hit(kind, digest, stamp.len);
                    return Ok(path);
                }
                _ => {
                    tracing::warn!(
                        file = %path.display(),
                        "a held file no longer hashes to its name: deleted, fetched again"
                    );
                    self.counts
                        .altered
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    ferry_shared::sync::lock(&self.verified).remove(&(kind, digest));
                    ferry_shared::sync::lock(&self.usage).forget(&(kind, digest));
                    std::fs::remove_file(&path).map_err(|e| HeldError::Disk(e.to_string()))?;
                }
            }
        }
        self.counts
            .misses
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.fetch(kind, digest, &path)?;
        Ok(path)
    }

    /// Fetches the file from the origin into `<path>.part`, checks it, renames it into place.
    fn fetch(&self, kind: Kind, digest: Sha256Digest, path: &Path) -> Result<(), HeldError> {
        let disk = |e: std::io::Error| HeldError::Disk(e.to_string());
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(disk)?;
        let url = format!(
            "{}/v1/{}/sha256/{}",
            self.origin,
            kind.folder(),
            digest.to_hex()
        );
        let mut resp = self
            .agent
            .get(&url)
            .call()
            .map_err(|e| HeldError::Unreachable(format!("{url}: {e}")))?;
        match resp.status().as_u16() {
            200 => {}
            404 | 410 => return Err(HeldError::NotAtOrigin(format!("{digest}"))),
            s => return Err(HeldError::Unreachable(format!("{url}: HTTP {s}"))),
        }
        let part = path.with_extension("part");
        let mut file = std::fs::File::create(&part).map_err(disk)?;
        let mut reader = resp
            .body_mut()
            .with_config()
            .limit(self.max_bytes.saturating_add(1))
            .reader();
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 << 10];
        let mut total = 0u64;
        let copied: Result<(), HeldError> = loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => n,
                Err(e) => break Err(HeldError::Unreachable(format!("{url}: {e}"))),
            };
            total += n as u64;
            self.counts
                .origin_bytes
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            if total > self.max_bytes {
                break Err(HeldError::Wrong(format!(
                    "{url} sent more than {} bytes",
                    self.max_bytes
                )));
            }
            hasher.update(&buf[..n]);
            if let Err(e) = file.write_all(&buf[..n]) {
                break Err(disk(e));
            }
        };
        let finished = copied.and_then(|()| file.sync_all().map_err(disk));
        drop(file);
        let got = Sha256Digest::from_bytes(hasher.finalize().into());
        let outcome = finished.and_then(|()| {
            if got == digest {
                Ok(())
            } else {
                Err(HeldError::Wrong(format!(
                    "{url} sent {total} bytes hashing to {got}"
                )))
            }
        });
        if let Err(e) = outcome {
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
        std::fs::rename(&part, path).map_err(disk)?;
        let meta = std::fs::metadata(path).map_err(disk)?;
        ferry_shared::sync::lock(&self.verified).insert((kind, digest), stamp_of(&meta));
        self.used((kind, digest), meta.len());
        self.evict((kind, digest));
        Ok(())
    }
}

/// The SHA-256 of the file at `path` and the stamp it had when read.
fn hash_file(path: &Path) -> std::io::Result<(Sha256Digest, Stamp)> {
    let mut f = std::fs::File::open(path)?;
    let before = stamp_of(&f.metadata()?);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok((Sha256Digest::from_bytes(hasher.finalize().into()), before))
}
