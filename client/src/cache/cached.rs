//! When a cached program may be used: the last known good entry, re-checked before any use
//! (offline, after a failed resolve, in the cached-first load modes, `cached`) against what its
//! release signed and the device as it is now.
//!
//! A cached program is used only while its signed constraints admit the device: app version
//! range, runtime version range and registered backends, platform, OS minimum, RAM, SoC lists
//! (the same checks as the server's selection, [`ferry_shared::select::incompatibilities`]),
//! and only while its release is not revoked. When the entry no longer fits, another variant of
//! the same release that is held verified in the cache and fits is used instead; otherwise
//! nothing cached is used and the load fails with `cached_incompatible` (or with the server's
//! `no_compatible_variant` when the server said so).
//!
//! An app or runtime update is noticed when the client starts ([`Client::note_versions`]):
//! entries the new versions can no longer use are marked, lose their protection from eviction
//! (and go first), and are reported once in telemetry.

use ferry_shared::errors::ErrorCode;
use ferry_shared::manifest::{ReleaseManifest, Variant};
use ferry_shared::select::incompatibilities;
use ferry_shared::wire::telemetry::{EventKind, Outcome, TelemetryEvent};

use crate::Client;
use crate::cache::{Cache, ModelEntry, VerifiedBlob};
use crate::error::{Attempt, ClientError, Stage};
use crate::trust::verify::verify_release;
use crate::types::{CachedModel, DeviceInfo};

/// Why [`Client::load_cached`] found nothing to load.
pub(crate) enum CacheMiss {
    /// No last known good entry.
    Empty,
    /// The entry's file failed its integrity check and was removed.
    Corrupt,
    /// The entry, and every other variant of its release held in the cache, was signed for
    /// other devices: each constraint that no longer holds, with both values.
    Unfit {
        /// The cached release.
        release: String,
        /// The cached variant.
        variant: String,
        /// What no longer holds.
        why: String,
    },
    /// The entry was passed over (it crashed this app before: the attempt says so), and no
    /// other variant of its release held in the cache could stand in.
    PassedOver(Attempt),
}

/// A cached entry checked by [`Client::last_good`].
pub(crate) struct LastGood {
    pub(crate) entry: ModelEntry,
    pub(crate) manifest: ReleaseManifest,
    pub(crate) variant: Variant,
    pub(crate) blob: Option<VerifiedBlob>,
}

impl Client {
    /// The model's last known good entry, checked against the release envelope stored with it:
    /// the envelope against the trusted release keys, then the entry's model, release version,
    /// variant id, delegate, digest and size against that signed manifest, then the bytes on
    /// disk (`blob` is `None` when they failed and were removed). `Ok(None)`: nothing cached.
    pub(crate) fn last_good(&self, model: &str) -> Result<Option<LastGood>, ClientError> {
        let Some(entry) = self.cache().last_good(model).cloned() else {
            return Ok(None);
        };
        let ring = self.trust().ring_at(self.now());
        let manifest = verify_release(&entry.release_envelope, &ring)?.into_inner();
        // A release its publisher revoked is not loaded, not even offline.
        let held = self
            .cache()
            .revocations(model)
            .map(|(e, kv)| (e.clone(), kv));
        if let Ok((list, _)) = crate::trust::verify::effective_revocations(
            model,
            held.as_ref().map(|(e, kv)| (e, *kv)),
            None,
            0,
            &ring,
            0,
        ) && let Some(e) = crate::trust::verify::revoked(model, &entry.release, list.as_ref())
        {
            return Err(e);
        }
        if manifest.model.as_str() != model || manifest.version.to_string() != entry.release {
            return Err(ClientError::DecisionMismatch(format!(
                "the cached entry names {model} {}, its signed release is {} {}",
                entry.release, manifest.model, manifest.version
            )));
        }
        let variant = manifest
            .variants
            .iter()
            .find(|v| {
                v.id.as_str() == entry.variant
                    && v.sha256 == entry.sha256
                    && v.size == entry.size
                    && v.delegate.to_string() == entry.delegate
            })
            .ok_or_else(|| {
                ClientError::DecisionMismatch(
                    "the cached entry is not a variant of its signed release".into(),
                )
            })?
            .clone();
        let blob = self.verified_program(&variant)?;
        Ok(Some(LastGood {
            entry,
            manifest,
            variant,
            blob,
        }))
    }

