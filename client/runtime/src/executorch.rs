//! The real ExecuTorch runtime (feature `executorch`): the `executorch` crate's `Module` over the
//! shared libraries of the PyPI `executorch==1.5.1` wheel, with XNNPACK, the optimized and
//! quantized kernels linked in.
//!
//! Programs are loaded with `InternalConsistency` verification (they have already matched
//! their signed SHA-256; the runtime can still crash on corrupted files, so that check comes
//! first). The registered backends are read from the runtime's own registry through a small
//! C++ shim (`client/runtime/cpp/registered_backends.cpp`), the registered operators through another
//! (`client/runtime/cpp/registered_kernels.cpp`).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_long};

use executorch::evalue::{EValue, IntoEValue as _};
use executorch::module::{LoadMode, Module, ModuleBuilder};
use executorch::program::ProgramVerification;
/// The 16-bit float types the runtime takes (for callers that pack them as raw bits).
pub use executorch::scalar::{bf16, f16};
use executorch::tensor::{ScalarType, TensorPtr, TensorPtrBuilder, View};
use ferry_shared::manifest::TensorValue;

use crate::{MethodSignature, RuntimeError, TensorSpec};

/// The ExecuTorch version of the linked runtime.
pub const RUNTIME_VERSION: &str = "1.5.1";

/// Programs whose bytes with their data files reach this size (16 MiB) are memory-mapped
/// (`LoadMode::Mmap`); smaller ones are read into memory.
pub const MMAP_FROM_BYTES: u64 = 16 << 20;

unsafe extern "C" {
    fn ferry_et_num_registered_backends() -> usize;
    fn ferry_et_registered_backend_name(index: usize, out: *mut c_char, cap: usize) -> c_long;
    fn ferry_et_num_registered_kernels() -> usize;
    fn ferry_et_registered_kernel_name(index: usize, out: *mut c_char, cap: usize) -> c_long;
    fn ferry_et_set_log_level(rank: std::ffi::c_int) -> std::ffi::c_int;
}

/// How much of the runtime's own log reaches stderr (it logs at `Info` on every first load:
/// CPU probing, for example).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Everything.
    Debug,
    /// Info and above.
    Info,
    /// Errors and fatal messages (the default).
    Error,
    /// Fatal messages only.
    Fatal,
    /// Nothing.
    Off,
}

impl LogLevel {
    /// Reads `debug`, `info`, `error`, `fatal` or `off` (any case).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "debug" => Self::Debug,
            "info" => Self::Info,
            "error" => Self::Error,
            "fatal" => Self::Fatal,
            "off" => Self::Off,
            _ => return None,
        })
    }
}

static LOG_LEVEL_SET: std::sync::Once = std::sync::Once::new();

/// Sets how much of the runtime's log reaches stderr, from now on (replacing the default
/// that the first program load would install).
pub fn set_log_level(level: LogLevel) {
    LOG_LEVEL_SET.call_once(|| {});
    apply_log_level(level);
}

fn apply_log_level(level: LogLevel) {
    // SAFETY: the shim stores an integer and registers a static function with the runtime.
    unsafe { ferry_et_set_log_level(level as std::ffi::c_int) };
}

/// Installs the log filter once per process unless the app chose a level: the level
/// `FERRY_EXECUTORCH_LOG` names (`debug`, `info`, `error`, `fatal`, `off`), else
/// [`LogLevel::Error`].
fn default_log_level() {
    LOG_LEVEL_SET.call_once(|| {
        let level = std::env::var("FERRY_EXECUTORCH_LOG")
            .ok()
            .and_then(|v| LogLevel::parse(&v))
            .unwrap_or(LogLevel::Error);
        apply_log_level(level);
    });
}

