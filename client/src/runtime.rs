//! The runtime the client loads programs into.
//!
//! [`Runtime`] is implemented by the real ExecuTorch runtime behind the `executorch` feature
//! ([`crate::executorch_runtime::ExecuTorchRuntime`]); apps with their own binding implement it
//! themselves. The client only hands a runtime files whose SHA-256 matched the signed
//! manifest, because corrupted programs can crash ExecuTorch.

use crate::cache::VerifiedBlob;
use ferry_shared::errors::ErrorCode;

use ferry_shared::manifest::TensorValue;

/// A runtime failure with the runtime's own code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RuntimeError {
    /// Stable code (`runtime_load_failed`, `runtime_execute_failed`, ...).
    pub code: ErrorCode,
    /// The runtime's message (for ExecuTorch: the error name and number).
    pub message: String,
}

impl RuntimeError {
    /// A load failure.
    pub fn load(message: impl Into<String>) -> Self {
        Self {
            code: ErrorCode::RuntimeLoadFailed,
            message: message.into(),
        }
    }

    /// An execution failure.
    pub fn execute(message: impl Into<String>) -> Self {
        Self {
            code: ErrorCode::RuntimeExecuteFailed,
            message: message.into(),
        }
    }
}

/// A runtime that can load `.pte` programs.
pub trait Runtime: Send + Sync {
    /// The runtime's version (sent to the server as `runtime_version`).
    fn version(&self) -> semver::Version;
    /// Backend ids this runtime really registered.
    fn registered_backends(&self) -> Vec<String>;

    /// The operators (`namespace::name.overload`) the runtime registered kernels for, sorted,
    /// each once; `None` when the runtime cannot tell (then nothing is checked against them).
    fn registered_operators(&self) -> Option<Vec<String>> {
        None
    }
    /// Opens a program whose bytes the cache verified (does not load methods yet), with the
    /// data files (`.ptd`) it keeps tensors in, verified with it ([`VerifiedBlob::data_files`]).
    fn open(&self, blob: &VerifiedBlob) -> Result<Box<dyn Program>, RuntimeError>;
}

/// One input or output of a method, as the program's metadata declares it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TensorSpec {
    /// Element type as [`TensorValue::dtype`] names it (`float32`, `int64`, `bool`, ...); for
    /// a value that is not a tensor, its kind (`int`, `double`, ...).
    pub dtype: String,
    /// Dimensions (a dynamic dimension at its upper bound); empty for a value that is not a
    /// tensor.
    pub shape: Vec<u64>,
}

/// A method's inputs and outputs, from the program's metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MethodSignature {
    /// Inputs in call order.
    pub inputs: Vec<TensorSpec>,
    /// Outputs in return order.
    pub outputs: Vec<TensorSpec>,
}

/// An opened program.
pub trait Program: Send {
    /// Backend ids method `method` calls, from the program's metadata.
    fn method_backends(&mut self, method: &str) -> Result<Vec<String>, RuntimeError>;
    /// The inputs and outputs method `method` declares. Runtimes that cannot read method
    /// metadata say so with an error (the default).
    fn signature(&mut self, method: &str) -> Result<MethodSignature, RuntimeError> {
        Err(RuntimeError::load(format!(
            "this runtime cannot read the signature of {method}"
        )))
    }
    /// Loads (initialises) a method; delegates are initialised here.
    fn load_method(&mut self, method: &str) -> Result<(), RuntimeError>;
    /// Runs a loaded method.
    fn run(
        &mut self,
        method: &str,
        inputs: &[TensorValue],
    ) -> Result<Vec<TensorValue>, RuntimeError>;
}

/// Largest absolute difference between two tensor lists, or `None` when their counts, element
/// types or shapes differ.
pub fn max_abs_diff(a: &[TensorValue], b: &[TensorValue]) -> Option<f64> {
    if a.len() != b.len() {
        return None;
    }
    let mut max = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        if x.dtype != y.dtype || x.shape != y.shape || x.data.len() != y.data.len() {
            return None;
        }
        for (p, q) in x.data.iter().zip(&y.data) {
            let d = (p - q).abs();
            if d.is_nan() {
                return Some(f64::INFINITY);
            }
            max = max.max(d);
        }
    }
    Some(max)
}
