//! The real ExecuTorch runtime (feature `executorch`): the `executorch` crate's `Module` over the
//! shared libraries of the PyPI `executorch==1.5.1` wheel, with XNNPACK, the optimized and
//! quantized kernels linked in.
//!
//! Programs are loaded with `InternalConsistency` verification (they have already matched
//! their signed SHA-256; the runtime can still crash on corrupted files, so that check comes
//! first). The registered backends are read from the runtime's own registry through a small
//! C++ shim (`client/cpp/registered_backends.cpp`).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_long};

use executorch::evalue::{EValue, IntoEValue as _};
use executorch::module::{LoadMode, Module, ModuleBuilder};
use executorch::program::ProgramVerification;
use executorch::tensor::{ScalarType, TensorPtr, TensorPtrBuilder, View};
use ferry_shared::manifest::TensorValue;

use crate::cache::VerifiedBlob;
use crate::runtime::{Program, Runtime, RuntimeError};

/// The ExecuTorch version of the linked runtime.
pub const RUNTIME_VERSION: &str = "1.5.1";

unsafe extern "C" {
    fn ferry_et_num_registered_backends() -> usize;
    fn ferry_et_registered_backend_name(index: usize, out: *mut c_char, cap: usize) -> c_long;
}

fn et_error(what: &str, e: executorch::Error) -> String {
    format!("{what}: ExecuTorch error {e:?} (0x{:x})", e as u32)
}

/// The linked ExecuTorch runtime.
#[derive(Debug, Default, Clone, Copy)]
pub struct ExecuTorchRuntime;

impl ExecuTorchRuntime {
    /// The runtime (the libraries are loaded with the process).
    pub fn new() -> Self {
        Self
    }
}

impl Runtime for ExecuTorchRuntime {
    fn version(&self) -> semver::Version {
        semver::Version::new(1, 5, 1)
    }

    fn registered_backends(&self) -> Vec<String> {
        let mut out = Vec::new();
        // SAFETY: the shim only reads the runtime's static registry.
        let n = unsafe { ferry_et_num_registered_backends() };
        for i in 0..n.min(256) {
            let mut buf = [0 as c_char; 128];
            // SAFETY: `buf` is writable for `buf.len()` bytes; the shim NUL-terminates.
            let len = unsafe { ferry_et_registered_backend_name(i, buf.as_mut_ptr(), buf.len()) };
            if len < 0 {
                continue;
            }
            let bytes: Vec<u8> = buf
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| *c as u8)
                .collect();
            if let Ok(s) = String::from_utf8(bytes) {
                out.push(s);
            }
        }
        out
    }

    fn open(&self, blob: &VerifiedBlob) -> Result<Box<dyn Program>, RuntimeError> {
        let mut module: Module<'static> = ModuleBuilder::new(blob.path())
            .load_mode(LoadMode::File)
            .build();
        module
            .load(Some(ProgramVerification::InternalConsistency), None)
            .map_err(|e| RuntimeError::load(et_error("program load failed", e)))?;
        Ok(Box::new(EtProgram { module }))
    }
}

struct EtProgram {
    module: Module<'static>,
}

fn input_tensor(t: &TensorValue) -> Result<TensorPtr<'static, View<f32>>, RuntimeError> {
    if t.dtype != "float32" {
        return Err(RuntimeError::execute(format!(
            "input dtype {} is not supported by this runtime binding (float32 only)",
            t.dtype
        )));
    }
    let n: u64 = t.shape.iter().product();
    if n != t.data.len() as u64 {
        return Err(RuntimeError::execute("input shape does not match its data"));
    }
    let data: Vec<f32> = t.data.iter().map(|v| *v as f32).collect();
    let sizes: Vec<i32> = t
        .shape
        .iter()
        .map(|d| i32::try_from(*d).map_err(|_| RuntimeError::execute("input dimension too large")))
        .collect::<Result<_, _>>()?;
    // SAFETY: the sizes multiply to exactly `data.len()` (checked above).
    let builder = unsafe { TensorPtrBuilder::<View<f32>>::from_vec(data).sizes(sizes) };
    builder
        .build()
        .map_err(|e| RuntimeError::execute(et_error("input tensor", e)))
}

fn output_value(v: &EValue<'_>) -> Result<TensorValue, RuntimeError> {
    let t = v.as_tensor();
    let shape: Vec<u64> = t.sizes().iter().map(|d| *d as u64).collect();
    let n = t.numel();
    let data: Vec<f64> = match t.scalar_type() {
        ScalarType::Float => {
            let typed = t.into_typed::<f32>();
            let ptr = typed.as_data_ptr();
            if ptr.is_null() {
                return Err(RuntimeError::execute("output tensor has no data"));
            }
            // SAFETY: a CPU float tensor holds `numel` contiguous f32 values at its data pointer,
            // valid while the method's outputs are alive (we copy before returning).
            unsafe { std::slice::from_raw_parts(ptr, n) }
                .iter()
                .map(|x| *x as f64)
                .collect()
        }
        other => {
            return Err(RuntimeError::execute(format!(
                "output dtype {other:?} is not supported by this runtime binding (float32 only)"
            )));
        }
    };
    Ok(TensorValue {
        dtype: "float32".into(),
        shape,
        data,
    })
}

impl Program for EtProgram {
    fn method_backends(&mut self, method: &str) -> Result<Vec<String>, RuntimeError> {
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

    fn load_method(&mut self, method: &str) -> Result<(), RuntimeError> {
        self.module
            .load_method(method, None, None)
            .map_err(|e| RuntimeError::load(et_error(&format!("load_method({method}) failed"), e)))
    }

    fn run(
        &mut self,
        method: &str,
        inputs: &[TensorValue],
    ) -> Result<Vec<TensorValue>, RuntimeError> {
        let tensors: Vec<TensorPtr<'static, View<f32>>> =
            inputs.iter().map(input_tensor).collect::<Result<_, _>>()?;
        let values: Vec<EValue<'_>> = tensors.iter().map(|t| t.into_evalue()).collect();
        let outputs = self
            .module
            .execute(method, &values)
            .map_err(|e| RuntimeError::execute(et_error(&format!("{method} failed"), e)))?;
        outputs.iter().map(output_value).collect()
    }
}
