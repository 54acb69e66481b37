//! A loaded model's signed metadata through the C ABI: its input preprocessing as a struct
//! (`ferry_model_preprocess`), its labels (`FERRY_FIELD_LABELS`), the verified files of its
//! assets (`ferry_model_asset_path`) and their bytes (`ferry_model_read_asset`, which decrypts a
//! sealed variant's as it reads), and every text field of a loaded model (`ferry_model_info`).

use std::ffi::{CStr, c_char};

use super::parts::FerryPreprocess;
use super::{FerryModel, FerryStatus, fail, guard};

/// Writes the model's signed preprocessing to `*out`. `FERRY_OK` when the release declares
/// one; `FERRY_ERR_INVALID_ARGUMENT` (code `invalid_argument`) for a NULL argument, and
/// `FERRY_ERR_LOAD` with code `not_found` when the release declares none (`*out` untouched).
///
/// # Safety
/// `model` is NULL or a live handle; `out` is NULL or points to a writable `ferry_preprocess`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_model_preprocess(
    model: *const FerryModel,
    out: *mut FerryPreprocess,
) -> FerryStatus {
    guard(|| {
        if model.is_null() || out.is_null() {
            return fail(
                FerryStatus::FerryErrInvalidArgument,
                ferry_shared::errors::ErrorCode::InvalidArgument.as_str(),
                "model and out must not be NULL",
            );
        }
        // SAFETY: live handle per the contract.
        let m = unsafe { &*model };
        match m.meta.preprocess {
            Some(p) => {
                // SAFETY: `out` is non-NULL and writable per the contract.
                unsafe { *out = p };
                FerryStatus::FerryOk
            }
            None => fail(
                FerryStatus::FerryErrLoad,
                ferry_shared::errors::ErrorCode::NotFound.as_str(),
                "the release declares no preprocessing",
            ),
        }
    })
}

/// The verified file of the model's asset `name` (a labels file, a tokenizer), valid until
/// `ferry_model_free`; NULL for a NULL argument, a name that is not UTF-8, or a variant
/// without such an asset.
///
/// # Safety
/// `model` is NULL or a live handle; `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_model_asset_path(
    model: *const FerryModel,
    name: *const c_char,
) -> *const c_char {
    if model.is_null() || name.is_null() {
        return std::ptr::null();
    }
    // SAFETY: per the contract.
    let (m, name) = unsafe { (&*model, CStr::from_ptr(name)) };
    match name.to_str().ok().and_then(|n| m.meta.assets.get(n)) {
        Some(p) => p.as_ptr(),
        None => std::ptr::null(),
    }
}

/// Reads up to `cap` bytes of the model's asset `name` from byte `offset` into `out`, and
/// writes how many to `*read` (0 at or past the end). For a sealed variant the asset is
/// decrypted as it is read (its cached file is ciphertext: read it with this function, not
/// through `ferry_model_asset_path`); for others it is the file's bytes. `*size`, when
/// `size` is not NULL, gets the asset's whole length. `FERRY_OK`;
/// `FERRY_ERR_INVALID_ARGUMENT` for a NULL `model`, `name`, `read` (or `out` with `cap` > 0);
/// `FERRY_ERR_LOAD` with code `not_found` for a variant without such an asset, `cache_io` when
/// the file cannot be read or does not authenticate.
///
/// # Safety
/// `model` is NULL or a live handle; `name` NULL or a NUL-terminated string; `out` NULL or
/// writable for `cap` bytes; `read` and `size` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_model_read_asset(
    model: *const FerryModel,
    name: *const c_char,
    offset: u64,
    out: *mut u8,
    cap: usize,
    read: *mut usize,
    size: *mut u64,
) -> FerryStatus {
    use ferry_shared::errors::ErrorCode;
    use std::io::{Read as _, Seek as _, SeekFrom};
    guard(|| {
        if model.is_null() || name.is_null() || read.is_null() || (out.is_null() && cap > 0) {
            return fail(
                FerryStatus::FerryErrInvalidArgument,
                ErrorCode::InvalidArgument.as_str(),
                "model, name and read must not be NULL, nor out when cap > 0",
            );
        }
        // SAFETY: per the contract.
        let (m, name) = unsafe { (&*model, CStr::from_ptr(name)) };
        let Ok(name) = name.to_str() else {
            return fail(
                FerryStatus::FerryErrInvalidArgument,
                ErrorCode::InvalidArgument.as_str(),
                "name is not UTF-8",
            );
        };
        let loaded = ferry_shared::sync::lock(&m.model);
        if loaded.asset(name).is_none() {
            return fail(
                FerryStatus::FerryErrLoad,
                ErrorCode::NotFound.as_str(),
                &format!("the variant has no asset {name:?}"),
            );
        }
        let io = |e: String| fail(FerryStatus::FerryErrLoad, ErrorCode::CacheIo.as_str(), &e);
        let mut reader = match loaded.open_asset(name) {
            Ok(r) => r,
            Err(e) => return io(e.to_string()),
        };
        let total = match reader.seek(SeekFrom::End(0)) {
            Ok(t) => t,
            Err(e) => return io(e.to_string()),
        };
        let buf: &mut [u8] = if cap == 0 {
            &mut []
        } else {
            // SAFETY: `out` is writable for `cap` bytes per the contract.
            unsafe { std::slice::from_raw_parts_mut(out, cap) }
        };
        let mut done = 0usize;
        if offset < total {
            if let Err(e) = reader.seek(SeekFrom::Start(offset)) {
                return io(e.to_string());
            }
            while done < buf.len() {
                match reader.read(&mut buf[done..]) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return io(e.to_string()),
                }
            }
        }
        // SAFETY: `read` is writable; `size` NULL or writable, per the contract.
        unsafe {
            *read = done;
            if !size.is_null() {
                *size = total;
            }
        }
        FerryStatus::FerryOk
    })
}

