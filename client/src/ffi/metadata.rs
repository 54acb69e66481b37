//! A loaded model's signed metadata through the C ABI: its input preprocessing as a struct
//! (`ferry_model_preprocess`), its labels (`FERRY_FIELD_LABELS`) and the verified files of its
//! assets (`ferry_model_asset_path`), and every text field of a loaded model
//! (`ferry_model_info`).

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
