//! Loading: for each verified candidate, best first, the cached or downloaded blob, the
//! runtime's open and method load, the golden check; telemetry for every step; the last known
//! good variant when the server cannot be used.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use ferry_shared::Sha256Digest;
use ferry_shared::errors::ErrorCode;
use ferry_shared::manifest::Variant;
use ferry_shared::telemetry::{EventKind, Outcome, TelemetryEvent};

use crate::cache::{ModelEntry, VerifiedBlob};
use crate::cached::{CacheMiss, LastGood};
use crate::error::{Attempt, ClientError, Stage};
use crate::policy::{DownloadPlan, LoadMode, LoadOptions};
use crate::runtime::{Program, max_abs_diff};
use crate::types::{DeviceInfo, InUseGuard, LoadReport, LoadedModel, Prefetched, Source};
use crate::verify::PlannedVariant;
use crate::{Client, download};

/// A failed load: the stage, a stable code and the message.
pub(crate) type LoadFailure = (Stage, String, String);

/// The largest program part (everything before the segments) [`delegation`] reads.
const MAX_PROGRAM_READ: u64 = 16 << 20;

/// Delegate calls per backend and kernel calls per operator of `method` in the verified program
/// at `path`, read from its flatbuffer (only the program part, not the segments, and at most
/// [`MAX_PROGRAM_READ`] bytes). `None` when it cannot be read.
fn delegation(
    path: &std::path::Path,
    method: &str,
) -> Option<(BTreeMap<String, u64>, BTreeMap<String, u64>)> {
    use std::io::Read as _;
    let limits = ferry_shared::pte::PteLimits::default();
    let mut file = std::fs::File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    let mut head = vec![0u8; size.min(64) as usize];
    file.read_exact(&mut head).ok()?;
    let need = ferry_shared::pte::required_prefix(&head, &limits)
        .ok()?
        .min(size);
    if need > MAX_PROGRAM_READ {
        return None;
    }
    use std::io::Seek as _;
    file.rewind().ok()?;
    let mut prefix = Vec::new();
    file.take(need).read_to_end(&mut prefix).ok()?;
    let report = ferry_shared::pte::inspect_prefix(&prefix, size, &limits).ok()?;
    let m = report.method(method)?;
    Some((m.delegate_calls.clone(), m.kernel_calls.clone()))
}

/// Runs `method` on the golden's inputs for it and compares with its expected outputs within
/// `atol`: the largest difference, `None` when the golden has nothing for the method.
pub(crate) fn check_golden(
    program: &mut dyn Program,
    method: &str,
    golden: &ferry_shared::manifest::Golden,
) -> Result<Option<f64>, LoadFailure> {
    let Some((input, output)) = golden.for_method(method) else {
        return Ok(None);
    };
    let out = program
        .run(method, input)
        .map_err(|e| (Stage::Execute, e.code.to_string(), e.message))?;
    match max_abs_diff(&out, output) {
        Some(d) if d <= golden.atol => Ok(Some(d)),
        Some(d) => Err((
            Stage::Golden,
            ErrorCode::GoldenMismatch.as_str().into(),
            format!(
                "golden check of {method}: max |diff| {d:e} exceeds atol {:e}",
                golden.atol
            ),
        )),
        None => Err((
            Stage::Golden,
            ErrorCode::GoldenMismatch.as_str().into(),
            format!(
                "golden check of {method}: the outputs differ from the expected ones in count, \
                 element type or shape"
            ),
        )),
    }
}

/// The length of a partial download (0 when there is none).
fn part_len(part: &std::path::Path) -> u64 {
    std::fs::metadata(part).map(|m| m.len()).unwrap_or(0)
}

/// `events` with the receipt of the resolve answer they are about (what makes the server count
/// them).
fn stamped(mut events: Vec<TelemetryEvent>, receipt: Option<&str>) -> Vec<TelemetryEvent> {
    for e in &mut events {
        e.receipt = receipt.map(str::to_string);
    }
    events
}

