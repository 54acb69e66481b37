//! Verify once, not at every start: what the cache records when it has hashed a file whole,
//! and the cheap checks that let a later load trust the file without hashing it again.
//!
//! When a file's bytes have matched their signed digest (after a download that hashed every
//! byte, or a full hash of a cached file), the index records a [`Checked`] for it:
//!
//! - the file's **stamp**: size, device, inode, modification and status-change times. Any
//!   write through the file system (another process, a partial write, a restore, a copy over
//!   it) changes the status-change time, which no process can set back; a replaced file has
//!   another inode.
//! - for a program (`.pte`) or data file (`.ptd`), the SHA-256 of its **head**: the header and
//!   flatbuffer the runtime parses before it reads any segment (at most [`MAX_HEAD`] bytes).
//! - when the whole file was last hashed.
//!
//! A load whose file still has its stamp hashes only the head (a few KiB for a program with
//! `.ptd` weights), so a program whose header changed never reaches the runtime, whatever the
//! cause. A file whose stamp changed is hashed whole again before it is used, with progress.
//! Changes no stamp shows (a flipped bit on the medium, a raw write to the block device, a
//! writer that forged the index too) are found by the background pass (`recheck.rs`), which
//! hashes files whose last full hash is older than the client's `reverify_after` after a load,
//! and evicts and reports a file that no longer matches before its next load.

use std::fs::File;
use std::io;

use ferry_shared::Sha256Digest;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The longest head hashed at every load. A program or data file whose header and flatbuffer
/// are longer is hashed whole at every load (as before this check existed).
pub const MAX_HEAD: u64 = 16 << 20;

/// A file's identity on disk: what any write or replacement changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stamp {
    /// Size in bytes.
    pub len: u64,
    /// Device and inode (0 where the platform has none).
    pub dev: u64,
    pub ino: u64,
    /// Modification and status-change times, nanoseconds since the epoch (0 where unknown).
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl Stamp {
    /// The stamp of an open file now.
    pub fn of(file: &File) -> io::Result<Stamp> {
        let m = file.metadata()?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt as _;
            let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
            Ok(Stamp {
                len: m.len(),
                dev: m.dev(),
                ino: m.ino(),
                mtime_ns: ns(m.mtime(), m.mtime_nsec()),
                ctime_ns: ns(m.ctime(), m.ctime_nsec()),
            })
        }
        #[cfg(not(unix))]
        {
            let ns = |t: io::Result<std::time::SystemTime>| {
                t.ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            };
            Ok(Stamp {
                len: m.len(),
                dev: 0,
                ino: 0,
                mtime_ns: ns(m.modified()),
                // No status-change time: the creation time stands in (a replaced file differs).
                ctime_ns: ns(m.created()),
            })
        }
    }
}

/// What the part of a file the runtime parses first is checked against at each load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Head {
    /// Not a program or data file (an asset): the runtime never reads it.
    None,
    /// The first `len` bytes hash to `sha256`.
    Hash {
        /// Bytes from the start.
        len: u64,
        /// Their SHA-256.
        sha256: Sha256Digest,
    },
    /// The head is longer than [`MAX_HEAD`]: the whole file is hashed at every load.
    Whole,
}

/// A file whose bytes matched their signed digest, as the index records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Checked {
    /// The file's stamp when it was hashed.
    pub stamp: Stamp,
    /// The head check of later loads.
    pub head: Head,
    /// When the whole file was last hashed (seconds since the epoch, the device's clock).
    pub hashed_at: u64,
}

/// The device's clock in seconds since the epoch (0 before it).
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The SHA-256 of a whole open file of `len` bytes, read from its start, calling `progress`
/// with the bytes hashed so far after each step. A file shorter than `len` is an error.
pub(crate) fn hash_whole(
    file: &File,
    len: u64,
    progress: &mut dyn FnMut(u64),
) -> io::Result<Sha256Digest> {
    let mut h = Sha256::new();
    hash_range(file, len, &mut h, progress)?;
    Ok(Sha256Digest::from_bytes(h.finalize().into()))
}

/// Feeds the first `len` bytes of `file` to `h`. Reads with `read(2)` from the start (the
/// handle is the cache's own), not `pread`: the crash tests' preloaded library tells the
/// runtime's reads (`pread`) from the client's by that.
fn hash_range(
    file: &File,
    len: u64,
    h: &mut Sha256,
    progress: &mut dyn FnMut(u64),
) -> io::Result<()> {
    use std::io::Seek as _;
    let mut reader = file;
    reader.seek(io::SeekFrom::Start(0))?;
    let read = ferry_fs::hash_from(h, reader, Some(len), progress)?;
    if read < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the file ended at byte {read} of {len}"),
        ));
    }
    Ok(())
}

