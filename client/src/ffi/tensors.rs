//! Tensors across the C ABI: element types, the typed `ferry_model_run` with its outputs,
//! and the float32 shortcut `ferry_model_run_f32`.

#![allow(unsafe_code)]

use super::*;

/// `float32` ([`FerryTensor::dtype`]).
pub const FERRY_DTYPE_FLOAT32: u32 = 0;
/// `float64`.
pub const FERRY_DTYPE_FLOAT64: u32 = 1;
/// `float16` (IEEE half, raw 16-bit values).
pub const FERRY_DTYPE_FLOAT16: u32 = 2;
/// `bfloat16` (raw 16-bit values).
pub const FERRY_DTYPE_BFLOAT16: u32 = 3;
/// `int8`.
pub const FERRY_DTYPE_INT8: u32 = 4;
/// `int16`.
pub const FERRY_DTYPE_INT16: u32 = 5;
/// `int32`.
pub const FERRY_DTYPE_INT32: u32 = 6;
/// `int64`.
pub const FERRY_DTYPE_INT64: u32 = 7;
/// `uint8`.
pub const FERRY_DTYPE_UINT8: u32 = 8;
/// `bool` (one byte, 0 or 1).
pub const FERRY_DTYPE_BOOL: u32 = 9;

/// The element types by code: name and size in bytes.
const DTYPES: [(&str, usize); 10] = [
    ("float32", 4),
    ("float64", 8),
    ("float16", 2),
    ("bfloat16", 2),
    ("int8", 1),
    ("int16", 2),
    ("int32", 4),
    ("int64", 8),
    ("uint8", 1),
    ("bool", 1),
];

/// A tensor crossing the C ABI: element type (`FERRY_DTYPE_*`), `ndim` dimensions at `shape`
/// (an `int64_t` array), and `nbytes` bytes of row-major elements in the platform's byte order
/// at `data` (any alignment). `shape` may be NULL when `ndim` is 0 and `data` when `nbytes` is
/// 0. At most 16 dimensions and 2^28 elements; `int64` values must be below 2^53 in magnitude.
/// Outputs come back with `data` aligned to 8 bytes (NULL when empty).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FerryTensor {
    /// A `FERRY_DTYPE_*` code.
    pub dtype: u32,
    /// The dimensions.
    pub shape: *const i64,
    /// How many dimensions (at most 16).
    pub ndim: usize,
    /// The elements.
    pub data: *const std::ffi::c_void,
    /// Their size in bytes: the product of the dimensions times the element size.
    pub nbytes: usize,
}

/// Opaque outputs of [`ferry_model_run`]: per tensor its dtype code, shape, byte count and the
/// bytes in 8-byte words (so that a C caller may read them as any element type).
pub struct FerryOutputs {
    tensors: Vec<(u32, Vec<i64>, usize, Vec<u64>)>,
}

/// `bytes` in 8-byte-aligned storage.
fn aligned(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_ne_bytes(w)
        })
        .collect()
}

/// The most bytes all inputs of one [`ferry_model_run`] may hold together.
const MAX_INPUT_BYTES: usize = 1 << 30;

