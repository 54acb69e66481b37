//! Sealed files (scheme `ferry-seal-1`): a model file encrypted in authenticated pieces that
//! can be read at any offset, so a runtime can load it without a plaintext copy on disk or a
//! second full copy in memory. [`format`] holds the bytes, [`keys`] the key derivation and
//! wrapping; this module seals a file ([`seal_file`]), reads one ([`SealedReader`]) and cuts one
//! at its chunks for its chunk index ([`index_entries`]).

pub mod format;
pub mod keys;

use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::path::Path;

use sha2::{Digest as _, Sha256};

pub use format::{Layout, SCHEME, SealError, Trailer};

use format::{KEY, PIECE, PLAIN_CHUNKS, TAG, TRAILER};

/// What sealing a file made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The sealed file's SHA-256 (what a release signs and a server stores).
    pub sha256: [u8; 32],
    /// The sealed file's length.
    pub size: u64,
    /// The plaintext's length.
    pub plain_len: u64,
    /// The sealed file's chunk index entries (length and SHA-256), see [`Layout::index_ranges`].
    pub index: Vec<(u64, [u8; 32])>,
}

/// Reads exactly `buf.len()` bytes of `file` at `offset` without moving a shared cursor (so
/// any number of threads may read one file).
pub fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        let (mut done, mut buf) = (0u64, buf);
        while !buf.is_empty() {
            match std::os::windows::fs::FileExt::seek_read(file, buf, offset + done) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    done += n as u64;
                    buf = &mut buf[n..];
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Seals the file at `src` into `dst` (written durably: a failure leaves no `dst`), with the
/// model's seal `secret` (chunk keys) and this file's random `file_key` (key table). Memory
/// stays within a few of the largest chunks and the key table, whatever the file's length.
pub fn seal_file(
    src: &Path,
    dst: &Path,
    secret: &[u8; KEY],
    file_key: &[u8; KEY],
) -> io::Result<Sealed> {
    let reader = io::BufReader::with_capacity(1 << 20, File::open(src)?);
    crate::write_with(dst, crate::Mode::Public, |w| {
        let chunker = fastcdc::v2020::StreamCDC::new(
            reader,
            PLAIN_CHUNKS.min as usize,
            PLAIN_CHUNKS.avg as usize,
            PLAIN_CHUNKS.max as usize,
        );
        let mut whole = Sha256::new();
        let (mut keys, mut lengths, mut index) = (Vec::new(), Vec::new(), Vec::new());
        let (mut plain_len, mut sealed_len) = (0u64, 0u64);
        // The last sealed chunk is held back: the index may list it with the tail.
        let mut held: Vec<u8> = Vec::new();
        let mut sealed = Vec::with_capacity(PLAIN_CHUNKS.max as usize + 1024);
        for chunk in chunker {
            let chunk = chunk.map_err(crate::cdc_error)?;
            if !held.is_empty() {
                index.push((held.len() as u64, Sha256::digest(&held).into()));
            }
            let key = keys::chunk_key(secret, &chunk.data);
            sealed.clear();
            format::seal_chunk(&key, &chunk.data, &mut sealed);
            w.write_all(&sealed)?;
            whole.update(&sealed);
            keys.push(key);
            lengths.extend_from_slice(&(chunk.data.len() as u32).to_le_bytes());
            plain_len += chunk.data.len() as u64;
            sealed_len += sealed.len() as u64;
            std::mem::swap(&mut held, &mut sealed);
        }
        let trailer = Trailer {
            chunks: keys.len() as u32,
            plain_len,
            table_offset: sealed_len,
        }
        .to_bytes();
        let table = format::seal_table(file_key, &keys, &lengths, &trailer);
        // The last chunk is listed alone when it may be, else with the tail (as
        // `Layout::index_ranges` cuts it).
        let mut tail = if held.len() as u64 >= format::INDEX_CHUNK_MIN {
            index.push((held.len() as u64, Sha256::digest(&held).into()));
            Vec::new()
        } else {
            held
        };
        let written = tail.len();
        tail.extend_from_slice(&table);
        tail.extend_from_slice(&lengths);
        tail.extend_from_slice(&trailer);
        w.write_all(&tail[written..])?;
        whole.update(&tail[written..]);
        for piece in tail.chunks(format::INDEX_CHUNK_MAX as usize) {
            index.push((piece.len() as u64, Sha256::digest(piece).into()));
        }
        Ok(Sealed {
            sha256: whole.finalize().into(),
            size: sealed_len + (table.len() + lengths.len() + TRAILER) as u64,
            plain_len,
            index,
        })
    })
}

/// Reads a sealed file's trailer and lengths (no key needed).
pub fn layout(file: &File) -> io::Result<Layout> {
    let len = file.metadata()?.len();
    if len < TRAILER as u64 {
        return Err(SealError::NotSealed(format!("{len} bytes is shorter than a trailer")).into());
    }
    let mut t = [0u8; TRAILER];
    read_exact_at(file, &mut t, len - TRAILER as u64)?;
    let trailer = Trailer::parse(&t, len)?;
    let mut lengths = vec![0u8; trailer.chunks as usize * 4];
    read_exact_at(
        file,
        &mut lengths,
        trailer.table_offset + trailer.table_len(),
    )?;
    Ok(Layout::parse(trailer, &lengths)?)
}

/// True when the file at `path` ends with a sealed trailer.
pub fn is_sealed(path: &Path) -> bool {
    File::open(path).and_then(|f| layout(&f)).is_ok()
}

/// The chunk index entries of the sealed file at `path` (length and SHA-256 of each range of
/// [`Layout::index_ranges`]), read in bounded memory without any key.
pub fn index_entries(path: &Path) -> io::Result<Vec<(u64, [u8; 32])>> {
    let file = File::open(path)?;
    let layout = layout(&file)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut out = Vec::new();
    let mut reader = io::BufReader::with_capacity(1 << 20, &file);
    for (_, len) in layout.index_ranges() {
        let mut h = Sha256::new();
        let mut left = len;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            reader.read_exact(&mut buf[..n])?;
            h.update(&buf[..n]);
            left -= n as u64;
        }
        out.push((len, h.finalize().into()));
    }
    Ok(out)
}

