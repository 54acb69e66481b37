//! The admission half of chunk indexes: at publish, every chunk index a release signs is
//! checked against the stored bytes of its file, streamed, so a delta built from it can never
//! assemble other bytes than the ones signed.

use ferry_shared::Sha256Digest;
use ferry_shared::manifest::chunks::{ChunkIndex, ChunkIndexRef};
use futures_util::StreamExt as _;
use object_store::ObjectStoreExt as _;
use sha2::{Digest as _, Sha256};

use crate::release::publish::error::PublishError;
use crate::storage::{StorageKey, Store};

/// Checks a stored blob against the chunk index its release signs: the index blob is stored
/// with the signed size, parses, adds up to the blob, and every chunk's SHA-256 is that of the
/// stored bytes at its place (streamed: memory stays within one chunk). `Ok(Err(why))` is a
/// refusal; `Err` a store failure.
pub async fn check_stored(
    store: &Store,
    blob: &Sha256Digest,
    blob_size: u64,
    index_ref: &ChunkIndexRef,
) -> Result<Result<(), String>, object_store::Error> {
    let key = StorageKey::blob(&index_ref.sha256);
    let meta = match store.head(&key).await {
        Ok(m) => m,
        Err(object_store::Error::NotFound { .. }) => {
            return Ok(Err(format!(
                "its chunk index {} has not been uploaded (ferry publish uploads it)",
                index_ref.sha256
            )));
        }
        Err(e) => return Err(e),
    };
    if meta.size != index_ref.size {
        return Ok(Err(format!(
            "its chunk index is stored with {} bytes, the manifest says {}",
            meta.size, index_ref.size
        )));
    }
    let bytes = store.get(&key).await?.bytes().await?;
    if Sha256Digest::of(&bytes) != index_ref.sha256 {
        return Ok(Err(
            "its stored chunk index does not hash to the signed digest".into(),
        ));
    }
    let index = match ChunkIndex::parse(&bytes, blob_size) {
        Ok(i) => i,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let mut stream = store.get(&StorageKey::blob(blob)).await?.into_stream();
    let mut chunks = index.with_offsets();
    let mut current = chunks.next();
    let mut hasher = Sha256::new();
    let mut filled = 0u64;
    while let Some(piece) = stream.next().await {
        let mut piece = &piece?[..];
        while !piece.is_empty() {
            let Some((at, c)) = current else {
                return Ok(Err("the blob is longer than its chunk index".into()));
            };
            let take = (c.size - filled).min(piece.len() as u64) as usize;
            hasher.update(&piece[..take]);
            piece = &piece[take..];
            filled += take as u64;
            if filled == c.size {
                let digest = Sha256Digest::from_bytes(hasher.finalize_reset().into());
                if digest != c.sha256 {
                    return Ok(Err(format!(
                        "the chunk at byte {at} ({} bytes) hashes to {digest}, the index says {}",
                        c.size, c.sha256
                    )));
                }
                filled = 0;
                current = chunks.next();
            }
        }
    }
    if current.is_some() {
        return Ok(Err("the blob is shorter than its chunk index".into()));
    }
    Ok(Ok(()))
}

/// [`check_stored`] for every file of a variant that has a chunk index, except the (file,
/// index) pairs in `checked` (an earlier variant of the release named them); adds the others.
pub async fn check_variant(
    store: &Store,
    v: &ferry_shared::manifest::Variant,
    checked: &mut std::collections::HashSet<(Sha256Digest, Sha256Digest)>,
) -> Result<(), PublishError> {
    let files = std::iter::once((
        format!("blob {}", v.sha256),
        v.sha256,
        v.size,
        v.chunk_index,
    ))
    .chain(
        v.side_files()
            .map(|f| (format!("file {}", f.name), f.sha256, f.size, f.chunk_index)),
    );
    for (what, digest, size, index) in files {
        let Some(index) = index else { continue };
        if !checked.insert((digest, index.sha256)) {
            continue;
        }
        if let Err(why) = check_stored(store, &digest, size, &index).await? {
            return Err(PublishError::ChunkIndexMismatch {
                variant: v.id.to_string(),
                what,
                why,
            });
        }
    }
    Ok(())
}
