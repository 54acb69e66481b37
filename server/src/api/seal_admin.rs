//! The operator's side of sealed releases: stopping and resuming their key releases
//! (`PUT`/`DELETE /v1/admin/models/{model}/releases/{version}/seal-stop`, scope `rollout`), and
//! reading who got keys (`GET .../key-releases`, scope `read`).
//!
//! A stop is one object in the store, read by every replica on every key request, so it holds
//! at once across replicas and restarts. Each replica also lists the stops with its catalog
//! refresh (every 30 s) and names them in resolve answers (`sealed_stopped`): a device that
//! holds a key learns of the stop there and forgets the key.

use actix_web::{HttpRequest, HttpResponse, web};
use ferry_shared::errors::ErrorCode;
use futures_util::StreamExt as _;
use object_store::{ObjectStoreExt as _, PutPayload};
use semver::Version;

use crate::api::AppState;
use crate::api::auth::authorize;
use crate::api::error::ApiError;
use crate::api::extract::read_body;
use crate::storage::StorageKey;
use crate::tokens::Scope;

/// Most audit records one listing returns (the newest).
const MAX_LISTED: usize = 1000;

fn sealed_release(
    state: &AppState,
    model: &str,
    version: &str,
) -> Result<(ferry_shared::ModelName, Version), ApiError> {
    let (model, version, release) = crate::api::extract::published_release(state, model, version)?;
    if !release.manifest.variants.iter().any(|v| v.sealed.is_some()) {
        return Err(ApiError::new(
            ErrorCode::RequestInvalid,
            format!("{model} {version} has no sealed variant"),
        ));
    }
    Ok((model, version))
}

/// `PUT .../seal-stop`: no key of this release is released any more. The body may carry
/// `{"reason": "..."}`.
pub(crate) async fn put_seal_stop(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let caller = authorize(&req, &state.config().tokens, Scope::Rollout)?;
    let (model, version) = path.into_inner();
    let (model, version) = sealed_release(&state, &model, &version)?;
    let body = read_body(payload, &state.config().limits, 16 << 10).await?;
    let reason = if body.is_empty() {
        String::new()
    } else {
        let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            ApiError::new(ErrorCode::RequestMalformed, format!("seal-stop body: {e}"))
        })?;
        let reason = v["reason"].as_str().unwrap_or_default();
        if reason.chars().count() > 512 || reason.chars().any(char::is_control) {
            return Err(ApiError::new(
                ErrorCode::RequestInvalid,
                "reason: at most 512 characters, no control characters",
            ));
        }
        reason.to_string()
    };
    let record = serde_json::json!({
        "model": model,
        "release": version.to_string(),
        "by": caller.name,
        "at": crate::storage::revisions::now_text(),
        "reason": reason,
    });
    let bytes = serde_json::to_vec(&record)
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
    state
        .store()
        .put(
            &StorageKey::seal_stop(&model, &version),
            PutPayload::from(bytes),
        )
        .await?;
    state.key_service().note_stop(&model, &version, true);
    tracing::warn!(%model, %version, by = %caller.name, "key releases stopped");
    Ok(HttpResponse::Ok().json(serde_json::json!({"stopped": true, "record": record})))
}

/// `DELETE .../seal-stop`: key releases resume.
pub(crate) async fn delete_seal_stop(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let caller = authorize(&req, &state.config().tokens, Scope::Rollout)?;
    let (model, version) = path.into_inner();
    let (model, version) = sealed_release(&state, &model, &version)?;
    match state
        .store()
        .delete(&StorageKey::seal_stop(&model, &version))
        .await
    {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    state.key_service().note_stop(&model, &version, false);
    tracing::warn!(%model, %version, by = %caller.name, "key releases resumed");
    Ok(HttpResponse::Ok().json(serde_json::json!({"stopped": false})))
}

/// `GET .../key-releases`: whether releases are stopped, and the newest audit records (at most
/// 1,000) of keys released for this release.
pub(crate) async fn get_key_releases(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config().tokens, Scope::Read)?;
    let (model, version) = path.into_inner();
    let (model, version) = sealed_release(&state, &model, &version)?;
    let store = state.store();
    let stopped = match store.get(&StorageKey::seal_stop(&model, &version)).await {
        Ok(g) => serde_json::from_slice::<serde_json::Value>(&g.bytes().await?).ok(),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let prefix = StorageKey::key_audits(&model, &version);
    let mut paths = Vec::new();
    let mut listing = store.list(Some(&prefix));
    let mut total = 0usize;
    while let Some(meta) = listing.next().await {
        paths.push(meta?.location);
        total += 1;
        // Ids sort by time: keep the newest.
        if paths.len() > 2 * MAX_LISTED {
            paths.sort();
            paths.drain(..paths.len() - MAX_LISTED);
        }
    }
    paths.sort();
    let keep = paths.len().saturating_sub(MAX_LISTED);
    let mut records = Vec::new();
    for p in paths.into_iter().skip(keep).rev() {
        if let Ok(bytes) = store.get(&p).await?.bytes().await
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes)
        {
            records.push(v);
        }
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "model": model,
        "release": version.to_string(),
        "stopped": stopped,
        "total": total,
        "records": records,
    })))
}
