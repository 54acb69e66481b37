//! The bytes of a sealed file (scheme `ferry-seal-1`), without I/O.
//!
//! ```text
//! [sealed chunk 0] ... [sealed chunk n-1] [key table] [lengths] [trailer]
//! ```
//!
//! - The plaintext is cut into content-defined chunks ([`PLAIN_CHUNKS`]); each chunk is sealed
//!   under its own key ([`super::keys::chunk_key`]: derived from the chunk's SHA-256 and the
//!   model's seal secret, so an unchanged chunk seals to the same bytes in every release).
//! - A sealed chunk is its plaintext in pieces of [`PIECE`] bytes (the last shorter), each
//!   encrypted with AES-256-GCM and followed by its 16-byte tag. A piece's nonce is its index
//!   within the chunk and its additional data the chunk's length, so pieces cannot be moved,
//!   dropped or cut unnoticed, and any piece can be opened alone: a reader decrypts only what
//!   it reads.
//! - The key table is every chunk's key, in order, encrypted with AES-256-GCM under the file
//!   key (random per file and release; see [`super::keys`]), its additional data being the
//!   lengths and the trailer's first 48 bytes: a changed length or trailer does not open.
//! - The lengths are each chunk's plaintext length (u32 LE), in clear: the chunk index of the
//!   sealed file (public anyway) shows the same sizes, and with them anyone (the publisher,
//!   the server) can cut the sealed file at its chunks without a key.
//! - The trailer is [`TRAILER`] bytes: magic, version, piece size, chunk count, flags, the
//!   plaintext's length and the sealed chunks' total length (where the key table starts).

use std::fmt;

/// The scheme's name, as a resolve request lists it and a manifest names it.
pub const SCHEME: &str = "ferry-seal-1";
/// Plaintext bytes per authenticated piece (64 KiB).
pub const PIECE: usize = 64 << 10;
/// Bytes of an AES-256-GCM tag.
pub const TAG: usize = 16;
/// Bytes of a key.
pub const KEY: usize = 32;
/// Bytes of the trailer.
pub const TRAILER: usize = 64;
/// The trailer's first eight bytes.
pub const MAGIC: &[u8; 8] = b"FRYSEAL1";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;

/// The content-defined chunker of the plaintext: FastCDC with the chunk index's smallest and
/// typical sizes, and a largest size 1 KiB under the index's, so that every sealed chunk (its
/// plaintext plus a tag per 64 KiB) is itself a valid chunk of the sealed file's index.
pub const PLAIN_CHUNKS: crate::ChunkSizes = crate::ChunkSizes {
    min: 128 << 10,
    avg: 512 << 10,
    max: (2 << 20) - 1024,
};

/// The chunk index's largest chunk (2 MiB), for cutting the sealed file's tail.
pub const INDEX_CHUNK_MAX: u64 = 2 << 20;
/// The chunk index's smallest chunk but the last (128 KiB).
pub const INDEX_CHUNK_MIN: u64 = 128 << 10;

/// Why sealed bytes cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealError {
    /// Not a sealed file of this scheme (no trailer, another magic).
    NotSealed(String),
    /// A version this code does not know.
    Version(u32),
    /// The structure is inconsistent (lengths that do not add up, a piece size of another
    /// scheme, too many chunks).
    Invalid(String),
    /// Authentication failed: a wrong key, or bytes changed since they were sealed.
    Tampered(String),
}

impl fmt::Display for SealError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SealError::NotSealed(why) => write!(f, "not a {SCHEME} sealed file: {why}"),
            SealError::Version(v) => {
                write!(f, "sealed file version {v} is not one this ferry reads")
            }
            SealError::Invalid(why) => write!(f, "the sealed file is invalid: {why}"),
            SealError::Tampered(what) => write!(
                f,
                "{what} does not open: a wrong key, or the sealed bytes changed"
            ),
        }
    }
}

impl std::error::Error for SealError {}

impl From<SealError> for std::io::Error {
    fn from(e: SealError) -> Self {
        let kind = match e {
            SealError::Tampered(_) => std::io::ErrorKind::InvalidData,
            _ => std::io::ErrorKind::InvalidInput,
        };
        std::io::Error::new(kind, e)
    }
}

/// The fixed fields at the end of a sealed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    /// Number of chunks.
    pub chunks: u32,
    /// The plaintext's length.
    pub plain_len: u64,
    /// The sealed chunks' total length: where the key table starts.
    pub table_offset: u64,
}

