//! Chunk indexes of the files a release names, for delta updates: made by `ferry sign` (and
//! again by `ferry publish`, which uploads them). The server checks them against the stored
//! bytes at publish (`crate::release::publish::chunks`).

use std::path::Path;

use anyhow::Context as _;
use ferry_shared::Sha256Digest;
use ferry_shared::manifest::ReleaseManifest;
use ferry_shared::manifest::chunks::{
    CHUNK_AVG, CHUNK_MAX, CHUNK_MIN, CHUNKED_FILE_MIN, ChunkIndex, ChunkIndexRef,
};

use crate::release::sign::variants::SignedFile;

/// Format 1's chunker sizes.
pub fn sizes() -> ferry_fs::ChunkSizes {
    ferry_fs::ChunkSizes {
        min: CHUNK_MIN,
        avg: CHUNK_AVG,
        max: CHUNK_MAX,
    }
}

fn from_pieces(pieces: Vec<(u64, [u8; 32])>) -> ChunkIndex {
    ChunkIndex::new(
        pieces
            .into_iter()
            .map(|(size, d)| ferry_shared::manifest::chunks::Chunk {
                size,
                sha256: Sha256Digest::from_bytes(d),
            })
            .collect(),
    )
}

/// The chunk index of the file at `path`, read in bounded memory.
pub fn index_of_file(path: &Path) -> anyhow::Result<ChunkIndex> {
    let pieces = ferry_fs::chunk_file(path, sizes())
        .with_context(|| format!("cannot read {} to chunk it", path.display()))?;
    Ok(from_pieces(pieces))
}

/// The chunk index of the sealed file at `path`: its sealed chunks, cut where the sealing cut
/// them (`ferry_fs::sealed::Layout::index_ranges`), read without any key.
pub fn index_of_sealed_file(path: &Path) -> anyhow::Result<ChunkIndex> {
    let pieces = ferry_fs::sealed::index_entries(path)
        .with_context(|| format!("cannot read {} as a sealed file", path.display()))?;
    Ok(from_pieces(pieces))
}

/// Gives every file of `manifest` of at least [`CHUNKED_FILE_MIN`] bytes its chunk index
/// reference; `files` are the signed files in the manifest's order.
pub fn attach(manifest: &mut ReleaseManifest, files: &[SignedFile]) -> anyhow::Result<()> {
    let chunked = |f: &SignedFile| -> anyhow::Result<Option<ChunkIndexRef>> {
        if f.size < CHUNKED_FILE_MIN {
            return Ok(None);
        }
        let index = index_of_file(&f.path)?;
        if index.size != f.size {
            anyhow::bail!(
                "{} changed while it was signed ({} bytes, then {})",
                f.path.display(),
                f.size,
                index.size
            );
        }
        Ok(Some(index.reference()))
    };
    for (v, f) in manifest.variants.iter_mut().zip(files) {
        v.chunk_index = chunked(f)?;
        for (x, s) in v.extra_files.iter_mut().zip(&f.data) {
            x.chunk_index = chunked(s)?;
        }
        for (x, s) in v.assets.iter_mut().zip(&f.assets) {
            x.chunk_index = chunked(s)?;
        }
    }
    Ok(())
}
