//! Publishing: streaming blob uploads and release admission.
//!
//! A blob is streamed into a multipart upload at its final key while being hashed and
//! counted; on a hash mismatch or an oversized body the upload is aborted, so nothing partial
//! is ever visible. A release is admitted only after every check passes; the inspection report
//! is written first and the signed manifest last with a create-if-absent put, so a release is
//! visible exactly when it is complete, and a second publish of the same version loses.

use std::collections::BTreeMap;

use actix_web::http::StatusCode;
use bytes::Bytes;
use ferry_shared::dsse::{Envelope, KeyRing};
use ferry_shared::manifest::{ReleaseManifest, verify_release_envelope};
use ferry_shared::pte::{self, PteLimits, PteReport};
use ferry_shared::{ModelName, Sha256Digest};
use futures_util::{Stream, StreamExt as _};
use object_store::{ObjectStoreExt as _, PutMode, PutOptions, PutPayload, WriteMultipart};
use sha2::{Digest as _, Sha256};

use crate::api::error::ApiError;
use crate::storage::catalog::Release;
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

/// Streams `body` into `blobs/sha256/<digest>`, refusing more than `max` bytes or bytes that
/// do not hash to `digest`. Nothing is visible unless the whole body checks out.
pub async fn put_blob<S, E>(
    store: &Store,
    digest: &Sha256Digest,
    body: S,
    max: u64,
) -> Result<BlobOutcome, ApiError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let key = StorageKey::blob(digest);
    if let Ok(meta) = store.head(&key).await {
        return Ok(BlobOutcome::Existed { size: meta.size });
    }
    let upload = store.put_multipart(&key).await?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, 8 << 20);
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut body = body;
    while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let _ = writer.abort().await;
                return Err(ApiError::bad_request(
                    "upload_interrupted",
                    format!("the upload body ended with an error: {e}"),
                ));
            }
        };
        size += chunk.len() as u64;
        if size > max {
            let _ = writer.abort().await;
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "blob_too_large",
                format!("blob is larger than the limit of {max} bytes"),
            ));
        }
        hasher.update(&chunk);
        if let Err(e) = writer.wait_for_capacity(4).await {
            return Err(ApiError::unavailable(e));
        }
        writer.write(&chunk);
    }
    let actual = Sha256Digest::from_bytes(hasher.finalize().into());
    if &actual != digest {
        let _ = writer.abort().await;
        return Err(ApiError::unprocessable(
            "hash_mismatch",
            format!("body hashes to {actual}, not {digest}"),
        ));
    }
    if size == 0 {
        let _ = writer.abort().await;
        return Err(ApiError::bad_request(
            "blob_empty",
            "an empty blob cannot be a model",
        ));
    }
    writer.finish().await.map_err(ApiError::unavailable)?;
    Ok(BlobOutcome::Created { size })
}

fn forbidden(code: &'static str, message: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, code, message)
}

/// Reads just enough of a stored blob to inspect it.
async fn inspect_blob(
    store: &Store,
    digest: &Sha256Digest,
    size: u64,
) -> Result<PteReport, ApiError> {
    let key = StorageKey::blob(digest);
    let limits = PteLimits::default();
    let head_len = size.min(64);
    let head = store.get_range(&key, 0..head_len).await?;
    let need = pte::required_prefix(&head, &limits)
        .map_err(|e| {
            ApiError::unprocessable("not_a_pte", format!("blob {digest} is not a .pte: {e}"))
        })?
        .min(size);
    let prefix = store.get_range(&key, 0..need).await?;
    pte::inspect_prefix(&prefix, size, &limits).map_err(|e| {
        ApiError::unprocessable(
            "not_a_pte",
            format!("blob {digest} is not a valid .pte ({}): {e}", e.code()),
        )
    })
}

/// Checks that what the variant declares is what its bytes contain.
fn check_delegation(
    variant: &ferry_shared::manifest::Variant,
    report: &PteReport,
) -> Result<(), ApiError> {
    if let Some(why) = pte::delegation_mismatch(
        variant.id.as_str(),
        variant.delegate,
        &variant.backends,
        report,
    ) {
        return Err(ApiError::unprocessable("delegate_mismatch", why));
    }
    if report.schema_version > pte::KNOWN_SCHEMA_VERSION {
        return Err(ApiError::unprocessable(
            "pte_schema_unsupported",
            format!(
                "variant {} has program schema version {}, newer than this server understands ({})",
                variant.id,
                report.schema_version,
                pte::KNOWN_SCHEMA_VERSION
            ),
        ));
    }
    Ok(())
}

