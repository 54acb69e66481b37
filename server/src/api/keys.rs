//! `POST /v1/keys/release`: the keys of a sealed variant's files, for a device that shows the
//! receipt of the resolve that chose it (the policy is [`crate::release::key_release`]); and
//! the operator's stop (`PUT`/`DELETE /v1/admin/models/{model}/releases/{version}/seal-stop`)
//! and audit view (`GET .../key-releases`).

use actix_web::{HttpResponse, web};
use ferry_shared::errors::ErrorCode;
use ferry_shared::wire::keys::{KeyRequest, KeyResponse};
use object_store::{ObjectStoreExt as _, PutPayload};

use crate::api::error::ApiError;
use crate::api::extract::{read_body, require_object};
use crate::api::state::AppState;
use crate::fleet::intake::receipt::Facts;
use crate::release::key_release::Refusal;
use crate::storage::StorageKey;

/// Largest key request body (a receipt, a few digests and an attestation token).
const MAX_KEY_REQUEST_BYTES: usize = 64 << 10;

fn refusal(r: Refusal) -> ApiError {
    match r {
        Refusal::Invalid(why) => ApiError::new(ErrorCode::RequestInvalid, why),
        Refusal::Refused(why) => ApiError::new(ErrorCode::KeyReleaseRefused, why),
        Refusal::Stopped(why) => ApiError::new(ErrorCode::KeyReleaseStopped, why),
        Refusal::Unavailable(why) => ApiError::new(ErrorCode::KeyReleaseUnavailable, why),
        Refusal::Limited => ApiError::new(
            ErrorCode::RateLimited,
            "too many key requests from this address or install; try again in a minute",
        ),
    }
}

pub(crate) async fn release_keys(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let peer = state.client_ip(&req);
    let outcome = release_inner(&state, payload, peer).await;
    state.metrics().key_release(match &outcome {
        Ok(_) => "ok",
        Err(e) => e.code.as_str(),
    });
    outcome
}

async fn release_inner(
    state: &AppState,
    payload: web::Payload,
    peer: Option<std::net::IpAddr>,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload, &state.config().limits, MAX_KEY_REQUEST_BYTES).await?;
    require_object(&body, ErrorCode::RequestMalformed, "key request")?;
    let request: KeyRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(ErrorCode::RequestMalformed, format!("key request: {e}")))?;
    request
        .validate()
        .map_err(|m| ApiError::new(ErrorCode::RequestInvalid, m))?;
    let service = state.key_service();
    service.admit_address(peer).map_err(refusal)?;
    let version = semver::Version::parse(&request.release)
        .map_err(|e| ApiError::new(ErrorCode::InvalidVersion, format!("release: {e}")))?;
    let release = state
        .catalog()
        .release(&request.model, &version)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::ReleaseNotFound,
                format!("{} {} is not published", request.model, version),
            )
        })?;
    let variant = release.manifest.variant(&request.variant).ok_or_else(|| {
        ApiError::new(
            ErrorCode::RequestInvalid,
            format!(
                "{} {version} has no variant {}",
                request.model, request.variant
            ),
        )
    })?;
    let facts = Facts {
        install_id: &request.install_id,
        model: request.model.as_str(),
        release: &request.release,
        platform: &request.platform,
        soc: &request.soc,
        device_model: &request.device_model,
    };
    if !state
        .receipts()
        .names(&request.receipt, &facts, &[request.variant.as_str()])
    {
        return Err(refusal(Refusal::Refused(
            "the receipt is not from a resolve that chose this variant for this install and \
             device (resolve again and ask with its receipt)"
                .into(),
        )));
    }
    service
        .admit_install(&request.install_id)
        .map_err(refusal)?;
    if let Some(revoked) = state
        .revocations()
        .get(&request.model)
        .and_then(|r| r.list.revokes(&version).cloned())
    {
        return Err(refusal(Refusal::Stopped(format!(
            "{} {version} is revoked: {}",
            request.model, revoked.reason
        ))));
    }
    let stop = StorageKey::seal_stop(&request.model, &version);
    match state.store().head(&stop).await {
        Ok(_) => {
            return Err(refusal(Refusal::Stopped(format!(
                "key releases for {} {version} were stopped by an operator",
                request.model
            ))));
        }
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(crate::storage::StoreError::from(e).into()),
    }
    // A verifier is a program: run it off the async workers.
    let checked = {
        let (service, request) = (service.clone(), request.clone());
        tokio::task::spawn_blocking(move || service.check_attestation(&request))
            .await
            .map_err(|e| ApiError::new(ErrorCode::Internal, format!("attestation: {e}")))?
    };
    checked.map_err(refusal)?;
    let keys = service.release(&request, variant).map_err(refusal)?;
    let audit_id = audit(state, &request, &version, peer, keys.len()).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(KeyResponse { keys, audit_id }))
}

/// Writes the audit record of a key release (before the keys leave: no record, no keys).
async fn audit(
    state: &AppState,
    request: &KeyRequest,
    version: &semver::Version,
    peer: Option<std::net::IpAddr>,
    files: usize,
) -> Result<String, ApiError> {
    let now = time::OffsetDateTime::now_utc();
    let mut random = [0u8; 6];
    let _ = getrandom::fill(&mut random);
    let id = format!(
        "{:020}-{}",
        now.unix_timestamp_nanos().max(0),
        hex::encode(random)
    );
    let record = serde_json::json!({
        "id": id,
        "at": now.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
        "model": request.model,
        "release": version.to_string(),
        "variant": request.variant,
        "install_id": request.install_id,
        "platform": request.platform,
        "device_model": request.device_model,
        "soc": request.soc,
        "address": peer.map(|p| p.to_string()),
        "attestation": request.attestation.as_ref().map(|a| a.kind.clone()),
        "files": files,
        "node": state.node(),
    });
    let bytes = serde_json::to_vec(&record)
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
    state
        .store()
        .put(
            &StorageKey::key_audit(&request.model, version, &id),
            PutPayload::from(bytes),
        )
        .await
        .map_err(crate::storage::StoreError::from)?;
    Ok(id)
}
