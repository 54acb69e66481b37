//! One candidate's program: its blob (cached, shared with another process, or downloaded within
//! the load's limits), its data files, then the runtime's open, the method's load and the
//! golden check.

use std::sync::Arc;

use ferry_shared::Sha256Digest;
use ferry_shared::manifest::chunks::{ChunkIndex, ChunkIndexRef};

use crate::Client;
use crate::cache::VerifiedBlob;
use crate::error::ClientError;
use crate::policy::LoadOptions;
use crate::transfer::download;
use crate::transfer::sources::{Route, Tally, WholeFetch};
use crate::trust::verify::PlannedVariant;

/// What one load downloaded of a variant's files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Transfer {
    /// Bytes fetched from the server (less than `total` with delta updates).
    pub fetched: u64,
    /// The size of the files that were not cached.
    pub total: u64,
    /// What each blob source did, when the decision listed sources.
    pub sources: Vec<ferry_shared::wire::sources::SourceUse>,
}

/// The length of a partial download (0 when there is none).
pub(crate) fn part_len(part: &std::path::Path) -> u64 {
    std::fs::metadata(part).map(|m| m.len()).unwrap_or(0)
}

impl Client {
    /// Makes sure the variant's verified files (its program, data files and assets) are all in
    /// the cache; returns the program with them and what was downloaded now, if anything.
    /// A download `opts` does not allow is refused before any byte is fetched
    /// (`DownloadDeferred`); `spent` counts the bytes this load fetched so far (for the byte
    /// budget) and grows by what this call fetches. Each file is kept once by its digest, so
    /// a data file another variant or model already brought is not fetched again.
    pub(crate) fn ensure_blob(
        &self,
        model: &str,
        c: &PlannedVariant,
        opts: &LoadOptions,
        spent: &mut u64,
    ) -> Result<(VerifiedBlob, Option<Transfer>), ClientError> {
        let v = &c.variant;
        let data_ids: Vec<String> = v
            .extra_files
            .iter()
            .map(|f| format!("{} data file {}", v.id, f.name))
            .chain(
                v.assets
                    .iter()
                    .map(|f| format!("{} asset {}", v.id, f.name)),
            )
            .collect();
        let mut wanted = vec![download::Wanted::from(v)];
        for (f, id) in v.side_files().zip(&data_ids) {
            wanted.push(download::Wanted {
                id,
                sha256: f.sha256,
                size: f.size,
            });
        }
        let total: u64 = wanted.iter().map(|w| w.size).sum();
        // What is cached and verified, and what still has to come.
        let have = self.cached_files(v.id.as_str(), &wanted, total)?;
        let mut to_fetch = 0u64;
        let mut counted = std::collections::BTreeSet::new();
        for (w, h) in wanted.iter().zip(&have) {
            // A file listed twice (an asset with a data file's bytes) is fetched once.
            if h.is_none() && counted.insert(w.sha256) {
                to_fetch += w
                    .size
                    .saturating_sub(part_len(&self.cache().part_path(&w.sha256)));
            }
        }
        // Over a byte budget whole, an update may fit it as a delta: what that fetches is known
        // from the indexes (fetched now, and used for the deltas) and the cache's chunks.
        let mut budgeted = to_fetch;
        let mut prefetched = std::collections::HashMap::new();
        if to_fetch > 0
            && opts.policy.refusal(0, *spent, &opts.conditions).is_none()
            && opts
                .policy
                .refusal(to_fetch, *spent, &opts.conditions)
                .is_some()
        {
            (budgeted, prefetched) = self.delta_estimate(c, &wanted, &have);
        }
        if to_fetch > 0
            && let Some(reason) = opts.policy.refusal(budgeted, *spent, &opts.conditions)
        {
            return Err(ClientError::DownloadDeferred {
                model: model.to_string(),
                variant: v.id.to_string(),
                reason,
            });
        }
        if to_fetch > 0 {
            self.ensure_space(v.id.as_str(), to_fetch, &wanted)?;
        }
        let indexes: Vec<_> = std::iter::once(v.chunk_index)
            .chain(v.side_files().map(|f| f.chunk_index))
            .collect();
        let mut downloaded: Option<Transfer> = None;
        // Bytes of the variant's files already complete, for one progress count over all.
        let mut done: u64 = wanted
            .iter()
            .zip(&have)
            .filter(|(_, h)| h.is_some())
            .map(|(w, _)| w.size)
            .sum();
        let mut blobs = Vec::with_capacity(wanted.len());
        let mut tally = Tally::default();
        for ((w, h), &index) in wanted.iter().zip(have).zip(&indexes) {
            if let Some(blob) = h {
                blobs.push(blob);
                continue;
            }
            // One process of the app downloads a file into the shared cache; the others wait
            // for it (bounded), then take the finished file or download on their own.
            let lock_path = self.cache().download_lock_path(&w.sha256);
            let lock = crate::cache::locks::exclusive_within(&lock_path, self.limits.shared_wait)?;
            if let Some(blob) = self.cache().verified_blob(&w.sha256, w.size)? {
                done += w.size;
                blobs.push(blob);
                continue;
            }
            let part = if lock.is_some() {
                self.cache().part_path(&w.sha256)
            } else {
                self.cache().private_part_path(&w.sha256)
            };
            let had = part_len(&part);
            let progress: Option<crate::transfer::download::ProgressFn> =
                self.progress.as_ref().map(|p| {
                    let (p, id, offset) = (p.clone(), v.id.to_string(), done);
                    let f: crate::transfer::download::ProgressFn =
                        Arc::new(move |_: &str, n: u64, _: u64| p(&id, offset + n, total));
                    f
                });
            let known = prefetched.remove(&w.sha256);
            let fetched_file = self.fetch_file(
                c,
                w,
                (index, known),
                (&part, had),
                progress.as_ref(),
                &mut tally,
            );
            let (fetched, memo, later) = match fetched_file {
                Ok(got) => got,
                Err(e) => {
                    *spent += part_len(&part).saturating_sub(had);
                    if matches!(e, ClientError::DiskFull { .. }) {
                        // Free what the failed download took; the cache stays as it was.
                        let _ = download::truncate(&part);
                    }
                    return Err(e);
                }
            };
            *spent += fetched;
            done += w.size;
            let t = downloaded.get_or_insert_default();
            t.fetched += fetched;
            t.total += w.size;
            blobs.push(self.cache().commit_file(&part, &w.sha256, w.size)?);
            drop(lock);
            // The file's chunks, kept for a later update: the index fetched for the delta, or
            // after a first download (one small request, once the file is in and unlocked).
            let memo = match (memo, later, index) {
                (Some(m), _, _) => Some(m),
                (None, true, Some(r)) => {
                    let got = crate::transfer::delta::index_for_later(
                        &self.agent,
                        &self.routes(c, &r.sha256),
                        &r,
                        w.size,
                        &self.limits,
                    );
                    if got.is_some() {
                        *spent += r.size;
                        t.fetched += r.size;
                    }
                    got
                }
                _ => None,
            };
            if let Some(m) = memo {
                crate::transfer::delta::remember(self.cache().root(), &w.sha256, &m);
            }
        }
        if let Some(t) = downloaded.as_mut() {
            t.sources = tally.0;
        }
        let mut blobs = blobs.into_iter();
        let program = blobs
            .next()
            .ok_or_else(|| ClientError::DecisionMismatch("no program".into()))?;
        let data: Vec<VerifiedBlob> = blobs.by_ref().take(v.extra_files.len()).collect();
        Ok((program.with_side_files(data, blobs.collect()), downloaded))
    }