impl Client {
    /// Makes sure the variant's verified files (its program and data files) are all in the
    /// cache; returns the program with its data files and whether anything was downloaded now.
    /// A download `opts` does not allow is refused before any byte is fetched
    /// (`DownloadDeferred`); `spent` counts the bytes this load fetched so far (for the byte
    /// budget) and grows by what this call fetches. Each file is kept once by its digest, so
    /// a data file another variant or model already brought is not fetched again.
    fn ensure_blob(
        &self,
        model: &str,
        c: &PlannedVariant,
        opts: &LoadOptions,
        spent: &mut u64,
    ) -> Result<(VerifiedBlob, bool), ClientError> {
        let v = &c.variant;
        let data_ids: Vec<String> = v
            .extra_files
            .iter()
            .map(|f| format!("{} data file {}", v.id, f.name))
            .collect();
        let mut wanted = vec![download::Wanted::from(v)];
        for (f, id) in v.extra_files.iter().zip(&data_ids) {
            wanted.push(download::Wanted {
                id,
                sha256: f.sha256,
                size: f.size,
            });
        }
        let total: u64 = wanted.iter().map(|w| w.size).sum();
        // What is cached and verified, and what still has to come.
        let mut have: Vec<Option<VerifiedBlob>> = Vec::with_capacity(wanted.len());
        {
            let mut cache = self.cache();
            for w in &wanted {
                let blob = cache.verified_blob(&w.sha256, w.size)?;
                if blob.is_some() {
                    cache.mark_used(&w.sha256, w.size)?;
                }
                have.push(blob);
            }
        }
        let mut to_fetch = 0u64;
        for (w, h) in wanted.iter().zip(&have) {
            if h.is_none() {
                to_fetch += w
                    .size
                    .saturating_sub(part_len(&self.cache().part_path(&w.sha256)));
            }
        }
        if to_fetch > 0
            && let Some(reason) = opts.policy.refusal(to_fetch, *spent, &opts.conditions)
        {
            return Err(ClientError::DownloadDeferred {
                model: model.to_string(),
                variant: v.id.to_string(),
                reason,
            });
        }
        let mut downloaded = false;
        // Bytes of the variant's files already complete, for one progress count over all.
        let mut done: u64 = wanted
            .iter()
            .zip(&have)
            .filter(|(_, h)| h.is_some())
            .map(|(w, _)| w.size)
            .sum();
        let mut blobs = Vec::with_capacity(wanted.len());
        for (w, h) in wanted.iter().zip(have) {
            if let Some(blob) = h {
                blobs.push(blob);
                continue;
            }
            // One process of the app downloads a file into the shared cache; the others wait
            // for it (bounded), then take the finished file or download on their own.
            let lock_path = self.cache().download_lock_path(&w.sha256);
            let lock = crate::locks::exclusive_within(&lock_path, self.limits.shared_wait)?;
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
            let url = if w.sha256 == v.sha256 {
                self.url_for(&c.url)
            } else {
                self.data_url(&c.url, &v.sha256, &w.sha256)
            };
            let progress: Option<crate::download::ProgressFn> = self.progress.as_ref().map(|p| {
                let (p, id, offset) = (p.clone(), v.id.to_string(), done);
                let f: crate::download::ProgressFn =
                    Arc::new(move |_: &str, n: u64, _: u64| p(&id, offset + n, total));
                f
            });
            let result = download::fetch(
                &self.agent,
                &url,
                &part,
                *w,
                &self.limits,
                progress.as_ref(),
            );
            if let Err(e) = result {
                *spent += part_len(&part).saturating_sub(had);
                if matches!(e, ClientError::DiskFull { .. }) {
                    // Free what the failed download took; the cache stays as it was.
                    let _ = std::fs::remove_file(&part);
                }
                return Err(e);
            }
            *spent += w.size.saturating_sub(had);
            done += w.size;
            downloaded = true;
            blobs.push(self.cache().commit_file(&part, &w.sha256, w.size)?);
            drop(lock);
        }
        let mut blobs = blobs.into_iter();
        let program = blobs
            .next()
            .ok_or_else(|| ClientError::DecisionMismatch("no program".into()))?;
        Ok((program.with_data(blobs.collect()), downloaded))
    }

