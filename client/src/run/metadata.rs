//! A loaded variant's signed metadata: the preprocessing its model was trained with, its class
//! labels, and the verified files of its assets.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ferry_shared::manifest::{MAX_LABELS, MAX_LABELS_BYTES, Preprocess, Variant};

use crate::cache::VerifiedBlob;
use crate::error::ClientError;
use crate::seal::{FileKeys, SealedAsset};

/// What a [`LoadedModel`](crate::LoadedModel) tells the app about preparing inputs and reading
/// outputs.
#[derive(Debug, Default)]
pub(crate) struct ModelMetadata {
    pub(crate) preprocess: Option<Preprocess>,
    pub(crate) labels: Option<Vec<String>>,
    pub(crate) assets: BTreeMap<String, PathBuf>,
    /// For a sealed variant: each asset's sealed digest, and the file keys to read them with.
    pub(crate) sealed: Option<(BTreeMap<String, ferry_shared::Sha256Digest>, FileKeys)>,
}

impl ModelMetadata {
    /// Reads `v`'s metadata; `blob` is its verified program with its assets in the manifest's
    /// order. The labels file was verified against its signed digest and size (at most
    /// [`MAX_LABELS_BYTES`]); it is read whole, one label per line.
    pub(crate) fn of(
        v: &Variant,
        blob: &VerifiedBlob,
        keys: Option<FileKeys>,
    ) -> Result<Self, ClientError> {
        let assets: BTreeMap<String, PathBuf> = v
            .assets
            .iter()
            .zip(blob.assets())
            .map(|(a, b)| (a.name.clone(), b.path().to_path_buf()))
            .collect();
        let sealed = keys.filter(|_| v.sealed.is_some()).map(|k| {
            let digests = v
                .assets
                .iter()
                .map(|a| (a.name.clone(), a.sha256))
                .collect();
            (digests, k)
        });
        let mut meta = Self {
            preprocess: v.preprocess.clone(),
            labels: None,
            assets,
            sealed,
        };
        if let Some(name) = &v.labels
            && meta.assets.contains_key(name)
        {
            let reader = meta.open_asset(name)?;
            meta.labels = Some(read_labels(reader, &meta.assets[name])?);
        }
        Ok(meta)
    }

    /// A reader of asset `name`'s plaintext: the cached file, or for a sealed variant the
    /// sealed file decrypted as it is read.
    pub(crate) fn open_asset(&self, name: &str) -> Result<Box<dyn ReadSeek>, ClientError> {
        let path = self
            .assets
            .get(name)
            .ok_or_else(|| ClientError::Config(format!("the variant has no asset {name:?}")))?;
        let io = |e: std::io::Error| ClientError::CacheIo {
            path: path.clone(),
            message: e.to_string(),
        };
        match &self.sealed {
            None => Ok(Box::new(std::fs::File::open(path).map_err(io)?)),
            Some((digests, keys)) => {
                let key = digests.get(name).and_then(|d| keys.get(d)).ok_or_else(|| {
                    ClientError::CacheIo {
                        path: path.clone(),
                        message: format!("no key for the sealed asset {name}"),
                    }
                })?;
                // Each read decrypts whole 64 KiB pieces: a piece-sized buffer keeps an app's
                // small reads (a line, a token) from opening the same piece again and again.
                Ok(Box::new(std::io::BufReader::with_capacity(
                    ferry_fs::sealed::format::PIECE,
                    SealedAsset::open(path, key).map_err(io)?,
                )))
            }
        }
    }
}

/// What an asset reader is: read and seek, sendable to another thread.
pub trait ReadSeek: std::io::Read + std::io::Seek + Send {}

impl<T: std::io::Read + std::io::Seek + Send> ReadSeek for T {}

/// One label per line (a trailing carriage return dropped), at most [`MAX_LABELS`]; bytes that
/// are not UTF-8 are replaced rather than refused, since the file's digest was signed.
fn read_labels(
    reader: Box<dyn ReadSeek>,
    path: &std::path::Path,
) -> Result<Vec<String>, ClientError> {
    use std::io::Read as _;
    let io = |e: std::io::Error| ClientError::CacheIo {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let mut bytes = Vec::new();
    reader
        .take(MAX_LABELS_BYTES)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    Ok(String::from_utf8_lossy(&bytes)
        .lines()
        .take(MAX_LABELS)
        .map(str::to_string)
        .collect())
}
