//! Chunk indexes: how a blob splits into content-defined chunks, for delta updates.
//!
//! A large file is cut into chunks whose boundaries depend on the bytes around them
//! (FastCDC, 2020 variant), so an edit in one region moves only the boundaries near it and
//! every other chunk keeps its bytes and its SHA-256. The chunk index of a blob lists its
//! chunks in order (size and SHA-256; offsets are the running sum). The index is itself a
//! blob, stored and served by its digest like any other, and the signed release manifest
//! names it ([`ChunkIndexRef`]) next to the file it describes, so a device trusts an index
//! exactly as it trusts the file.
//!
//! A device that already holds some blob with chunks of the same SHA-256 copies them from
//! its cache and fetches only the others (HTTP `Range` requests on the blob itself), checking
//! every chunk and then the whole file; see `docs/client.md`.

use serde::{Deserialize, Serialize};

use crate::names::Sha256Digest;

/// The index format this code writes and reads; a device ignores an index of another format
/// (it downloads the whole file instead).
pub const CHUNK_INDEX_FORMAT: u32 = 1;
/// The chunking algorithm of format 1.
pub const CHUNK_ALGORITHM: &str = "fastcdc-2020";
/// Smallest chunk (except the last): 128 KiB.
pub const CHUNK_MIN: u32 = 128 << 10;
/// Typical chunk: 512 KiB (a 2 GiB file has about 4,000 chunks and an index of ~350 KiB).
pub const CHUNK_AVG: u32 = 512 << 10;
/// Largest chunk: 2 MiB (also the most a device holds in memory per chunk).
pub const CHUNK_MAX: u32 = 2 << 20;
/// Files below this size get no index: a delta would save less than its round trips cost.
pub const CHUNKED_FILE_MIN: u64 = 4 << 20;
/// Largest index accepted (16 MiB: a 16 GiB file of the smallest chunks).
pub const MAX_CHUNK_INDEX_BYTES: u64 = 16 << 20;

/// What a signed manifest says about a file's chunk index: the index blob's digest and size.
/// Optional (an additive v1 field): files signed without one are downloaded whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkIndexRef {
    /// The SHA-256 of the index's bytes (the blob to fetch).
    pub sha256: Sha256Digest,
    /// The index's size in bytes.
    pub size: u64,
}

impl ChunkIndexRef {
    /// Checks the reference's own bounds.
    pub fn validate(&self) -> Result<(), String> {
        if self.size == 0 || self.size > MAX_CHUNK_INDEX_BYTES {
            return Err(format!(
                "chunk index size {} is outside 1..={MAX_CHUNK_INDEX_BYTES}",
                self.size
            ));
        }
        Ok(())
    }
}

/// One chunk of a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Its length in bytes.
    pub size: u64,
    /// The SHA-256 of its bytes.
    pub sha256: Sha256Digest,
}

/// A blob's chunks, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkIndex {
    /// [`CHUNK_INDEX_FORMAT`].
    pub format: u32,
    /// [`CHUNK_ALGORITHM`].
    pub algorithm: String,
    /// The chunker's smallest chunk.
    pub min_size: u32,
    /// The chunker's typical chunk.
    pub avg_size: u32,
    /// The chunker's largest chunk.
    pub max_size: u32,
    /// The whole blob's size (the sum of the chunks' sizes).
    pub size: u64,
    /// The chunks from the blob's first byte to its last.
    pub chunks: Vec<Chunk>,
}

/// Why an index cannot be used for a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkIndexError {
    /// Not JSON of the index's shape.
    #[error("the chunk index is malformed: {0}")]
    Malformed(String),
    /// A format or algorithm this code does not know (a newer signer): not an error of the
    /// index, but this device cannot use it.
    #[error("chunk index format {format} ({algorithm}) is not one this version of ferry knows")]
    Unknown {
        /// The index's format.
        format: u32,
        /// The index's algorithm.
        algorithm: String,
    },
    /// It breaks a structural rule.
    #[error("the chunk index is invalid: {0}")]
    Invalid(String),
}

