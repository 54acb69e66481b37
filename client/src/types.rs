//! The values apps hand to and get back from the [`Client`](crate::Client): device facts, the
//! loaded model and where it came from, cached and prefetched variants, and the clock.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ferry_shared::Sha256Digest;
use ferry_shared::manifest::{Platform, TensorValue};
use time::OffsetDateTime;

use crate::error::Attempt;
use crate::runtime::{MethodSignature, Program, RuntimeError};

/// Where time comes from (injectable so tests can play an expired decision).
pub trait Clock: Send + Sync {
    /// The current UTC time (the wall clock, which may be wrong).
    fn now(&self) -> OffsetDateTime;

    /// This boot's id and the time since it started, counting suspend: what the client's
    /// estimate of the server's time is carried by (`docs/client.md`, device clocks). `None`
    /// (the default) keeps the client on [`Clock::now`].
    fn since_boot(&self) -> Option<(String, std::time::Duration)> {
        None
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    /// Linux and Android: the kernel's boot id and `CLOCK_BOOTTIME` (`/proc/uptime`).
    fn since_boot(&self) -> Option<(String, std::time::Duration)> {
        crate::timekeeping::system_since_boot()
    }
}

/// What the device tells the server about itself (the runtime version and registered backends
/// come from the [`Runtime`](crate::Runtime)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// A stable, app-scoped install id (decides rollout cohorts).
    pub install_id: String,
    /// Platform.
    pub platform: Platform,
    /// OS version.
    pub os_version: String,
    /// Device model.
    pub device_model: String,
    /// System on chip.
    pub soc: String,
    /// RAM in MiB.
    pub ram_mb: u64,
    /// Backends to claim beyond those the runtime registered (testing on a desktop what a
    /// phone would be offered); the runtime's real answer still decides what loads.
    pub claimed_backends: Vec<String>,
}

/// Where the loaded bytes came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Downloaded now.
    Downloaded,
    /// Already in the cache (re-verified before loading).
    Cached,
    /// The server could not be used; the last known good verified variant was loaded.
    LastKnownGood {
        /// Why the server was not used (error code).
        code: String,
        /// Its message.
        reason: String,
    },
}

/// One load, start to end: what was chosen, what was tried before it and why each failed (with
/// the stage), what the runtime registers, and how the chosen program splits between delegates
/// and portable kernels.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LoadReport {
    /// Model name.
    pub model: String,
    /// The release that loaded.
    pub release: Option<String>,
    /// The variant that loaded.
    pub variant: Option<String>,
    /// Its delegate, as the signed manifest says.
    pub delegate: Option<String>,
    /// `downloaded`, `cached` or `last_known_good`.
    pub source: String,
    /// The method loaded.
    pub method: String,
    /// Each candidate tried before the one that loaded, in order, with the stage that failed,
    /// its error code, message and time; for `last_known_good`, first the resolve failure
    /// that made the client fall back to the cache.
    pub attempts: Vec<Attempt>,
    /// Backends the runtime registers.
    pub registered_backends: Vec<String>,
    /// Calls of the loaded method into each delegate (backend id to count), from the verified
    /// program; `None` when its program table could not be read (over 16 MiB before the
    /// segments, or a layout the inspector does not know).
    pub delegated: Option<BTreeMap<String, u64>>,
    /// Operators the loaded method runs on portable or optimized kernels, not a delegate
    /// (operator to call count): what stayed on the CPU outside the delegate. `None` as for
    /// `delegated`.
    pub portable_kernels: Option<BTreeMap<String, u64>>,
    /// Time from the start of the load (before resolving) to the end, in milliseconds.
    pub duration_ms: f64,
    /// The day after which the server may stop answering this client's protocol, when it
    /// announced one (see [`crate::Client::protocol_sunset`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_sunset: Option<String>,
    /// How far the device's wall clock is from the server's time, in seconds (positive:
    /// ahead), when the client has learned it (see [`crate::Client::clock_offset_secs`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_offset_s: Option<i64>,
    /// What the on-device probe did, when the load options asked for one
    /// ([`crate::LoadOptions::probe`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeReport>,
    /// How the runtime read the program and its data files: `mmap` (large programs: mapped
    /// from the cache, paged in on demand) or `file` (read into memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_mode: Option<String>,
}

/// What the on-device probe did after a load.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProbeReport {
    /// Why it did not run (power-saving mode, or the release was probed before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Each candidate timed, best-ranked first, as its `inference` event reports it.
    pub timed: Vec<ProbeTiming>,
}

