//! The copy loop of a download: bytes from the network go to the file on one thread and to
//! SHA-256 on another, with the disk asked to write back as the download goes.

use std::io::{Read, Write};

use sha2::{Digest as _, Sha256};

/// Buffers in flight between the reading and the hashing thread, and their size: at most
/// 4 x 256 KiB of a download is in memory.
const PIPE_BUFFERS: usize = 4;
const PIPE_BUFFER_BYTES: usize = 256 * 1024;

/// How many written bytes [`copy_hashing`] lets pile up before it asks the kernel to start
/// writing them to disk.
const WRITEBACK_BYTES: u64 = 8 << 20;

/// Starts (does not wait for) writing `len` bytes of `file` from `offset` to disk, so that the
/// final `fsync` of a large download has little left to do: the disk works while the network
/// does. Advisory: failures are ignored (the `fsync` still decides durability).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn start_writeback(file: &std::fs::File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd as _;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: the descriptor is open for the whole call (borrowed from `file`); the call only
    // reads its arguments.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &std::fs::File, _offset: u64, _len: u64) {}

/// What [`copy_hashing`] got through.
pub(super) struct Copied {
    /// Bytes in the file now (from its start).
    pub(super) written: u64,
    /// The hash of those bytes.
    pub(super) hasher: Sha256,
    /// Why the stream ended before the size, if it failed.
    pub(super) stream_error: Option<String>,
}

pub(super) enum CopyError {
    /// The body is longer than the signed size.
    TooLong,
    /// Writing the file failed.
    Write(std::io::Error),
}

/// Copies `reader` into `file` (positioned at `start`) while a second thread hashes the same
/// bytes, so that hashing overlaps the network and the disk (SHA-256 is about half of the CPU
/// time of a download on loopback). Stops at the end of the body or at a read error, which is
/// returned as `stream_error` with the bytes so far kept; refuses a body longer than `size`.
pub(super) fn copy_hashing(
    reader: &mut dyn Read,
    file: &mut std::fs::File,
    hasher: Sha256,
    start: u64,
    size: u64,
    mut progress: impl FnMut(u64),
) -> Result<Copied, CopyError> {
    use std::sync::mpsc::sync_channel;
    let (full_tx, full_rx) = sync_channel::<(Vec<u8>, usize)>(PIPE_BUFFERS);
    let (empty_tx, empty_rx) = sync_channel::<Vec<u8>>(PIPE_BUFFERS);
    for _ in 0..PIPE_BUFFERS {
        // Cannot fail: the channel has room for every buffer and its receiver is alive.
        let _ = empty_tx.send(vec![0u8; PIPE_BUFFER_BYTES]);
    }
    std::thread::scope(|scope| {
        let hashing = scope.spawn(move || {
            let mut hasher = hasher;
            for (buf, n) in full_rx {
                hasher.update(&buf[..n]);
                // The reader may have stopped already; then the buffer is just dropped.
                let _ = empty_tx.send(buf);
            }
            hasher
        });
        let mut written = start;
        let mut writeback_from = start;
        let mut stream_error = None;
        let mut failed = None;
        while let Ok(mut buf) = empty_rx.recv() {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    let _ = full_tx.send((buf, 0));
                    continue;
                }
                Err(e) => {
                    stream_error = Some(e.to_string());
                    break;
                }
            };
            if written + n as u64 > size {
                failed = Some(CopyError::TooLong);
                break;
            }
            if let Err(e) = file.write_all(&buf[..n]) {
                failed = Some(CopyError::Write(e));
                break;
            }
            written += n as u64;
            if written - writeback_from >= WRITEBACK_BYTES {
                start_writeback(file, writeback_from, written - writeback_from);
                writeback_from = written;
            }
            progress(written);
            if full_tx.send((buf, n)).is_err() {
                break;
            }
        }
        drop(full_tx);
        let hasher = hashing
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match failed {
            Some(e) => Err(e),
            None => Ok(Copied {
                written,
                hasher,
                stream_error,
            }),
        }
    })
}