impl Trailer {
    /// The trailer's bytes.
    pub fn to_bytes(&self) -> [u8; TRAILER] {
        let mut b = [0u8; TRAILER];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(PIECE as u32).to_le_bytes());
        b[16..20].copy_from_slice(&self.chunks.to_le_bytes());
        // 20..24: flags, none yet.
        b[24..32].copy_from_slice(&self.plain_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.table_offset.to_le_bytes());
        b
    }

    /// Reads a trailer, checking what it can alone; `file_len` is the sealed file's length.
    pub fn parse(b: &[u8], file_len: u64) -> Result<Self, SealError> {
        let b: &[u8; TRAILER] = b
            .try_into()
            .map_err(|_| SealError::NotSealed(format!("a trailer has {TRAILER} bytes")))?;
        if &b[0..8] != MAGIC {
            return Err(SealError::NotSealed("no sealed trailer at its end".into()));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        let version = u32_at(8);
        if version != VERSION {
            return Err(SealError::Version(version));
        }
        if u32_at(12) as usize != PIECE || u32_at(20) != 0 || b[40..].iter().any(|x| *x != 0) {
            return Err(SealError::Invalid(
                "piece size, flags or reserved bytes of another scheme".into(),
            ));
        }
        let t = Trailer {
            chunks: u32_at(16),
            plain_len: u64_at(24),
            table_offset: u64_at(32),
        };
        let most = t.plain_len / u64::from(PLAIN_CHUNKS.min) + 1;
        if u64::from(t.chunks) > most || (t.chunks == 0) != (t.plain_len == 0) {
            return Err(SealError::Invalid(format!(
                "{} chunks for {} bytes",
                t.chunks, t.plain_len
            )));
        }
        if Some(file_len) != t.tail_len().checked_add(t.table_offset) {
            return Err(SealError::Invalid(format!(
                "the trailer describes {} bytes before the key table, the file has {file_len} \
                 in all",
                t.table_offset
            )));
        }
        Ok(t)
    }

    /// Bytes of the key table (the chunks' keys and a tag).
    pub fn table_len(&self) -> u64 {
        u64::from(self.chunks) * KEY as u64 + TAG as u64
    }

    /// Bytes after the sealed chunks: key table, lengths and trailer.
    pub fn tail_len(&self) -> u64 {
        self.table_len() + u64::from(self.chunks) * 4 + TRAILER as u64
    }
}

/// The sealed length of a chunk of `plain` bytes.
pub fn sealed_chunk_len(plain: u64) -> u64 {
    plain + plain.div_ceil(PIECE as u64) * TAG as u64
}

/// Where each chunk is, from the lengths: checked against the trailer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Each chunk's (plaintext offset, sealed offset, plaintext length), in order.
    pub chunks: Vec<(u64, u64, u32)>,
    /// The trailer.
    pub trailer: Trailer,
}

impl Layout {
    /// Reads the lengths (`chunks` × 4 bytes) of a file whose trailer is `trailer`.
    pub fn parse(trailer: Trailer, lengths: &[u8]) -> Result<Self, SealError> {
        if lengths.len() as u64 != u64::from(trailer.chunks) * 4 {
            return Err(SealError::Invalid("the lengths are cut".into()));
        }
        let mut chunks = Vec::with_capacity(trailer.chunks as usize);
        let (mut plain, mut sealed) = (0u64, 0u64);
        let last = trailer.chunks as usize - usize::from(trailer.chunks > 0);
        for (i, l) in lengths.chunks_exact(4).enumerate() {
            let len = u32::from_le_bytes([l[0], l[1], l[2], l[3]]);
            let short = len < PLAIN_CHUNKS.min && i != last;
            if len == 0 || len > PLAIN_CHUNKS.max || short {
                return Err(SealError::Invalid(format!("chunk {i} has {len} bytes")));
            }
            chunks.push((plain, sealed, len));
            plain += u64::from(len);
            sealed += sealed_chunk_len(u64::from(len));
        }
        if plain != trailer.plain_len || sealed != trailer.table_offset {
            return Err(SealError::Invalid(format!(
                "the chunks add up to {plain} bytes sealed as {sealed}; the trailer says {} as \
                 {}",
                trailer.plain_len, trailer.table_offset
            )));
        }
        Ok(Self { chunks, trailer })
    }

    /// The chunk that holds plaintext byte `offset` (< the plaintext's length).
    pub fn chunk_at(&self, offset: u64) -> usize {
        self.chunks
            .partition_point(|(start, _, _)| *start <= offset)
            .saturating_sub(1)
    }

