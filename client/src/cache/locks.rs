//! OS file locks for the cache that an app's processes share (a UI process and a background
//! prefetch, a capture service and an analytics service): the index is changed under an
//! exclusive lock on `<cache>/.lock`, a blob is downloaded by the holder of its
//! `locks/<hex>.lock`, a blob in use is held with a shared lock on the blob file itself (eviction
//! takes it exclusively or skips it), and the telemetry queue is changed under
//! `telemetry/queue.lock`.
//!
//! These are the kernel's advisory locks (`flock(2)` on every unix, Android and Apple
//! platforms included; `LockFileEx` on Windows, through `std::fs::File::lock`): a process that
//! dies, even by SIGKILL, releases them, so nothing stays locked. On unix `flock` is called
//! directly, because std's `File::lock` family returns `Unsupported` on Android before Rust
//! 1.98 (rust-lang/rust#148325). A filesystem that cannot lock (some network and FUSE mounts) is
//! reported as `cache_lock_unsupported`.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::ClientError;

/// A held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct FileLock {
    file: File,
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = os::unlock(&self.file);
    }
}

/// The lock calls themselves.
#[cfg(unix)]
mod os {
    use std::fs::File;
    use std::io;
    use std::os::fd::AsRawFd as _;

    #[allow(unsafe_code)]
    fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
        loop {
            // SAFETY: `flock` on a descriptor the `File` owns and keeps open for the call.
            if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    pub(super) fn lock(file: &File) -> io::Result<()> {
        flock(file, libc::LOCK_EX)
    }

    pub(super) fn lock_shared(file: &File) -> io::Result<()> {
        flock(file, libc::LOCK_SH)
    }

    /// `Ok(false)` when another holder has a lock on it.
    pub(super) fn try_lock(file: &File) -> io::Result<bool> {
        match flock(file, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(super) fn unlock(file: &File) -> io::Result<()> {
        flock(file, libc::LOCK_UN)
    }
}

/// The lock calls themselves.
#[cfg(not(unix))]
mod os {
    use std::fs::{File, TryLockError};
    use std::io;

    pub(super) fn lock(file: &File) -> io::Result<()> {
        file.lock()
    }

    pub(super) fn lock_shared(file: &File) -> io::Result<()> {
        file.lock_shared()
    }

    pub(super) fn try_lock(file: &File) -> io::Result<bool> {
        match file.try_lock() {
            Ok(()) => Ok(true),
            Err(TryLockError::WouldBlock) => Ok(false),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }

    pub(super) fn unlock(file: &File) -> io::Result<()> {
        file.unlock()
    }
}

/// An exclusive lock on `file` if no one holds any lock on it now (`None`: someone does).
pub(crate) fn try_lock_file(file: File, path: &Path) -> Result<Option<FileLock>, ClientError> {
    match os::try_lock(&file) {
        Ok(true) => Ok(Some(FileLock { file })),
        Ok(false) => Ok(None),
        Err(e) => Err(lock_error(path, e)),
    }
}

impl FileLock {
    /// The locked file.
    pub fn file(&self) -> &File {
        &self.file
    }
}

/// Whether an I/O error means the filesystem cannot lock at all.
fn unsupported(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::Unsupported)
        || matches!(
            e.raw_os_error(),
            Some(37 /* ENOLCK */) | Some(95 /* EOPNOTSUPP */)
        )
}

/// The error for a lock that failed on `path`.
pub(crate) fn lock_error(path: &Path, e: io::Error) -> ClientError {
    if unsupported(&e) {
        ClientError::CacheLockUnsupported {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    } else {
        ClientError::io(path, e)
    }
}

fn open(path: &Path) -> Result<File, ClientError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| ClientError::io(path, e))
}

/// Waits for an exclusive lock on `path` (created when missing).
pub(crate) fn exclusive(path: &Path) -> Result<FileLock, ClientError> {
    let file = open(path)?;
    os::lock(&file).map_err(|e| lock_error(path, e))?;
    Ok(FileLock { file })
}

/// Waits for a shared lock on `path` (created when missing).
pub(crate) fn shared(path: &Path) -> Result<FileLock, ClientError> {
    let file = open(path)?;
    os::lock_shared(&file).map_err(|e| lock_error(path, e))?;
    Ok(FileLock { file })
}

/// An exclusive lock on `path` if no one holds any lock on it now.
pub(crate) fn try_exclusive(path: &Path) -> Result<Option<FileLock>, ClientError> {
    try_lock_file(open(path)?, path)
}

/// What [`try_exclusive_existing`] found.
pub(crate) enum Exclusive {
    /// The file does not exist.
    Missing,
    /// Another holder (this process or another) has a lock on it.
    Held,
    /// Locked exclusively.
    Locked(FileLock),
}

/// An exclusive lock on the existing file `path` if no one holds any lock on it now (never
/// creates it).
pub(crate) fn try_exclusive_existing(path: &Path) -> Result<Exclusive, ClientError> {
    exclusive_existing(path, false)
}

/// [`try_exclusive_existing`] on a file opened for reading and writing.
pub(crate) fn try_exclusive_existing_rw(path: &Path) -> Result<Exclusive, ClientError> {
    exclusive_existing(path, true)
}

fn exclusive_existing(path: &Path, write: bool) -> Result<Exclusive, ClientError> {
    let file = match OpenOptions::new().read(true).write(write).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Exclusive::Missing),
        Err(e) => return Err(ClientError::io(path, e)),
    };
    Ok(match try_lock_file(file, path)? {
        Some(l) => Exclusive::Locked(l),
        None => Exclusive::Held,
    })
}

