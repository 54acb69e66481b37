//! The part file of a download (`<hex>.part`) and the validator kept beside it
//! (`<hex>.part.etag`).

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::error::ClientError;

pub(crate) fn hash_prefix(path: &Path, len: u64) -> Result<Sha256, ClientError> {
    let mut h = Sha256::new();
    if len > 0 {
        ferry_fs::hash_into(&mut h, path, Some(len)).map_err(|e| ClientError::io(path, e))?;
    }
    Ok(h)
}

pub(crate) fn part_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

pub(crate) fn etag_path(part: &Path) -> PathBuf {
    let mut p = part.as_os_str().to_owned();
    p.push(".etag");
    PathBuf::from(p)
}

/// Forgets the validator (`ETag`) kept for `part`: the next request resumes it with a plain
/// `Range` (another source's validator would only make it start over).
pub(crate) fn forget_validator(part: &Path) {
    let _ = std::fs::remove_file(etag_path(part));
}

pub(crate) fn truncate(part: &Path) -> Result<(), ClientError> {
    let _ = std::fs::remove_file(etag_path(part));
    match std::fs::remove_file(part) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ClientError::io(part, e)),
    }
}

/// The partial download `part`, cut to `start` bytes and open for writing from there.
pub(crate) fn open_at(part: &Path, start: u64) -> Result<std::fs::File, ClientError> {
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(part)
        .map_err(|e| ClientError::io(part, e))?;
    file.set_len(start).map_err(|e| ClientError::io(part, e))?;
    file.seek(SeekFrom::Start(start))
        .map_err(|e| ClientError::io(part, e))?;
    Ok(file)
}
