//! Operations endpoints: `/healthz`, `/readyz`, `/metrics`.

use actix_web::{HttpResponse, web};
use object_store::ObjectStoreExt as _;

use crate::api::error::ApiError;
use crate::app::AppState;

pub(crate) async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

pub(crate) async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    // A cheap round trip to the store: a missing key answers NotFound when the store works.
    match state
        .store
        .head(&crate::storage::StorageKey::readiness_probe())
        .await
    {
        Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(ApiError::unavailable(e)),
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "status": "ready",
        "releases": state.catalog().release_count(),
    })))
}

pub(crate) async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    state
        .metrics
        .telemetry_raw_dropped(state.telemetry.dropped());
    HttpResponse::Ok()
        .content_type(crate::app::metrics::CONTENT_TYPE)
        .body(state.metrics.render())
}
