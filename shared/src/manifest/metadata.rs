//! A variant's signed model metadata: how an app prepares the program's input from an image
//! ([`Preprocess`]), the files the app reads beside the program (its assets, listed like data
//! files with [`ExtraFile`]), and which asset holds the class labels.
//!
//! Readers are tolerant: a resize filter, colour order or layout this build does not know is
//! read as `Other` (the app decides what to do with it), and fields it does not know are
//! ignored. `ferry sign` never writes `Other`.

use serde::{Deserialize, Serialize};

/// Largest labels file: one label per line, read whole by the client at load.
pub const MAX_LABELS_BYTES: u64 = 4 << 20;
/// Most labels a labels file holds (`ferry sign` refuses more; a client reads no more).
pub const MAX_LABELS: usize = 65_536;
/// Largest magnitude of a `mean` or `range` value, and of a `std` (a float32 pipeline must
/// hold every value).
pub const MAX_PREPROCESS_VALUE: f64 = 1e6;
/// Smallest `std`.
pub const MIN_STD: f64 = 1e-6;
/// Most channels a preprocessing's `mean` and `std` list.
pub const MAX_CHANNELS: usize = 4;
/// Largest side of a resize.
pub const MAX_RESIZE: u32 = 65_536;

/// How an app turns an image into the program's first input, as the model was trained:
/// resize it, order its channels, scale 8-bit values 0..=255 linearly onto `range`, subtract
/// `mean` and divide by `std` per channel, and lay the tensor out in `layout`. Every part is
/// optional; what is absent is not part of the model's contract.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Preprocess {
    /// The size the image is resized to first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<Resize>,
    /// The channel order the program takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<ColorOrder>,
    /// The input tensor's layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
    /// `[low, high]`: where 8-bit values 0 and 255 land before normalisation (`[0, 1]`,
    /// `[-1, 1]`, `[0, 255]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<[f64; 2]>,
    /// Per channel (in `color` order), subtracted after scaling; one value for every channel,
    /// or one per channel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mean: Vec<f64>,
    /// Per channel, divided by after subtracting `mean`; one value, or one per channel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub std: Vec<f64>,
}

/// A resize to `width` × `height` pixels with a filter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resize {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The interpolation the model was trained with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<ResizeFilter>,
}

/// An image interpolation filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResizeFilter {
    /// Nearest neighbour.
    Nearest,
    /// Bilinear.
    Bilinear,
    /// Bicubic.
    Bicubic,
    /// Area averaging (OpenCV's `INTER_AREA`).
    Area,
    /// Lanczos.
    Lanczos,
    /// A filter this build does not know.
    #[serde(other)]
    Other,
}

/// The order of an image's colour channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColorOrder {
    /// Red, green, blue.
    Rgb,
    /// Blue, green, red (OpenCV's default).
    Bgr,
    /// One grey channel.
    Gray,
    /// An order this build does not know.
    #[serde(other)]
    Other,
}

impl ColorOrder {
    /// Its number of channels (`None` for one this build does not know).
    pub fn channels(self) -> Option<usize> {
        match self {
            ColorOrder::Rgb | ColorOrder::Bgr => Some(3),
            ColorOrder::Gray => Some(1),
            ColorOrder::Other => None,
        }
    }
}

/// The layout of an image tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Batch, channels, height, width (PyTorch's).
    Nchw,
    /// Batch, height, width, channels.
    Nhwc,
    /// A layout this build does not know.
    #[serde(other)]
    Other,
}

impl Preprocess {
    /// Checks its values: finite numbers, positive `std`, `range` low below high, a resize
    /// within 1..=65536 pixels, and `mean`/`std` of one value or one per channel.
    pub fn check(&self) -> Result<(), String> {
        if let Some(r) = &self.resize
            && (!(1..=MAX_RESIZE).contains(&r.width) || !(1..=MAX_RESIZE).contains(&r.height))
        {
            return Err(format!(
                "preprocess resize {}x{} is outside 1..={MAX_RESIZE} pixels",
                r.width, r.height
            ));
        }
        let fits = |x: f64| x.is_finite() && x.abs() <= MAX_PREPROCESS_VALUE;
        if let Some([lo, hi]) = self.range
            && !(fits(lo) && fits(hi) && lo < hi)
        {
            return Err(format!(
                "preprocess range [{lo}, {hi}] needs numbers within ±{MAX_PREPROCESS_VALUE}, \
                 low below high"
            ));
        }
        for (what, list) in [("mean", &self.mean), ("std", &self.std)] {
            if list.len() > MAX_CHANNELS {
                return Err(format!(
                    "preprocess {what} has {} values; at most {MAX_CHANNELS}",
                    list.len()
                ));
            }
            if list.iter().any(|x| !fits(*x)) {
                return Err(format!(
                    "preprocess {what} holds a number that is not finite or is beyond \
                     ±{MAX_PREPROCESS_VALUE}"
                ));
            }
            let channels = self.color.and_then(ColorOrder::channels);
            if let Some(n) = channels
                && list.len() > 1
                && list.len() != n
            {
                return Err(format!(
                    "preprocess {what} has {} values; {} takes one, or one per channel ({n})",
                    list.len(),
                    self.color
                        .map(|c| format!("{c:?}").to_lowercase())
                        .unwrap_or_default()
                ));
            }
        }
        if self.std.iter().any(|s| *s < MIN_STD) {
            return Err(format!("preprocess std values must be at least {MIN_STD}"));
        }
        Ok(())
    }

    /// The values this build does not know (written by a newer signer), by field name.
    pub fn unknown_values(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self
            .resize
            .as_ref()
            .is_some_and(|r| r.filter == Some(ResizeFilter::Other))
        {
            out.push("resize.filter");
        }
        if self.color == Some(ColorOrder::Other) {
            out.push("color");
        }
        if self.layout == Some(Layout::Other) {
            out.push("layout");
        }
        out
    }
}