    /// Where a data file of the variant whose program is at `program_url` is: the same place
    /// with the data file's digest in place of the program's (blob addresses end in the
    /// digest), else the server's blob endpoint.
    fn data_url(&self, program_url: &str, program: &Sha256Digest, data: &Sha256Digest) -> String {
        match program_url.strip_suffix(program.to_hex().as_str()) {
            Some(base) => self.url_for(&format!("{base}{}", data.to_hex())),
            None => self.url_for(&format!("/v1/blobs/sha256/{}", data.to_hex())),
        }
    }

    pub(crate) fn event(
        &self,
        kind: EventKind,
        release: &str,
        model: &str,
        v: Option<&Variant>,
        device: &DeviceInfo,
    ) -> TelemetryEvent {
        TelemetryEvent {
            kind,
            model: model.to_string(),
            release: release.to_string(),
            variant: v.map(|v| v.id.to_string()).unwrap_or_default(),
            delegate: v.map(|v| v.delegate.to_string()).unwrap_or_default(),
            outcome: Outcome::Ok,
            error_code: None,
            load_ms: None,
            install_id: device.install_id.clone(),
            platform: device.platform.to_string(),
            soc: device.soc.clone(),
            device_model: device.device_model.clone(),
            os_version: device.os_version.clone(),
            app_version: self.app_version.to_string(),
            runtime_version: self.runtime.version().to_string(),
            at: self
                .clock
                .now()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            to_variant: None,
            receipt: None,
            stage: None,
        }
    }

    /// Opens the program, checks backends, loads the method, runs the golden check.
    fn open_and_check(
        &self,
        blob: &VerifiedBlob,
        v: &Variant,
    ) -> Result<(Box<dyn Program>, Option<f64>), LoadFailure> {
        let registered = self.runtime.registered_backends();
        let mut program = self
            .runtime
            .open(blob)
            .map_err(|e| (Stage::LoadProgram, e.code.to_string(), e.message))?;
        let needed = program
            .method_backends(&self.method)
            .map_err(|e| (Stage::LoadMethod, e.code.to_string(), e.message))?;
        let missing: Vec<String> = needed
            .into_iter()
            .filter(|b| !registered.contains(b))
            .collect();
        if let Err(e) = program.load_method(&self.method) {
            let msg = if missing.is_empty() {
                e.message
            } else {
                format!(
                    "{}; method {} needs {}, which this runtime does not register",
                    e.message,
                    self.method,
                    missing.join(", ")
                )
            };
            return Err((Stage::LoadMethod, e.code.to_string(), msg));
        }
        let diff = match &v.golden {
            Some(g) => check_golden(program.as_mut(), &self.method, g)?,
            None => None,
        };
        Ok((program, diff))
    }

    /// Resolves, downloads, verifies, caches and loads `model` for `device`, falling back
    /// through the candidates; serves the last known good cached variant when the server
    /// cannot be used.
    pub fn load(&self, model: &str, device: &DeviceInfo) -> Result<LoadedModel, ClientError> {
        self.load_opts(model, device, &LoadOptions::default())
            .map(|(loaded, _)| loaded)
    }

    /// [`Client::load`] with a load mode, a download policy and the device's conditions. With
    /// [`LoadMode::CachedThenUpdate`] and a cached copy, the copy is loaded now and a
    /// background thread (one per model at a time) downloads the latest under the same
    /// policy; when that is a different variant, it loads it once (verify, load, golden) so
    /// that it becomes the last known good the next load finds. The update's outcome is not
    /// returned; its downloads and loads are reported in telemetry like any other.
    pub fn load_with(
        self: &Arc<Self>,
        model: &str,
        device: &DeviceInfo,
        opts: &LoadOptions,
    ) -> Result<LoadedModel, ClientError> {
        let (loaded, from_cache) = self.load_opts(model, device, opts)?;
        if opts.mode == LoadMode::CachedThenUpdate && from_cache {
            self.update_in_background(model, device, opts);
        }
        Ok(loaded)
    }

