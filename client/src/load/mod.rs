//! Loading: for each verified candidate, best first, the cached or downloaded blob, the
//! runtime's open and method load, the golden check; telemetry for every step; the last known
//! good variant when the server cannot be used.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use ferry_shared::manifest::Variant;
use ferry_shared::wire::telemetry::{EventKind, Outcome, TelemetryEvent};

use crate::Client;
use crate::cache::VerifiedBlob;
use crate::error::{Attempt, ClientError};
use crate::policy::{LoadMode, LoadOptions};
use crate::run::model::LoadedModel;
use crate::types::{DeviceInfo, LoadReport, Source};

mod drive;
mod fetch;
mod offline;
mod open;
mod prefetch;
mod probe;
mod walk;

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

/// `events` with the receipt of the resolve answer they are about (what makes the server count
/// them).
pub(crate) fn stamped(
    mut events: Vec<TelemetryEvent>,
    receipt: Option<&str>,
) -> Vec<TelemetryEvent> {
    for e in &mut events {
        e.receipt = receipt.map(str::to_string);
    }
    events
}

impl Client {
    /// `template` (a `verify` event) as the failed one of a cached file found corrupt: outcome
    /// failed, `hash_mismatch`, stage `cache`.
    pub(crate) fn corrupt_event(template: TelemetryEvent) -> TelemetryEvent {
        TelemetryEvent {
            outcome: Outcome::Failed,
            error_code: Some(
                ferry_shared::errors::ErrorCode::HashMismatch
                    .as_str()
                    .to_string(),
            ),
            stage: Some(crate::error::Stage::Cache.as_str().to_string()),
            ..template
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
                .now()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            to_variant: None,
            receipt: None,
            stage: None,
            clock_offset_s: self.clock_offset_secs(),
            inference: Default::default(),
            bytes_fetched: None,
            bytes_total: None,
            sources: Vec::new(),
            metric: Default::default(),
        }
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
            let mut updating = ferry_shared::sync::lock(&self.updating);
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
        let mut updating = ferry_shared::sync::lock(&self.updating);
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
        // The crashes of earlier launches first: each load below passes over what crashed.
        self.recover_crashes(device);
        let result = match opts.mode {
            LoadMode::Latest => self.load_inner(model, device, opts).map(|l| (l, false)),
            LoadMode::CachedOrDownload | LoadMode::CachedThenUpdate => {
                match self.load_cached(model, device, Source::Cached, Vec::new(), Instant::now()) {
                    Ok(Ok(loaded)) => Ok((loaded, true)),
                    _ => self.load_inner(model, device, opts).map(|l| (l, false)),
                }
            }
        };
        if self.autosend {
            self.send_in_background();
        }
        result.map(|(mut loaded, cached)| {
            self.start_timing(&mut loaded, model, device);
            (loaded, cached)
        })
    }

    /// Times the loaded model's runs from now on (unless runs are not timed), summarised as
    /// `inference` events with its release, variant, device and receipt; its app metrics go out
    /// the same way.
    fn start_timing(&self, loaded: &mut LoadedModel, model: &str, device: &DeviceInfo) {
        let mut template = self.event(EventKind::Inference, &loaded.release, model, None, device);
        template.variant.clone_from(&loaded.variant);
        template.delegate.clone_from(&loaded.delegate);
        template.receipt.clone_from(&loaded.receipt);
        loaded.times = Some(crate::run::model::Timing {
            times: self.inference.start(template, self.time_runs),
            queue: self.telemetry.clone(),
            offset_s: self.clock_offset_secs().unwrap_or(0),
        });
    }

    /// Starts a background send unless one is running.
    pub(crate) fn send_in_background(&self) {
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
        // The run timings are drained and queued on the telemetry thread, off the load path.
        let (inference, at) = (self.inference.clone(), self.now_rfc3339());
        let spawned = std::thread::Builder::new()
            .name("ferry-telemetry".into())
            .spawn(move || {
                let events = inference.drain(&at);
                if !events.is_empty() {
                    let _ = queue.push(&events);
                }
                queue.send(&agent, &server);
                flag.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.sending.store(false, Ordering::Release);
        }
    }

    /// The load report of a finished load: `chosen` is the release, variant and verified file
    /// that loaded.
    pub(crate) fn report(
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
            clock_offset_s: self.clock_offset_secs(),
            probe: None,
            load_mode: None,
            sources: Vec::new(),
        }
    }
}