/// An exclusive lock on `path`, waiting at most `wait` (polling); `None` when another process
/// kept it longer.
pub(crate) fn exclusive_within(
    path: &Path,
    wait: Duration,
) -> Result<Option<FileLock>, ClientError> {
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(5);
    loop {
        if let Some(l) = try_exclusive(path)? {
            return Ok(Some(l));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// A shared lock on an existing file, taken on the file it names now; `None` when it does not
/// exist (or was replaced or removed while the lock was taken).
pub(crate) fn shared_existing(path: &Path) -> Result<Option<FileLock>, ClientError> {
    let mut opts = OpenOptions::new();
    opts.read(true);
    // A pipe put under the name would otherwise block the open until a writer comes.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut opts, libc::O_NONBLOCK);
    let file = match opts.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ClientError::io(path, e)),
    };
    os::lock_shared(&file).map_err(|e| lock_error(path, e))?;
    // Eviction may have removed the file between the open and the lock.
    if !same_file(&file, path) {
        return Ok(None);
    }
    Ok(Some(FileLock { file }))
}

/// Whether `path` still names the open `file`.
#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Whether `path` still names the open `file` (without inode numbers: it still exists).
#[cfg(not(unix))]
fn same_file(_file: &File, path: &Path) -> bool {
    path.exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_excludes_and_shared_shares() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("x.lock");
        let a = shared(&p).expect("shared");
        let b = shared(&p).expect("another shared");
        assert!(
            try_exclusive(&p).expect("try").is_none(),
            "shared locks block exclusive"
        );
        drop((a, b));
        let held = try_exclusive(&p).expect("try").expect("free now");
        assert!(
            exclusive_within(&p, Duration::from_millis(50))
                .expect("wait")
                .is_none(),
            "bounded wait gives up"
        );
        drop(held);
        assert!(
            exclusive_within(&p, Duration::from_millis(50))
                .expect("wait")
                .is_some()
        );
    }

    #[test]
    fn a_shared_lock_on_a_removed_file_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("blob");
        assert!(shared_existing(&p).expect("none").is_none());
        std::fs::write(&p, b"x").expect("write");
        assert!(shared_existing(&p).expect("lock").is_some());
    }
}