    /// Fetches and adopts the latest variant of `model` on a background thread, unless one is
    /// already doing so for this model.
    fn update_in_background(
        self: &Arc<Self>,
        model: &str,
        device: &DeviceInfo,
        opts: &LoadOptions,
    ) {
        {
            let mut updating = match self.updating.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            if !updating.insert(model.to_string()) {
                return;
            }
        }
        let (client, model, device, opts) =
            (self.clone(), model.to_string(), device.clone(), *opts);
        let task_client = client.clone();
        let task_model = model.clone();
        let spawned = std::thread::Builder::new()
            .name("ferry-update".into())
            .spawn(move || {
                let (client, model) = (task_client, task_model);
                if let Ok(got) = client.prefetch_with(&model, &device, &opts) {
                    let current = client.cached(&model);
                    let same = current
                        .is_some_and(|c| c.release == got.release && c.variant == got.variant);
                    if !same {
                        let latest = LoadOptions {
                            mode: LoadMode::Latest,
                            ..opts
                        };
                        drop(client.load_opts(&model, &device, &latest));
                    }
                }
                client.done_updating(&model);
            });
        if spawned.is_err() {
            client.done_updating(&model);
        }
    }

    fn done_updating(&self, model: &str) {
        let mut updating = match self.updating.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        updating.remove(model);
    }

    /// A load; `true` with it when it came from the cache without asking the server.
    fn load_opts(
        &self,
        model: &str,
        device: &DeviceInfo,
        opts: &LoadOptions,
    ) -> Result<(LoadedModel, bool), ClientError> {
        self.report_incompatible(device);
        let result = match opts.mode {
            LoadMode::Latest => self.load_inner(model, device, opts).map(|l| (l, false)),
            LoadMode::CachedOrDownload | LoadMode::CachedThenUpdate => {
                match self.load_cached(model, device, Source::Cached, None, Instant::now()) {
                    Ok(Ok(loaded)) => Ok((loaded, true)),
                    _ => self.load_inner(model, device, opts).map(|l| (l, false)),
                }
            }
        };
        if self.autosend {
            self.send_in_background();
        }
        result
    }

