//! The shell of the fallback walk: resolve, then do what the walk ([`super::walk::Walk`])
//! says (fetch a candidate's files, open its program, hand it over, fall back to the last
//! known good, which `offline.rs` loads) and tell it what happened.

use std::collections::BTreeSet;
use std::time::Instant;

use ferry_shared::Sha256Digest;
use ferry_shared::wire::telemetry::{EventKind, Outcome, TelemetryEvent};

use super::fetch::Transfer;
use super::stamped;
use super::walk::{Fetched, Next, Opened, Walk};
use crate::Client;
use crate::cache::ModelEntry;
use crate::cache::VerifiedBlob;
use crate::cache::in_use::InUseGuard;
use crate::error::{Attempt, ClientError, Stage};
use crate::policy::LoadOptions;
use crate::run::model::LoadedModel;
use crate::runtime::Program;
use crate::trust::verify::{Plan, PlannedVariant};
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
        let crashes = self.known_crashes();
        let base =
            |kind: EventKind, v: &Variant| self.event(kind, &release, model, Some(v), device);
        let mut walk = Walk::new(plan.candidates.iter().map(|c| &c.variant).collect(), &base);
        let send = |events: Vec<TelemetryEvent>| {
            let _ = self
                .telemetry
                .push(&stamped(events, plan.receipt.as_deref()));
        };
        // What the walk's steps produced that it does not hold: the fetched files, the first
        // deferral, the error that ends the walk, the opened program.
        let (mut fetched, mut opened) = (None, None);
        let (mut deferred, mut ended) = (None, None);
        let mut spent = 0u64;
        let mut candidate_started = Instant::now();
        loop {
            match walk.next() {
                Next::Fetch(i) => {
                    candidate_started = Instant::now();
                    let v = &plan.candidates[i].variant;
                    if let Some(c) = self.crash_of(&crashes, &v.sha256, device) {
                        let a = Client::crashed_attempt(c);
                        let outcome = Fetched::Crashed {
                            stage: a.stage,
                            message: a.message,
                        };
                        walk.fetched(i, outcome, 0.0);
                        continue;
                    }
                    let outcome =
                        self.fetch_candidate(model, &plan.candidates[i], opts, &mut spent);
                    self.found_corrupt(v, base(EventKind::Verify, v), &send);
                    let outcome = match outcome {
                        Files::Ready(blob, transfer) => {
                            fetched = Some((blob, transfer.as_ref().map(|t| t.sources.clone())));
                            Fetched::Ready(transfer)
                        }
                        Files::Not(outcome, error) => {
                            if let Some(e) = error {
                                match &outcome {
                                    Fetched::Deferred { .. } => {
                                        deferred.get_or_insert(e);
                                    }
                                    _ => ended = Some(e),
                                }
                            }
                            outcome
                        }
                    };
                    walk.fetched(i, outcome, ms_since(candidate_started));
                }
                Next::Open(i) => {
                    let Some((blob, _)) = &fetched else {
                        return Err(ClientError::Config(
                            "internal: the walk opened a candidate it did not fetch".into(),
                        ));
                    };
                    let started = Instant::now();
                    let v = &plan.candidates[i].variant;
                    let r = self.flight_record(model, &release, v, plan.receipt.as_deref(), device);
                    let ctx = (&r, device, plan.sealed_stopped.as_slice());
                    let outcome = match self.open_and_check(blob, v, ctx, false) {
                        Ok(program) => {
                            opened = Some(program);
                            Opened::Loaded(ms_since(started))
                        }
                        Err(failure) => {
                            // A cached file trusted by its stamp may be what failed.
                            self.corrupt_after_failure(blob, base(EventKind::Verify, v), &send);
                            Opened::Failed(failure, ms_since(started))
                        }
                    };
                    walk.opened(i, outcome, ms_since(candidate_started));
                }
                Next::Loaded(i) => {
                    send(walk.take_events());
                    let (Some((blob, downloaded)), Some((program, golden, flight, keys))) =
                        (fetched.take(), opened.take())
                    else {
                        return Err(ClientError::Config(
                            "internal: the walk handed over a candidate it did not open".into(),
                        ));
                    };
                    let v = &plan.candidates[i].variant;
                    let due = blob.due_for_recheck();
                    let mut loaded = self.loaded(
                        model,
                        &plan,
                        v,
                        Handover {
                            blob,
                            program,
                            golden,
                            downloaded,
                            flight,
                            keys,
                        },
                        walk.into_attempts(),
                        load_started,
                    );
                    if let Ok(m) = &mut loaded {
                        self.recheck_later(due, base(EventKind::Verify, v), plan.receipt.clone());
                        self.crash_cleared(&crashes, &v.sha256, device);
                        let (plan, loaded) = (&plan, v.id.as_str());
                        m.report.probe =
                            self.probe_after_load(model, device, (plan, loaded), opts, &mut spent);
                    }
                    return loaded;
                }
                Next::Stop => {
                    send(walk.take_events());
                    return Err(ended.unwrap_or_else(|| {
                        ClientError::Config("internal: the walk stopped without an error".into())
                    }));
                }
                Next::LastKnownGood => {
                    send(walk.take_events());
                    // A download was not allowed: what is cached serves, or the deferral is
                    // the error.
                    let e = deferred.unwrap_or_else(|| {
                        ClientError::Config("internal: the walk deferred without an error".into())
                    });
                    return self.load_last_good(model, device, e, load_started);
                }
                Next::AllFailed => {
                    send(walk.take_events());
                    let attempts = walk.into_attempts();
                    return self.after_all_failed(model, device, &plan, attempts, load_started);
                }
            }
        }
    }

    /// When a cached file of `v` failed its check since the last call (it was removed, and
    /// fetched again when the load allowed), `send`s `event` (its `verify` event) as failed:
    /// ops see it.
    fn found_corrupt(
        &self,
        v: &Variant,
        event: TelemetryEvent,
        send: &dyn Fn(Vec<TelemetryEvent>),
    ) {
        let files: Vec<Sha256Digest> = std::iter::once(v.sha256)
            .chain(v.side_files().map(|f| f.sha256))
            .collect();
        if !self.cache().take_corrupt_of(&files).is_empty() {
            send(vec![Client::corrupt_event(event)]);
        }
    }

    /// Candidate `c`'s files made sure of: the verified blob and what was downloaded, or what
    /// the walk is told, with the error to keep (a deferral, or one that ends the walk).
    #[allow(clippy::type_complexity)]
    fn fetch_candidate(
        &self,
        model: &str,
        c: &PlannedVariant,
        opts: &LoadOptions,
        spent: &mut u64,
    ) -> Files {
        // Defence in depth: whatever the server knew, a program calling operators this
        // runtime lacks would fail `load_method` after its whole download.
        if let Some(message) = self.missing_operators(&c.variant) {
            return Files::Not(Fetched::OperatorsMissing(message), None);
        }
        let e = match self.ensure_blob(model, c, opts, spent) {
            Ok((blob, transfer)) => return Files::Ready(blob, transfer),
            Err(e) => e,
        };
        if let ClientError::DownloadDeferred { .. } | ClientError::InsufficientStorage { .. } = e {
            // Not the variant's failure: no telemetry; a cached candidate after it, a smaller
            // one, or the last known good may still load.
            let outcome = Fetched::Deferred {
                code: e.code().to_string(),
                message: e.to_string(),
            };
            return Files::Not(outcome, Some(e));
        }
        let stage = match e {
            ClientError::HashMismatch { .. } | ClientError::SizeMismatch { .. } => Stage::Verify,
            _ => Stage::Download,
        };
        let ends_walk = matches!(e, ClientError::DiskFull { .. });
        let outcome = Fetched::Failed {
            stage,
            code: e.code().to_string(),
            message: e.to_string(),
            ends_walk,
        };
        Files::Not(outcome, ends_walk.then_some(e))
    }
}