/// One candidate's probe.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProbeTiming {
    /// Variant id.
    pub variant: String,
    /// Its delegate.
    pub delegate: String,
    /// Runs timed (all warm: the load's golden check ran first).
    pub runs: u64,
    /// The warm runs' median.
    pub p50_ms: Option<f64>,
    /// The warm runs' 95th percentile.
    pub p95_ms: Option<f64>,
}

/// A model loaded into the runtime.
pub struct LoadedModel {
    /// Model name.
    pub model: String,
    /// Release version.
    pub release: String,
    /// Variant id.
    pub variant: String,
    /// Its delegate.
    pub delegate: String,
    /// The verified file on disk.
    pub path: PathBuf,
    /// The verified data files (`.ptd`) it was loaded with, in the manifest's order.
    pub data_files: Vec<PathBuf>,
    /// Where it came from.
    pub source: Source,
    /// Candidates tried before this one, and why each failed.
    pub attempts: Vec<Attempt>,
    /// Everything about this load in one value, to show or log (and to send anywhere as JSON).
    pub report: LoadReport,
    /// Largest difference of the golden check, when the manifest had one.
    pub golden_max_abs_diff: Option<f64>,
    /// The method that was loaded.
    pub method: String,
    pub(crate) program: Box<dyn Program>,
    /// Methods loaded by [`LoadedModel::run_method`] besides `method`.
    pub(crate) other_methods: Vec<String>,
    /// The variant's signed golden, for methods loaded later.
    pub(crate) golden: Option<ferry_shared::manifest::Golden>,
    /// Each method's signed input and output contract (`None`: signed before ferry recorded
    /// it; inputs then go to the runtime unchecked).
    pub(crate) contract: Option<std::collections::BTreeMap<String, ferry_shared::pte::Signature>>,
    /// The variant's signed metadata: preprocessing, labels, assets.
    pub(crate) metadata: crate::metadata::ModelMetadata,
    /// Its run timings, and the queue its last summaries go to when it is dropped.
    pub(crate) times: Option<Timing>,
    /// The receipt of the resolve answer it was loaded from (none from the cache alone).
    pub(crate) receipt: Option<String>,
    pub(crate) _guard: InUseGuard,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("model", &self.model)
            .field("release", &self.release)
            .field("variant", &self.variant)
            .field("delegate", &self.delegate)
            .field("path", &self.path)
            .field("source", &self.source)
            .field("attempts", &self.attempts)
            .finish()
    }
}

/// A loaded model's run timings and where they go: when the model is dropped, its runs since
/// the last flush are queued as `inference` events.
pub(crate) struct Timing {
    pub(crate) times: Arc<Mutex<crate::inference::RunTimes>>,
    pub(crate) queue: Arc<crate::telemetry::TelemetryQueue>,
    /// The device clock's offset from the server's time at load (seconds, positive: ahead),
    /// to stamp the last events.
    pub(crate) offset_s: i64,
}

impl Drop for Timing {
    fn drop(&mut self) {
        let at = (OffsetDateTime::now_utc() - time::Duration::seconds(self.offset_s))
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        let events = crate::inference::final_events(&self.times, &at);
        if !events.is_empty() {
            let _ = self.queue.push(&events);
        }
    }
}

impl LoadedModel {
    /// Runs `method` on the program and times it when it succeeds.
    fn timed_run(
        &mut self,
        method: &str,
        inputs: &[TensorValue],
    ) -> Result<Vec<TensorValue>, RuntimeError> {
        let started = std::time::Instant::now();
        let out = self.program.run(method, inputs)?;
        let took = started.elapsed();
        if let Some(t) = &self.times {
            ferry_shared::sync::lock(&t.times).record(method, started, took);
        }
        Ok(out)
    }

    /// Runs the loaded method (the client's [`method`](crate::ClientBuilder::method),
    /// `forward` by default). Every successful call is timed for the `inference` telemetry.
    pub fn run(&mut self, inputs: &[TensorValue]) -> Result<Vec<TensorValue>, RuntimeError> {
        let method = std::mem::take(&mut self.method);
        let checked = check_inputs(&method, self.contract(&method), inputs);
        let out = checked.and_then(|()| self.timed_run(&method, inputs));
        self.method = method;
        out
    }

    /// `method`'s inputs and outputs as the program declares them and the release signed
    /// them: element type, sizes (a bounded dimension at its upper bound), dim order and
    /// whether sizes may vary. `None` for a release signed before ferry recorded it.
    pub fn contract(&self, method: &str) -> Option<&ferry_shared::pte::Signature> {
        self.contract.as_ref()?.get(method)
    }

    /// How the app prepares the first input from an image, as the release signed it (resize,
    /// colour order, layout, value range, mean and std); `None` when the release says nothing.
    pub fn preprocess(&self) -> Option<&ferry_shared::manifest::Preprocess> {
        self.metadata.preprocess.as_ref()
    }

