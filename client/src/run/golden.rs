//! The golden check: a method run on the signed golden inputs and compared with the expected
//! outputs, and the failure of a load ([`LoadFailure`]). Used at load and by
//! [`crate::LoadedModel::run_method`]; imports only the runtime and the error types.

use ferry_shared::errors::ErrorCode;

use crate::error::Stage;
use crate::runtime::{Program, RuntimeError, max_abs_diff};

/// Why a verified program did not load: the step, the catalogue code and the message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoadFailure {
    /// The step that failed.
    pub stage: Stage,
    /// The catalogue code.
    pub code: ErrorCode,
    /// What happened.
    pub message: String,
}

impl LoadFailure {
    /// A runtime error at `stage`.
    pub(crate) fn runtime(stage: Stage, e: RuntimeError) -> Self {
        Self {
            stage,
            code: e.code,
            message: e.message,
        }
    }
}

impl From<LoadFailure> for RuntimeError {
    fn from(f: LoadFailure) -> Self {
        RuntimeError {
            code: f.code,
            message: f.message,
        }
    }
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
        .map_err(|e| LoadFailure::runtime(Stage::Execute, e))?;
    match max_abs_diff(&out, output) {
        Some(d) if d <= golden.atol => Ok(Some(d)),
        Some(d) => Err(LoadFailure {
            stage: Stage::Golden,
            code: ErrorCode::GoldenMismatch,
            message: format!(
                "golden check of {method}: max |diff| {d:e} exceeds atol {:e}",
                golden.atol
            ),
        }),
        None => Err(LoadFailure {
            stage: Stage::Golden,
            code: ErrorCode::GoldenMismatch,
            message: format!(
                "golden check of {method}: the outputs differ from the expected ones in count, \
                 element type or shape"
            ),
        }),
    }
}
