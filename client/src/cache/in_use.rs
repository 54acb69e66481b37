//! Blobs held by live loaded models: counted per digest in this process (never evicted while
//! held), and locked shared against the app's other processes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ferry_shared::Sha256Digest;

/// Blobs held by live [`LoadedModel`](crate::LoadedModel)s (never evicted).
pub(crate) type InUse = Arc<Mutex<BTreeMap<Sha256Digest, usize>>>;

pub(crate) struct InUseGuard {
    set: InUse,
    digests: Vec<Sha256Digest>,
    /// The files, with their shared locks: other processes do not evict them meanwhile.
    _blob: crate::cache::VerifiedBlob,
}

impl InUseGuard {
    /// Marks the program's blob and its data files' blobs in use until the guard drops.
    pub(crate) fn new(set: &InUse, blob: &crate::cache::VerifiedBlob) -> Self {
        let digests: Vec<Sha256Digest> = std::iter::once(*blob.sha256())
            .chain(blob.data_files().iter().map(|d| *d.sha256()))
            .chain(blob.assets().iter().map(|d| *d.sha256()))
            .collect();
        {
            let mut g = ferry_shared::sync::lock(set);
            for d in &digests {
                *g.entry(*d).or_default() += 1;
            }
        }
        Self {
            set: set.clone(),
            digests,
            _blob: blob.clone(),
        }
    }
}

impl Drop for InUseGuard {
    fn drop(&mut self) {
        {
            let mut g = ferry_shared::sync::lock(&self.set);
            for d in &self.digests {
                if let Some(n) = g.get_mut(d) {
                    *n -= 1;
                    if *n == 0 {
                        g.remove(d);
                    }
                }
            }
        }
    }
}
