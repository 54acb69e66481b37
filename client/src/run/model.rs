//! A model loaded into the runtime: what apps run, with its inputs checked against the signed
//! contract, its runs timed for field latency, and its files pinned in the cache while it
//! lives.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ferry_shared::manifest::TensorValue;
use time::OffsetDateTime;

use crate::cache::in_use::InUseGuard;
use crate::error::Attempt;
use crate::runtime::{MethodSignature, Program, RuntimeError};
use crate::types::{LoadReport, Source};

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
    /// Its slot of the flight recorder, marked around each run (`None`: the cache could not
    /// hold one; runs go unrecorded).
    pub(crate) flight: Option<crate::crash::flight::Flight>,
    /// Methods loaded by [`LoadedModel::run_method`] besides `method`.
    pub(crate) other_methods: Vec<String>,
    /// The variant's signed golden, for methods loaded later.
    pub(crate) golden: Option<ferry_shared::manifest::Golden>,
    /// Each method's signed input and output contract (`None`: signed before ferry recorded
    /// it; inputs then go to the runtime unchecked).
    pub(crate) contract: Option<std::collections::BTreeMap<String, ferry_shared::pte::Signature>>,
    /// The variant's signed metadata: preprocessing, labels, assets.
    pub(crate) metadata: crate::run::metadata::ModelMetadata,
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
    pub(crate) times: Arc<Mutex<crate::run::inference::RunTimes>>,
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
        let events = crate::run::inference::final_events(&self.times, &at);
        if !events.is_empty() {
            let _ = self.queue.push(&events);
        }
    }
}

impl LoadedModel {
    /// Records one value of the app metric `name` against this model (its release, variant and
    /// receipt): values are averaged per flush and sent as one `metric` event per name, which
    /// experiments compare between arms (`docs/experiments.md`). Names are 1–64 characters of
    /// `[a-z0-9_.-]` starting with a letter, at most 32 per model between flushes; values are
    /// finite, within ±1e12.
    pub fn record_metric(&self, name: &str, value: f64) -> Result<(), crate::ClientError> {
        if let Some(why) = crate::run::inference::metric_error(name, value) {
            return Err(crate::ClientError::Config(why));
        }
        let Some(t) = &self.times else {
            return Ok(());
        };
        if ferry_shared::sync::lock(&t.times).record_metric(name, value) {
            Ok(())
        } else {
            Err(crate::ClientError::Config(format!(
                "metric {name}: this model already holds {} other metric names until the next \
                 send",
                crate::run::inference::MAX_METRIC_NAMES
            )))
        }
    }

    /// Runs `method` on the program and times it when it succeeds.
    fn timed_run(
        &mut self,
        method: &str,
        inputs: &[TensorValue],
    ) -> Result<Vec<TensorValue>, RuntimeError> {
        if let Some(f) = &mut self.flight {
            f.mark_run();
        }
        let started = std::time::Instant::now();
        let out = self.program.run(method, inputs);
        let took = started.elapsed();
        if let Some(f) = &mut self.flight {
            f.clear_run();
        }
        let out = out?;
        if let Some(t) = &self.times {
            let mut times = ferry_shared::sync::lock(&t.times);
            if times.timed {
                times.record(method, started, took);
            }
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

    /// The asset `name` (a labels file, a tokenizer) to read: its verified file, or for a
    /// sealed variant its sealed file decrypted as it is read (the plaintext is never written
    /// anywhere). Works for every variant; valid while this model is loaded.
    pub fn open_asset(
        &self,
        name: &str,
    ) -> Result<Box<dyn crate::run::metadata::ReadSeek>, crate::ClientError> {
        self.metadata.open_asset(name)
    }

    /// True when the loaded variant is sealed: its files in the cache are ciphertext (read
    /// its assets with [`LoadedModel::open_asset`]).
    pub fn is_sealed(&self) -> bool {
        self.metadata.sealed.is_some()
    }

    /// The verified file of the asset `name` (a labels file, a tokenizer) in the cache, valid
    /// while this model is loaded; `None` when the variant has no such asset. For a sealed
    /// variant the file is ciphertext: read it with [`LoadedModel::open_asset`].
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
            self.load_other(method)?;
            self.other_methods.push(method.to_string());
        }
        check_inputs(method, self.contract(method), inputs)?;
        self.timed_run(method, inputs)
    }

    /// Loads `method` and runs its golden check, under the flight recorder's mark.
    fn load_other(&mut self, method: &str) -> Result<(), RuntimeError> {
        use crate::error::Stage;
        if let Some(f) = &mut self.flight {
            f.mark(Stage::LoadMethod, false);
        }
        let mut out = self.program.load_method(method);
        if out.is_ok()
            && let Some(g) = &self.golden
        {
            if let Some(f) = &mut self.flight {
                f.mark(Stage::Golden, false);
            }
            out = crate::run::golden::check_golden(self.program.as_mut(), method, g)
                .map(|_| ())
                .map_err(RuntimeError::from);
        }
        if let Some(f) = &mut self.flight {
            f.clear(false);
        }
        out
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
