//! The real ExecuTorch runtime (feature `executorch`): [`ferry_runtime::executorch`] behind the
//! client's [`Runtime`] and [`Program`] traits.
//!
//! Programs are loaded with `InternalConsistency` verification, and only after they (and their
//! data files) matched their signed SHA-256: the runtime can crash on corrupted files, so that
//! check comes first. The registered backends and operators are read from the runtime's own
//! registries.

use ferry_runtime::executorch::{self as et, ExecuTorchProgram};
use ferry_shared::manifest::TensorValue;

use crate::cache::VerifiedBlob;
use crate::runtime::{MethodSignature, Program, Runtime, RuntimeError};

/// The ExecuTorch version of the linked runtime.
pub const RUNTIME_VERSION: &str = et::RUNTIME_VERSION;

/// The linked ExecuTorch runtime.
#[derive(Debug, Clone, Copy)]
pub struct ExecuTorchRuntime {
    mmap_from: u64,
}

impl Default for ExecuTorchRuntime {
    fn default() -> Self {
        Self {
            mmap_from: et::MMAP_FROM_BYTES,
        }
    }
}

impl ExecuTorchRuntime {
    /// The runtime (the libraries are loaded with the process). Programs whose bytes with
    /// their data files reach 16 MiB are memory-mapped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Memory-maps programs whose bytes with their data files reach `bytes` (0: every
    /// program), and reads smaller ones into memory. The load report's `load_mode` says which.
    pub fn mmap_from(mut self, bytes: u64) -> Self {
        self.mmap_from = bytes;
        self
    }
}

impl Runtime for ExecuTorchRuntime {
    fn version(&self) -> semver::Version {
        et::version()
    }

    fn registered_backends(&self) -> Vec<String> {
        et::registered_backends()
    }

    fn registered_operators(&self) -> Option<Vec<String>> {
        Some(et::registered_operators())
    }

    fn open(&self, blob: &VerifiedBlob) -> Result<Box<dyn Program>, RuntimeError> {
        // Data files (.ptd) were verified with the program; the runtime finds the tensors the
        // program keeps outside in them by name.
        let data: Vec<&std::path::Path> = blob.data_files().iter().map(|d| d.path()).collect();
        Ok(Box::new(ExecuTorchProgram::open_with(
            blob.path(),
            &data,
            self.mmap_from,
        )?))
    }

    fn opens_sources(&self) -> bool {
        true
    }

    fn open_sources(
        &self,
        program: Box<dyn ferry_runtime::ProgramSource>,
        data: Option<Box<dyn ferry_runtime::ProgramSource>>,
    ) -> Result<Box<dyn Program>, RuntimeError> {
        Ok(Box::new(ExecuTorchProgram::open_sources(program, data)?))
    }
}

impl Program for ExecuTorchProgram {
    fn method_backends(&mut self, method: &str) -> Result<Vec<String>, RuntimeError> {
        ExecuTorchProgram::method_backends(self, method)
    }

    fn signature(&mut self, method: &str) -> Result<MethodSignature, RuntimeError> {
        ExecuTorchProgram::signature(self, method)
    }

    fn load_mode(&self) -> Option<&'static str> {
        Some(ExecuTorchProgram::load_mode(self))
    }

    fn load_method(&mut self, method: &str) -> Result<(), RuntimeError> {
        ExecuTorchProgram::load_method(self, method)
    }

    fn run(
        &mut self,
        method: &str,
        inputs: &[TensorValue],
    ) -> Result<Vec<TensorValue>, RuntimeError> {
        ExecuTorchProgram::run(self, method, inputs)
    }
}