/// Reads one C tensor into a [`TensorValue`], checking every size against the others.
///
/// # Safety
/// `t.shape` holds `t.ndim` values and `t.data` holds `t.nbytes` bytes (either may be NULL
/// when its count is 0).
unsafe fn tensor_in(index: usize, t: &FerryTensor) -> Result<TensorValue, String> {
    let (name, size) = *DTYPES
        .get(t.dtype as usize)
        .ok_or_else(|| format!("input {index}: unknown dtype code {}", t.dtype))?;
    if t.ndim > 16 {
        return Err(format!("input {index}: {} dimensions; at most 16", t.ndim));
    }
    if t.ndim > 0 && t.shape.is_null() {
        return Err(format!("input {index}: shape is NULL"));
    }
    let dims: &[i64] = if t.ndim == 0 {
        &[]
    } else {
        // SAFETY: `shape` holds `ndim` values per the contract.
        unsafe { std::slice::from_raw_parts(t.shape, t.ndim) }
    };
    let mut n: u64 = 1;
    let mut shape = Vec::with_capacity(dims.len());
    for d in dims {
        let d = u64::try_from(*d).map_err(|_| format!("input {index}: negative dimension"))?;
        n = n
            .checked_mul(d)
            .filter(|n| *n <= 1 << 28)
            .ok_or_else(|| format!("input {index}: too many elements"))?;
        shape.push(d);
    }
    let want = n as usize * size;
    if t.nbytes != want {
        return Err(format!(
            "input {index}: {name} of shape {dims:?} is {want} bytes, nbytes says {}",
            t.nbytes
        ));
    }
    if want > 0 && t.data.is_null() {
        return Err(format!("input {index}: data is NULL"));
    }
    let bytes: &[u8] = if want == 0 {
        &[]
    } else {
        // SAFETY: `data` holds `nbytes` bytes per the contract.
        unsafe { std::slice::from_raw_parts(t.data.cast::<u8>(), want) }
    };
    let data: Vec<f64> = bytes
        .chunks_exact(size)
        .map(|c| match t.dtype {
            FERRY_DTYPE_FLOAT32 => f64::from(f32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
            FERRY_DTYPE_FLOAT64 => {
                f64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
            }
            FERRY_DTYPE_FLOAT16 => {
                ferry_runtime::executorch::f16::from_bits(u16::from_ne_bytes([c[0], c[1]])).to_f64()
            }
            FERRY_DTYPE_BFLOAT16 => {
                ferry_runtime::executorch::bf16::from_bits(u16::from_ne_bytes([c[0], c[1]]))
                    .to_f64()
            }
            FERRY_DTYPE_INT8 => f64::from(c[0] as i8),
            FERRY_DTYPE_INT16 => f64::from(i16::from_ne_bytes([c[0], c[1]])),
            FERRY_DTYPE_INT32 => f64::from(i32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
            FERRY_DTYPE_INT64 => {
                i64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f64
            }
            // uint8 and bool
            _ => f64::from(c[0]),
        })
        .collect();
    Ok(TensorValue {
        dtype: name.to_string(),
        shape,
        data,
    })
}

/// `v` as an integer of `T`, refusing fractions and values out of `T`'s range.
fn exact<T: TryFrom<i64>>(v: f64, dtype: &str) -> Result<T, String> {
    if v.fract() != 0.0 || !v.is_finite() || v.abs() >= 9_007_199_254_740_992.0 {
        return Err(format!("output value {v} is not a valid {dtype}"));
    }
    T::try_from(v as i64).map_err(|_| format!("output value {v} is out of the range of {dtype}"))
}

/// A [`TensorValue`] as the C ABI's element type code, dimensions and bytes.
fn tensor_out(t: &TensorValue) -> Result<(u32, Vec<i64>, Vec<u8>), String> {
    let code = DTYPES
        .iter()
        .position(|(name, _)| *name == t.dtype)
        .ok_or_else(|| format!("output dtype {} has no C code", t.dtype))? as u32;
    let shape = t
        .shape
        .iter()
        .map(|d| i64::try_from(*d).map_err(|_| "output dimension too large".to_string()))
        .collect::<Result<_, _>>()?;
    let name = t.dtype.as_str();
    let mut bytes = Vec::with_capacity(t.data.len() * DTYPES[code as usize].1);
    for v in &t.data {
        match code {
            FERRY_DTYPE_FLOAT32 => bytes.extend_from_slice(&(*v as f32).to_ne_bytes()),
            FERRY_DTYPE_FLOAT64 => bytes.extend_from_slice(&v.to_ne_bytes()),
            FERRY_DTYPE_FLOAT16 => bytes.extend_from_slice(
                &ferry_runtime::executorch::f16::from_f64(*v)
                    .to_bits()
                    .to_ne_bytes(),
            ),
            FERRY_DTYPE_BFLOAT16 => bytes.extend_from_slice(
                &ferry_runtime::executorch::bf16::from_f64(*v)
                    .to_bits()
                    .to_ne_bytes(),
            ),
            FERRY_DTYPE_INT8 => bytes.extend_from_slice(&exact::<i8>(*v, name)?.to_ne_bytes()),
            FERRY_DTYPE_INT16 => bytes.extend_from_slice(&exact::<i16>(*v, name)?.to_ne_bytes()),
            FERRY_DTYPE_INT32 => bytes.extend_from_slice(&exact::<i32>(*v, name)?.to_ne_bytes()),
            FERRY_DTYPE_INT64 => bytes.extend_from_slice(&exact::<i64>(*v, name)?.to_ne_bytes()),
            FERRY_DTYPE_UINT8 => bytes.push(exact::<u8>(*v, name)?),
            _ => bytes.push(u8::from(*v != 0.0)),
        }
    }
    Ok((code, shape, bytes))
}

/// Runs `method` (NULL: the loaded one) on `n_inputs` tensors of any `FERRY_DTYPE_*`; on
/// success `*out` owns the outputs, read with [`ferry_outputs_len`] and [`ferry_outputs_get`]
/// and freed with [`ferry_outputs_free`]. The count and element types are checked against the
/// method's metadata before any input is read, at most 1 GiB of inputs in all, then each
/// shape; another method is loaded on its first run. Calls on one model handle from several
/// threads take turns.
///
/// # Safety
/// `model` is a live handle (not freed meanwhile); `method` is NULL or a valid
/// string; `inputs` holds `n_inputs` tensors following the `ferry_tensor` contract; `out` is a
/// valid pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_model_run(
    model: *mut FerryModel,
    method: *const c_char,
    inputs: *const FerryTensor,
    n_inputs: usize,
    out: *mut *mut FerryOutputs,
) -> FerryStatus {
    guard(|| {
        if model.is_null() || out.is_null() || (n_inputs > 0 && inputs.is_null()) {
            return invalid("model, out or inputs is NULL");
        }
        if n_inputs > 1024 {
            return invalid("more than 1024 inputs");
        }
        let method = if method.is_null() {
            None
        } else {
            // SAFETY: a valid string per the contract.
            match unsafe { arg(method, "method") } {
                Ok(m) => Some(m),
                Err(s) => return s,
            }
        };
        let given: &[FerryTensor] = if n_inputs == 0 {
            &[]
        } else {
            // SAFETY: `inputs` holds `n_inputs` tensors per the contract.
            unsafe { std::slice::from_raw_parts(inputs, n_inputs) }
        };
        // SAFETY: live handle per the contract.
        let m = unsafe { &*model };
        // Runs of one model take turns; other threads wait here.
        let mut loaded = ferry_shared::sync::lock(&m.model);
        let method_name = method.map_or_else(|| loaded.method.clone(), str::to_string);
        // The method's declared inputs first: nothing is read or expanded for a call that
        // cannot be right.
        let declared = match loaded.signature(&method_name) {
            Ok(sig) => sig,
            Err(e) => return fail(FerryStatus::FerryErrRun, e.code.as_str(), &e.message),
        };
        if declared.inputs.len() != given.len() {
            return invalid(&format!(
                "{method_name} takes {} inputs, {} were given",
                declared.inputs.len(),
                given.len()
            ));
        }
        let mut total = 0usize;
        for (i, (t, d)) in given.iter().zip(&declared.inputs).enumerate() {
            let name = DTYPES
                .get(t.dtype as usize)
                .map_or("an unknown type", |x| x.0);
            if name != d.dtype {
                return invalid(&format!(
                    "input {i} is {name} but {method_name} takes {}",
                    d.dtype
                ));
            }
            total = total.saturating_add(t.nbytes);
        }
        if total > MAX_INPUT_BYTES {
            return invalid(&format!(
                "the inputs are {total} bytes; at most {MAX_INPUT_BYTES}"
            ));
        }
        let mut values = Vec::with_capacity(given.len());
        for (i, t) in given.iter().enumerate() {
            // SAFETY: each tensor follows the contract.
            match unsafe { tensor_in(i, t) } {
                Ok(v) => values.push(v),
                Err(e) => {
                    return invalid(&e);
                }
            }
        }
        let result = match method {
            Some(name) => loaded.run_method(name, &values),
            None => loaded.run(&values),
        };
        let outs = match result {
            Ok(o) => o,
            Err(e) => return fail(FerryStatus::FerryErrRun, e.code.as_str(), &e.message),
        };
        let mut tensors = Vec::with_capacity(outs.len());
        for t in &outs {
            match tensor_out(t) {
                Ok((code, shape, bytes)) => {
                    tensors.push((code, shape, bytes.len(), aligned(&bytes)))
                }
                Err(e) => {
                    return fail(
                        FerryStatus::FerryErrRun,
                        ErrorCode::RuntimeExecuteFailed.as_str(),
                        &e,
                    );
                }
            }
        }
        // SAFETY: `out` is non-NULL and valid per the contract.
        unsafe { *out = Box::into_raw(Box::new(FerryOutputs { tensors })) };
        FerryStatus::FerryOk
    })
}

/// How many outputs `outputs` holds (0 for NULL).
///
/// # Safety
/// `outputs` is NULL or a live handle from [`ferry_model_run`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_outputs_len(outputs: *const FerryOutputs) -> usize {
    if outputs.is_null() {
        return 0;
    }
    // SAFETY: live handle per the contract.
    unsafe { &*outputs }.tensors.len()
}