    /// The program of `variant` with every data file and asset, verified; `None` when any is missing or
    /// fails its check (a failed file is removed). A file hashed whole now (its first check in
    /// this cache, or its stamp moved) reports progress as a download does.
    pub(crate) fn verified_program(
        &self,
        variant: &Variant,
    ) -> Result<Option<VerifiedBlob>, ClientError> {
        let total = variant.size + variant.side_files().map(|f| f.size).sum::<u64>();
        let mut done = 0u64;
        let mut cache = self.cache();
        let id = variant.id.as_str();
        let Some(program) = self.check_cached(
            &mut cache,
            id,
            (&mut done, total),
            &variant.sha256,
            variant.size,
        )?
        else {
            return Ok(None);
        };
        let mut data = Vec::with_capacity(variant.extra_files.len());
        for f in variant.side_files() {
            match self.check_cached(&mut cache, id, (&mut done, total), &f.sha256, f.size)? {
                Some(d) => data.push(d),
                None => return Ok(None),
            }
        }
        let assets = data.split_off(variant.extra_files.len());
        Ok(Some(program.with_side_files(data, assets)))
    }

    /// Cached file `d` (`size` bytes) of variant `variant`, checked
    /// ([`Cache::verified_blob_with`]); a whole hash reports progress on the variant's one
    /// count: `done` bytes of `total` before it, and `done` grows by its size when it is there.
    pub(crate) fn check_cached(
        &self,
        cache: &mut Cache,
        variant: &str,
        (done, total): (&mut u64, u64),
        d: &ferry_shared::Sha256Digest,
        size: u64,
    ) -> Result<Option<VerifiedBlob>, ClientError> {
        let before = *done;
        let mut progress = |n: u64| {
            if let Some(p) = &self.progress {
                p(variant, before + n, total);
            }
        };
        let got = cache.verified_blob_with(d, size, &mut progress)?;
        if got.is_some() {
            *done += size;
        }
        Ok(got)
    }

    /// The model's last known good entry if its signed constraints admit `device` now, else
    /// another variant of the same release held verified in the cache that they admit (the
    /// entry passed over is returned as an attempt, stage `cache`, code
    /// `cached_incompatible`). A variant `passed_over` gives an attempt for (one that crashed
    /// this app, say) is never the one returned. `Ok(Err(_))`: nothing usable is cached.
    pub(crate) fn usable_last_good(
        &self,
        model: &str,
        device: &DeviceInfo,
        passed_over: &dyn Fn(&Variant) -> Option<Attempt>,
    ) -> Result<Result<(LastGood, Vec<Attempt>), CacheMiss>, ClientError> {
        let Some(last) = self.last_good(model)? else {
            return Ok(Err(CacheMiss::Empty));
        };
        let request = self.request(model, device, None, false)?;
        let why = incompatibilities(&last.variant, &request);
        let skipped = if let Some(a) = passed_over(&last.variant) {
            a
        } else if why.is_empty() {
            return Ok(match last.blob {
                Some(_) => Ok((last, Vec::new())),
                None => {
                    self.report_corrupt(&last, device);
                    Err(CacheMiss::Corrupt)
                }
            });
        } else {
            Attempt {
                variant: last.variant.id.to_string(),
                delegate: last.variant.delegate.to_string(),
                stage: Stage::Cache,
                error_code: ErrorCode::CachedIncompatible.as_str().to_string(),
                message: format!(
                    "the cached {model} {} ({}) is signed for other devices: {}",
                    last.entry.release,
                    last.variant.id,
                    why.join("; ")
                ),
                duration_ms: 0.0,
            }
        };
        // Another variant of the same release, already verified in the cache, that fits (the
        // XNNPACK fallback the device used before a delegate went away, say).
        for v in &last.manifest.variants {
            if v.id == last.variant.id
                || !incompatibilities(v, &request).is_empty()
                || passed_over(v).is_some()
            {
                continue;
            }
            if let Some(blob) = self.verified_program(v)? {
                let entry = ModelEntry {
                    variant: v.id.to_string(),
                    delegate: v.delegate.to_string(),
                    sha256: v.sha256,
                    size: v.size,
                    data: v.side_files().map(|f| f.sha256).collect(),
                    incompatible: None,
                    ..last.entry.clone()
                };
                let next = LastGood {
                    entry,
                    manifest: last.manifest.clone(),
                    variant: v.clone(),
                    blob: Some(blob),
                };
                return Ok(Ok((next, vec![skipped])));
            }
        }
        if skipped.stage != Stage::Cache {
            return Ok(Err(CacheMiss::PassedOver(skipped)));
        }
        Ok(Err(CacheMiss::Unfit {
            release: last.entry.release,
            variant: last.entry.variant,
            why: why.join("; "),
        }))
    }

