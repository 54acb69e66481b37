//! Streaming blob uploads: a blob is streamed into a multipart upload at its final key while
//! being hashed and counted; on a hash mismatch or an oversized body the upload is aborted, so
//! nothing partial is ever visible.

use bytes::Bytes;
use ferry_shared::Sha256Digest;
use futures_util::{Stream, StreamExt as _};
use object_store::{ObjectStoreExt as _, WriteMultipart};
use sha2::{Digest as _, Sha256};

use crate::release::publish::error::PublishError;
use crate::storage::{StorageKey, Store};

/// What a blob upload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobOutcome {
    /// Stored now.
    Created {
        /// Bytes stored.
        size: u64,
    },
    /// It was there already (content-addressed, so nothing to do).
    Existed {
        /// Its size.
        size: u64,
    },
}

/// Whether an upload to a digest that is already stored first checks the stored bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExistingBlob {
    /// Hash the stored blob and replace it when it does not match (a store that can be left
    /// with a torn file: the local folder store after a power cut).
    Verify,
    /// Take it as it is (object stores whose writes are all-or-nothing, such as S3).
    Trust,
}

/// One stored blob is hashed at a time, so repeated uploads of large blobs cannot tie up the
/// server's I/O.
static VERIFYING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Time limits of one upload.
#[derive(Debug, Clone, Copy)]
pub struct UploadTime {
    /// Longest pause between two pieces of the body.
    pub idle: std::time::Duration,
    /// Longest the whole upload may take.
    pub total: std::time::Duration,
}

/// Bytes buffered per upload part (S3's smallest part is 5 MiB).
pub const UPLOAD_PART_BYTES: usize = 5 << 20;
/// Parts of one upload in flight to the store at once: with the part being filled, an upload
/// holds at most `(UPLOAD_PARTS_IN_FLIGHT + 1) * UPLOAD_PART_BYTES` (15 MiB) of memory.
pub const UPLOAD_PARTS_IN_FLIGHT: usize = 2;

/// Streams `body` into `blobs/sha256/<digest>`, refusing more than `max` bytes, bytes that do
/// not hash to `digest`, or a body that pauses longer than `time.idle` or takes longer than
/// `time.total`. Nothing is visible unless the whole body checks out.
pub async fn put_blob<S, E>(
    store: &Store,
    digest: &Sha256Digest,
    body: S,
    max: u64,
    time: UploadTime,
    existing: ExistingBlob,
) -> Result<BlobOutcome, PublishError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let key = StorageKey::blob(digest);
    if let Ok(meta) = store.head(&key).await {
        if existing == ExistingBlob::Trust {
            return Ok(BlobOutcome::Existed { size: meta.size });
        }
        // A blob is named by its digest, so a stored one whose bytes hash otherwise was torn
        // (a power cut before the data reached the disk) or damaged: the upload replaces it.
        let _permit = VERIFYING.acquire().await;
        match stored_digest(store, &key).await {
            Ok(d) if d == *digest => return Ok(BlobOutcome::Existed { size: meta.size }),
            Ok(d) => tracing::warn!(
                "blob {digest} is stored with {} bytes hashing to {d}: replacing it",
                meta.size
            ),
            Err(e) => tracing::warn!("blob {digest} cannot be read back ({e}): replacing it"),
        }
    }
    let upload = store.put_multipart(&key).await?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, UPLOAD_PART_BYTES);
    let mut check = Check::Hash(Sha256::new());
    let size = match stream_body(&mut writer, body, max, time, &mut check).await {
        Ok(size) => size,
        Err(e) => {
            // Leave no orphaned parts behind on the store.
            let _ = writer.abort().await;
            return Err(e);
        }
    };
    let Check::Hash(hasher) = check else {
        let _ = writer.abort().await;
        return Err(PublishError::Internal(
            "a blob upload was not hashed".into(),
        ));
    };
    let actual = Sha256Digest::from_bytes(hasher.finalize().into());
    if &actual != digest {
        let _ = writer.abort().await;
        return Err(PublishError::HashMismatch {
            expected: *digest,
            actual,
        });
    }
    if size == 0 {
        let _ = writer.abort().await;
        return Err(PublishError::BlobEmpty);
    }
    writer.finish().await?;
    Ok(BlobOutcome::Created { size })
}

/// What checks the bytes of an upload as they stream by.
pub(crate) enum Check {
    /// They are the blob: hash them.
    Hash(Sha256),
    /// They are an encoding of the blob: hand them to the thread that decodes and hashes them.
    Decode(tokio::sync::mpsc::Sender<Bytes>),
}

impl Check {
    async fn feed(&mut self, chunk: &Bytes) -> Result<(), PublishError> {
        match self {
            Check::Hash(h) => h.update(chunk),
            Check::Decode(to) => {
                if to.send(chunk.clone()).await.is_err() {
                    // The decoder stopped on bad bytes; its caller says why.
                    return Err(PublishError::EncodingInvalid(String::new()));
                }
            }
        }
        Ok(())
    }
}

/// Streams `body` into `writer`, through `check`, refusing more than `max` bytes or a body
/// that pauses longer than `time.idle` or takes longer than `time.total`; the bytes streamed.
/// On an error the caller aborts the upload.
pub(crate) async fn stream_body<S, E>(
    writer: &mut WriteMultipart,
    mut body: S,
    max: u64,
    time: UploadTime,
    check: &mut Check,
) -> Result<u64, PublishError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut size = 0u64;
    let deadline = tokio::time::Instant::now() + time.total;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Ok(next) = tokio::time::timeout(time.idle.min(left), body.next()).await else {
            return Err(if left <= time.idle {
                PublishError::TooSlow {
                    secs: time.total.as_secs(),
                }
            } else {
                PublishError::Stalled {
                    secs: time.idle.as_secs(),
                }
            });
        };
        let Some(chunk) = next else {
            return Ok(size);
        };
        let chunk = chunk.map_err(|e| PublishError::Interrupted(e.to_string()))?;
        size += chunk.len() as u64;
        if size > max {
            return Err(PublishError::BlobTooLarge { max });
        }
        check.feed(&chunk).await?;
        writer.wait_for_capacity(UPLOAD_PARTS_IN_FLIGHT).await?;
        writer.write(&chunk);
    }
}

/// The SHA-256 of a stored object, streamed.
async fn stored_digest(
    store: &Store,
    key: &object_store::path::Path,
) -> Result<Sha256Digest, object_store::Error> {
    let mut stream = store.get(key).await?.into_stream();
    let mut hasher = Sha256::new();
    while let Some(chunk) = stream.next().await {
        hasher.update(&chunk?);
    }
    Ok(Sha256Digest::from_bytes(hasher.finalize().into()))
}