    /// Starts a background send unless one is running.
    fn send_in_background(&self) {
        use std::sync::atomic::Ordering;
        if self.sending.swap(true, Ordering::AcqRel) {
            return;
        }
        let (queue, agent, server, flag) = (
            self.telemetry.clone(),
            self.agent.clone(),
            self.server.clone(),
            self.sending.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("ferry-telemetry".into())
            .spawn(move || {
                queue.send(&agent, &server);
                flag.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.sending.store(false, Ordering::Release);
        }
    }

    fn load_inner(
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
        let mut attempts = Vec::new();
        let mut events = Vec::new();
        let mut deferred = None;
        let mut spent = 0u64;
        for (i, c) in plan.candidates.iter().enumerate() {
            let v = &c.variant;
            let candidate_started = Instant::now();
            let fail = |stage: Stage,
                        code: &str,
                        message: String,
                        events: &mut Vec<TelemetryEvent>,
                        attempts: &mut Vec<Attempt>| {
                attempts.push(Attempt {
                    variant: v.id.to_string(),
                    delegate: v.delegate.to_string(),
                    stage,
                    error_code: code.to_string(),
                    message,
                    duration_ms: candidate_started.elapsed().as_secs_f64() * 1000.0,
                });
                if let Some(next) = plan.candidates.get(i + 1) {
                    events.push(TelemetryEvent {
                        error_code: Some(code.to_string()),
                        outcome: Outcome::Failed,
                        to_variant: Some(next.variant.id.to_string()),
                        stage: Some(stage.as_str().to_string()),
                        ..self.event(EventKind::Fallback, &release, model, Some(v), device)
                    });
                }
            };
            let (blob, downloaded) = match self.ensure_blob(model, c, opts, &mut spent) {
                Ok(x) => x,
                Err(e @ ClientError::DownloadDeferred { .. }) => {
                    // Not the variant's failure: no telemetry; a cached candidate after it or
                    // the last known good may still load.
                    attempts.push(Attempt {
                        variant: v.id.to_string(),
                        delegate: v.delegate.to_string(),
                        stage: Stage::Download,
                        error_code: e.code().to_string(),
                        message: e.to_string(),
                        duration_ms: candidate_started.elapsed().as_secs_f64() * 1000.0,
                    });
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
                    events.push(TelemetryEvent {
                        outcome: Outcome::Failed,
                        error_code: Some(e.code().to_string()),
                        stage: Some(stage.as_str().to_string()),
                        ..self.event(EventKind::Download, &release, model, Some(v), device)
                    });
                    if matches!(e, ClientError::DiskFull { .. }) {
                        let _ = self
                            .telemetry
                            .push(&stamped(events, plan.receipt.as_deref()));
                        return Err(e);
                    }
                    fail(stage, e.code(), e.to_string(), &mut events, &mut attempts);
                    continue;
                }
            };
            if downloaded {
                events.push(self.event(EventKind::Download, &release, model, Some(v), device));
            }
            let started = Instant::now();
            match self.open_and_check(&blob, v) {
                Ok((program, golden)) => {
                    let ms = started.elapsed().as_secs_f64() * 1000.0;
                    events.push(TelemetryEvent {
                        load_ms: Some(ms),
                        ..self.event(EventKind::Load, &release, model, Some(v), device)
                    });
                    let _ = self
                        .telemetry
                        .push(&stamped(events, plan.receipt.as_deref()));
                    let entry = ModelEntry {
                        release: release.clone(),
                        variant: v.id.to_string(),
                        delegate: v.delegate.to_string(),
                        sha256: v.sha256,
                        size: v.size,
                        data: v.extra_files.iter().map(|f| f.sha256).collect(),
                        release_envelope: plan.release_envelope.clone(),
                        incompatible: None,
                    };
                    let guard = InUseGuard::new(&self.in_use, &blob);
                    {
                        let mut cache = self.cache();
                        cache.set_last_good(model, entry)?;
                        let in_use: BTreeSet<Sha256Digest> = self
                            .in_use
                            .lock()
                            .map(|g| g.keys().copied().collect())
                            .unwrap_or_default();
                        cache.evict(&in_use)?;
                    }
                    let source = if downloaded {
                        Source::Downloaded
                    } else {
                        Source::Cached
                    };
                    let report = self.report(
                        model,
                        Some((&release, v, &blob)),
                        &source,
                        &attempts,
                        load_started,
                    );
                    return Ok(LoadedModel {
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
                        method: self.method.clone(),
                        program,
                        other_methods: Vec::new(),
                        _guard: guard,
                    });
                }
                Err((stage, code, message)) => {
                    events.push(TelemetryEvent {
                        outcome: Outcome::Failed,
                        error_code: Some(code.clone()),
                        stage: Some(stage.as_str().to_string()),
                        load_ms: Some(started.elapsed().as_secs_f64() * 1000.0),
                        ..self.event(EventKind::Load, &release, model, Some(v), device)
                    });
                    fail(stage, &code, message, &mut events, &mut attempts);
                }
            }
        }
        let _ = self
            .telemetry
            .push(&stamped(events, plan.receipt.as_deref()));
        if let Some(e) = deferred {
            // A download was not allowed: what is cached serves, or the deferral is the error.
            return self.load_last_good(model, device, e, load_started);
        }
        Err(ClientError::AllCandidatesFailed { attempts })
    }

    /// Loads the last known good variant after the server could not be used or a download
    /// was not allowed (`cause`).
    fn load_last_good(
        &self,
        model: &str,
        device: &DeviceInfo,
        cause: ClientError,
        load_started: Instant,
    ) -> Result<LoadedModel, ClientError> {
        // Why the server's answer was not used, as the report's first step.
        let first = Attempt {
            variant: String::new(),
            delegate: String::new(),
            stage: if matches!(cause, ClientError::DownloadDeferred { .. }) {
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
        match self.load_cached(model, device, source, Some(first), load_started)? {
            Ok(loaded) => Ok(loaded),
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
                    "{cause} (the cached copy failed its integrity check and was removed)"
                ),
            }),
        }
    }

    /// Loads the model's last known good cached variant after checking it, and that its signed
    /// constraints still admit `device` ([`Client::usable_last_good`]), reporting it as
    /// `source` with `first` (and any cached entry passed over) as the report's first attempts.
    /// `Ok(Err(_))`: nothing usable is cached.
    fn load_cached(
        &self,
        model: &str,
        device: &DeviceInfo,
        source: Source,
        first: Option<Attempt>,
        load_started: Instant,
    ) -> Result<Result<LoadedModel, CacheMiss>, ClientError> {
        let (
            LastGood {
                entry,
                variant,
                blob,
                ..
            },
            skipped,
        ) = match self.usable_last_good(model, device)? {
            Ok(found) => found,
            Err(miss) => return Ok(Err(miss)),
        };
        let Some(blob) = blob else {
            return Ok(Err(CacheMiss::Corrupt));
        };
        let first: Vec<Attempt> = first.into_iter().chain(skipped).collect();
        let started = Instant::now();
        let (program, golden) =
            self.open_and_check(&blob, &variant)
                .map_err(|(stage, code, message)| ClientError::AllCandidatesFailed {
                    attempts: vec![Attempt {
                        variant: variant.id.to_string(),
                        delegate: variant.delegate.to_string(),
                        stage,
                        error_code: code,
                        message,
                        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                    }],
                })?;
        let entry_release = entry.release.clone();
        let report = self.report(
            model,
            Some((&entry_release, &variant, &blob)),
            &source,
            first.as_slice(),
            load_started,
        );
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
            method: self.method.clone(),
            program,
            other_methods: Vec::new(),
            _guard: InUseGuard::new(&self.in_use, &blob),
        }))
    }

    /// The load report of a finished load: `chosen` is the release, variant and verified file
    /// that loaded.
    fn report(
        &self,
        model: &str,
        chosen: Option<(&str, &Variant, &VerifiedBlob)>,
        source: &Source,
        attempts: &[Attempt],
        started: Instant,
    ) -> LoadReport {
        let (delegated, portable_kernels) = chosen
            .and_then(|(_, _, blob)| delegation(blob.path(), &self.method))
            .unzip();
        LoadReport {
            model: model.to_string(),
            release: chosen.map(|(r, _, _)| r.to_string()),
            variant: chosen.map(|(_, v, _)| v.id.to_string()),
            delegate: chosen.map(|(_, v, _)| v.delegate.to_string()),
            source: match source {
                Source::Downloaded => "downloaded",
                Source::Cached => "cached",
                Source::LastKnownGood { .. } => "last_known_good",
            }
            .into(),
            method: self.method.clone(),
            attempts: attempts.to_vec(),
            registered_backends: self.runtime.registered_backends(),
            delegated,
            portable_kernels,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            protocol_sunset: self.protocol_sunset(),
        }
    }

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

    /// What [`Client::prefetch`] would download, known before any byte is fetched: the
    /// release, variant, signed size and the bytes still to fetch (0 when a file of the signed
    /// size is cached; its digest is checked when it is used). A load tries the same variant
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
        let files = std::iter::once((v.sha256, v.size))
            .chain(v.extra_files.iter().map(|f| (f.sha256, f.size)));
        let (mut size, mut to_download) = (0u64, 0u64);
        for (d, n) in files {
            size += n;
            let cached = self.cache().blob_path(&d);
            if !std::fs::metadata(&cached).is_ok_and(|m| m.len() == n) {
                to_download += n.saturating_sub(part_len(&self.cache().part_path(&d)));
            }
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
        plan: &'p crate::verify::Plan,
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