    /// What in `variant`'s signed constraints the app, its runtime and the backends the runtime
    /// registers no longer meet (empty: they still fit). The device-dependent constraints are
    /// not checked.
    pub(crate) fn unfit_for_app(&self, variant: &Variant) -> Vec<String> {
        let mut why = Vec::new();
        if !variant.app.matches(&self.app_version) {
            why.push(format!(
                "needs app {}, app is {}",
                variant.app, self.app_version
            ));
        }
        let runtime = self.runtime.version();
        if !variant.runtime.matches(&runtime) {
            why.push(format!(
                "needs ExecuTorch runtime {}, the app's runtime is {runtime}",
                variant.runtime
            ));
        }
        let registered = self.runtime.registered_backends();
        for b in &variant.backends {
            if !registered.iter().any(|r| r == b.as_str()) {
                why.push(format!(
                    "needs backend {b}, which this app's runtime does not register"
                ));
            }
        }
        why
    }

    /// Reports once, in telemetry (a failed `verify` event, stage `cache`, code
    /// `cached_incompatible`), each cached entry an app or runtime update left outside its
    /// signed constraints.
    pub(crate) fn report_incompatible(&self, device: &DeviceInfo) {
        let Ok(marked) = self.cache().take_unreported_incompatible() else {
            return;
        };
        let events: Vec<TelemetryEvent> = marked
            .into_iter()
            .map(|(model, e)| TelemetryEvent {
                outcome: Outcome::Failed,
                error_code: Some(ErrorCode::CachedIncompatible.as_str().to_string()),
                stage: Some(Stage::Cache.as_str().to_string()),
                variant: e.variant.clone(),
                delegate: e.delegate.clone(),
                ..self.event(EventKind::Verify, &e.release, &model, None, device)
            })
            .collect();
        if !events.is_empty() {
            let _ = self.telemetry.push(&events);
        }
    }

    /// Notices an app or runtime update: when the versions differ from those the cache last
    /// saw, every entry is re-checked against the new ones ([`Client::unfit_for_app`]), those
    /// that no longer fit are marked (evictable first, reported once in telemetry by the next
    /// load) and those that fit again are unmarked. Nothing is deleted.
    pub(crate) fn note_versions(&self) -> Result<(), ClientError> {
        let seen = (
            self.app_version.to_string(),
            self.runtime.version().to_string(),
        );
        if self.cache().seen_versions() == Some(&seen) {
            return Ok(());
        }
        let models: Vec<String> = self.cache().models().map(|(m, _)| m.clone()).collect();
        for model in models {
            let why = match self.last_good(&model) {
                Ok(Some(last)) => self.unfit_for_app(&last.variant),
                _ => continue,
            };
            let mark = (!why.is_empty()).then(|| why.join("; "));
            self.cache().mark_incompatible(&model, mark)?;
        }
        self.cache().set_seen_versions(seen)
    }
    /// The model's last known good variant on disk (usable offline), after re-checking the
    /// signature of its release, that the cached entry is a variant of that release, and its
    /// bytes. `None` when nothing is cached or any check fails.
    ///
    /// What its release signed about apps and runtimes is checked too: a copy signed for
    /// another app version range, another runtime range, or a backend the runtime does not
    /// register is `None` (the device-dependent constraints, platform, OS, RAM and SoC, are
    /// checked by every load, which knows the device).
    pub fn cached(&self, model: &str) -> Option<CachedModel> {
        let LastGood {
            entry,
            variant,
            blob,
            ..
        } = self.last_good(model).ok()??;
        if !self.unfit_for_app(&variant).is_empty() {
            return None;
        }
        let blob = blob?;
        Some(CachedModel {
            release: entry.release,
            variant: entry.variant,
            delegate: entry.delegate,
            path: blob.path().to_path_buf(),
            sha256: entry.sha256,
        })
    }
}

impl Client {
    /// A cached file of `last` failed its integrity check (and was removed): a failed `verify`
    /// event (`hash_mismatch`, stage `cache`), sent with the rest, so ops see it.
    fn report_corrupt(&self, last: &LastGood, device: &DeviceInfo) {
        let v = &last.variant;
        let files: Vec<_> = std::iter::once(v.sha256)
            .chain(v.side_files().map(|f| f.sha256))
            .collect();
        if self.cache().take_corrupt_of(&files).is_empty() {
            return;
        }
        let event = Client::corrupt_event(TelemetryEvent {
            receipt: last.entry.receipt.clone(),
            ..self.event(
                EventKind::Verify,
                &last.entry.release,
                last.manifest.model.as_str(),
                Some(v),
                device,
            )
        });
        let _ = self.telemetry.push(&[event]);
    }
}
