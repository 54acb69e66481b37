//! Uploads of a blob's `ferry-grouped-zstd` encoding (`ferry_fs::grouped`): streamed into
//! their own key while a blocking thread decodes the bytes and hashes what they decode to; kept
//! only when that is exactly the stored blob, and smaller than it.

use bytes::Bytes;
use ferry_shared::Sha256Digest;
use futures_util::{Stream, StreamExt as _};
use object_store::{ObjectStoreExt as _, WriteMultipart};
use sha2::{Digest as _, Sha256};

use crate::release::publish::blobs::{Check, ExistingBlob, UPLOAD_PART_BYTES, stream_body};
use crate::release::publish::{PublishError, UploadTime};
use crate::storage::{StorageKey, Store};

/// What an encoding upload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodedOutcome {
    /// Stored now.
    Created {
        /// Bytes of the encoding.
        size: u64,
    },
    /// An encoding of the blob that decodes to it was there already.
    Existed {
        /// Its size.
        size: u64,
    },
}

/// Pieces of an upload waiting for the decoder (at most this many chunks of the body).
const QUEUED: usize = 8;

/// Streams `body`, the encoding of stored blob `digest`, into its key. Refused: an encoding
/// of a blob that is not stored, one not smaller than the blob, one that does not decode, or
/// one that decodes to other bytes. Nothing is visible unless the whole body checks out.
pub async fn put_grouped_zstd<S, E>(
    store: &Store,
    digest: &Sha256Digest,
    body: S,
    time: UploadTime,
    existing: ExistingBlob,
) -> Result<EncodedOutcome, PublishError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let blob = match store.head(&StorageKey::blob(digest)).await {
        Ok(meta) => meta.size,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(PublishError::EncodedWithoutBlob(*digest));
        }
        Err(e) => return Err(e.into()),
    };
    let key = StorageKey::grouped_zstd(digest);
    if let Ok(meta) = store.head(&key).await {
        if existing == ExistingBlob::Trust || stored_decodes_to(store, &key, digest, blob).await {
            return Ok(EncodedOutcome::Existed { size: meta.size });
        }
        tracing::warn!("the stored encoding of blob {digest} does not decode to it: replacing it");
    }
    let (to_decoder, pieces) = tokio::sync::mpsc::channel::<Bytes>(QUEUED);
    let decoding = tokio::task::spawn_blocking(move || decoded_digest(pieces, blob));
    let upload = store.put_multipart(&key).await?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, UPLOAD_PART_BYTES);
    let mut check = Check::Decode(to_decoder);
    // An encoding that is not smaller than the blob saves nothing.
    let streamed = stream_body(&mut writer, body, blob.saturating_sub(1), time, &mut check).await;
    drop(check);
    let decoded = decoding
        .await
        .map_err(|e| PublishError::Internal(format!("the decoder stopped: {e}")));
    let outcome = match (streamed, decoded) {
        // The decoder stopped taking pieces without a complaint: it cannot have, as it reads
        // to the end of the body, but say something true if it did.
        (Err(PublishError::EncodingInvalid(why)), Ok(Ok(_))) if why.is_empty() => Err(
            PublishError::EncodingInvalid("bytes follow the encoded file".into()),
        ),
        (Err(PublishError::EncodingInvalid(_)), Ok(Err(why))) | (Ok(_), Ok(Err(why))) => {
            Err(PublishError::EncodingInvalid(why))
        }
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
        (Ok(_), Ok(Ok(actual))) if actual != *digest => Err(PublishError::HashMismatch {
            expected: *digest,
            actual,
        }),
        (Ok(size), Ok(Ok(_))) => Ok(size),
    };
    match outcome {
        Ok(size) => {
            writer.finish().await?;
            Ok(EncodedOutcome::Created { size })
        }
        Err(e) => {
            let _ = writer.abort().await;
            Err(match e {
                PublishError::BlobTooLarge { max } => PublishError::EncodingInvalid(format!(
                    "an encoding must be smaller than the blob's {} bytes",
                    max + 1
                )),
                other => other,
            })
        }
    }
}

/// Whether the stored encoding at `key` decodes to the `len` bytes of blob `digest`.
async fn stored_decodes_to(
    store: &Store,
    key: &object_store::path::Path,
    digest: &Sha256Digest,
    len: u64,
) -> bool {
    let Ok(got) = store.get(key).await else {
        return false;
    };
    let (to_decoder, pieces) = tokio::sync::mpsc::channel::<Bytes>(QUEUED);
    let decoding = tokio::task::spawn_blocking(move || decoded_digest(pieces, len));
    let mut stream = got.into_stream();
    while let Some(Ok(piece)) = stream.next().await {
        if to_decoder.send(piece).await.is_err() {
            break;
        }
    }
    drop(to_decoder);
    matches!(decoding.await, Ok(Ok(d)) if d == *digest)
}

/// Decodes the pieces arriving on `pieces` and hashes the result, which must be `len` bytes
/// long; why not, for people.
fn decoded_digest(
    pieces: tokio::sync::mpsc::Receiver<Bytes>,
    len: u64,
) -> Result<Sha256Digest, String> {
    use std::io::Read as _;
    let mut decoder = ferry_fs::grouped::Decoder::new(Pieces {
        pieces,
        at: Bytes::new(),
    })
    .map_err(|e| e.to_string())?;
    let said = decoder.header().len;
    if said != len {
        return Err(format!(
            "its header says the file has {said} bytes; the blob has {len}"
        ));
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match decoder.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) => return Err(e.to_string()),
        }
    }
    // The body must end with the frame: what is stored is served to devices as it is.
    decoder.finish().map_err(|e| e.to_string())?;
    Ok(Sha256Digest::from_bytes(hasher.finalize().into()))
}

/// The pieces of a body as a blocking reader (for a thread of the blocking pool).
struct Pieces {
    pieces: tokio::sync::mpsc::Receiver<Bytes>,
    at: Bytes,
}

impl std::io::Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::BufRead as _;
        let have = self.fill_buf()?;
        let n = have.len().min(buf.len());
        buf[..n].copy_from_slice(&have[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl std::io::BufRead for Pieces {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.at.is_empty() {
            match self.pieces.blocking_recv() {
                Some(piece) => self.at = piece,
                None => break,
            }
        }
        Ok(&self.at)
    }

    fn consume(&mut self, n: usize) {
        let _ = self.at.split_to(n.min(self.at.len()));
    }
}
