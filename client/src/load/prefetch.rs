//! Prefetching: a model's best variant downloaded and verified ahead of its first load, and
//! the download plan an app can show before it asks.

use crate::Client;
use crate::error::ClientError;
use crate::policy::{DownloadPlan, LoadOptions};
use crate::trust::verify::PlannedVariant;
use crate::types::{DeviceInfo, Prefetched};

impl Client {
    /// Resolves and downloads (without loading) the best candidate whose backends the runtime
    /// registered, falling back to the last candidate (XNNPACK).
    pub fn prefetch(&self, model: &str, device: &DeviceInfo) -> Result<Prefetched, ClientError> {
        self.prefetch_with(model, device, &LoadOptions::default())
    }

    /// [`Client::prefetch`] under a download policy: a download the policy does not allow
    /// now fails with `download_deferred` before any byte is fetched.
    pub fn prefetch_with(
        &self,
        model: &str,
        device: &DeviceInfo,
        opts: &LoadOptions,
    ) -> Result<Prefetched, ClientError> {
        let plan = self.resolve(model, device)?;
        let c = self.prefetch_candidate(&plan)?;
        let (blob, _) = self.ensure_blob(model, c, opts, &mut 0)?;
        Ok(Prefetched {
            release: plan.manifest.version.to_string(),
            variant: c.variant.id.to_string(),
            path: blob.path().to_path_buf(),
        })
    }

    /// What [`Client::prefetch`] would download, known before any file is fetched: the
    /// release, variant, signed size and the bytes still to fetch (0 when a file of the signed
    /// size is cached, its digest checked when it is used; for a file the cache can build
    /// from chunks it holds, its chunk index, fetched now, and the chunks it lacks). A load tries the same variant
    /// first unless the device claims backends the runtime lacks (then the server may offer a
    /// variant for those first, which the load tries and falls back from).
    pub fn plan_download(
        &self,
        model: &str,
        device: &DeviceInfo,
    ) -> Result<DownloadPlan, ClientError> {
        let plan = self.resolve(model, device)?;
        let c = self.prefetch_candidate(&plan)?;
        let v = &c.variant;
        let files = std::iter::once((v.sha256, v.size, v.chunk_index))
            .chain(v.side_files().map(|f| (f.sha256, f.size, f.chunk_index)));
        let (mut size, mut to_download) = (0u64, 0u64);
        let mut seen = std::collections::BTreeSet::new();
        let id = v.id.to_string();
        for (d, n, r) in files.filter(|(d, _, _)| seen.insert(*d)) {
            size += n;
            let cached = self.cache().blob_path(&d);
            if std::fs::metadata(&cached).is_ok_and(|m| m.len() == n) {
                continue;
            }
            let wanted = crate::transfer::download::Wanted {
                id: &id,
                sha256: d,
                size: n,
            };
            to_download += self.file_cost(c, &wanted, r).0;
        }
        Ok(DownloadPlan {
            release: plan.manifest.version.to_string(),
            variant: v.id.to_string(),
            delegate: v.delegate.to_string(),
            size,
            to_download,
        })
    }

    /// The best candidate whose backends the runtime registers, else the last (XNNPACK).
    fn prefetch_candidate<'p>(
        &self,
        plan: &'p crate::trust::verify::Plan,
    ) -> Result<&'p PlannedVariant, ClientError> {
        let registered = self.runtime.registered_backends();
        plan.candidates
            .iter()
            .find(|c| {
                c.variant
                    .backends
                    .iter()
                    .all(|b| registered.iter().any(|r| r == b.as_str()))
            })
            .or(plan.candidates.last())
            .ok_or_else(|| ClientError::DecisionMismatch("no candidate".into()))
    }
}