    /// The ranges of the sealed file that its chunk index lists: each sealed chunk, then the
    /// tail (key table, lengths, trailer; it changes with every sealing, the chunks only with
    /// their plaintext) cut at [`INDEX_CHUNK_MAX`]. A last chunk shorter than
    /// [`INDEX_CHUNK_MIN`] is listed with the tail (only an index's last entry may be short).
    pub fn index_ranges(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(self.chunks.len() + 1);
        let mut at = 0;
        let n = self.chunks.len();
        for (i, &(_, sealed, len)) in self.chunks.iter().enumerate() {
            let size = sealed_chunk_len(u64::from(len));
            if i + 1 < n || size >= INDEX_CHUNK_MIN {
                out.push((sealed, size));
                at = sealed + size;
            }
        }
        let end = self.trailer.table_offset + self.trailer.tail_len();
        while end - at > INDEX_CHUNK_MAX {
            out.push((at, INDEX_CHUNK_MAX));
            at += INDEX_CHUNK_MAX;
        }
        out.push((at, end - at));
        out
    }
}

/// The nonce of piece `index` of a chunk.
pub fn piece_nonce(index: u32) -> ring::aead::Nonce {
    let mut n = [0u8; 12];
    n[8..].copy_from_slice(&index.to_be_bytes());
    ring::aead::Nonce::assume_unique_for_key(n)
}

/// An AES-256-GCM key.
pub fn aead_key(key: &[u8; KEY]) -> ring::aead::LessSafeKey {
    // A 32-byte key is AES-256's length: this cannot fail.
    ring::aead::LessSafeKey::new(
        ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, key).expect("a 32-byte key"),
    )
}

/// Seals a chunk's plaintext with its key, appending the sealed bytes to `out`.
pub fn seal_chunk(key: &[u8; KEY], plain: &[u8], out: &mut Vec<u8>) {
    let k = aead_key(key);
    let aad = (plain.len() as u64).to_le_bytes();
    for (i, piece) in plain.chunks(PIECE).enumerate() {
        let at = out.len();
        out.extend_from_slice(piece);
        let tag = k
            .seal_in_place_separate_tag(
                piece_nonce(i as u32),
                ring::aead::Aad::from(aad),
                &mut out[at..],
            )
            .expect("a chunk is far below GCM's message limit");
        out.extend_from_slice(tag.as_ref());
    }
}

/// Opens piece `index` of a chunk of `chunk_len` plaintext bytes in place: `sealed` holds the
/// piece's ciphertext and tag; the plaintext is its start.
pub fn open_piece<'a>(
    key: &ring::aead::LessSafeKey,
    chunk_len: u32,
    index: u32,
    sealed: &'a mut [u8],
) -> Result<&'a mut [u8], SealError> {
    key.open_in_place(
        piece_nonce(index),
        ring::aead::Aad::from(u64::from(chunk_len).to_le_bytes()),
        sealed,
    )
    .map_err(|_| SealError::Tampered(format!("piece {index} of a chunk")))
}

/// The key table's additional data: the lengths and the trailer's fields.
fn table_aad(lengths: &[u8], trailer: &[u8; TRAILER]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(lengths.len() + 48);
    aad.extend_from_slice(lengths);
    aad.extend_from_slice(&trailer[..48]);
    aad
}

/// The sealed key table for `keys` under `file_key`.
pub fn seal_table(
    file_key: &[u8; KEY],
    keys: &[[u8; KEY]],
    lengths: &[u8],
    trailer: &[u8; TRAILER],
) -> Vec<u8> {
    let mut table: Vec<u8> = keys.iter().flatten().copied().collect();
    let tag = aead_key(file_key)
        .seal_in_place_separate_tag(
            ring::aead::Nonce::assume_unique_for_key([0; 12]),
            ring::aead::Aad::from(table_aad(lengths, trailer)),
            &mut table,
        )
        .expect("a key table is far below GCM's message limit");
    table.extend_from_slice(tag.as_ref());
    table
}

/// Opens a sealed key table: every chunk's key.
pub fn open_table(
    file_key: &[u8; KEY],
    mut sealed: Vec<u8>,
    lengths: &[u8],
    trailer: &[u8; TRAILER],
) -> Result<Vec<[u8; KEY]>, SealError> {
    let plain = aead_key(file_key)
        .open_in_place(
            ring::aead::Nonce::assume_unique_for_key([0; 12]),
            ring::aead::Aad::from(table_aad(lengths, trailer)),
            &mut sealed,
        )
        .map_err(|_| SealError::Tampered("the key table".into()))?;
    Ok(plain
        .chunks_exact(KEY)
        .map(|k| {
            let mut key = [0u8; KEY];
            key.copy_from_slice(k);
            key
        })
        .collect())
}