/// The SHA-256 of the first `len` bytes of `file`.
pub(crate) fn hash_head(file: &File, len: u64) -> io::Result<Sha256Digest> {
    let mut h = Sha256::new();
    hash_range(file, len, &mut h, &mut |_| {})?;
    Ok(Sha256Digest::from_bytes(h.finalize().into()))
}

/// How much of a file the runtime parses before its segments: from its first bytes, for a
/// program (`.pte`: the flatbuffer, whole file when it has no extended header) or a data file
/// (`.ptd`: header and flatbuffer); [`Head::None`] for anything else.
pub(crate) fn head_of(file: &File, len: u64) -> io::Result<Head> {
    let first = read_start(file, len.min(64))?;
    let (first, n) = (&first[..], first.len());
    let limits = ferry_shared::pte::PteLimits {
        max_program_size: u64::MAX,
        ..Default::default()
    };
    let wanted = if first.len() >= 8 && &first[4..8] == ferry_shared::pte::FILE_IDENTIFIER {
        ferry_shared::pte::required_prefix(first, &limits).unwrap_or(len)
    } else if ferry_shared::pte::is_ptd(first) {
        ferry_shared::pte::ptd_required_prefix(first).unwrap_or(len)
    } else {
        return Ok(Head::None);
    };
    // The first 64 bytes are always in the head: a header that shrank its own length is
    // still caught.
    let wanted = wanted.clamp(n as u64, len);
    if wanted > MAX_HEAD {
        return Ok(Head::Whole);
    }
    Ok(Head::Hash {
        len: wanted,
        sha256: hash_head(file, wanted)?,
    })
}

/// Up to `n` first bytes of `file` (fewer at its end), read with `read(2)`.
fn read_start(file: &File, n: u64) -> io::Result<Vec<u8>> {
    use std::io::{Read as _, Seek as _};
    let mut reader = file;
    reader.seek(io::SeekFrom::Start(0))?;
    let mut out = Vec::new();
    reader.take(n).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("f");
        std::fs::write(&path, bytes).expect("write");
        let f = File::open(&path).expect("open");
        (dir, f)
    }

    #[test]
    fn a_program_head_is_its_flatbuffer_and_an_asset_has_none() {
        let pte = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/pte/mlp-external-portable.pte"),
        )
        .expect("fixture");
        let (_d, f) = file_with(&pte);
        match head_of(&f, pte.len() as u64).expect("head") {
            Head::Hash { len, sha256 } => {
                assert!(len >= 64 && len <= pte.len() as u64, "{len}");
                let mut h = Sha256::new();
                h.update(&pte[..usize::try_from(len).expect("len")]);
                assert_eq!(sha256, Sha256Digest::from_bytes(h.finalize().into()));
            }
            other => panic!("{other:?}"),
        }
        let (_d, f) = file_with(b"labels\ncat\ndog\n");
        assert_eq!(head_of(&f, 15).expect("head"), Head::None);
    }

    #[test]
    fn a_short_file_fails_its_whole_hash() {
        let (_d, f) = file_with(b"abc");
        assert!(hash_whole(&f, 4, &mut |_| {}).is_err());
        let mut seen = 0;
        let d = hash_whole(&f, 3, &mut |n| seen = n).expect("hash");
        assert_eq!(seen, 3);
        assert_eq!(d.to_hex(), hex::encode(Sha256::digest(b"abc")));
    }

    #[test]
    fn any_write_changes_the_stamp() {
        let (dir, f) = file_with(b"0123456789");
        let before = Stamp::of(&f).expect("stamp");
        // The same length, the modification time set back: the status-change time moves.
        let path = dir.path().join("f");
        let mtime = std::fs::metadata(&path)
            .expect("meta")
            .modified()
            .expect("mtime");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let w = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        std::os::unix::fs::FileExt::write_at(&w, b"X", 5).expect("write");
        w.set_modified(mtime).expect("set mtime");
        let after = Stamp::of(&f).expect("stamp");
        assert_eq!(before.len, after.len);
        assert_eq!(before.mtime_ns, after.mtime_ns, "the writer hid its write");
        assert_ne!(before, after, "the status-change time did not move");
    }
}
