//! ferry's adapter to the ExecuTorch runtime, shared by the client (which loads verified
//! programs on devices) and the server (which runs them at signing, `ferry evaluate`).
//!
//! Without features it holds the types both sides speak: [`RuntimeError`], a method's declared
//! [`MethodSignature`], and [`max_abs_diff`]. With the `executorch` feature, [`executorch`]
//! opens programs in the real runtime (the shared libraries of the PyPI `executorch==1.5.1`
//! wheel, unpacked by `scripts/setup-executorch.sh`).

use ferry_shared::errors::ErrorCode;
use ferry_shared::manifest::TensorValue;

#[cfg(feature = "executorch")]
pub mod executorch;

/// Bytes the runtime reads a program or a data file from at any offset, when they are not a
/// plain file: a sealed file decrypted as it is read (the client), for one. Reads may come from
/// several threads at once.
pub trait ProgramSource: Send + Sync {
    /// The plaintext's length in bytes.
    fn len(&self) -> u64;

    /// True when the source holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `out` with the bytes at `offset`; an error when they cannot be read (or, for a
    /// sealed file, do not authenticate).
    fn read_at(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()>;
}

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
