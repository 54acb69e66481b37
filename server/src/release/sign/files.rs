//! How `ferry sign` reads the files it signs: a small file whole (through the caller's `read`),
//! a large one (a multi-GB program, `.ptd` or asset) as a stream for its SHA-256 and size, with
//! only the leading bytes the inspector needs in memory, so that signing a 4 GB model does not
//! need 4 GB of memory.

use std::io::Read as _;
use std::path::Path;

use anyhow::Context as _;
use ferry_shared::Sha256Digest;
use sha2::{Digest as _, Sha256};

/// Files of at least this size (64 MiB) on disk are streamed.
pub const STREAM_FROM: u64 = 64 << 20;
/// Leading bytes read first, to learn how many the inspector needs.
const HEAD: u64 = 64 << 10;
/// The most leading bytes held for a streamed file (the program part of a `.pte`, the
/// flatbuffer of a `.ptd`; each is far smaller in practice): the inspector's own bound.
fn max_prefix() -> u64 {
    ferry_shared::pte::PteLimits::default().max_program_size
}

/// A file to sign.
pub(crate) struct Described {
    /// Its bytes from the start: all of them for a small file; for a streamed one, the prefix
    /// `need` asked for (at least 64 KiB when the file has them).
    pub bytes: Vec<u8>,
    /// Its size in bytes.
    pub size: u64,
    /// The SHA-256 of all of it.
    pub sha256: Sha256Digest,
}

/// Describes `path`: read whole with `read` when small, else streamed, keeping the leading
/// bytes `need` asks for given the first 64 KiB (`None`: only those).
pub(crate) fn describe(
    path: &Path,
    read: &dyn Fn(&Path) -> anyhow::Result<Vec<u8>>,
    need: &dyn Fn(&[u8]) -> Option<u64>,
) -> anyhow::Result<Described> {
    let large = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() >= STREAM_FROM);
    if !large {
        let bytes = read(path)?;
        return Ok(Described {
            size: bytes.len() as u64,
            sha256: Sha256Digest::of(&bytes),
            bytes,
        });
    }
    let head = prefix(path, HEAD)?;
    let want = need(&head).unwrap_or(HEAD).clamp(HEAD, max_prefix());
    let bytes = if want > head.len() as u64 {
        prefix(path, want)?
    } else {
        head
    };
    let mut hasher = Sha256::new();
    let size = ferry_fs::hash_into(&mut hasher, path, None)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Described {
        bytes,
        size,
        sha256: Sha256Digest::from_bytes(hasher.finalize().into()),
    })
}

/// The first `n` bytes of `path` (fewer when it is shorter).
fn prefix(path: &Path, n: u64) -> anyhow::Result<Vec<u8>> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut out = Vec::new();
    f.take(n)
        .read_to_end(&mut out)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_file_is_hashed_whole_and_held_only_as_far_as_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("big.bin");
        let bytes: Vec<u8> = (0..STREAM_FROM + 12_345).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).expect("write");
        let never = |_: &Path| -> anyhow::Result<Vec<u8>> { anyhow::bail!("read whole") };
        let d = describe(&path, &never, &|_| Some(100_000)).expect("streamed");
        assert_eq!(d.size, bytes.len() as u64);
        assert_eq!(d.sha256, Sha256Digest::of(&bytes));
        assert_eq!(d.bytes, bytes[..100_000]);
        let d = describe(&path, &never, &|_| None).expect("streamed");
        assert_eq!(d.bytes.len() as u64, HEAD);
        // A small file goes through `read`.
        let small = dir.path().join("small.bin");
        std::fs::write(&small, b"abc").expect("write");
        let e = describe(&small, &never, &|_| None)
            .err()
            .expect("read whole");
        assert!(e.to_string().contains("read whole"), "{e}");
    }
}
