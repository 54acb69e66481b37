//! Revocation endpoints: the list in force, and a new signed list, which also ends the stage of
//! a revoked staged release.

use actix_web::{HttpRequest, HttpResponse, web};

use ferry_shared::errors::ErrorCode;
use ferry_shared::select::rollout::RolloutPlan;

use crate::api::AppState;
use crate::api::auth::authorize;
use crate::api::error::ApiError;
use crate::api::extract::{read_body, require_object};
use crate::tokens::Scope;

/// `GET /v1/admin/models/{model}/revocations` (scope read): the list in force, with its
/// envelope (what `ferry release revoke` builds the next version from).
pub(crate) async fn get_revocations(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let model = crate::api::extract::read_view(&req, &state, &model).await?;
    let held = state.revocations().get(&model).cloned();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "model": model,
        "version": held.as_ref().map_or(0, |r| r.list.version),
        "revoked": held.as_ref().map(|r| r.list.revoked.clone()).unwrap_or_default(),
        "envelope": held.as_ref().and_then(|r| r.envelope.as_deref().cloned()),
        "signed_by_current_key": held.as_ref().is_none_or(|r| r.envelope.is_some()),
    })))
}

/// `POST /v1/admin/models/{model}/revocations` (scope publish): a signed revocation list, the
/// successor of the one in force (201), or the very envelope already in force (200: a retried
/// request).
pub(crate) async fn post_revocations(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let caller = authorize(&req, &state.config().tokens, Scope::Publish)?;
    let model = crate::api::extract::known_model(&state, &model).await?;
    let body = read_body(
        payload,
        &state.config().limits,
        state.config().limits.max_json_bytes,
    )
    .await?;
    require_object(&body, ErrorCode::EnvelopeMalformed, "revocation envelope")?;
    let env: ferry_shared::trust::dsse::Envelope = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            ErrorCode::EnvelopeMalformed,
            format!("revocation envelope: {e}"),
        )
    })?;
    // Only published releases can be newly revoked (a typo must not revoke nothing, or a
    // future version for good); entries carried over from the list in force may name releases
    // no longer loaded (signed by a rotated-out key).
    let catalog = state.catalog();
    let held = state.revocations().get(&model).cloned();
    if let Ok(list) = ferry_shared::trust::revocation::RevocationList::from_accepted_envelope(&env)
        && let Some(r) = list.revoked.iter().find(|r| {
            catalog.release(&model, &r.release).is_none()
                && held
                    .as_ref()
                    .is_none_or(|h| h.list.revokes(&r.release).is_none())
        })
    {
        return Err(ApiError::new(
            ErrorCode::ReleaseNotFound,
            format!(
                "{model} {} is not published; only published releases can be revoked",
                r.release
            ),
        ));
    }
    let submitted =
        crate::plans::revocation::submit(state.store(), &state.keys().release_ring, &model, &env)
            .await?;
    let (list, stored) = match submitted {
        crate::plans::revocation::Submitted::Stored(list) => (list, true),
        crate::plans::revocation::Submitted::AlreadyInForce(list) => (list, false),
    };
    if stored {
        tracing::warn!(
            caller = caller.name,
            %model,
            version = list.version,
            revoked = %list.revoked.iter().map(|r| r.release.to_string()).collect::<Vec<_>>().join(","),
            "revocation list changed"
        );
    }
    let ended = end_revoked_stage(&state, &model, &list, &caller.name).await;
    let mut view = serde_json::json!({
        "model": model,
        "version": list.version,
        "revoked": list.revoked,
    });
    if let Some(plan) = &ended {
        view["rollout"] = serde_json::json!(plan);
    }
    // Also for a retry: this replica may not have read the list another one stored.
    state.views().set_revocations(list, Some(env));
    // A revoked arm ends the model's experiment (the answer says so).
    if let Some(stopped) = crate::api::experiments::stop_if_revoked(&state, &model).await {
        view["experiment"] = serde_json::json!(stopped);
    }
    let mut answer = if stored {
        HttpResponse::Created()
    } else {
        HttpResponse::Ok()
    };
    Ok(answer.json(view))
}

/// A revoked release that is staged ends its stage: a `rollback` revision naming the
/// revocation (the way back is never refused), so every view says what devices get (the
/// baseline) and the rollout cannot be completed. `None` when nothing was staged or it was
/// already ended (a retry, another replica); a failure to write is logged: resolve never
/// offers a revoked release whatever the plan says.
async fn end_revoked_stage(
    state: &AppState,
    model: &ferry_shared::ModelName,
    list: &ferry_shared::trust::revocation::RevocationList,
    actor: &str,
) -> Option<RolloutPlan> {
    let plan = state.rollouts().get(model).cloned()?;
    let staged = plan.staged.clone().filter(|_| plan.cohort_is_live())?;
    let revoked = list.revokes(&staged)?;
    let change = ferry_shared::select::rollout::RolloutChange::Rollback {
        reason: Some(format!("{staged} was revoked: {}", revoked.reason)),
    };
    let at = crate::storage::revisions::now_text();
    let catalog = state.catalog();
    let mode = crate::plans::rollout::ChangeMode {
        dry_run: false,
        if_revision: Some(plan.revision),
    };
    match crate::plans::rollout::change(state.store(), &catalog, model, &change, (actor, &at), mode)
        .await
    {
        Ok((next, _)) => {
            tracing::warn!(%model, %staged, "the revoked staged release was rolled back");
            state.set_rollout(model, next.clone());
            Some(next)
        }
        Err(e) => {
            tracing::warn!(%model, %staged, "the revoked staged release was not rolled back: {e}");
            None
        }
    }
}
