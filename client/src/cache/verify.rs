//! The cache's side of "verify once" (`check.rs`): handing out a cached file as verified,
//! recording what was hashed, and forgetting what failed.

use super::*;

impl Cache {
    /// The blob as a [`VerifiedBlob`] when it is present, has the signed size and hashes to its
    /// digest; `None` when it is absent. A blob that fails is removed (it must never reach the
    /// runtime) and `None` returned.
    pub(crate) fn verified_blob(
        &mut self,
        d: &Sha256Digest,
        size: u64,
    ) -> Result<Option<VerifiedBlob>, ClientError> {
        self.verified_blob_with(d, size, &mut |_| {})
    }

    /// [`Cache::verified_blob`], checked as `check.rs` says: a file whose stamp is the one
    /// recorded when it last matched its digest is trusted once its head hashes as then; any
    /// other is hashed whole (`progress` gets the bytes hashed so far) and, when it matches,
    /// recorded. A file that cannot be read to its end is corrupt, like one that does not hash.
    pub(crate) fn verified_blob_with(
        &mut self,
        d: &Sha256Digest,
        size: u64,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Option<VerifiedBlob>, ClientError> {
        let path = self.blob_path(d);
        // Something else than a plain file under a blob's name (a folder, a pipe, a link): the
        // cache never makes one, so it is damage; it goes, and the file is fetched again.
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
            self.forget_corrupt(d)?;
            return Ok(None);
        }
        // Held from before the check: another process cannot evict what is being checked.
        let Some(lock) = crate::cache::locks::shared_existing(&path)? else {
            return Ok(None);
        };
        let file = lock.file();
        let stamp = check::Stamp::of(file).map_err(|e| ClientError::io(&path, e))?;
        let known = self
            .index
            .blobs
            .get(&d.to_hex())
            .and_then(|b| b.checked)
            .filter(|c| c.stamp == stamp && stamp.len == size);
        let trusted = match known {
            Some(c) => match c.head {
                check::Head::None => Some(c),
                check::Head::Hash { len, sha256 } if len <= size => check::hash_head(file, len)
                    .ok()
                    .filter(|h| *h == sha256)
                    .map(|_| c),
                check::Head::Hash { .. } => None,
                check::Head::Whole => None,
            },
            None => None,
        };
        let (ok, recheck) = match trusted {
            Some(c) => (true, self.recheck_due(c.hashed_at)),
            None if stamp.len != size => (false, false),
            None => {
                let matched = check::hash_whole(file, size, progress).ok() == Some(*d);
                if matched && known.is_none_or(|c| c.head != check::Head::Whole) {
                    // Recorded unless it stands: a file with a head too long to check is hashed
                    // at every load and needs no new record each time; a record whose head did
                    // not match the intact file is replaced.
                    let checked = check::Checked {
                        stamp,
                        head: check::head_of(file, size).unwrap_or(check::Head::Whole),
                        hashed_at: check::now_secs(),
                    };
                    self.update(|i| {
                        let e = i.blobs.entry(d.to_hex()).or_default();
                        e.size = size;
                        e.checked = Some(checked);
                    })?;
                }
                (matched, false)
            }
        };
        if ok {
            return Ok(Some(VerifiedBlob {
                path,
                sha256: *d,
                size,
                data: Vec::new(),
                assets: Vec::new(),
                recheck,
                by_stamp: trusted.is_some(),
                held: Held {
                    _lock: Some(std::sync::Arc::new(lock)),
                },
            }));
        }
        drop(lock);
        self.forget_corrupt(d)?;
        Ok(None)
    }

    /// Whether a file last hashed whole at `hashed_at` is due another hash: older than
    /// `reverify_after`, or stamped in the future by a clock that has since gone back.
    fn recheck_due(&self, hashed_at: u64) -> bool {
        let now = check::now_secs();
        now.saturating_sub(hashed_at) >= self.reverify_after.as_secs()
            || hashed_at > now.saturating_add(24 * 3600)
    }

    /// Removes blob `d`, found corrupt, with every model entry that uses it, and remembers it
    /// for telemetry.
    pub(crate) fn forget_corrupt(&mut self, d: &Sha256Digest) -> Result<(), ClientError> {
        let _ = std::fs::remove_file(self.blob_path(d));
        if self.corrupt.len() < 64 && !self.corrupt.contains(d) {
            self.corrupt.push(*d);
        }
        self.update(|i| {
            i.blobs.remove(&d.to_hex());
            i.models.retain(|_, m| !m.uses(d));
        })
    }

    /// Records that the blobs `hashed` (digest and the stamp they had when their hash began)
    /// matched their digests whole now; a blob whose file changed since keeps no record.
    pub(crate) fn record_hashed(
        &mut self,
        hashed: &[(Sha256Digest, check::Stamp)],
    ) -> Result<(), ClientError> {
        let now = check::now_secs();
        self.update(|i| {
            for (d, stamp) in hashed {
                if let Some(c) = i
                    .blobs
                    .get_mut(&d.to_hex())
                    .and_then(|b| b.checked.as_mut())
                    .filter(|c| c.stamp == *stamp)
                {
                    c.hashed_at = now;
                }
            }
        })
    }

    /// After a whole hash of blobs outside a load: `matched` (with the stamps they had) get a
    /// new hash time, `bad` are removed with the entries that use them. Whether any of `bad`
    /// was removed now (taken from what telemetry will report: the caller reports it).
    pub(crate) fn settle_hashed(
        &mut self,
        matched: &[(Sha256Digest, check::Stamp)],
        bad: &[Sha256Digest],
    ) -> bool {
        let _ = self.record_hashed(matched);
        for d in bad {
            let _ = self.forget_corrupt(d);
        }
        !self.take_corrupt_of(bad).is_empty()
    }

    /// Whether blob `d` was last hashed whole less than `within` ago (by the device's clock).
    pub(crate) fn hashed_within(&self, d: &Sha256Digest, within: std::time::Duration) -> bool {
        let now = check::now_secs();
        self.index
            .blobs
            .get(&d.to_hex())
            .and_then(|b| b.checked)
            .is_some_and(|c| c.hashed_at <= now && now - c.hashed_at < within.as_secs())
    }

    /// Sets how old a file's last full hash may be before a background hash.
    pub(crate) fn set_reverify_after(&mut self, after: std::time::Duration) {
        self.reverify_after = after;
    }

    /// Those of `files` found corrupt (and removed) since they were last asked for; the
    /// others stay for their own callers.
    pub(crate) fn take_corrupt_of(&mut self, files: &[Sha256Digest]) -> Vec<Sha256Digest> {
        let (taken, kept) = std::mem::take(&mut self.corrupt)
            .into_iter()
            .partition(|d| files.contains(d));
        self.corrupt = kept;
        taken
    }
}
