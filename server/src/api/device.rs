//! Device endpoints: `POST /v1/resolve`, `GET /v1/keys` and `GET /v1/keyring`.

use actix_web::http::header;
use actix_web::{HttpResponse, web};
use ferry_shared::errors::ErrorCode;
use ferry_shared::resolve::{
    Candidate, Cohort, DECISION_PAYLOAD_TYPE, Decision, ResolveRequest, ResolveResponse,
};
use ferry_shared::select;
use ferry_shared::select::Preference;
use serde::Deserialize;
use time::OffsetDateTime;

use crate::api::error::ApiError;
use crate::api::extract::read_body;
use crate::app::AppState;
use ferry_shared::deny::DenyEntry;

pub(crate) async fn keys(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(&state.trust)
}

pub(crate) async fn keyring(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(ferry_shared::keyring::KeyringResponse {
        version: state.keyring_version,
        keyrings: state.keyring_chain.clone(),
    })
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResolveQuery {
    #[serde(default)]
    explain: bool,
}

pub(crate) async fn resolve(
    state: web::Data<AppState>,
    query: Result<web::Query<ResolveQuery>, actix_web::Error>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let outcome = resolve_inner(&state, query, payload).await;
    let label = match &outcome {
        Ok(_) => "ok",
        Err(e) => e.code.as_str(),
    };
    state.metrics.resolve(label);
    outcome
}

/// The error for a resolve body that does not parse: `invalid_name` or `invalid_version` when
/// the model name or a version is what is wrong, else `request_malformed`.
fn resolve_error(body: &[u8], e: serde_json::Error) -> ApiError {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(Err(err)) = v["model"]
            .as_str()
            .map(str::parse::<ferry_shared::ModelName>)
        {
            return ApiError::new(ErrorCode::InvalidName, format!("model: {err}"));
        }
        for field in ["app_version", "runtime_version"] {
            if let Some(Err(err)) = v[field].as_str().map(semver::Version::parse) {
                return ApiError::new(ErrorCode::InvalidVersion, format!("{field}: {err}"));
            }
        }
    }
    ApiError::new(ErrorCode::RequestMalformed, format!("resolve request: {e}"))
}