impl ChunkIndex {
    /// An index of format 1 over `chunks` (the chunker's parameters are format 1's).
    pub fn new(chunks: Vec<Chunk>) -> Self {
        Self {
            format: CHUNK_INDEX_FORMAT,
            algorithm: CHUNK_ALGORITHM.to_string(),
            min_size: CHUNK_MIN,
            avg_size: CHUNK_AVG,
            max_size: CHUNK_MAX,
            size: chunks.iter().map(|c| c.size).sum(),
            chunks,
        }
    }

    /// The bytes stored as the index blob (deterministic: the same chunks always give the same
    /// bytes, so a signer and a publisher agree on its digest).
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising plain structs of numbers and hex strings cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The reference a manifest holds for this index.
    pub fn reference(&self) -> ChunkIndexRef {
        let bytes = self.to_bytes();
        ChunkIndexRef {
            sha256: Sha256Digest::of(&bytes),
            size: bytes.len() as u64,
        }
    }

    /// Parses index bytes and checks them against the file they describe (`file_size`).
    /// Unknown fields are ignored (a newer signer may add some); an unknown format is
    /// [`ChunkIndexError::Unknown`].
    pub fn parse(bytes: &[u8], file_size: u64) -> Result<Self, ChunkIndexError> {
        if bytes.len() as u64 > MAX_CHUNK_INDEX_BYTES {
            return Err(ChunkIndexError::Invalid(format!(
                "{} bytes; at most {MAX_CHUNK_INDEX_BYTES}",
                bytes.len()
            )));
        }
        let index: Self =
            serde_json::from_slice(bytes).map_err(|e| ChunkIndexError::Malformed(e.to_string()))?;
        index.validate(file_size)?;
        Ok(index)
    }

    /// Checks the structural rules: a known format, chunks within the stated bounds (only the
    /// last may be shorter than the minimum), and sizes adding up to `file_size`.
    pub fn validate(&self, file_size: u64) -> Result<(), ChunkIndexError> {
        if self.format != CHUNK_INDEX_FORMAT || self.algorithm != CHUNK_ALGORITHM {
            return Err(ChunkIndexError::Unknown {
                format: self.format,
                algorithm: self.algorithm.clone(),
            });
        }
        let bad = |s: String| Err(ChunkIndexError::Invalid(s));
        if (self.min_size, self.avg_size, self.max_size) != (CHUNK_MIN, CHUNK_AVG, CHUNK_MAX) {
            return bad(format!(
                "chunk sizes {}/{}/{} are not format 1's",
                self.min_size, self.avg_size, self.max_size
            ));
        }
        if self.size != file_size {
            return bad(format!(
                "it describes {} bytes; the file has {file_size}",
                self.size
            ));
        }
        let most = file_size / u64::from(CHUNK_MIN) + 1;
        if self.chunks.is_empty() || self.chunks.len() as u64 > most {
            return bad(format!(
                "{} chunks for {file_size} bytes (1..={most} allowed)",
                self.chunks.len()
            ));
        }
        let mut sum = 0u64;
        let last = self.chunks.len() - 1;
        for (i, c) in self.chunks.iter().enumerate() {
            if c.size == 0
                || c.size > u64::from(CHUNK_MAX)
                || (i < last && c.size < u64::from(CHUNK_MIN))
            {
                return bad(format!("chunk {i} has {} bytes", c.size));
            }
            sum = sum.saturating_add(c.size);
        }
        if sum != file_size {
            return bad(format!("its chunks add up to {sum} bytes, not {file_size}"));
        }
        Ok(())
    }

