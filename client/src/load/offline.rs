//! Loads without a usable answer from the server: the last known good variant, or what the
//! cache holds for the model.

use std::time::Instant;

use ferry_shared::errors::ErrorCode;
use ferry_shared::wire::telemetry::{EventKind, Outcome, TelemetryEvent};

use crate::Client;
use crate::cache::cached::{CacheMiss, LastGood};
use crate::cache::in_use::InUseGuard;
use crate::error::{Attempt, ClientError, Stage};
use crate::run::model::LoadedModel;
use crate::trust::verify::Plan;
use crate::types::{DeviceInfo, Source};

impl Client {
    /// Loads the last known good variant after the server could not be used or a download
    /// was not allowed (`cause`).
    pub(crate) fn load_last_good(
        &self,
        model: &str,
        device: &DeviceInfo,
        cause: ClientError,
        load_started: Instant,
    ) -> Result<LoadedModel, ClientError> {
        // Why the server's answer was not used, as the report's first step.
        let first = Attempt {
            // The variant whose download was not allowed, when that is the cause.
            variant: match &cause {
                ClientError::DownloadDeferred { variant, .. }
                | ClientError::InsufficientStorage { variant, .. } => variant.clone(),
                _ => String::new(),
            },
            delegate: String::new(),
            stage: if matches!(
                cause,
                ClientError::DownloadDeferred { .. } | ClientError::InsufficientStorage { .. }
            ) {
                Stage::Download
            } else {
                Stage::Resolve
            },
            error_code: cause.code().to_string(),
            message: cause.to_string(),
            duration_ms: load_started.elapsed().as_secs_f64() * 1000.0,
        };
        let source = Source::LastKnownGood {
            code: cause.code().to_string(),
            reason: cause.to_string(),
        };
        match self.load_cached(model, device, source, vec![first.clone()], load_started)? {
            Ok(loaded) => Ok(loaded),
            // The cached copy crashed this app before: the server's candidates, once it can be
            // reached or a download is allowed, are what can serve.
            Err(CacheMiss::PassedOver(a)) => Err(if cause.is_unavailable() {
                ClientError::NothingCached {
                    model: model.to_string(),
                    reason: format!("{cause} (the cached copy is not loaded: {})", a.message),
                }
            } else {
                cause
            }),
            // The server said nothing fits this device, and the cached copy's own signed
            // constraints agree: the app hears the server's answer, with its explanation.
            Err(CacheMiss::Unfit { .. })
                if cause.code() == ErrorCode::NoCompatibleVariant.as_str() =>
            {
                Err(cause)
            }
            Err(CacheMiss::Unfit {
                release,
                variant,
                why,
            }) => Err(ClientError::CachedIncompatible {
                model: model.to_string(),
                release,
                variant,
                why,
                reason: cause.to_string(),
            }),
            Err(CacheMiss::Empty) => Err(if cause.is_unavailable() {
                ClientError::NothingCached {
                    model: model.to_string(),
                    reason: cause.to_string(),
                }
            } else {
                cause
            }),
            Err(CacheMiss::Corrupt) => Err(ClientError::NothingCached {
                model: model.to_string(),
                reason: format!(
                    "{cause} (the cached copy is incomplete, or failed its integrity check and \
                     was removed)"
                ),
            }),
        }
    }

