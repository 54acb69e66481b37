//! Operations endpoints: `/healthz`, `/readyz`, `/metrics` (a read token on the main listener;
//! none on the `metrics_listen` one, which serves these three only).

use actix_web::{HttpResponse, web};
use object_store::ObjectStoreExt as _;

use crate::api::AppState;
use crate::api::error::ApiError;
use ferry_shared::errors::ErrorCode;

pub(crate) async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

pub(crate) async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    // A cheap round trip to the store: a missing key answers NotFound when the store works.
    // Without the store the replica still resolves from memory, so it stays ready (a load
    // balancer must keep sending it devices) and says it is degraded.
    let store = match state
        .store()
        .head(&crate::storage::StorageKey::readiness_probe())
        .await
    {
        Ok(_) | Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => {
            tracing::warn!("readiness: the store does not answer: {e}");
            Some(ErrorCode::StorageUnavailable)
        }
    };
    let expires = state.keys().online_expires_at;
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
        "keyring_version": state.keys().version,
    });
    if let Some(at) = expires {
        body["online_key_expires_at"] = at
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default()
            .into();
    }
    Ok(HttpResponse::Ok().json(body))
}

/// `GET /metrics` on the main listener: for a token with the read scope (the figures name
/// every model, its rollout share, failure rates and deny counts).
pub(crate) async fn metrics(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    crate::api::auth::authorize(&req, &state.config().tokens, crate::tokens::Scope::Read).map_err(
        |mut e| {
            if e.code == ErrorCode::Unauthorized {
                let why = if e.message.starts_with("this endpoint needs") {
                    "no token".to_string()
                } else {
                    e.message.clone()
                };
                e.message = format!(
                    "{why}: /metrics needs a token with the read scope, Authorization: Bearer \
                     TOKEN (Prometheus: authorization: {{credentials_file: ...}}), or set \
                     metrics_listen for a listener without one"
                );
            }
            e
        },
    )?;
    Ok(metrics_open(state).await)
}

/// `GET /metrics` on the `metrics_listen` listener (no token: that listener is for a private
/// network).
pub(crate) async fn metrics_open(state: web::Data<AppState>) -> HttpResponse {
    state
        .metrics()
        .telemetry_raw_dropped(state.telemetry().outbox().dropped());
    state.metrics().sample_process();
    // One label set per published model (a bounded set: the catalog's).
    let rollouts = state.rollouts();
    let deny = state.deny_lists();
    for (model, _) in state.catalog().models() {
        let plan = rollouts.get(model);
        let live = plan.filter(|p| p.cohort_is_live());
        let fleet = state.telemetry().fleet(model.as_str());
        let rates = |v: Option<&semver::Version>| {
            v.map(|v| {
                let (loads, failures, fallbacks) =
                    fleet.release_totals(model.as_str(), &v.to_string());
                let rate = |n: u64| {
                    if loads == 0 {
                        0.0
                    } else {
                        n.min(loads) as f64 / loads as f64
                    }
                };
                (rate(failures), rate(fallbacks))
            })
        };
        let figures = crate::metrics::ModelState {
            staged_basis_points: live.map_or(0, |p| p.basis_points),
            active: live
                .is_some_and(|p| p.state == ferry_shared::select::rollout::RolloutState::Active),
            halted: plan
                .is_some_and(|p| p.state == ferry_shared::select::rollout::RolloutState::Halted),
            ramp_step: plan
                .and_then(|p| p.ramp.as_ref())
                .map(|r| u32::try_from(r.step).unwrap_or(u32::MAX)),
            deny: deny.get(model).map_or(0, |d| d.entries.len()),
            staged_rates: rates(plan.and_then(|p| p.staged.as_ref())),
            baseline_rates: rates(plan.and_then(|p| p.baseline.as_ref())),
        };
        state.metrics().model_state(model.as_str(), &figures);
    }
    HttpResponse::Ok()
        .content_type(crate::metrics::CONTENT_TYPE)
        .body(state.metrics().render())
}
