//! The runtime the client loads programs into.
//!
//! [`Runtime`] is implemented by the real ExecuTorch runtime behind the `executorch` feature
//! ([`crate::executorch_runtime::ExecuTorchRuntime`], over `ferry-runtime`); apps with their own binding implement it
//! themselves. The client only hands a runtime files whose SHA-256 matched the signed
//! manifest, because corrupted programs can crash ExecuTorch.

use crate::cache::VerifiedBlob;
use ferry_shared::manifest::TensorValue;

pub use ferry_runtime::{MethodSignature, ProgramSource, RuntimeError, TensorSpec, max_abs_diff};

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

    /// True when the runtime can open a program read through [`ProgramSource`]s
    /// ([`Runtime::open_sources`]): only then does the client ask for sealed variants (the
    /// default: no).
    fn opens_sources(&self) -> bool {
        false
    }

    /// Opens a program whose bytes come from `program` (a sealed file decrypted as it is
    /// read), with its data file from `data`. Runtimes that cannot say so with an error (the
    /// default).
    fn open_sources(
        &self,
        program: Box<dyn ProgramSource>,
        data: Option<Box<dyn ProgramSource>>,
    ) -> Result<Box<dyn Program>, RuntimeError> {
        let _ = (program, data);
        Err(RuntimeError::load(
            "this runtime cannot read a program through a data loader (sealed variants)",
        ))
    }
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
    /// How the runtime reads the program and its data files: `mmap` (pages mapped from the
    /// cached files, read on demand) or `file` (read into memory); `None` when it does not say.
    fn load_mode(&self) -> Option<&'static str> {
        None
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