    /// Each chunk with its offset in the blob.
    pub fn with_offsets(&self) -> impl Iterator<Item = (u64, &Chunk)> {
        self.chunks.iter().scan(0u64, |offset, c| {
            let at = *offset;
            *offset += c.size;
            Some((at, c))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(size: u64, byte: u8) -> Chunk {
        Chunk {
            size,
            sha256: Sha256Digest::of(&[byte]),
        }
    }

    fn sample() -> ChunkIndex {
        ChunkIndex::new(vec![
            chunk(u64::from(CHUNK_MIN), 1),
            chunk(u64::from(CHUNK_MAX), 2),
            chunk(10, 3),
        ])
    }

    #[test]
    fn round_trip_is_deterministic_and_valid() {
        let a = sample();
        let bytes = a.to_bytes();
        assert_eq!(bytes, sample().to_bytes());
        let back = ChunkIndex::parse(&bytes, a.size).expect("valid");
        assert_eq!(back, a);
        assert_eq!(a.reference().sha256, Sha256Digest::of(&bytes));
        let offsets: Vec<u64> = a.with_offsets().map(|(o, _)| o).collect();
        assert_eq!(
            offsets,
            vec![0, u64::from(CHUNK_MIN), u64::from(CHUNK_MIN + CHUNK_MAX)]
        );
    }

    #[test]
    fn unknown_fields_are_ignored_and_unknown_formats_named() {
        let mut v: serde_json::Value = serde_json::from_slice(&sample().to_bytes()).expect("json");
        v["future"] = serde_json::json!({"x": 1});
        let bytes = serde_json::to_vec(&v).expect("bytes");
        assert!(ChunkIndex::parse(&bytes, sample().size).is_ok());
        v["format"] = serde_json::json!(2);
        let bytes = serde_json::to_vec(&v).expect("bytes");
        assert!(matches!(
            ChunkIndex::parse(&bytes, sample().size),
            Err(ChunkIndexError::Unknown { format: 2, .. })
        ));
    }

    #[test]
    fn hostile_indexes_are_refused() {
        let good = sample();
        // Sizes that do not add up to the file.
        assert!(ChunkIndex::parse(&good.to_bytes(), good.size + 1).is_err());
        // A lying total.
        let mut lying = good.clone();
        lying.size += 5;
        assert!(lying.validate(good.size).is_err());
        // A chunk over the maximum (a device would have to hold it in memory).
        let mut big = good.clone();
        big.chunks[1].size = u64::from(CHUNK_MAX) + 1;
        big.size += 1;
        assert!(big.validate(big.size).is_err());
        // A tiny chunk in the middle (a flood of range requests).
        let mut tiny = good.clone();
        tiny.chunks[0].size = 1;
        tiny.size = tiny.chunks.iter().map(|c| c.size).sum();
        assert!(tiny.validate(tiny.size).is_err());
        // Empty, zero-sized, truncated and non-JSON bytes.
        assert!(ChunkIndex::new(Vec::new()).validate(0).is_err());
        let mut zero = good.clone();
        zero.chunks[2].size = 0;
        zero.size -= 10;
        assert!(zero.validate(zero.size).is_err());
        let bytes = good.to_bytes();
        assert!(matches!(
            ChunkIndex::parse(&bytes[..bytes.len() / 2], good.size),
            Err(ChunkIndexError::Malformed(_))
        ));
        assert!(ChunkIndex::parse(b"\xff\x00", good.size).is_err());
        // Other chunker parameters under format 1.
        let mut params = good.clone();
        params.min_size = 1;
        assert!(params.validate(params.size).is_err());
        // Oversized bytes are refused before parsing.
        let huge = vec![b' '; (MAX_CHUNK_INDEX_BYTES + 1) as usize];
        assert!(matches!(
            ChunkIndex::parse(&huge, 1),
            Err(ChunkIndexError::Invalid(_))
        ));
    }

    #[test]
    fn references_are_bounded() {
        let r = sample().reference();
        assert!(r.validate().is_ok());
        assert!(
            ChunkIndexRef { size: 0, ..r }.validate().is_err()
                && ChunkIndexRef {
                    size: MAX_CHUNK_INDEX_BYTES + 1,
                    ..r
                }
                .validate()
                .is_err()
        );
    }
}