    /// The class labels in output order, from the release's signed labels file; `None` when it
    /// has none.
    pub fn labels(&self) -> Option<&[String]> {
        self.metadata.labels.as_deref()
    }

    /// The verified file of the asset `name` (a labels file, a tokenizer) in the cache, valid
    /// while this model is loaded; `None` when the variant has no such asset.
    pub fn asset(&self, name: &str) -> Option<&std::path::Path> {
        self.metadata.assets.get(name).map(PathBuf::as_path)
    }

    /// Every asset of the variant by name, with its verified file.
    pub fn assets(&self) -> &BTreeMap<String, PathBuf> {
        &self.metadata.assets
    }

    /// Runs another method of the same program by name, loading it first when it is not
    /// loaded yet (a method whose delegate the runtime lacks fails here, with the runtime's
    /// error). When the signed manifest has a golden for the method, it runs once after the
    /// load, and a mismatch is an error (`golden_mismatch`) until a later call passes it.
    /// Inputs are checked against the method's declared types and counts.
    pub fn run_method(
        &mut self,
        method: &str,
        inputs: &[TensorValue],
    ) -> Result<Vec<TensorValue>, RuntimeError> {
        if method != self.method && !self.other_methods.iter().any(|m| m == method) {
            self.program.load_method(method)?;
            if let Some(g) = &self.golden {
                crate::golden::check_golden(self.program.as_mut(), method, g)?;
            }
            self.other_methods.push(method.to_string());
        }
        check_inputs(method, self.contract(method), inputs)?;
        self.timed_run(method, inputs)
    }

    /// The inputs and outputs `method` declares in the program's metadata (element types and
    /// shapes), so an app can build its tensors without hard-coding them.
    pub fn signature(&mut self, method: &str) -> Result<MethodSignature, RuntimeError> {
        self.program.signature(method)
    }
}

/// Checks `inputs` against a method's signed contract before the runtime sees them:
/// the number of inputs (`invalid_argument`), then each one's element type, number of
/// dimensions and sizes (fixed, or at most its bound: `input_mismatch`). Values the program
/// takes that are not tensors are left to the runtime.
fn check_inputs(
    method: &str,
    contract: Option<&ferry_shared::pte::Signature>,
    inputs: &[TensorValue],
) -> Result<(), RuntimeError> {
    use ferry_shared::pte::Dynamism;
    let Some(sig) = contract else {
        return Ok(());
    };
    if sig.inputs.len() != inputs.len() {
        return Err(RuntimeError {
            code: ferry_shared::errors::ErrorCode::InvalidArgument,
            message: format!(
                "{method} takes {} inputs, {} were given",
                sig.inputs.len(),
                inputs.len()
            ),
        });
    }
    let mismatch = |message: String| RuntimeError {
        code: ferry_shared::errors::ErrorCode::InputMismatch,
        message,
    };
    for (i, (spec, value)) in sig.inputs.iter().zip(inputs).enumerate() {
        if !spec.is_tensor() {
            continue;
        }
        if spec.dtype != value.dtype {
            return Err(mismatch(format!(
                "input {i}: element type {}, the program takes {}",
                value.dtype, spec.dtype
            )));
        }
        if spec.shape.len() != value.shape.len() {
            return Err(mismatch(format!(
                "input {i}: {} dimensions {:?}, the program takes {} ({})",
                value.shape.len(),
                value.shape,
                spec.shape.len(),
                spec.describe()
            )));
        }
        for (d, (bound, got)) in spec.shape.iter().zip(&value.shape).enumerate() {
            let got = i64::try_from(*got).unwrap_or(i64::MAX);
            match spec.dynamism {
                Dynamism::Static if got != *bound => {
                    return Err(mismatch(format!(
                        "input {i} dimension {d}: size {got}, the program takes exactly {bound}"
                    )));
                }
                Dynamism::Bounded if got > *bound => {
                    return Err(mismatch(format!(
                        "input {i} dimension {d}: size {got} is above the bound {bound} the \
                         program was exported with"
                    )));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// A model's cached, verified variant (for offline use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedModel {
    /// Release version.
    pub release: String,
    /// Variant id.
    pub variant: String,
    /// Delegate.
    pub delegate: String,
    /// File on disk.
    pub path: PathBuf,
    /// Digest.
    pub sha256: Sha256Digest,
}

/// Blobs held by live [`LoadedModel`]s (never evicted).
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

/// What [`Client::prefetch`](crate::Client::prefetch) stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefetched {
    /// Release.
    pub release: String,
    /// Variant downloaded.
    pub variant: String,
    /// File.
    pub path: PathBuf,
}
