//! A loaded variant's signed metadata: the preprocessing its model was trained with, its class
//! labels, and the verified files of its assets.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ferry_shared::manifest::{MAX_LABELS, MAX_LABELS_BYTES, Preprocess, Variant};

use crate::cache::VerifiedBlob;
use crate::error::ClientError;

/// What a [`LoadedModel`](crate::LoadedModel) tells the app about preparing inputs and reading
/// outputs.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ModelMetadata {
    pub(crate) preprocess: Option<Preprocess>,
    pub(crate) labels: Option<Vec<String>>,
    pub(crate) assets: BTreeMap<String, PathBuf>,
}

impl ModelMetadata {
    /// Reads `v`'s metadata; `blob` is its verified program with its assets in the manifest's
    /// order. The labels file was verified against its signed digest and size (at most
    /// [`MAX_LABELS_BYTES`]); it is read whole, one label per line.
    pub(crate) fn of(v: &Variant, blob: &VerifiedBlob) -> Result<Self, ClientError> {
        let assets: BTreeMap<String, PathBuf> = v
            .assets
            .iter()
            .zip(blob.assets())
            .map(|(a, b)| (a.name.clone(), b.path().to_path_buf()))
            .collect();
        let labels = match v.labels.as_ref().and_then(|n| assets.get(n)) {
            Some(path) => Some(read_labels(path)?),
            None => None,
        };
        Ok(Self {
            preprocess: v.preprocess.clone(),
            labels,
            assets,
        })
    }
}

/// One label per line (a trailing carriage return dropped), at most [`MAX_LABELS`]; bytes that
/// are not UTF-8 are replaced rather than refused, since the file's digest was signed.
fn read_labels(path: &std::path::Path) -> Result<Vec<String>, ClientError> {
    use std::io::Read as _;
    let io = |e: std::io::Error| ClientError::CacheIo {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_LABELS_BYTES)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    Ok(String::from_utf8_lossy(&bytes)
        .lines()
        .take(MAX_LABELS)
        .map(str::to_string)
        .collect())
}