    /// Loads the model's last known good cached variant after checking it, and that its signed
    /// constraints still admit `device` ([`Client::usable_last_good`]), reporting it as
    /// `source` with `first` (and any cached entry passed over) as the report's first attempts.
    /// A variant that crashed this app under the same versions is passed over.
    /// `Ok(Err(_))`: nothing usable is cached.
    pub(crate) fn load_cached(
        &self,
        model: &str,
        device: &DeviceInfo,
        source: Source,
        first: Vec<Attempt>,
        load_started: Instant,
    ) -> Result<Result<LoadedModel, CacheMiss>, ClientError> {
        let crashes = self.known_crashes();
        let (
            LastGood {
                entry,
                variant,
                blob,
                ..
            },
            skipped,
        ) = {
            let passed_over = |v: &ferry_shared::manifest::Variant| {
                self.crash_of(&crashes, &v.sha256, device)
                    .map(Client::crashed_attempt)
            };
            match self.usable_last_good(model, device, &passed_over)? {
                Ok(found) => found,
                Err(miss) => return Ok(Err(miss)),
            }
        };
        let Some(blob) = blob else {
            return Ok(Err(CacheMiss::Corrupt));
        };
        // A cached variant passed over because it crashed this app: a fallback to the one that
        // stands in, as in a walk.
        let passed: Vec<TelemetryEvent> = skipped
            .iter()
            .filter(|a| a.error_code == ErrorCode::Crashed.as_str())
            .map(|a| TelemetryEvent {
                variant: a.variant.clone(),
                delegate: a.delegate.clone(),
                outcome: Outcome::Failed,
                error_code: Some(a.error_code.clone()),
                stage: Some(a.stage.as_str().to_string()),
                to_variant: Some(variant.id.to_string()),
                receipt: entry.receipt.clone(),
                ..self.event(EventKind::Fallback, &entry.release, model, None, device)
            })
            .collect();
        if !passed.is_empty() {
            let _ = self.telemetry.push(&passed);
        }
        let first: Vec<Attempt> = first.into_iter().chain(skipped).collect();
        let started = Instant::now();
        let record = self.flight_record(
            model,
            &entry.release,
            &variant,
            entry.receipt.as_deref(),
            device,
        );
        let (program, golden, flight, keys) = self
            .open_and_check(&blob, &variant, (&record, device, &[]), false)
            .map_err(|f| ClientError::AllCandidatesFailed {
                attempts: vec![Attempt {
                    variant: variant.id.to_string(),
                    delegate: variant.delegate.to_string(),
                    stage: f.stage,
                    error_code: f.code.to_string(),
                    message: f.message,
                    duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                }],
            })?;
        self.crash_cleared(&crashes, &variant.sha256, device);
        // A load from the cache alone is a load too (offline ones included): it is queued and
        // sent when the network is back, with the receipt of the answer that chose it.
        let loaded_event = TelemetryEvent {
            load_ms: Some(started.elapsed().as_secs_f64() * 1000.0),
            receipt: entry.receipt.clone(),
            ..self.event(
                EventKind::Load,
                &entry.release,
                model,
                Some(&variant),
                device,
            )
        };
        let _ = self.telemetry.push(&[loaded_event]);
        let entry_release = entry.release.clone();
        let mut report = self.report(
            model,
            Some((&entry_release, &variant, &blob)),
            &source,
            first.as_slice(),
            load_started,
        );
        report.load_mode = program.load_mode().map(str::to_string);
        Ok(Ok(LoadedModel {
            model: model.to_string(),
            release: entry.release,
            variant: entry.variant,
            delegate: entry.delegate,
            path: blob.path().to_path_buf(),
            data_files: blob
                .data_files()
                .iter()
                .map(|d| d.path().to_path_buf())
                .collect(),
            report,
            source,
            attempts: Vec::new(),
            golden_max_abs_diff: golden,
            golden: variant.golden.clone(),
            contract: variant.methods.clone(),
            metadata: crate::run::metadata::ModelMetadata::of(&variant, &blob, keys)?,
            times: None,
            receipt: None,
            method: self.method.clone(),
            program,
            flight,
            other_methods: Vec::new(),
            _guard: InUseGuard::new(&self.in_use, &blob),
        }))
    }
}

impl Client {
    /// Every candidate of `plan` failed (`attempts`). When some of them crashed this app before,
    /// the last known good serves if it is none of the candidates and did not crash either;
    /// otherwise the load fails: with `crashed` when every candidate crashed, else with the
    /// attempts.
    pub(crate) fn after_all_failed(
        &self,
        model: &str,
        device: &DeviceInfo,
        plan: &Plan,
        attempts: Vec<Attempt>,
        load_started: Instant,
    ) -> Result<LoadedModel, ClientError> {
        let crashed = |a: &Attempt| a.error_code == ErrorCode::Crashed.as_str();
        if !attempts.iter().any(crashed) {
            return Err(ClientError::AllCandidatesFailed { attempts });
        }
        let offered =
            |d: &ferry_shared::Sha256Digest| plan.candidates.iter().any(|c| c.variant.sha256 == *d);
        let last = self.cache().last_good(model).map(|e| e.sha256);
        if last.is_some_and(|d| !offered(&d)) {
            let source = Source::LastKnownGood {
                code: ErrorCode::Crashed.as_str().to_string(),
                reason: "every variant the server offered crashed this app before or failed"
                    .to_string(),
            };
            if let Ok(Ok(mut loaded)) =
                self.load_cached(model, device, source, attempts.clone(), load_started)
            {
                // The candidates passed over, as for any other fallback.
                loaded.attempts = attempts;
                return Ok(loaded);
            }
        }
        if attempts.iter().all(crashed) {
            Err(ClientError::Crashed { attempts })
        } else {
            Err(ClientError::AllCandidatesFailed { attempts })
        }
    }
}