pub(crate) async fn resolve_inner(
    state: &AppState,
    query: Result<web::Query<ResolveQuery>, actix_web::Error>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let explain = query
        .map_err(|e| ApiError::new(ErrorCode::RequestInvalid, format!("bad query string: {e}")))?
        .explain;
    let body = read_body(
        payload,
        &state.config.limits,
        state.config.limits.max_resolve_bytes,
    )
    .await?;
    let device: ResolveRequest =
        serde_json::from_slice(&body).map_err(|e| resolve_error(&body, e))?;
    device
        .validate()
        .map_err(|m| ApiError::new(ErrorCode::RequestInvalid, m))?;
    let catalog = state.catalog();
    if !catalog.has_model(&device.model) {
        return Err(ApiError::new(
            ErrorCode::ModelNotFound,
            format!("no release of {} is published", device.model),
        ));
    }
    let revocations = state.revocations().get(&device.model).cloned();
    let mut all = catalog.releases_newest_first(&device.model);
    let all_published = all.len();
    // A revoked release is never offered, whatever the rollout plan says.
    if let Some(r) = &revocations {
        all.retain(|rel| r.list.revokes(&rel.manifest.version).is_none());
        if all.is_empty() {
            return Err(ApiError::new(
                ErrorCode::NoCompatibleVariant,
                format!(
                    "every published release of {} is revoked; nothing can be offered until a \
                     new release is published and shipped",
                    device.model
                ),
            ));
        }
    }
    let plan = state.rollouts().get(&device.model).cloned();
    let wanted_cohort = plan
        .as_ref()
        .map_or(Cohort::Baseline, |p| p.cohort(&device.install_id));
    let mut releases = crate::fleet::rollout::releases_for(&all, plan.as_ref(), wanted_cohort);
    // A pinned test device tries its pinned release first, whatever its cohort.
    let pin = plan
        .as_ref()
        .and_then(|p| p.pinned(&device.install_id, OffsetDateTime::now_utc()))
        .cloned();
    if let Some(pin) = &pin
        && let Some(r) = all.iter().find(|r| r.manifest.version == pin.release)
    {
        releases.retain(|x| x.manifest.version != pin.release);
        releases.insert(0, r.clone());
    }
    let manifests: Vec<&ferry_shared::manifest::ReleaseManifest> =
        releases.iter().map(|r| &r.manifest).collect();
    let pref: &Preference = &state.config.preference;
    let deny_lists = state.deny_lists();
    let deny_in_force = deny_lists.get(&device.model);
    let deny_entries: &[DenyEntry] = deny_in_force.map_or(&[], |d| d.entries.as_slice());
    let deny = |m: &ferry_shared::manifest::ReleaseManifest,
                v: &ferry_shared::manifest::Variant,
                d: &ResolveRequest| {
        let release = m.version.to_string();
        deny_entries
            .iter()
            .find(|e| e.matches(&release, v.id.as_str(), &d.soc, &d.device_model))
            .map(DenyEntry::reason)
    };
    let selection = match select::select(&manifests, &device, pref, &deny) {
        Ok(s) => s,
        Err(explain) => {
            let first: Vec<String> = explain
                .iter()
                .take(6)
                .map(|e| format!("{}/{}: {}", e.release, e.variant, e.reasons.join(", ")))
                .collect();
            return Err(ApiError::new(
                ErrorCode::NoCompatibleVariant,
                format!(
                    "no variant of {} fits this device: {}",
                    device.model,
                    first.join("; ")
                ),
            )
            .with_details(serde_json::json!({ "explain": explain })));
        }
    };
    let release = releases
        .iter()
        .find(|r| r.manifest.version == selection.manifest.version)
        .ok_or_else(|| ApiError::internal("selected release vanished from the catalog"))?;
    let pinned_here = pin
        .as_ref()
        .is_some_and(|p| p.release == selection.manifest.version);
    let cohort = match plan.as_ref().and_then(|p| p.staged.as_ref()) {
        Some(staged)
            if (wanted_cohort == Cohort::Staged || pinned_here)
                && *staged == selection.manifest.version =>
        {
            Cohort::Staged
        }
        _ => Cohort::Baseline,
    };
    state.telemetry.record_cohort(
        device.model.as_str(),
        if cohort == Cohort::Staged {
            "staged"
        } else {
            "baseline"
        },
        &device.install_id,
    );
    // Devices are told about the list only when a current release key signed it.
    let revocations_version = revocations
        .as_ref()
        .filter(|r| r.envelope.is_some())
        .map_or(0, |r| r.list.version);
    let base = state.config.public_url.clone().unwrap_or_default();
    let now = OffsetDateTime::now_utc();
    let decision = Decision {
        model: device.model.clone(),
        release: selection.manifest.version.clone(),
        cohort,
        install_id: device.install_id.clone(),
        issued_at: now,
        expires_at: now + time::Duration::seconds(state.config.decision_ttl_secs as i64),
        keyring_version: state.keyring_version,
        revocations_version,
        sequence: AppState::sequence(
            plan.as_ref().map_or(0, |p| p.revision),
            deny_in_force.map_or(0, |d| d.revision),
            all_published as u64,
            revocations_version,
        ),
        candidates: selection
            .candidates
            .iter()
            .map(|v| Candidate {
                variant: v.id.clone(),
                delegate: v.delegate,
                backends: v.backends.clone(),
                sha256: v.sha256,
                size: v.size,
                url: format!("{base}/v1/blobs/sha256/{}", v.sha256.to_hex()),
            })
            .collect(),
    };
    let variant_ids: Vec<&str> = decision
        .candidates
        .iter()
        .map(|c| c.variant.as_str())
        .collect();
    let release_text = selection.manifest.version.to_string();
    let receipt = state.receipts.issue(
        &crate::fleet::receipt::Facts {
            install_id: &device.install_id,
            model: device.model.as_str(),
            release: &release_text,
            platform: device.platform.as_str(),
            soc: &device.soc,
            device_model: &device.device_model,
        },
        &variant_ids,
    );
    let payload = serde_json::to_vec(&decision).map_err(ApiError::internal)?;
    let response = ResolveResponse {
        decision: state.online.sign(DECISION_PAYLOAD_TYPE, &payload),
        release: release.envelope.clone(),
        revocations: revocations.and_then(|r| r.envelope.as_deref().cloned()),
        receipt: Some(receipt),
        explain: explain.then(|| {
            let mut ex = selection.explain;
            if let Some(p) = &pin {
                let why = format!(
                    "pinned: install id {} gets {} first{}",
                    p.install_id,
                    p.release,
                    p.expires
                        .as_ref()
                        .map(|e| format!(" until {e}"))
                        .unwrap_or_default()
                );
                for e in ex.iter_mut().filter(|e| e.release == p.release) {
                    e.reasons.push(why.clone());
                }
            }
            ex
        }),
    };
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(response))
}
