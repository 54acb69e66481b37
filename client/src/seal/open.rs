//! Opening a sealed variant: its program and data file through [`SealedSource`]s in the
//! runtime, its assets as [`SealedAsset`] readers.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use ferry_shared::errors::ErrorCode;
use ferry_shared::manifest::{Sealing, Variant};

use crate::Client;
use crate::cache::VerifiedBlob;
use crate::error::Stage;
use crate::run::golden::LoadFailure;
use crate::runtime::Program;
use crate::seal::{FileKeys, SealedSource};

/// A sealed asset opened with its key: reads and seeks over the plaintext, decrypting the
/// pieces it reads (the plaintext is never written anywhere).
#[derive(Debug)]
pub struct SealedAsset {
    source: SealedSource,
    at: u64,
}

impl SealedAsset {
    /// Opens the sealed file at `path` with its file key.
    pub fn open(path: &Path, file_key: &[u8; 32]) -> std::io::Result<Self> {
        Ok(Self {
            source: SealedSource::open(path, file_key)?,
            at: 0,
        })
    }

    /// The plaintext's length.
    pub fn len(&self) -> u64 {
        ferry_runtime::ProgramSource::len(&self.source)
    }

    /// True when the plaintext is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Read for SealedAsset {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.len().saturating_sub(self.at);
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        ferry_runtime::ProgramSource::read_at(&self.source, self.at, &mut buf[..n])?;
        self.at += n as u64;
        Ok(n)
    }
}

impl Seek for SealedAsset {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        let to = match pos {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len().checked_add_signed(d),
            SeekFrom::Current(d) => self.at.checked_add_signed(d),
        };
        self.at = to.ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a seek before the start of the asset",
            )
        })?;
        Ok(self.at)
    }
}

fn key_failure(v: &Variant, what: &str, e: &std::io::Error) -> LoadFailure {
    LoadFailure {
        stage: Stage::Key,
        code: ErrorCode::SealedKeyMissing,
        message: format!(
            "the key held for {what} of sealed variant {} does not open it ({e}); it was \
             forgotten, and the next load asks the server again",
            v.id
        ),
    }
}

impl Client {
    /// Opens sealed variant `v` in the runtime: its program and its data file read through
    /// [`SealedSource`]s with `keys`. A key that does not open its file is forgotten.
    pub(crate) fn open_sealed(
        &self,
        blob: &VerifiedBlob,
        v: &Variant,
        sealing: &Sealing,
        keys: &FileKeys,
        install_id: &str,
    ) -> Result<Box<dyn Program>, LoadFailure> {
        let open = |digest, path: &Path, what: &str| -> Result<SealedSource, LoadFailure> {
            let key = keys.get(digest).ok_or_else(|| LoadFailure {
                stage: Stage::Key,
                code: ErrorCode::SealedKeyMissing,
                message: format!("no key for {what} of sealed variant {}", v.id),
            })?;
            SealedSource::open(path, key).map_err(|e| {
                self.forget_keys(sealing, install_id);
                key_failure(v, what, &e)
            })
        };
        let program = open(&v.sha256, blob.path(), "the program")?;
        let data = match (v.extra_files.first(), blob.data_files().first()) {
            (Some(f), Some(d)) => Some(open(&f.sha256, d.path(), "the data file")?),
            _ => None,
        };
        self.runtime
            .open_sources(
                Box::new(program),
                data.map(|d| Box::new(d) as Box<dyn ferry_runtime::ProgramSource>),
            )
            .map_err(|e| LoadFailure::runtime(Stage::LoadProgram, e))
    }
}