/// Parses, verifies and checks a signed release, then stores it. Returns the admitted release.
pub async fn publish_release(
    store: &Store,
    ring: &KeyRing,
    url_model: &ModelName,
    body: &[u8],
) -> Result<Release, ApiError> {
    let envelope: Envelope = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(
            "envelope_malformed",
            format!("body is not a DSSE envelope: {e}"),
        )
    })?;
    let verified = verify_release_envelope(&envelope, ring).map_err(|e| match e {
        ferry_shared::dsse::DsseError::Malformed(_)
        | ferry_shared::dsse::DsseError::TooLarge { .. } => {
            ApiError::bad_request(e.code(), e.to_string())
        }
        other => forbidden(other.code(), other.to_string()),
    })?;
    let manifest = ReleaseManifest::from_json_strict(verified.value())
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.code(), e.to_string()))?;
    if &manifest.model != url_model {
        return Err(ApiError::bad_request(
            "model_mismatch",
            format!(
                "the manifest is for {} but was posted to {url_model}",
                manifest.model
            ),
        ));
    }
    let release_key = StorageKey::release(&manifest.model, &manifest.version);
    if store.head(&release_key).await.is_ok() {
        return Err(release_exists(&manifest));
    }
    let mut reports = BTreeMap::new();
    for v in &manifest.variants {
        let key = StorageKey::blob(&v.sha256);
        let meta = match store.head(&key).await {
            Ok(m) => m,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(ApiError::unprocessable(
                    "blob_missing",
                    format!("variant {}: blob {} has not been uploaded", v.id, v.sha256),
                ));
            }
            Err(e) => return Err(ApiError::unavailable(e)),
        };
        if meta.size != v.size {
            return Err(ApiError::unprocessable(
                "blob_size_mismatch",
                format!(
                    "variant {}: blob {} is {} bytes, the manifest says {}",
                    v.id, v.sha256, meta.size, v.size
                ),
            ));
        }
        let report = inspect_blob(store, &v.sha256, v.size).await?;
        check_delegation(v, &report)?;
        for f in &v.extra_files {
            match store.head(&StorageKey::blob(&f.sha256)).await {
                Ok(m) if m.size == f.size => {}
                Ok(m) => {
                    return Err(ApiError::unprocessable(
                        "blob_size_mismatch",
                        format!(
                            "variant {}: extra file {} is {} bytes, the manifest says {}",
                            v.id, f.name, m.size, f.size
                        ),
                    ));
                }
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(ApiError::unprocessable(
                        "blob_missing",
                        format!(
                            "variant {}: extra file {} ({}) has not been uploaded",
                            v.id, f.name, f.sha256
                        ),
                    ));
                }
                Err(e) => return Err(ApiError::unavailable(e)),
            }
        }
        reports.insert(v.id.to_string(), report);
    }
    let inspection = serde_json::to_value(&reports).map_err(ApiError::internal)?;
    let ins_bytes = serde_json::to_vec(&inspection).map_err(ApiError::internal)?;
    store
        .put(
            &StorageKey::inspection(&manifest.model, &manifest.version),
            PutPayload::from(ins_bytes),
        )
        .await?;
    let env_bytes = serde_json::to_vec(&envelope).map_err(ApiError::internal)?;
    match store
        .put_opts(
            &release_key,
            PutPayload::from(env_bytes),
            PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            },
        )
        .await
    {
        Ok(_) => {}
        Err(object_store::Error::AlreadyExists { .. }) => return Err(release_exists(&manifest)),
        Err(e) => return Err(ApiError::unavailable(e)),
    }
    Ok(Release {
        manifest,
        envelope,
        inspection: Some(inspection),
    })
}

fn release_exists(m: &ReleaseManifest) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "release_exists",
        format!(
            "{} {} is already published; releases are immutable, publish a new version",
            m.model, m.version
        ),
    )
}
