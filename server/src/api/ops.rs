//! Operations endpoints: `/healthz`, `/readyz`, `/metrics`.

use actix_web::{HttpResponse, web};
use object_store::ObjectStoreExt as _;

use crate::api::error::ApiError;
use crate::app::AppState;
use ferry_shared::errors::ErrorCode;

pub(crate) async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

pub(crate) async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    // A cheap round trip to the store: a missing key answers NotFound when the store works.
    // Without the store the replica still resolves from memory, so it stays ready (a load
    // balancer must keep sending it devices) and says it is degraded.
    let store = match state
        .store
        .head(&crate::storage::StorageKey::readiness_probe())
        .await
    {
        Ok(_) | Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => {
            tracing::warn!("readiness: the store does not answer: {e}");
            Some(ErrorCode::StorageUnavailable)
        }
    };
    let expires = state.online_expires_at;
    if let Some(at) = expires
        && at <= time::OffsetDateTime::now_utc()
    {
        return Err(ApiError::new(
            ErrorCode::OnlineKeyExpired,
            format!("the online key expired at {at}; devices refuse what it signs: rotate it"),
        ));
    }
    let mut body = serde_json::json!({
        "status": if store.is_some() { "degraded" } else { "ready" },
        "store": store.map_or("ok", ErrorCode::as_str),
        "releases": state.catalog().release_count(),
        "keyring_version": state.keyring_version,
    });
    if let Some(at) = expires {
        body["online_key_expires_at"] = at
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default()
            .into();
    }
    Ok(HttpResponse::Ok().json(body))
}

pub(crate) async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    state
        .metrics
        .telemetry_raw_dropped(state.telemetry.dropped());
    state.metrics.sample_process();
    // One label set per published model (a bounded set: the catalog's).
    let rollouts = state.rollouts();
    let deny = state.deny_lists();
    for (model, _) in state.catalog().models() {
        let plan = rollouts.get(model);
        let live = plan.filter(|p| p.cohort_is_live());
        state.metrics.model_state(
            model.as_str(),
            live.map_or(0, |p| p.basis_points),
            live.is_some_and(|p| p.state == ferry_shared::rollout::RolloutState::Active),
            deny.get(model).map_or(0, |d| d.entries.len()),
        );
    }
    HttpResponse::Ok()
        .content_type(crate::app::metrics::CONTENT_TYPE)
        .body(state.metrics.render())
}