/// Which field of a loaded model [`ferry_model_info`] returns.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerryModelField {
    /// Variant id.
    FerryFieldVariant = 0,
    /// Release version.
    FerryFieldRelease = 1,
    /// Delegate.
    FerryFieldDelegate = 2,
    /// Path of the verified file.
    FerryFieldPath = 3,
    /// `downloaded`, `cached` or `last_known_good:<code>`.
    FerryFieldSource = 4,
    /// The load report as JSON (`model`, `release`, `variant`, `delegate`, `source`,
    /// `method`, `attempts` with their `stage`, `registered_backends`, `delegated`,
    /// `portable_kernels`, `duration_ms`; see docs/client.md).
    FerryFieldReport = 5,
    /// Each method's signed input and output contract as JSON, `{"forward": {"inputs": [...],
    /// "outputs": [...]}}`, each tensor with `dtype`, `shape` (a bounded dimension at its
    /// bound), `dim_order` and `dynamism` (`static`, `bounded`, `unbounded`); `null` for a
    /// release signed before ferry recorded it (see docs/client.md).
    FerryFieldContract = 6,
    /// The class labels from the release's signed labels file, one per line in output order;
    /// empty when the release has none (see docs/client.md, model metadata).
    FerryFieldLabels = 7,
    /// The signed input preprocessing as JSON (`resize` with `width`, `height`, `filter`;
    /// `color`, `layout`, `range`, `mean`, `std`), `null` when the release declares none;
    /// `ferry_model_preprocess` gives the same as a struct.
    FerryFieldPreprocess = 8,
}

/// A field of a loaded model (a `ferry_model_field` value), valid until `ferry_model_free`;
/// NULL for a NULL handle or a value that names no field (the field is taken as an integer,
/// so a value from a newer header is answered with NULL rather than undefined behaviour).
///
/// # Safety
/// `model` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_model_info(model: *const FerryModel, field: u32) -> *const c_char {
    if model.is_null() {
        return std::ptr::null();
    }
    // SAFETY: live handle per the contract.
    let m = unsafe { &*model };
    let f = |x: FerryModelField| field == x as u32;
    if f(FerryModelField::FerryFieldVariant) {
        m.variant.as_ptr()
    } else if f(FerryModelField::FerryFieldRelease) {
        m.release.as_ptr()
    } else if f(FerryModelField::FerryFieldDelegate) {
        m.delegate.as_ptr()
    } else if f(FerryModelField::FerryFieldPath) {
        m.path.as_ptr()
    } else if f(FerryModelField::FerryFieldSource) {
        m.source.as_ptr()
    } else if f(FerryModelField::FerryFieldReport) {
        m.report.as_ptr()
    } else if f(FerryModelField::FerryFieldContract) {
        m.contract.as_ptr()
    } else if f(FerryModelField::FerryFieldLabels) {
        m.meta.labels.as_ptr()
    } else if f(FerryModelField::FerryFieldPreprocess) {
        m.preprocess_json.as_ptr()
    } else {
        std::ptr::null()
    }
}