/// Output `index` into `*tensor`; its pointers stay valid until [`ferry_outputs_free`]
/// (`data` aligned to 8 bytes; NULL pointers for an empty shape or no data).
///
/// # Safety
/// `outputs` is a live handle from [`ferry_model_run`]; `tensor` is a valid pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_outputs_get(
    outputs: *const FerryOutputs,
    index: usize,
    tensor: *mut FerryTensor,
) -> FerryStatus {
    guard(|| {
        if outputs.is_null() || tensor.is_null() {
            return invalid("outputs or tensor is NULL");
        }
        // SAFETY: live handle per the contract.
        let o = unsafe { &*outputs };
        let Some((dtype, shape, nbytes, words)) = o.tensors.get(index) else {
            return invalid(&format!("output {index} of {}", o.tensors.len()));
        };
        let t = FerryTensor {
            dtype: *dtype,
            shape: if shape.is_empty() {
                std::ptr::null()
            } else {
                shape.as_ptr()
            },
            ndim: shape.len(),
            data: if *nbytes == 0 {
                std::ptr::null()
            } else {
                words.as_ptr().cast()
            },
            nbytes: *nbytes,
        };
        // SAFETY: `tensor` is valid per the contract.
        unsafe { *tensor = t };
        FerryStatus::FerryOk
    })
}

/// Frees outputs (NULL is ignored).
///
/// # Safety
/// `outputs` is NULL or a handle from [`ferry_model_run`], not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_outputs_free(outputs: *mut FerryOutputs) {
    if !outputs.is_null() {
        // SAFETY: the handle came from Box::into_raw and is not used again.
        drop(unsafe { Box::from_raw(outputs) });
    }
}

#[cfg(test)]
mod typed_tests;
