//! Admin catalog endpoints: publishing a release and the catalog views.

use actix_web::{HttpRequest, HttpResponse, web};
use ferry_shared::errors::ErrorCode;
use semver::Version;

use crate::api::auth::{Scope, authorize};
use crate::api::error::ApiError;
use crate::api::extract::{parse_model, read_body};
use crate::app::AppState;
use crate::release::publish::publish_release;
use crate::storage::catalog::Release;

pub(crate) async fn post_release(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let caller = authorize(&req, &state.config.tokens, Scope::Publish)?;
    let model = parse_model(&model)?;
    let body = read_body(payload, state.config.limits.max_json_bytes).await?;
    let outcome = publish_release(&state.store, &state.release_ring, &model, &body).await;
    let label = match &outcome {
        Ok(_) => "ok",
        Err(e) => e.code().as_str(),
    };
    state.metrics.publish(label);
    let release = outcome?;
    tracing::info!(caller = caller.name, model = %release.manifest.model, version = %release.manifest.version, "release published");
    let view = release_view(&release);
    state.add_release(release);
    Ok(HttpResponse::Created().json(view))
}

pub(crate) fn release_view(r: &Release) -> serde_json::Value {
    serde_json::json!({
        "model": r.manifest.model,
        "version": r.manifest.version.to_string(),
        "notes": r.manifest.notes,
        "created": r.manifest.created.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
        "variants": r.manifest.variants,
        "inspection": r.inspection,
        "envelope": r.envelope,
    })
}

pub(crate) async fn list_models(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config.tokens, Scope::Read)?;
    let catalog = state.catalog();
    let models: Vec<serde_json::Value> = catalog
        .models()
        .map(|(m, versions)| {
            serde_json::json!({
                "model": m,
                "releases": versions.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
                "latest": versions.last().map(|v| v.to_string()),
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "models": models })))
}

pub(crate) async fn get_model(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config.tokens, Scope::Read)?;
    let model = parse_model(&model)?;
    let releases = state.catalog().releases_newest_first(&model);
    if releases.is_empty() {
        return Err(ApiError::new(
            ErrorCode::ModelNotFound,
            format!("no release of {model} is published"),
        ));
    }
    let list: Vec<serde_json::Value> = releases
        .iter()
        .map(|r| {
            serde_json::json!({
                "version": r.manifest.version.to_string(),
                "notes": r.manifest.notes,
                "variants": r.manifest.variants.iter().map(|v| serde_json::json!({
                    "id": v.id, "delegate": v.delegate, "quant": v.quant, "size": v.size,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "model": model, "releases": list })))
}

pub(crate) async fn get_release(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config.tokens, Scope::Read)?;
    let (model, version) = path.into_inner();
    let model = parse_model(&model)?;
    if version.len() > 64 {
        return Err(ApiError::new(
            ErrorCode::InvalidVersion,
            "a version is at most 64 characters",
        ));
    }
    let version: Version = version
        .parse()
        .map_err(|e| ApiError::new(ErrorCode::InvalidVersion, format!("{e}")))?;
    let release = state.catalog().release(&model, &version).ok_or_else(|| {
        ApiError::new(
            ErrorCode::ReleaseNotFound,
            format!("{model} {version} is not published"),
        )
    })?;
    Ok(HttpResponse::Ok().json(release_view(&release)))
}
