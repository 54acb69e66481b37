//! Durable file writes and file hashing, the one implementation that the server, the CLI and
//! the client all use.
//!
//! A durable write never leaves a half-written file behind, whatever the moment of a crash or
//! power loss: the bytes go to a staging file in the same folder (opened with `create_new`, so
//! two writers never share one), the staging file is fsynced, renamed over the destination, and
//! the folder is fsynced so that the rename itself survives. Readers see the old file or the
//! new one.
//!
//! [`commit`] is the second half alone, for files that were written in place over time (a
//! resumable download's `.part` file) and are published once complete.

pub mod grouped;
pub mod sealed;

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};

/// Unix permissions of a new file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Readable by everyone, writable by the owner (`0o644`).
    Public,
    /// Readable and writable by the owner only (`0o600`), for secret keys.
    OwnerOnly,
}

impl Mode {
    #[cfg(unix)]
    fn bits(self) -> u32 {
        match self {
            Mode::Public => 0o644,
            Mode::OwnerOnly => 0o600,
        }
    }
}

static STAGE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The folder that holds `path` (`.` for a bare file name).
fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Creates a fresh staging file next to `dest` with `create_new`, so no other writer (another
/// thread or process) can be writing the same one.
fn stage(dest: &Path, mode: Mode) -> io::Result<(File, PathBuf)> {
    let dir = parent_of(dest);
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    loop {
        let n = STAGE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(mode.bits());
        }
        #[cfg(not(unix))]
        let _ = mode;
        match opts.open(&tmp) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Fsyncs a folder, so that renames and creations inside it survive a power loss. A no-op
/// where folders cannot be opened (not Unix).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Writes `bytes` to `path` durably and atomically (see the crate docs). Creates the folder if
/// it is missing.
pub fn write(path: &Path, bytes: &[u8], mode: Mode) -> io::Result<()> {
    let dir = parent_of(path);
    std::fs::create_dir_all(dir)?;
    let (mut file, tmp) = stage(path, mode)?;
    let result = (|| {
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes a file durably and atomically as [`write`] does, its bytes coming from `fill` (which
/// streams them into the writer it is given, and may fail: nothing is left behind then).
pub fn write_with<T>(
    path: &Path,
    mode: Mode,
    fill: impl FnOnce(&mut io::BufWriter<&mut File>) -> io::Result<T>,
) -> io::Result<T> {
    let dir = parent_of(path);
    std::fs::create_dir_all(dir)?;
    let (mut file, tmp) = stage(path, mode)?;
    let result = (|| {
        let value = {
            let mut w = io::BufWriter::with_capacity(1 << 20, &mut file);
            let value = fill(&mut w)?;
            w.flush()?;
            value
        };
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)?;
        Ok(value)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Publishes a complete file written elsewhere in the same folder: fsyncs `staged`, renames it
/// to `dest` and fsyncs the folder.
pub fn commit(staged: &Path, dest: &Path) -> io::Result<()> {
    File::open(staged)?.sync_all()?;
    std::fs::rename(staged, dest)?;
    sync_dir(parent_of(dest))
}

/// True when `name` is a staging file left by [`write`] (a crash between staging and rename);
/// such files are safe to delete.
pub fn is_staging_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// Feeds the first `limit` bytes of `path` (all of it when `None`) into `hasher`; returns how
/// many bytes were read (fewer than `limit` when the file is shorter).
pub fn hash_into(hasher: &mut Sha256, path: &Path, limit: Option<u64>) -> io::Result<u64> {
    hash_from(hasher, File::open(path)?, limit, &mut |_| {})
}

/// [`hash_into`] from an open reader (read with `read(2)` from where it stands), calling
/// `progress` with the bytes hashed so far after each read.
pub fn hash_from(
    hasher: &mut Sha256,
    mut reader: impl Read,
    limit: Option<u64>,
    progress: &mut dyn FnMut(u64),
) -> io::Result<u64> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let want = match limit {
            Some(l) => (l - total).min(buf.len() as u64) as usize,
            None => buf.len(),
        };
        if want == 0 {
            break;
        }
        let n = match reader.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        total += n as u64;
        progress(total);
    }
    Ok(total)
}

/// The SHA-256 of a whole file.
pub fn sha256_file(path: &Path) -> io::Result<[u8; 32]> {
    let mut h = Sha256::new();
    hash_into(&mut h, path, None)?;
    Ok(h.finalize().into())
}

/// The sizes of a content-defined chunker (FastCDC, 2020 variant), in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSizes {
    /// Smallest chunk (except the last).
    pub min: u32,
    /// Typical chunk.
    pub avg: u32,
    /// Largest chunk.
    pub max: u32,
}

/// Splits everything `reader` yields into content-defined chunks and returns each chunk's
/// length and SHA-256, in order. Memory stays within about two of the largest chunks, whatever
/// the input's length. The same bytes always give the same chunks.
pub fn content_chunks<R: Read>(reader: R, sizes: ChunkSizes) -> io::Result<Vec<(u64, [u8; 32])>> {
    let chunker = fastcdc::v2020::StreamCDC::new(
        reader,
        sizes.min as usize,
        sizes.avg as usize,
        sizes.max as usize,
    );
    let mut out = Vec::new();
    for chunk in chunker {
        let chunk = chunk.map_err(cdc_error)?;
        out.push((chunk.length as u64, Sha256::digest(&chunk.data).into()));
    }
    Ok(out)
}

/// A content-defined chunker's error as an I/O error (the reader's own, when it was one).
pub(crate) fn cdc_error(e: fastcdc::v2020::Error) -> io::Error {
    match e {
        fastcdc::v2020::Error::IoError(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

/// [`content_chunks`] of a whole file.
pub fn chunk_file(path: &Path, sizes: ChunkSizes) -> io::Result<Vec<(u64, [u8; 32])>> {
    content_chunks(
        io::BufReader::with_capacity(1 << 20, File::open(path)?),
        sizes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pseudo-random bytes from a fixed seed (xorshift), so the tests need no files.
    pub(crate) fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    const SMALL: ChunkSizes = ChunkSizes {
        min: 4096,
        avg: 16384,
        max: 65536,
    };

    #[test]
    fn chunking_is_deterministic_and_covers_the_input() {
        let data = noise(3 << 20, 7);
        let a = content_chunks(&data[..], SMALL).expect("chunks");
        // The same bytes through a reader that hands out a few bytes at a time.
        struct Dribble<'a>(&'a [u8]);
        impl Read for Dribble<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = buf.len().min(self.0.len()).min(1000);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let b = content_chunks(Dribble(&data), SMALL).expect("chunks");
        assert_eq!(a, b);
        assert_eq!(a.iter().map(|c| c.0).sum::<u64>(), data.len() as u64);
        assert!(a.len() > 50, "{} chunks", a.len());
        assert!(a.iter().all(|c| c.0 <= u64::from(SMALL.max)));
        let mut at = 0usize;
        for (len, digest) in &a {
            let d: [u8; 32] = Sha256::digest(&data[at..at + *len as usize]).into();
            assert_eq!(&d, digest);
            at += *len as usize;
        }
    }

    #[test]
    fn an_edit_moves_only_nearby_chunks() {
        let data = noise(4 << 20, 11);
        let mut edited = data.clone();
        // Rewrite 64 KiB in the middle and insert 100 bytes before it.
        for b in &mut edited[2 << 20..(2 << 20) + 65536] {
            *b = b.wrapping_add(1);
        }
        edited.splice(1 << 20..1 << 20, std::iter::repeat_n(9u8, 100));
        let old = content_chunks(&data[..], SMALL).expect("chunks");
        let new = content_chunks(&edited[..], SMALL).expect("chunks");
        let known: std::collections::HashSet<_> = old.iter().map(|c| c.1).collect();
        let changed: u64 = new
            .iter()
            .filter(|c| !known.contains(&c.1))
            .map(|c| c.0)
            .sum();
        // The edits touch 64 KiB + 100 bytes; with the chunks around them a little more.
        assert!(changed < 400 << 10, "{changed} bytes in changed chunks");
        assert!(changed >= 65536, "{changed}");
    }

    #[test]
    fn chunking_a_missing_file_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(chunk_file(&dir.path().join("absent"), SMALL).is_err());
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").expect("write");
        assert!(chunk_file(&empty, SMALL).expect("chunks").is_empty());
    }

    #[test]
    fn write_replaces_and_leaves_no_staging_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("sub/state.json");
        write(&p, b"one", Mode::Public).expect("first write");
        write(&p, b"two", Mode::Public).expect("second write");
        assert_eq!(std::fs::read(&p).expect("read"), b"two");
        let names: Vec<String> = std::fs::read_dir(p.parent().expect("parent"))
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["state.json".to_string()]);
    }

    #[cfg(unix)]
    #[test]
    fn owner_only_mode_is_applied() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("secret.key");
        write(&p, b"k", Mode::OwnerOnly).expect("write");
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn staging_never_reuses_an_existing_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dest = dir.path().join("x");
        let (_a, pa) = stage(&dest, Mode::Public).expect("a");
        let (_b, pb) = stage(&dest, Mode::Public).expect("b");
        assert_ne!(pa, pb);
        assert!(is_staging_name(
            &pa.file_name().expect("name").to_string_lossy()
        ));
    }

    #[test]
    fn a_failed_write_leaves_the_old_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("f");
        write(&p, b"old", Mode::Public).expect("write");
        // Renaming a file over a non-empty folder fails: the old content must stay intact.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir_all(blocked.join("inner")).expect("mkdir");
        assert!(write(&blocked, b"new", Mode::Public).is_err());
        assert!(blocked.join("inner").is_dir());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(|e| e.ok())
            .filter(|e| is_staging_name(&e.file_name().to_string_lossy()))
            .collect();
        assert!(left.is_empty(), "staging files left: {left:?}");
        assert_eq!(std::fs::read(&p).expect("read"), b"old");
    }

    #[test]
    fn hashes_match_a_one_shot_hash() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("blob");
        let bytes: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &bytes).expect("write");
        let whole: [u8; 32] = Sha256::digest(&bytes).into();
        assert_eq!(sha256_file(&p).expect("hash"), whole);
        let mut h = Sha256::new();
        assert_eq!(
            hash_into(&mut h, &p, Some(300_001)).expect("prefix"),
            300_001
        );
        let prefix: [u8; 32] = h.finalize().into();
        let expect: [u8; 32] = Sha256::digest(&bytes[..300_001]).into();
        assert_eq!(prefix, expect);
        let mut h = Sha256::new();
        assert_eq!(
            hash_into(&mut h, &p, Some(10_000_000)).expect("long"),
            700_000
        );
    }

    #[test]
    fn commit_publishes_a_staged_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let part = dir.path().join("blob.part");
        std::fs::write(&part, b"bytes").expect("write");
        let dest = dir.path().join("blob");
        commit(&part, &dest).expect("commit");
        assert!(!part.exists());
        assert_eq!(std::fs::read(&dest).expect("read"), b"bytes");
    }
}