/// Reads of at least this many bytes are split between threads (the runtime loads a data
/// file's tensors in one read each: a large model's first load is mostly this).
const PARALLEL_FROM: usize = 8 << 20;

/// Most threads one read uses.
const MAX_THREADS: usize = 8;

/// A sealed file opened with its file key: reads any range of the plaintext, decrypting and
/// authenticating only the pieces it touches. Safe to share between threads.
pub struct SealedReader {
    file: File,
    layout: Layout,
    keys: Vec<ring::aead::LessSafeKey>,
}

impl std::fmt::Debug for SealedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedReader")
            .field("plain_len", &self.plain_len())
            .field("chunks", &self.layout.chunks.len())
            .finish()
    }
}

impl SealedReader {
    /// Opens `file` with its file key: reads the trailer, the lengths and the key table (a
    /// wrong key or changed bytes there fail here).
    pub fn open(file: File, file_key: &[u8; KEY]) -> io::Result<Self> {
        let layout = layout(&file)?;
        let t = layout.trailer;
        let mut table = vec![0u8; t.table_len() as usize];
        read_exact_at(&file, &mut table, t.table_offset)?;
        let mut lengths = vec![0u8; t.chunks as usize * 4];
        read_exact_at(&file, &mut lengths, t.table_offset + t.table_len())?;
        let keys = format::open_table(file_key, table, &lengths, &t.to_bytes())?;
        Ok(Self {
            file,
            keys: keys.iter().map(format::aead_key).collect(),
            layout,
        })
    }

    /// The plaintext's length.
    pub fn plain_len(&self) -> u64 {
        self.layout.trailer.plain_len
    }

    /// Fills `out` with the plaintext from `offset`; a range past the end is an error, and so
    /// is a piece that does not authenticate (`InvalidData`). A large read is shared between
    /// the machine's cores.
    pub fn read_at(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        offset
            .checked_add(out.len() as u64)
            .filter(|e| *e <= self.plain_len())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "a read of {} bytes at {offset} is past the plaintext's {} bytes",
                        out.len(),
                        self.plain_len()
                    ),
                )
            })?;
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_THREADS)
            .min(out.len() / PARALLEL_FROM.max(1) + 1);
        if threads < 2 {
            return self.read_serial(offset, out);
        }
        let part = out.len().div_ceil(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = out
                .chunks_mut(part)
                .enumerate()
                .map(|(i, piece)| {
                    let at = offset + (i * part) as u64;
                    s.spawn(move || self.read_serial(at, piece))
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a read panicked")))
            })
        })
    }

    /// [`SealedReader::read_at`] on this thread: a piece wholly inside `out` is read (with its
    /// tag, which lands where the next piece goes) and decrypted in place; the pieces at the
    /// edges go through a scratch buffer.
    fn read_serial(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let end = offset + out.len() as u64;
        let mut at = offset;
        let mut scratch = Vec::new();
        while at < end {
            let c = self.layout.chunk_at(at);
            let (start, sealed_start, len) = self.layout.chunks[c];
            let index = ((at - start) / PIECE as u64) as usize;
            let piece_start = start + (index * PIECE) as u64;
            let piece_len = (len as usize - index * PIECE).min(PIECE);
            let sealed_at = sealed_start + (index * (PIECE + TAG)) as u64;
            let dst = (at - offset) as usize;
            if at == piece_start && dst + piece_len + TAG <= out.len() {
                let buf = &mut out[dst..dst + piece_len + TAG];
                read_exact_at(&self.file, buf, sealed_at)?;
                format::open_piece(&self.keys[c], len, index as u32, buf)?;
                at += piece_len as u64;
                continue;
            }
            scratch.resize(piece_len + TAG, 0);
            read_exact_at(&self.file, &mut scratch, sealed_at)?;
            let plain = format::open_piece(&self.keys[c], len, index as u32, &mut scratch)?;
            let to = end.min(piece_start + piece_len as u64);
            out[dst..(to - offset) as usize]
                .copy_from_slice(&plain[(at - piece_start) as usize..(to - piece_start) as usize]);
            at = to;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
