//! The fallback walk: each verified candidate in turn, best first, until one loads (its
//! attempts and telemetry kept by [`super::fallback::Walk`]), and the last known good when
//! the server cannot be used or a download is not allowed.

use std::collections::BTreeSet;
use std::time::Instant;

use ferry_shared::Sha256Digest;
use ferry_shared::errors::ErrorCode;
use ferry_shared::wire::telemetry::{EventKind, Outcome, TelemetryEvent};

use super::fallback::Walk;
use super::stamped;
use crate::Client;
use crate::cache::ModelEntry;
use crate::cache::VerifiedBlob;
use crate::cache::in_use::InUseGuard;
use crate::error::{Attempt, ClientError, Stage};
use crate::policy::LoadOptions;
use crate::run::model::LoadedModel;
use crate::runtime::Program;
use crate::trust::verify::Plan;
use crate::types::{DeviceInfo, Source};
use ferry_shared::manifest::Variant;

impl Client {
    pub(crate) fn load_inner(
        &self,
        model: &str,
        device: &DeviceInfo,
        opts: &LoadOptions,
    ) -> Result<LoadedModel, ClientError> {
        let load_started = Instant::now();
        let plan = match self.resolve(model, device) {
            Ok(p) => p,
            Err(e) => {
                if matches!(
                    e,
                    ClientError::Verify { .. }
                        | ClientError::Expired { .. }
                        | ClientError::ClockSkewed { .. }
                        | ClientError::Replay { .. }
                        | ClientError::DecisionMismatch(_)
                ) {
                    let ev = TelemetryEvent {
                        outcome: Outcome::Failed,
                        error_code: Some(e.code().to_string()),
                        stage: Some(Stage::Resolve.as_str().to_string()),
                        ..self.event(EventKind::Verify, "", model, None, device)
                    };
                    let _ = self.telemetry.push(&[ev]);
                }
                return self.load_last_good(model, device, e, load_started);
            }
        };
        let release = plan.manifest.version.to_string();
        let base =
            |kind: EventKind, v: &Variant| self.event(kind, &release, model, Some(v), device);
        let mut walk = Walk::new(plan.candidates.iter().map(|c| &c.variant).collect(), &base);
        let send = |events: Vec<TelemetryEvent>| {
            let _ = self
                .telemetry
                .push(&stamped(events, plan.receipt.as_deref()));
        };
        let mut deferred = None;
        let mut spent = 0u64;
        for (i, c) in plan.candidates.iter().enumerate() {
            let v = &c.variant;
            let candidate_started = Instant::now();
            let ms = || candidate_started.elapsed().as_secs_f64() * 1000.0;
            // Defence in depth: whatever the server knew, a program calling operators this
            // runtime lacks would fail `load_method` after its whole download.
            if let Some(message) = self.missing_operators(v) {
                walk.failed(
                    i,
                    Stage::Select,
                    ErrorCode::OperatorsMissing.as_str(),
                    message,
                    ms(),
                );
                continue;
            }
            let (blob, downloaded) = match self.ensure_blob(model, c, opts, &mut spent) {
                Ok(x) => x,
                Err(
                    e @ (ClientError::DownloadDeferred { .. }
                    | ClientError::InsufficientStorage { .. }),
                ) => {
                    // Not the variant's failure: no telemetry; a cached candidate after it, a
                    // smaller one, or the last known good may still load.
                    walk.deferred(i, e.code(), e.to_string(), ms());
                    deferred.get_or_insert(e);
                    continue;
                }
                Err(e) => {
                    let stage = match e {
                        ClientError::HashMismatch { .. } | ClientError::SizeMismatch { .. } => {
                            Stage::Verify
                        }
                        _ => Stage::Download,
                    };
                    walk.download_failed(i, stage, e.code());
                    if matches!(e, ClientError::DiskFull { .. }) {
                        send(walk.take_events());
                        return Err(e);
                    }
                    walk.failed(i, stage, e.code(), e.to_string(), ms());
                    continue;
                }
            };
            if let Some(t) = downloaded {
                walk.downloaded(i, t);
            }
            let started = Instant::now();
            match self.open_and_check(&blob, v) {
                Ok((program, golden)) => {
                    walk.loaded(i, started.elapsed().as_secs_f64() * 1000.0);
                    send(walk.take_events());
                    let mut loaded = self.loaded(
                        model,
                        &plan,
                        v,
                        Opened {
                            blob,
                            program,
                            golden,
                            downloaded: downloaded.is_some(),
                        },
                        walk.into_attempts(),
                        load_started,
                    );
                    if let Ok(m) = &mut loaded {
                        let (plan, loaded) = (&plan, v.id.as_str());
                        m.report.probe =
                            self.probe_after_load(model, device, (plan, loaded), opts, &mut spent);
                    }
                    return loaded;
                }
                Err(failure) => {
                    let load_ms = started.elapsed().as_secs_f64() * 1000.0;
                    walk.load_failed(i, failure, load_ms, ms());
                }
            }
        }
        send(walk.take_events());
        if let Some(e) = deferred {
            // A download was not allowed: what is cached serves, or the deferral is the error.
            return self.load_last_good(model, device, e, load_started);
        }
        Err(ClientError::AllCandidatesFailed {
            attempts: walk.into_attempts(),
        })
    }
}