/// Reads entry `i` of a registry through a shim that copies a NUL-terminated name.
fn registry_name(
    i: usize,
    read: unsafe extern "C" fn(usize, *mut c_char, usize) -> c_long,
) -> Option<String> {
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` is writable for `buf.len()` bytes; the shims NUL-terminate and only read
    // the runtime's static registries.
    let len = unsafe { read(i, buf.as_mut_ptr(), buf.len()) };
    if len < 0 || len as usize >= buf.len() {
        return None;
    }
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8(bytes).ok()
}

fn et_error(what: &str, e: executorch::Error) -> String {
    format!("{what}: ExecuTorch error {e:?} (0x{:x})", e as u32)
}

/// The linked runtime's version.
pub fn version() -> semver::Version {
    semver::Version::new(1, 5, 1)
}

/// Backend ids the linked runtime registered.
pub fn registered_backends() -> Vec<String> {
    // SAFETY: the shim only reads the runtime's static registry.
    let n = unsafe { ferry_et_num_registered_backends() };
    (0..n.min(256))
        .filter_map(|i| registry_name(i, ferry_et_registered_backend_name))
        .collect()
}

/// The operators (`namespace::name.overload`) the linked runtime registered kernels for,
/// sorted, each once.
pub fn registered_operators() -> Vec<String> {
    // The registry is filled by static constructors before main and never changes after:
    // read it once per process.
    static OPERATORS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    OPERATORS
        .get_or_init(|| {
            // SAFETY: the shim only reads the runtime's static registry.
            let n = unsafe { ferry_et_num_registered_kernels() };
            ferry_shared::select::operators::normalize(
                (0..n.min(1 << 16))
                    .filter_map(|i| registry_name(i, ferry_et_registered_kernel_name))
                    .filter(|name| ferry_shared::select::operators::check_name(name).is_ok()),
            )
        })
        .clone()
}

mod source;

/// A program opened in the linked runtime (methods are loaded on demand).
pub struct ExecuTorchProgram {
    // Dropped first: the runtime's loaders read from `sources` until it is gone.
    module: Module<'static>,
    mode: &'static str,
    #[allow(
        dead_code,
        clippy::vec_box,
        reason = "kept alive, each at a fixed address the C++ loaders point to (source.rs)"
    )]
    sources: Vec<Box<Box<dyn crate::ProgramSource>>>,
}

impl std::fmt::Debug for ExecuTorchProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExecuTorchProgram")
    }
}

impl ExecuTorchProgram {
    /// Opens the program at `program`, with the data files (`.ptd`) it keeps tensors in.
    /// The runtime can crash on a corrupted file: callers hand it only files they checked
    /// (the client: files that matched their signed digests; the server: files it is signing).
    pub fn open(
        program: &std::path::Path,
        data: &[&std::path::Path],
    ) -> Result<Self, RuntimeError> {
        Self::open_with(program, data, MMAP_FROM_BYTES)
    }

    /// [`ExecuTorchProgram::open`], memory-mapping the files when they reach `mmap_from` bytes
    /// together (0: always) and reading them into memory otherwise.
    pub fn open_with(
        program: &std::path::Path,
        data: &[&std::path::Path],
        mmap_from: u64,
    ) -> Result<Self, RuntimeError> {
        default_log_level();
        // Large programs and data files are mapped, not read: the pages come from the file on
        // demand and the kernel may drop them again, so a 2 GB model does not need 2 GB of
        // heap. (The files are never changed in place: the cache replaces files whole.)
        let bytes: u64 = std::iter::once(program)
            .chain(data.iter().copied())
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        let mapped = bytes >= mmap_from;
        let mut module: Module<'static> = ModuleBuilder::new(program)
            .data_files(data)
            .load_mode(if mapped {
                LoadMode::Mmap
            } else {
                LoadMode::File
            })
            .build();
        module
            .load(Some(ProgramVerification::InternalConsistency), None)
            .map_err(|e| RuntimeError::load(et_error("program load failed", e)))?;
        Ok(Self {
            module,
            mode: if mapped { "mmap" } else { "file" },
            sources: Vec::new(),
        })
    }

    /// `mmap` when the program and its data files were mapped, `file` when they were read,
    /// `source` when they were read through [`ExecuTorchProgram::open_sources`].
    pub fn load_mode(&self) -> &'static str {
        self.mode
    }
}

/// An input tensor of one of the element types the binding passes to ExecuTorch.
enum Input {
    F32(TensorPtr<'static, View<f32>>),
    F64(TensorPtr<'static, View<f64>>),
    F16(TensorPtr<'static, View<f16>>),
    Bf16(TensorPtr<'static, View<bf16>>),
    I8(TensorPtr<'static, View<i8>>),
    I16(TensorPtr<'static, View<i16>>),
    I32(TensorPtr<'static, View<i32>>),
    I64(TensorPtr<'static, View<i64>>),
    U8(TensorPtr<'static, View<u8>>),
    Bool(TensorPtr<'static, View<bool>>),
}

impl Input {
    fn evalue(&self) -> EValue<'_> {
        match self {
            Input::F32(t) => t.into_evalue(),
            Input::F64(t) => t.into_evalue(),
            Input::F16(t) => t.into_evalue(),
            Input::Bf16(t) => t.into_evalue(),
            Input::I8(t) => t.into_evalue(),
            Input::I16(t) => t.into_evalue(),
            Input::I32(t) => t.into_evalue(),
            Input::I64(t) => t.into_evalue(),
            Input::U8(t) => t.into_evalue(),
            Input::Bool(t) => t.into_evalue(),
        }
    }
}

/// A tensor of `data` with dimensions `sizes` (whose product the caller checked).
fn typed<S: executorch::tensor::Scalar>(
    data: Vec<S>,
    sizes: Vec<i32>,
) -> Result<TensorPtr<'static, View<S>>, RuntimeError> {
    // SAFETY: the sizes multiply to exactly `data.len()` (checked by `input_tensor`).
    let builder = unsafe { TensorPtrBuilder::<View<S>>::from_vec(data).sizes(sizes) };
    builder
        .build()
        .map_err(|e| RuntimeError::execute(et_error("input tensor", e)))
}

/// 2^53: integers at or beyond it are not all representable in an `f64`.
const EXACT_F64_INTEGERS: f64 = 9_007_199_254_740_992.0;

/// The most dimensions an input may have.
const MAX_DIMS: usize = 16;

/// Converts each value to an integer type, refusing fractions, values out of its range and
/// values whose `f64` may already have been rounded (|v| >= 2^53).
fn integers<T: TryFrom<i64>>(index: usize, t: &TensorValue) -> Result<Vec<T>, RuntimeError> {
    t.data
        .iter()
        .map(|v| {
            let whole = v.fract() == 0.0 && v.is_finite() && v.abs() < EXACT_F64_INTEGERS;
            whole
                .then(|| T::try_from(*v as i64).ok())
                .flatten()
                .ok_or_else(|| {
                    RuntimeError::execute(format!("input {index}: {v} is not a valid {}", t.dtype))
                })
        })
        .collect()
}

/// Builds input `index` from its value, checking it against the method's declared input.
fn input_tensor(
    index: usize,
    t: &TensorValue,
    declared: Option<&TensorSpec>,
) -> Result<Input, RuntimeError> {
    if let Some(d) = declared
        && d.dtype != t.dtype
    {
        return Err(RuntimeError::execute(format!(
            "input {index} is {} but the method takes {}",
            t.dtype, d.dtype
        )));
    }
    if t.shape.len() > MAX_DIMS {
        return Err(RuntimeError::execute(format!(
            "input {index}: {} dimensions; at most {MAX_DIMS}",
            t.shape.len()
        )));
    }
    // The runtime computes strides in 32 bits: the product of the non-zero dimensions must fit
    // even when a zero dimension makes the element count 0.
    let too_large = || RuntimeError::execute(format!("input {index}: shape too large"));
    let strides = t
        .shape
        .iter()
        .filter(|d| **d != 0)
        .try_fold(1u64, |acc, d| acc.checked_mul(*d))
        .ok_or_else(too_large)?;
    if strides > i32::MAX as u64 {
        return Err(too_large());
    }
    let n: u64 = if t.shape.contains(&0) { 0 } else { strides };
    if n != t.data.len() as u64 {
        return Err(RuntimeError::execute(format!(
            "input {index}: shape {:?} holds {n} elements, the data has {}",
            t.shape,
            t.data.len()
        )));
    }
    let sizes: Vec<i32> = t
        .shape
        .iter()
        .map(|d| {
            i32::try_from(*d)
                .map_err(|_| RuntimeError::execute(format!("input {index}: dimension too large")))
        })
        .collect::<Result<_, _>>()?;
    // A finite value that becomes infinite in a narrower float type is refused, not sent.
    let narrowed = |wide: f64, narrow: f64| -> Result<(), RuntimeError> {
        if wide.is_finite() && !narrow.is_finite() {
            return Err(RuntimeError::execute(format!(
                "input {index}: {wide} is out of the range of {}",
                t.dtype
            )));
        }
        Ok(())
    };
    Ok(match t.dtype.as_str() {
        "float32" => Input::F32(typed(
            t.data
                .iter()
                .map(|v| narrowed(*v, f64::from(*v as f32)).map(|()| *v as f32))
                .collect::<Result<_, _>>()?,
            sizes,
        )?),
        "float64" => Input::F64(typed(t.data.clone(), sizes)?),
        "float16" => Input::F16(typed(
            t.data
                .iter()
                .map(|v| {
                    let h = f16::from_f64(*v);
                    narrowed(*v, h.to_f64()).map(|()| h)
                })
                .collect::<Result<_, _>>()?,
            sizes,
        )?),
        "bfloat16" => Input::Bf16(typed(
            t.data
                .iter()
                .map(|v| {
                    let h = bf16::from_f64(*v);
                    narrowed(*v, h.to_f64()).map(|()| h)
                })
                .collect::<Result<_, _>>()?,
            sizes,
        )?),
        "int8" => Input::I8(typed(integers(index, t)?, sizes)?),
        "int16" => Input::I16(typed(integers(index, t)?, sizes)?),
        "int32" => Input::I32(typed(integers(index, t)?, sizes)?),
        "int64" => Input::I64(typed(integers(index, t)?, sizes)?),
        "uint8" => Input::U8(typed(integers(index, t)?, sizes)?),
        "bool" => {
            let flags: Vec<u8> = integers(index, t)?;
            if flags.iter().any(|b| *b > 1) {
                return Err(RuntimeError::execute(format!(
                    "input {index}: a bool tensor holds only 0 and 1"
                )));
            }
            Input::Bool(typed(flags.into_iter().map(|b| b == 1).collect(), sizes)?)
        }
        other => {
            return Err(RuntimeError::execute(format!(
                "input {index}: dtype {other:?} is not one this binding passes (float32, \
                 float64, float16, bfloat16, int8, int16, int32, int64, uint8, bool)"
            )));
        }
    })
}

/// PyTorch's name (without `torch.`) of an ExecuTorch element type, for the types the binding
/// reads and writes.
fn dtype_name(t: ScalarType) -> Option<&'static str> {
    Some(match t {
        ScalarType::Float => "float32",
        ScalarType::Double => "float64",
        ScalarType::Half => "float16",
        ScalarType::BFloat16 => "bfloat16",
        ScalarType::Char => "int8",
        ScalarType::Short => "int16",
        ScalarType::Int => "int32",
        ScalarType::Long => "int64",
        ScalarType::Byte => "uint8",
        ScalarType::Bool => "bool",
        _ => return None,
    })
}

/// The elements of a CPU tensor whose element type is `S` (the caller matched its scalar
/// type), as `f64`.
fn elements<S: Copy>(
    t: &executorch::tensor::TensorAny<'_>,
    to_f64: impl Fn(S) -> f64,
) -> Result<Vec<f64>, RuntimeError> {
    let n = t.numel();
    if n == 0 {
        return Ok(Vec::new());
    }
    let ptr = t.as_data_ptr_raw().cast::<S>();
    if ptr.is_null() {
        return Err(RuntimeError::execute("output tensor has no data"));
    }
    // SAFETY: a CPU tensor of `S` holds `numel` contiguous values at its data pointer, valid
    // while the method's outputs are alive (copied here before returning).
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) }
        .iter()
        .map(|x| to_f64(*x))
        .collect())
}

fn output_value(index: usize, v: &EValue<'_>) -> Result<TensorValue, RuntimeError> {
    let t: executorch::tensor::TensorAny<'_> = v.try_into().map_err(|_| {
        RuntimeError::execute(format!(
            "output {index} is a {:?}, not a tensor (this binding reads tensors)",
            v.tag()
        ))
    })?;
    let shape: Vec<u64> = t.sizes().iter().map(|d| (*d).max(0) as u64).collect();
    if !t.device().is_cpu() {
        return Err(RuntimeError::execute(format!(
            "output {index} is not in CPU memory"
        )));
    }
    // Elements are read in memory order: only the default (row-major) dim order gives them
    // in the order of the shape.
    if t.dim_order()
        .iter()
        .enumerate()
        .any(|(i, d)| usize::from(*d) != i)
    {
        return Err(RuntimeError::execute(format!(
            "output {index} has dim order {:?}, not row-major; this binding reads row-major \
             outputs",
            t.dim_order()
        )));
    }
    let kind = t.scalar_type();
    let dtype = dtype_name(kind).ok_or_else(|| {
        RuntimeError::execute(format!(
            "output {index}: element type {kind:?} is not one this binding reads"
        ))
    })?;
    let data = match kind {
        ScalarType::Float => elements::<f32>(&t, f64::from)?,
        ScalarType::Double => elements::<f64>(&t, |x| x)?,
        ScalarType::Half => elements::<f16>(&t, f16::to_f64)?,
        ScalarType::BFloat16 => elements::<bf16>(&t, bf16::to_f64)?,
        ScalarType::Char => elements::<i8>(&t, f64::from)?,
        ScalarType::Short => elements::<i16>(&t, f64::from)?,
        ScalarType::Int => elements::<i32>(&t, f64::from)?,
        ScalarType::Long => {
            let wide = elements::<i64>(&t, |x| x as f64)?;
            if let Some(v) = wide.iter().find(|v| v.abs() >= EXACT_F64_INTEGERS) {
                return Err(RuntimeError::execute(format!(
                    "output {index}: the int64 value near {v} cannot be returned exactly (beyond \
                     2^53)"
                )));
            }
            wide
        }
        ScalarType::Byte => elements::<u8>(&t, f64::from)?,
        // Read as bytes: any non-zero byte is true.
        ScalarType::Bool => elements::<u8>(&t, |x| if x != 0 { 1.0 } else { 0.0 })?,
        _ => {
            return Err(RuntimeError::execute(format!(
                "output {index}: element type {kind:?} is not one this binding reads"
            )));
        }
    };
    Ok(TensorValue {
        dtype: dtype.into(),
        shape,
        data,
    })
}

/// One declared input or output of a method's metadata.
fn spec_of(
    info: Result<executorch::program::TensorInfo<'_>, executorch::Error>,
    tag: Option<executorch::evalue::Tag>,
) -> TensorSpec {
    match info {
        Ok(info) => TensorSpec {
            dtype: dtype_name(info.scalar_type())
                .map(str::to_string)
                .unwrap_or_else(|| format!("{:?}", info.scalar_type())),
            shape: info.sizes().iter().map(|d| (*d).max(0) as u64).collect(),
        },
        Err(_) => TensorSpec {
            dtype: tag.map_or_else(|| "unknown".into(), |t| format!("{t:?}").to_lowercase()),
            shape: Vec::new(),
        },
    }
}

impl ExecuTorchProgram {
    /// Backend ids method `method` calls, from the program's metadata.
    pub fn method_backends(&mut self, method: &str) -> Result<Vec<String>, RuntimeError> {
        let meta = self
            .module
            .method_meta(method)
            .map_err(|e| RuntimeError::load(et_error(&format!("method {method}"), e)))?;
        let mut out = Vec::new();
        for i in 0..meta.num_backends() {
            if let Ok(name) = meta.get_backend_name(i) {
                out.push(name.to_string());
            }
        }
        Ok(out)
    }

    /// Loads (initialises) a method; delegates are initialised here.
    pub fn load_method(&mut self, method: &str) -> Result<(), RuntimeError> {
        self.module
            .load_method(method, None, None)
            .map_err(|e| RuntimeError::load(et_error(&format!("load_method({method}) failed"), e)))
    }

    /// The inputs and outputs method `method` declares.
    pub fn signature(&mut self, method: &str) -> Result<MethodSignature, RuntimeError> {
        let meta = self
            .module
            .method_meta(method)
            .map_err(|e| RuntimeError::load(et_error(&format!("method {method}"), e)))?;
        Ok(MethodSignature {
            inputs: (0..meta.num_inputs())
                .map(|i| spec_of(meta.input_tensor_meta(i), meta.input_tag(i).ok()))
                .collect(),
            outputs: (0..meta.num_outputs())
                .map(|i| spec_of(meta.output_tensor_meta(i), meta.output_tag(i).ok()))
                .collect(),
        })
    }

    /// Runs a loaded method (loading it first if needed).
    pub fn run(
        &mut self,
        method: &str,
        inputs: &[TensorValue],
    ) -> Result<Vec<TensorValue>, RuntimeError> {
        let declared = self
            .signature(method)
            .map_err(|e| RuntimeError::execute(e.message))?;
        if declared.inputs.len() != inputs.len() {
            return Err(RuntimeError::execute(format!(
                "{method} takes {} inputs, {} were given",
                declared.inputs.len(),
                inputs.len()
            )));
        }
        let tensors: Vec<Input> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| input_tensor(i, t, declared.inputs.get(i)))
            .collect::<Result<_, _>>()?;
        let values: Vec<EValue<'_>> = tensors.iter().map(Input::evalue).collect();
        let outputs = self
            .module
            .execute(method, &values)
            .map_err(|e| RuntimeError::execute(et_error(&format!("{method} failed"), e)))?;
        outputs
            .iter()
            .enumerate()
            .map(|(i, v)| output_value(i, v))
            .collect()
    }
}
