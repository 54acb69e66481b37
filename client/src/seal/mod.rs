//! Sealed variants on the device: the program, its data file and its assets stay ciphertext
//! in the cache; the runtime reads them through [`SealedSource`], which decrypts the pieces it
//! is asked for as it reads them (no plaintext file, no second full copy in memory). Keys come
//! from the device's [`KeyStore`] or, the first time, from the server (`request.rs`), and the
//! app reads sealed assets through [`SealedAsset`].

pub(crate) mod keys;
mod open;
mod request;

use std::fs::File;
use std::path::Path;

use ferry_fs::sealed::SealedReader;

pub use keys::{Attest, FileKeyStore, FileKeys, KeyStore, MemoryKeyStore, entry_name};
pub use open::SealedAsset;
pub(crate) use request::KeyAsk;

/// A sealed file opened with its file key, read by the runtime at any offset.
#[derive(Debug)]
pub struct SealedSource {
    reader: SealedReader,
}

impl SealedSource {
    /// Opens the sealed file at `path` with its file key: the key table is checked here (a
    /// wrong key or changed bytes fail now, before the runtime reads anything).
    pub fn open(path: &Path, file_key: &[u8; 32]) -> std::io::Result<Self> {
        Ok(Self {
            reader: SealedReader::open(File::open(path)?, file_key)?,
        })
    }
}

impl ferry_runtime::ProgramSource for SealedSource {
    fn len(&self) -> u64 {
        self.reader.plain_len()
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.reader.read_at(offset, out)
    }
}

#[cfg(all(test, feature = "executorch"))]
mod tests;