    /// Each of `wanted` as it is verified in the cache (`None`: absent, or removed as corrupt),
    /// all marked used in one write of the index. Files hashed whole now report progress on
    /// the variant's one count (`total` bytes), as a download does.
    fn cached_files(
        &self,
        variant: &str,
        wanted: &[download::Wanted<'_>],
        total: u64,
    ) -> Result<Vec<Option<VerifiedBlob>>, ClientError> {
        let mut have: Vec<Option<VerifiedBlob>> = Vec::with_capacity(wanted.len());
        let mut cache = self.cache();
        let mut checked = 0u64;
        for w in wanted {
            have.push(self.check_cached(
                &mut cache,
                variant,
                (&mut checked, total),
                &w.sha256,
                w.size,
            )?);
        }
        let used: Vec<(Sha256Digest, u64)> = wanted
            .iter()
            .zip(&have)
            .filter(|(_, h)| h.is_some())
            .map(|(w, _)| (w.sha256, w.size))
            .collect();
        cache.mark_all_used(&used)?;
        Ok(have)
    }

    /// Downloads file `w` of candidate `c` into `part` (holding `had` bytes already): built
    /// from cached chunks when its release signs a chunk index `index` and the cache holds
    /// some, else whole, from the decision's sources in order (`tally` notes what each did).
    /// Returns the bytes fetched, the file's chunk index to keep with it, and whether there is
    /// none yet (a first install) and it should be fetched afterwards.
    fn fetch_file(
        &self,
        c: &PlannedVariant,
        w: &download::Wanted<'_>,
        (index, prefetched): (Option<ChunkIndexRef>, Option<ChunkIndex>),
        (part, had): (&std::path::Path, u64),
        progress: Option<&download::ProgressFn>,
        tally: &mut Tally,
    ) -> Result<(u64, Option<ChunkIndex>, bool), ClientError> {
        // The same bound as a whole download's, before any byte (a delta writes the file too).
        if w.size > self.limits.max_bytes {
            return Err(ClientError::TooLarge {
                variant: w.id.to_string(),
                size: w.size,
                limit: self.limits.max_bytes,
            });
        }
        let routes = self.routes(c, &w.sha256);
        // Taken out so that the cache is not locked while a file is built from chunks.
        let cache_root = self.cache().root().to_path_buf();
        let index_routes = index.map(|r| self.routes(c, &r.sha256));
        let job = index.zip(index_routes.as_deref()).map(|(r, index_routes)| {
            crate::transfer::delta::DeltaJob {
                agent: &self.agent,
                routes: &routes,
                index_routes,
                index: r,
                cache_root: &cache_root,
                part,
                wanted: *w,
                limits: &self.limits,
                progress,
                prefetched,
                book: &self.source_book,
                tally: std::cell::RefCell::default(),
                current: std::cell::Cell::new(0),
            }
        });
        let run = job
            .as_ref()
            .map(crate::transfer::delta::DeltaJob::run)
            .transpose()?;
        if let Some(j) = &job {
            tally.merge(&j.tally.borrow());
        }
        let built = run.as_ref().and_then(|r| r.built.as_ref().ok());
        if built.is_none() {
            let whole = WholeFetch {
                agent: &self.agent,
                routes: &routes,
                part,
                wanted: *w,
                limits: &self.limits,
                progress,
                book: &self.source_book,
            };
            whole.run(tally)?;
        }
        let mut fetched = match built {
            Some(d) => d.fetched,
            None => w.size.saturating_sub(had),
        };
        let memo = run.as_ref().and_then(|r| r.index.clone());
        if built.is_none() && memo.is_some() {
            fetched += index.map_or(0, |r| r.size);
        }
        let later = run.as_ref().is_some_and(|r| r.fetch_later);
        Ok((fetched, memo, later))
    }

    /// Where file `digest` of candidate `c` may be fetched, in the order to try: each source
    /// the signed decision lists (those that failed lately last), or without a list, the
    /// candidate's URL (for a data file, the same place with its digest).
    pub(crate) fn routes(&self, c: &PlannedVariant, digest: &Sha256Digest) -> Vec<Route> {
        if c.sources.is_empty() {
            let url = if *digest == c.variant.sha256 {
                self.url_for(&c.url)
            } else {
                self.data_url(&c.url, &c.variant.sha256, digest)
            };
            return vec![Route { source: None, url }];
        }
        let hex = digest.to_hex();
        self.source_book
            .order(&c.sources)
            .into_iter()
            .map(|s| Route {
                source: Some(s.to_string()),
                url: self.url_for(&ferry_shared::wire::sources::blob_url(s, &hex)),
            })
            .collect()
    }

    /// What fetching file `w` of candidate `c` costs, known before any of its bytes come:
    /// with a signed chunk index `r` and cached blobs to take chunks from, what the delta
    /// fetches (the index, fetched now and returned for the delta to use, and the chunks the
    /// cache lacks); else what a whole download fetches (less what a partial download holds).
    pub(crate) fn file_cost(
        &self,
        c: &PlannedVariant,
        w: &download::Wanted<'_>,
        r: Option<ChunkIndexRef>,
    ) -> (u64, Option<ChunkIndex>) {
        let whole = w
            .size
            .saturating_sub(part_len(&self.cache().part_path(&w.sha256)));
        let root = self.cache().root().to_path_buf();
        let delta = r.and_then(|r| {
            let routes = self.routes(c, &r.sha256);
            crate::transfer::delta::estimate(&self.agent, &routes, &r, w, &root, &self.limits)
        });
        match delta {
            Some((index, bytes)) => (bytes, Some(index)),
            None => (whole, None),
        }
    }

    /// [`Client::file_cost`] over the files of `wanted` not in `have` (each distinct file once),
    /// with the indexes fetched for it, by file digest.
    fn delta_estimate(
        &self,
        c: &PlannedVariant,
        wanted: &[download::Wanted<'_>],
        have: &[Option<VerifiedBlob>],
    ) -> (u64, std::collections::HashMap<Sha256Digest, ChunkIndex>) {
        let v = &c.variant;
        let indexes = std::iter::once(v.chunk_index).chain(v.side_files().map(|f| f.chunk_index));
        let mut total = 0u64;
        let mut fetched = std::collections::HashMap::new();
        let mut counted = std::collections::BTreeSet::new();
        for ((w, h), r) in wanted.iter().zip(have).zip(indexes) {
            if h.is_some() || !counted.insert(w.sha256) {
                continue;
            }
            let (bytes, index) = self.file_cost(c, w, r);
            total += bytes;
            if let Some(index) = index {
                fetched.insert(w.sha256, index);
            }
        }
        (total, fetched)
    }

    /// Refuses a download of `to_fetch` bytes that would leave less than the cache's headroom
    /// free on its filesystem, after evicting unused unpinned files (never the variant's own
    /// files, `wanted`). A filesystem that cannot say how much is free is not refused.
    fn ensure_space(
        &self,
        variant: &str,
        to_fetch: u64,
        wanted: &[download::Wanted<'_>],
    ) -> Result<(), ClientError> {
        let root = self.cache().root().to_path_buf();
        let needed = to_fetch.saturating_add(self.limits.headroom);
        let Some(free) = free_space(&root) else {
            return Ok(());
        };
        if free >= needed {
            return Ok(());
        }
        let keep: std::collections::BTreeSet<Sha256Digest> = wanted
            .iter()
            .map(|w| w.sha256)
            .chain(ferry_shared::sync::lock(&self.in_use).keys().copied())
            .collect();
        let mut cache = self.cache();
        let shortfall = needed - free;
        let limit = cache.used_bytes().saturating_sub(shortfall);
        cache.evict_below(&keep, limit)?;
        drop(cache);
        let free = free_space(&root).unwrap_or(0);
        if free >= needed {
            return Ok(());
        }
        Err(ClientError::InsufficientStorage {
            path: root,
            variant: variant.to_string(),
            needed,
            available: free,
        })
    }

    /// Where a data file of the variant whose program is at `program_url` is: the same place
    /// with the data file's digest in place of the program's (blob addresses end in the
    /// digest), else the server's blob endpoint.
    pub(crate) fn data_url(
        &self,
        program_url: &str,
        program: &Sha256Digest,
        data: &Sha256Digest,
    ) -> String {
        match program_url.strip_suffix(program.to_hex().as_str()) {
            Some(base) => self.url_for(&format!("{base}{}", data.to_hex())),
            None => self.url_for(&format!("/v1/blobs/sha256/{}", data.to_hex())),
        }
    }
}

/// Bytes free for this process on the filesystem that holds `path`.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) fn free_space(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value of the plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path that outlives the call; `st` is a valid out pointer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Some(u64::from(st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Bytes free on the filesystem that holds `path` (unknown on this platform).
#[cfg(not(unix))]
pub(crate) fn free_space(_path: &std::path::Path) -> Option<u64> {
    None
}