impl Client {
    /// The operators `v` needs (as its signed manifest says) that this runtime did not
    /// register, as a message naming them; `None` when none is missing or either side is
    /// unknown.
    pub(crate) fn missing_operators(&self, v: &Variant) -> Option<String> {
        if v.operators_needed().is_empty() {
            return None;
        }
        let have: BTreeSet<String> = self.runtime.registered_operators()?.into_iter().collect();
        let missing = ferry_shared::select::operators::missing(v.operators_needed(), &have);
        (!missing.is_empty()).then(|| {
            format!(
                "variant {} calls {} operator(s) this runtime did not register: {}",
                v.id,
                missing.len(),
                missing.join(", ")
            )
        })
    }
}

/// A candidate that opened, passed its checks and is about to be handed over.
struct Opened {
    blob: VerifiedBlob,
    program: Box<dyn Program>,
    golden: Option<f64>,
    downloaded: bool,
}

impl Client {
    /// Candidate `v` loaded: it becomes the model's last known good, the cache evicts what no
    /// process holds, and the app gets the model with its report.
    fn loaded(
        &self,
        model: &str,
        plan: &Plan,
        v: &Variant,
        opened: Opened,
        attempts: Vec<Attempt>,
        load_started: Instant,
    ) -> Result<LoadedModel, ClientError> {
        let Opened {
            blob,
            program,
            golden,
            downloaded,
        } = opened;
        let release = plan.manifest.version.to_string();
        // Read before the entry is recorded: a load that fails here leaves the last known
        // good as it was.
        let metadata = crate::run::metadata::ModelMetadata::of(v, &blob)?;
        let entry = ModelEntry {
            release: release.clone(),
            variant: v.id.to_string(),
            delegate: v.delegate.to_string(),
            sha256: v.sha256,
            size: v.size,
            data: v.side_files().map(|f| f.sha256).collect(),
            release_envelope: plan.release_envelope.clone(),
            incompatible: None,
        };
        let guard = InUseGuard::new(&self.in_use, &blob);
        {
            let mut cache = self.cache();
            cache.set_last_good(model, entry)?;
            let in_use: BTreeSet<Sha256Digest> = ferry_shared::sync::lock(&self.in_use)
                .keys()
                .copied()
                .collect();
            cache.evict(&in_use)?;
        }
        let source = if downloaded {
            Source::Downloaded
        } else {
            Source::Cached
        };
        let mut report = self.report(
            model,
            Some((&release, v, &blob)),
            &source,
            &attempts,
            load_started,
        );
        report.load_mode = program.load_mode().map(str::to_string);
        Ok(LoadedModel {
            model: model.to_string(),
            release,
            variant: v.id.to_string(),
            delegate: v.delegate.to_string(),
            path: blob.path().to_path_buf(),
            data_files: blob
                .data_files()
                .iter()
                .map(|d| d.path().to_path_buf())
                .collect(),
            source,
            report,
            attempts,
            golden_max_abs_diff: golden,
            golden: v.golden.clone(),
            contract: v.methods.clone(),
            metadata,
            times: None,
            receipt: plan.receipt.clone(),
            method: self.method.clone(),
            program,
            other_methods: Vec::new(),
            _guard: guard,
        })
    }
}
