//! The parts a handle keeps besides the client or the model: a model's signed metadata as the C
//! ABI hands it out (with the `ferry_preprocess` struct and its enums), and a client's download
//! progress slot. Imports nothing of the C ABI's other files, which all use it.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{CString, c_char, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ferry_shared::manifest::{ColorOrder, Layout, Preprocess, ResizeFilter};

use crate::LoadedModel;
use crate::transfer::download::ProgressFn;

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
pub(crate) struct MetadataOut {
    /// The preprocessing, when the release declares one.
    pub(crate) preprocess: Option<FerryPreprocess>,
    /// The labels, one per line (empty when the release has none).
    pub(crate) labels: CString,
    /// Each asset's verified file.
    pub(crate) assets: BTreeMap<String, CString>,
}

impl MetadataOut {
    pub(crate) fn of(m: &LoadedModel) -> Self {
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

/// The callback itself (a `ferry_progress_fn` that is set).
pub(crate) type RawProgressFn = unsafe extern "C" fn(*mut c_void, *const c_char, u64, u64);

/// The app's callback and the last figures, shared by a client handle and its downloads.
#[derive(Default)]
pub(crate) struct ProgressSlot {
    /// The callback and its `user_data` (kept as an address).
    pub(crate) callback: std::sync::Mutex<Option<(RawProgressFn, usize)>>,
    pub(crate) done: AtomicU64,
    pub(crate) total: AtomicU64,
}

impl ProgressSlot {
    /// The client's progress function: records the figures, then calls the app's callback.
    pub(crate) fn progress_fn(self: &Arc<Self>) -> ProgressFn {
        let slot = self.clone();
        Arc::new(move |variant: &str, done: u64, total: u64| {
            slot.total.store(total, Ordering::Relaxed);
            slot.done.store(done, Ordering::Relaxed);
            let callback = *ferry_shared::sync::lock(&slot.callback);
            if let Some((f, user_data)) = callback {
                let name = CString::new(variant.replace('\0', " ")).unwrap_or_default();
                // SAFETY: the app gave this callback with this `user_data` and keeps both valid
                // until it sets another or frees the client (ferry.h); the name outlives the call.
                unsafe { f(user_data as *mut c_void, name.as_ptr(), done, total) };
            }
        })
    }
}
