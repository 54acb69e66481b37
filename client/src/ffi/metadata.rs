//! A loaded model's signed metadata through the C ABI: its input preprocessing as a struct
//! (`ferry_model_preprocess`), its labels (`FERRY_FIELD_LABELS`) and the verified files of its
//! assets (`ferry_model_asset_path`), and every text field of a loaded model
//! (`ferry_model_info`).

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char};

use ferry_shared::manifest::{ColorOrder, Layout, Preprocess, ResizeFilter};

use super::{FerryModel, FerryStatus, fail, guard};
use crate::LoadedModel;

/// The filter a model's images are resized with.
// The C constants carry the prefix (`FERRY_FILTER_*`); cbindgen takes the names as written.
#[allow(clippy::enum_variant_names)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerryResizeFilter {
    /// The release names none.
    FerryFilterUnset = 0,
    /// Nearest neighbour.
    FerryFilterNearest = 1,
    /// Bilinear.
    FerryFilterBilinear = 2,
    /// Bicubic.
    FerryFilterBicubic = 3,
    /// Area averaging.
    FerryFilterArea = 4,
    /// Lanczos.
    FerryFilterLanczos = 5,
    /// One this library does not know (signed by a newer ferry).
    FerryFilterOther = 255,
}

/// The channel order a model takes.
// The C constants carry the prefix (`FERRY_FILTER_*`); cbindgen takes the names as written.
#[allow(clippy::enum_variant_names)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerryColorOrder {
    /// The release names none.
    FerryColorUnset = 0,
    /// Red, green, blue.
    FerryColorRgb = 1,
    /// Blue, green, red.
    FerryColorBgr = 2,
    /// One grey channel.
    FerryColorGray = 3,
    /// One this library does not know.
    FerryColorOther = 255,
}

/// The layout of a model's image input.
// The C constants carry the prefix (`FERRY_FILTER_*`); cbindgen takes the names as written.
#[allow(clippy::enum_variant_names)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerryLayout {
    /// The release names none.
    FerryLayoutUnset = 0,
    /// Batch, channels, height, width.
    FerryLayoutNchw = 1,
    /// Batch, height, width, channels.
    FerryLayoutNhwc = 2,
    /// One this library does not know.
    FerryLayoutOther = 255,
}

/// How the app prepares the model's first input from an image, as the release signed it:
/// resize, order the channels, map 8-bit values 0 and 255 to `range_low` and `range_high`,
/// subtract `mean` and divide by `std` per channel, lay out as `layout`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FerryPreprocess {
    /// Resize width in pixels (0: the release names no resize).
    pub resize_width: u32,
    /// Resize height in pixels (0: no resize).
    pub resize_height: u32,
    /// Resize filter.
    pub resize_filter: FerryResizeFilter,
    /// Channel order.
    pub color: FerryColorOrder,
    /// Tensor layout.
    pub layout: FerryLayout,
    /// Whether `range_low` and `range_high` are given.
    pub has_range: bool,
    /// Where 8-bit 0 lands.
    pub range_low: f64,
    /// Where 8-bit 255 lands.
    pub range_high: f64,
    /// How many of `mean` are given (0: none; 1: one for every channel).
    pub mean_len: u32,
    /// Per channel mean, subtracted after scaling.
    pub mean: [f64; 4],
    /// How many of `std` are given (0: none; 1: one for every channel).
    pub std_len: u32,
    /// Per channel standard deviation, divided by after the mean.
    pub std: [f64; 4],
}

impl FerryPreprocess {
    fn of(p: &Preprocess) -> Self {
        let filter = match p.resize.as_ref().and_then(|r| r.filter) {
            None => FerryResizeFilter::FerryFilterUnset,
            Some(ResizeFilter::Nearest) => FerryResizeFilter::FerryFilterNearest,
            Some(ResizeFilter::Bilinear) => FerryResizeFilter::FerryFilterBilinear,
            Some(ResizeFilter::Bicubic) => FerryResizeFilter::FerryFilterBicubic,
            Some(ResizeFilter::Area) => FerryResizeFilter::FerryFilterArea,
            Some(ResizeFilter::Lanczos) => FerryResizeFilter::FerryFilterLanczos,
            Some(ResizeFilter::Other) => FerryResizeFilter::FerryFilterOther,
        };
        let color = match p.color {
            None => FerryColorOrder::FerryColorUnset,
            Some(ColorOrder::Rgb) => FerryColorOrder::FerryColorRgb,
            Some(ColorOrder::Bgr) => FerryColorOrder::FerryColorBgr,
            Some(ColorOrder::Gray) => FerryColorOrder::FerryColorGray,
            Some(ColorOrder::Other) => FerryColorOrder::FerryColorOther,
        };
        let layout = match p.layout {
            None => FerryLayout::FerryLayoutUnset,
            Some(Layout::Nchw) => FerryLayout::FerryLayoutNchw,
            Some(Layout::Nhwc) => FerryLayout::FerryLayoutNhwc,
            Some(Layout::Other) => FerryLayout::FerryLayoutOther,
        };
        // Validation keeps both lists at most 4 long.
        let four = |v: &[f64]| {
            let mut out = [0.0; 4];
            for (o, x) in out.iter_mut().zip(v) {
                *o = *x;
            }
            (u32::try_from(v.len().min(4)).unwrap_or(4), out)
        };
        let (mean_len, mean) = four(&p.mean);
        let (std_len, std) = four(&p.std);
        let [range_low, range_high] = p.range.unwrap_or([0.0, 0.0]);
        Self {
            resize_width: p.resize.as_ref().map_or(0, |r| r.width),
            resize_height: p.resize.as_ref().map_or(0, |r| r.height),
            resize_filter: filter,
            color,
            layout,
            has_range: p.range.is_some(),
            range_low,
            range_high,
            mean_len,
            mean,
            std_len,
            std,
        }
    }
}

/// The metadata of a loaded model as the C ABI hands it out, kept with the handle.
#[derive(Debug)]
pub(super) struct MetadataOut {
    /// The preprocessing, when the release declares one.
    pub(super) preprocess: Option<FerryPreprocess>,
    /// The labels, one per line (empty when the release has none).
    pub(super) labels: CString,
    /// Each asset's verified file.
    pub(super) assets: BTreeMap<String, CString>,
}

impl MetadataOut {
    pub(super) fn of(m: &LoadedModel) -> Self {
        let text = |s: &str| CString::new(s.replace('\0', "")).unwrap_or_default();
        Self {
            preprocess: m.preprocess().map(FerryPreprocess::of),
            labels: text(&m.labels().map(|l| l.join("\n")).unwrap_or_default()),
            assets: m
                .assets()
                .iter()
                .map(|(n, p)| (n.clone(), text(&p.to_string_lossy())))
                .collect(),
        }
    }
}

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