/// A candidate's files: cached (with what this load downloaded of them), or what the walk is
/// told instead, with the error to keep (a deferral, or one that ends the walk).
enum Files {
    Ready(VerifiedBlob, Option<Transfer>),
    Not(Fetched, Option<ClientError>),
}

/// Milliseconds since `t`.
fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
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
struct Handover {
    blob: VerifiedBlob,
    program: Box<dyn Program>,
    golden: Option<f64>,
    /// Downloaded now (with what each blob source did), or `None` when it was cached.
    downloaded: Option<Vec<ferry_shared::wire::sources::SourceUse>>,
    flight: Option<crate::crash::flight::Flight>,
    /// A sealed variant's file keys (its assets are read with them).
    keys: Option<crate::seal::FileKeys>,
}

impl Client {
    /// Candidate `v` loaded: it becomes the model's last known good, the cache evicts what no
    /// process holds, and the app gets the model with its report.
    fn loaded(
        &self,
        model: &str,
        plan: &Plan,
        v: &Variant,
        opened: Handover,
        attempts: Vec<Attempt>,
        load_started: Instant,
    ) -> Result<LoadedModel, ClientError> {
        let Handover {
            blob,
            program,
            golden,
            downloaded,
            flight,
            keys,
        } = opened;
        let release = plan.manifest.version.to_string();
        // Read before the entry is recorded: a load that fails here leaves the last known
        // good as it was.
        let metadata = crate::run::metadata::ModelMetadata::of(v, &blob, keys)?;
        let entry = ModelEntry {
            release: release.clone(),
            variant: v.id.to_string(),
            delegate: v.delegate.to_string(),
            sha256: v.sha256,
            size: v.size,
            data: v.side_files().map(|f| f.sha256).collect(),
            release_envelope: plan.release_envelope.clone(),
            incompatible: None,
            receipt: plan.receipt.clone(),
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
        let source = if downloaded.is_some() {
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
        report.sources = downloaded.unwrap_or_default();
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
            flight,
            other_methods: Vec::new(),
            _guard: guard,
        })
    }
}
