//! Filling a site mirror ahead of a rollout (`ferry mirror sync MODEL [--release V]`, an admin
//! call on the mirror): the mirror asks the origin which releases devices may get (or takes the
//! one named), fetches each signed release manifest, verifies it under the pinned trust, and
//! fetches every file it lists (programs, `.ptd` data files, assets, chunk indexes) the way a
//! device's request would: once, verified, kept.
//!
//! The origin's release list is an admin route: the mirror calls it with the origin token it
//! was given (`FERRY_ORIGIN_TOKEN`, a token with the read scope on the origin).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferry_shared::Sha256Digest;
use ferry_shared::errors::ErrorCode;
use ferry_shared::manifest::{ReleaseManifest, verify_release_envelope};
use ferry_shared::trust::dsse::Envelope;

use super::held::Kind;
use super::state::Mirror;
use crate::api::error::ApiError;

fn origin_error(why: String) -> ApiError {
    ApiError::new(ErrorCode::OriginUnavailable, why)
}

/// `GET path` on the origin with the origin token, as JSON.
async fn origin_json(m: &Mirror, path: &str) -> Result<serde_json::Value, ApiError> {
    let Some(token) = m.origin_token.clone() else {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "the mirror has no origin token: start it with FERRY_ORIGIN_TOKEN set to a token \
             with the read scope on the origin, to let it list releases",
        ));
    };
    let headers = vec![("authorization".to_string(), format!("Bearer {token}"))];
    let got = m
        .relay(actix_web::http::Method::GET, path, None, headers)
        .await
        .map_err(|why| origin_error(format!("the origin is unreachable: {why}")))?;
    let body: serde_json::Value = serde_json::from_slice(&got.body).unwrap_or_default();
    match got.status {
        200 => Ok(body),
        401 | 403 => Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "the origin refused the mirror's origin token (HTTP {}): {}",
                got.status, body["message"]
            ),
        )),
        404 => Err(ApiError::new(
            if path.contains("/releases/") {
                ErrorCode::ReleaseNotFound
            } else {
                ErrorCode::ModelNotFound
            },
            format!("the origin says: {}", body["message"]),
        )),
        s => Err(origin_error(format!(
            "the origin answered HTTP {s} to {path}"
        ))),
    }
}

/// The releases devices may get from the origin now: the one the baseline cohort is served and
/// the staged one, if any.
async fn live_releases(m: &Mirror, model: &str) -> Result<Vec<String>, ApiError> {
    let models = origin_json(m, "/v1/admin/models").await?;
    let entry = models["models"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["model"] == model)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::ModelNotFound,
                format!("the origin has no model {model}"),
            )
        })?;
    let mut out: Vec<String> = ["live", "staged"]
        .iter()
        .filter_map(|k| entry[*k].as_str().map(str::to_string))
        .collect();
    out.dedup();
    if out.is_empty() {
        return Err(ApiError::new(
            ErrorCode::ReleaseNotFound,
            format!("no release of {model} is live on the origin; name one with --release"),
        ));
    }
    Ok(out)
}

/// Fetches (or finds held) every file of `version` of `model`; returns the manifest.
async fn sync_release(
    m: &Arc<Mirror>,
    model: &str,
    version: &str,
    files: &mut Vec<(Sha256Digest, u64)>,
) -> Result<ReleaseManifest, ApiError> {
    let view = origin_json(m, &format!("/v1/admin/models/{model}/releases/{version}")).await?;
    let digest = view["envelope_sha256"]
        .as_str()
        .and_then(|h| Sha256Digest::from_hex(h).ok())
        .ok_or_else(|| {
            origin_error(format!(
                "the origin's answer for {model} {version} names no envelope_sha256 (an older \
                 origin: upgrade it)"
            ))
        })?;
    let held = |e: super::held::HeldError| origin_error(e.to_string());
    let path = m.held.ensure(Kind::Release, digest).await.map_err(held)?;
    let bytes = std::fs::read(&path).map_err(ApiError::unavailable)?;
    if !files.iter().any(|(f, _)| *f == digest) {
        files.push((digest, bytes.len() as u64));
    }
    let env: Envelope = serde_json::from_slice(&bytes)
        .map_err(|e| origin_error(format!("the release manifest is not an envelope: {e}")))?;
    let ring = m.kept.ring_at(time::OffsetDateTime::now_utc());
    let payload = verify_release_envelope(&env, &ring)
        .map_err(|e| {
            ApiError::new(
                ErrorCode::SignatureInvalid,
                format!(
                    "{model} {version}: the release manifest does not verify under the trust \
                     the mirror holds: {e}"
                ),
            )
        })?
        .into_inner();
    let manifest = ReleaseManifest::from_json(&payload)
        .map_err(|e| origin_error(format!("{model} {version}: {e}")))?;
    for v in &manifest.variants {
        let refs = std::iter::once((v.sha256, v.size))
            .chain(v.side_files().map(|f| (f.sha256, f.size)))
            .chain(v.chunk_index.iter().map(|r| (r.sha256, r.size)))
            .chain(
                v.side_files()
                    .filter_map(|f| f.chunk_index)
                    .map(|r| (r.sha256, r.size)),
            );
        for (d, size) in refs {
            if files.iter().any(|(f, _)| *f == d) {
                continue;
            }
            m.held.ensure(Kind::Blob, d).await.map_err(held)?;
            files.push((d, size));
        }
    }
    Ok(manifest)
}

/// Fills the mirror with `release` of `model` (or the releases live on the origin); says what
/// it holds for them (files and bytes, the signed release manifests included) and what it
/// fetched now.
pub async fn sync(
    m: &Arc<Mirror>,
    model: &str,
    release: Option<&str>,
) -> Result<serde_json::Value, ApiError> {
    let model = crate::api::extract::parse_model(model)?;
    let versions = match release {
        Some(v) => vec![v.to_string()],
        None => live_releases(m, model.as_str()).await?,
    };
    // The keys release manifests are checked with: the origin's keyrings, as devices get them.
    if let Ok(got) = m
        .relay(
            actix_web::http::Method::GET,
            "/v1/keyring",
            None,
            Vec::new(),
        )
        .await
        && got.status == 200
    {
        m.kept.keep_document("keyring", &got.body);
    }
    let before = m.held.counts.origin_bytes.load(Ordering::Relaxed);
    let mut files = Vec::new();
    let mut done = Vec::new();
    for v in &versions {
        let manifest = sync_release(m, model.as_str(), v, &mut files).await?;
        done.push(manifest.version.to_string());
    }
    Ok(serde_json::json!({
        "model": model.as_str(),
        "releases": done,
        "files": files.len(),
        "bytes": files.iter().map(|(_, s)| s).sum::<u64>(),
        "fetched_bytes": m.held.counts.origin_bytes.load(Ordering::Relaxed) - before,
    }))
}
