//! Programs read through a [`ProgramSource`] instead of a path: a C++ `DataLoader`
//! (`client/runtime/cpp/source_loader.cpp`) asks Rust for each segment as the runtime needs it,
//! and an ExecuTorch `Module` is built over it (its constructor that takes loaders, which the
//! `executorch` crate does not expose).

use std::ffi::{c_int, c_void};

use executorch::module::Module;
use executorch::program::ProgramVerification;

use super::{ExecuTorchProgram, default_log_level, et_error};
use crate::{ProgramSource, RuntimeError};

unsafe extern "C" {
    fn ferry_source_module_new(
        program: *const c_void,
        program_len: usize,
        data: *const c_void,
        data_len: usize,
    ) -> *mut c_void;
}

/// A source kept alive as long as the module that reads it (a thin pointer to the inner box is
/// what the C++ loader holds).
type Held = Box<Box<dyn ProgramSource>>;

/// Called by the C++ loader: fills `out` with `size` bytes of `source` at `offset`.
#[unsafe(no_mangle)]
extern "C" fn ferry_source_read(
    source: *const c_void,
    offset: usize,
    size: usize,
    out: *mut u8,
) -> c_int {
    if source.is_null() || (out.is_null() && size > 0) {
        return -1;
    }
    let read = std::panic::catch_unwind(|| {
        // SAFETY: `source` is the thin pointer to a `Box<dyn ProgramSource>` that a `Held` of
        // the module's `ExecuTorchProgram` owns; the module (and its loaders) is dropped first.
        let source = unsafe { &*source.cast::<Box<dyn ProgramSource>>() };
        // SAFETY: the loader passes a buffer of at least `size` writable bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(out, size) };
        source.read_at(offset as u64, out)
    });
    match read {
        Ok(Ok(())) => 0,
        _ => -1,
    }
}

fn length(source: &dyn ProgramSource, what: &str) -> Result<usize, RuntimeError> {
    usize::try_from(source.len())
        .map_err(|_| RuntimeError::load(format!("the {what} is too large for this device")))
}

impl ExecuTorchProgram {
    /// Opens a program read from `program` (and its named data from `data`, a `.ptd`),
    /// segment by segment as the runtime asks: nothing is written to disk, and only the
    /// segments the runtime holds are in memory. The sources are kept as long as the program.
    pub fn open_sources(
        program: Box<dyn ProgramSource>,
        data: Option<Box<dyn ProgramSource>>,
    ) -> Result<Self, RuntimeError> {
        default_log_level();
        let program: Held = Box::new(program);
        let data: Option<Held> = data.map(Box::new);
        let program_len = length(program.as_ref().as_ref(), "program")?;
        let data_len = match &data {
            Some(d) => length(d.as_ref().as_ref(), "data file")?,
            None => 0,
        };
        let thin = |h: &Held| -> *const c_void { std::ptr::from_ref(h.as_ref()).cast() };
        // SAFETY: the pointers stay valid while `sources` holds them, which outlives `module`
        // (field order of `ExecuTorchProgram`); the shim only stores them.
        let raw = unsafe {
            ferry_source_module_new(
                thin(&program),
                program_len,
                data.as_ref().map_or(std::ptr::null(), thin),
                data_len,
            )
        };
        // Declared before `module`, so dropped after it on every path.
        let mut sources = vec![program];
        sources.extend(data);
        if raw.is_null() {
            return Err(RuntimeError::load("the runtime could not make a module"));
        }
        // SAFETY: `raw` is a `new executorch::extension::Module` from the shim, the type the
        // `executorch` crate's `Module` owns through a `UniquePtr` (deleted by it, with `delete`).
        let ptr = unsafe {
            executorch_sys::cxx::UniquePtr::<executorch_sys::Module>::from_raw(raw.cast())
        };
        // SAFETY: `executorch::module::Module` is a `UniquePtr<sys::Module>` and a zero-sized
        // marker; `transmute` checks the sizes are equal, so the pointer is its only data, at
        // offset 0.
        let mut module: Module<'static> = unsafe { std::mem::transmute(ptr) };
        module
            .load(Some(ProgramVerification::InternalConsistency), None)
            .map_err(|e| RuntimeError::load(et_error("program load failed", e)))?;
        Ok(Self {
            module,
            mode: "source",
            sources,
        })
    }
}
