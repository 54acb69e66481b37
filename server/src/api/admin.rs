//! Admin catalog endpoints: publishing a release and the catalog views.

use actix_web::{HttpRequest, HttpResponse, web};
use std::sync::Arc;

use ferry_shared::errors::ErrorCode;
use ferry_shared::select::rollout::{RolloutPlan, RolloutState, format_percent};
use semver::Version;

use crate::api::AppState;
use crate::api::auth::authorize;
use crate::api::error::ApiError;
use crate::api::extract::{parse_model, read_body, require_object};
use crate::release::publish::{Lifecycle, publish_release};
use crate::storage::catalog::Release;
use crate::tokens::Scope;

pub(crate) async fn post_release(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let caller = authorize(&req, &state.config().tokens, Scope::Publish)?;
    let model = parse_model(&model)?;
    let body = read_body(
        payload,
        &state.config().limits,
        state.config().limits.max_json_bytes,
    )
    .await?;
    require_object(&body, ErrorCode::EnvelopeMalformed, "release envelope")?;
    // Signed by a key this replica does not know: another replica may have taken a newer
    // keyring that trusts it; adopt what the store holds before judging the signature.
    if let Ok(env) = serde_json::from_slice::<ferry_shared::trust::dsse::Envelope>(&body) {
        let ring = state.keys().release_ring.clone();
        let known = env.signatures.iter().any(|s| {
            s.keyid
                .parse::<ferry_shared::KeyId>()
                .is_ok_and(|id| ring.get(&id).is_some())
        });
        if !known {
            crate::fleet::refresh_keys(state.fleet()).await;
        }
    }
    let catalog = state.catalog();
    let check = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k == "check")
        .map(|(_, v)| v)
        .collect::<Vec<_>>();
    match check.as_slice() {
        [] => {}
        [v] if v == "false" => {}
        [v] if v == "true" => {
            return check_release(&state, &catalog, &model, &body, &caller.name).await;
        }
        _ => {
            return Err(ApiError::new(
                ErrorCode::RequestInvalid,
                "check must be given once, as true or false",
            ));
        }
    }
    let lifecycle = Lifecycle {
        catalog: &catalog,
        key_release: state.key_service().held(),
        goes_live: state.config().publish_goes_live,
        actor: &caller.name,
    };
    let outcome = publish_release(
        state.store(),
        &state.keys().release_ring,
        &model,
        &body,
        lifecycle,
    )
    .await;
    let label = match &outcome {
        Ok(_) => "ok",
        Err(e) => e.code().as_str(),
    };
    state.metrics().publish(label);
    let (release, plan) = outcome?;
    tracing::info!(caller = caller.name, model = %release.manifest.model, version = %release.manifest.version, live = plan.is_some(), "release published");
    let mut view = release_view(&release);
    // Whether devices get it now (a model's first release), or only once a rollout stages it.
    view["live"] = serde_json::json!(plan.is_some());
    state.add_release(release);
    // A model new to this replica's catalog (its first release, or the first one loadable
    // after a key rotation) gets its revocation list in force before its first resolve.
    if state.revocations().get(&model).is_none() {
        match crate::plans::revocation::load(state.store(), &state.keys().release_ring, &model)
            .await
        {
            Ok(Some((list, env, signed))) => {
                state.views().set_revocations(list, signed.then_some(env))
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(%model, "revocation list not loaded: {e}"),
        }
    }
    if let Some(p) = plan {
        state.set_rollout(&model, p);
    }
    Ok(HttpResponse::Created().json(view))
}

/// `POST /v1/admin/models/{model}/releases?check=true`: what publishing this release would
/// meet, before any blob is uploaded: the signature against the trusted release keys, the
/// manifest, the caller's scope (checked by the caller), and whether the version exists.
/// `state` is `new` or `identical` (the same release, perhaps signed again); a different
/// release under a published version is `409 release_exists`.
async fn check_release(
    state: &AppState,
    catalog: &crate::storage::catalog::Catalog,
    model: &ferry_shared::ModelName,
    body: &[u8],
    caller: &str,
) -> Result<HttpResponse, ApiError> {
    let (envelope, manifest) =
        crate::release::publish::verify_release(&state.keys().release_ring, model, body)?;
    let differs = || {
        ApiError::new(
            ErrorCode::ReleaseExists,
            format!(
                "{model} {} is already published with different content; releases are immutable, publish a new version",
                manifest.version
            ),
        )
    };
    let same_as = |payload: &str| {
        payload == envelope.payload
            || base64::Engine::decode(&base64::engine::general_purpose::STANDARD, payload)
                .ok()
                .and_then(|b| ferry_shared::manifest::ReleaseManifest::from_json(&b).ok())
                .is_some_and(|m| m.same_content(&manifest))
    };
    let status = match catalog.release_named(model, &manifest.version.to_string()) {
        Some(r) if same_as(&r.envelope.payload) => "identical",
        Some(_) => return Err(differs()),
        // Not in this replica's catalog: the store decides (published through another
        // replica since the last refresh, or signed by a release key rotated out since).
        None => {
            match crate::storage::catalog::stored_envelope(state.store(), model, &manifest.version)
                .await?
            {
                None => "new",
                Some(Some(stored))
                    if ferry_shared::manifest::verify_release_envelope(
                        &stored,
                        &state.keys().release_ring,
                    )
                    .is_err() =>
                {
                    return Err(ApiError::new(
                        ErrorCode::ReleaseExists,
                        format!(
                            "{model} {} is stored, signed by a release key this server no longer trusts (rotated out), so it is not served; releases are immutable, publish a new version",
                            manifest.version
                        ),
                    ));
                }
                Some(Some(stored)) if same_as(&stored.payload) => "identical",
                Some(_) => return Err(differs()),
            }
        }
    };
    let signers: Vec<&str> = envelope
        .signatures
        .iter()
        .map(|s| s.keyid.as_str())
        .collect();
    tracing::info!(caller, %model, version = %manifest.version, status, "release checked");
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "model": model,
        "version": manifest.version.to_string(),
        "state": status,
        "signers": signers,
    })))
}

pub(crate) fn release_view(r: &Release) -> serde_json::Value {
    serde_json::json!({
        "model": r.manifest.model,
        "version": r.manifest.version.to_string(),
        "notes": r.manifest.notes,
        "created": r.manifest.created.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
        "variants": r.manifest.variants,
        "evaluation": r.manifest.evaluation,
        "inspection": r.inspection,
        "envelope": r.envelope,
        "envelope_sha256": r.envelope_sha256.to_hex(),
    })
}

pub(crate) async fn list_models(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config().tokens, Scope::Read)?;
    let catalog = state.catalog();
    let rollouts = state.rollouts();
    let deny = state.deny_lists();
    let models: Vec<serde_json::Value> = catalog
        .models()
        .map(|(m, versions)| {
            let plan = rollouts.get(m);
            let releases = catalog.releases_newest_first(m);
            let served = served_baseline(
                plan,
                &releases,
                state.revocations().get(m).map(|r| &*r.list),
            );
            serde_json::json!({
                "model": m,
                "live": served.map(|v| v.to_string()),
                "releases": versions.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
                "latest": versions.last().map(|v| v.to_string()),
                "baseline": plan.and_then(|p| p.baseline.as_ref()).map(ToString::to_string),
                "staged": plan.and_then(|p| p.staged.as_ref()).map(ToString::to_string),
                "percent": plan
                    .filter(|p| p.staged.is_some())
                    .map(|p| format_percent(p.basis_points)),
                "rollout_state": plan.map(|p| p.state),
                "rollout_action": plan.map(|p| p.action.clone()),
                "ramp_step": plan.and_then(|p| p.ramp.as_ref()).map(|r| r.step),
                "deny_entries": deny.get(m).map_or(0, |d| d.entries.len()),
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
    authorize(&req, &state.config().tokens, Scope::Read)?;
    let model = parse_model(&model)?;
    let releases = state.catalog().releases_newest_first(&model);
    if releases.is_empty() {
        return Err(ApiError::new(
            ErrorCode::ModelNotFound,
            format!("no release of {model} is published"),
        ));
    }
    let plan = state.rollouts().get(&model).cloned();
    let revoked = state.revocations().get(&model).cloned();
    // The runtimes devices reported, and what each release's variants need of them.
    let census = state.runtime_census(&model).await;
    // Per release, what a device updating to it downloads for each variant: from the live
    // release (what devices run) for a newer one, else from the release before it.
    let live = served_baseline(plan.as_ref(), &releases, revoked.as_ref().map(|r| &*r.list));
    let live_release = releases
        .iter()
        .find(|r| Some(&r.manifest.version) == live.as_ref());
    let mut updates = Vec::with_capacity(releases.len());
    for (i, r) in releases.iter().enumerate() {
        let from = match live_release {
            Some(l) if r.manifest.version > l.manifest.version => Some(l),
            _ => releases.get(i + 1),
        };
        updates.push(match from {
            Some(from) => Some((
                from.manifest.version.to_string(),
                crate::release::update_size::update_bytes(
                    state.store(),
                    &r.manifest,
                    &from.manifest,
                )
                .await,
            )),
            None => None,
        });
    }
    let list: Vec<serde_json::Value> = releases
        .iter()
        .zip(&updates)
        .map(|(r, update)| {
            let lifecycle = release_state(&r.manifest.version, plan.as_ref(), &releases);
            let shown = match revoked
                .as_ref()
                .and_then(|x| x.list.revokes(&r.manifest.version))
            {
                Some(_) => format!("revoked (was {lifecycle})"),
                // The release the baseline cohort really gets when the baseline is revoked.
                None if live.as_ref() == Some(&r.manifest.version) && lifecycle == "retired" => {
                    "live (the baseline is revoked)".to_string()
                }
                None => lifecycle,
            };
            let mut row = serde_json::json!({
                "version": r.manifest.version.to_string(),
                "state": shown,
                "notes": r.manifest.notes,
                "variants": r.manifest.variants.iter().map(|v| {
                    let mut x = serde_json::json!({
                        "id": v.id, "delegate": v.delegate, "quant": v.quant, "size": v.size,
                        "download_bytes": v.download_bytes(),
                    });
                    if let Some((from, u)) = update.as_ref()
                        && let Some(n) = u.get(v.id.as_str())
                    {
                        x["update_bytes"] = serde_json::json!(n);
                        x["update_from"] = serde_json::json!(from);
                    }
                    x
                }).collect::<Vec<_>>(),
            });
            if !census.is_empty() {
                row["runtimes"] = crate::fleet::census::runtimes::coverage(&census, &r.manifest);
            }
            if let Some(e) = &r.manifest.evaluation {
                row["evaluation"] = evaluation_summary(e);
            }
            row
        })
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "model": model, "releases": list })))
}

/// A release's signed evaluation in short, for lists: the metric, reference and sample count,
/// the variants that failed their bound and those not evaluated, the override's reason, and
/// per variant its value, drop and verdict.
fn evaluation_summary(e: &ferry_shared::manifest::Evaluation) -> serde_json::Value {
    let ids = |f: &dyn Fn(&ferry_shared::manifest::EvaluationResult) -> bool| -> Vec<&str> {
        e.results
            .values()
            .filter(|r| f(r))
            .map(|r| r.id.as_str())
            .collect()
    };
    serde_json::json!({
        "metric": e.metric,
        "reference": e.reference,
        "samples": e.samples,
        "failed": ids(&|r| r.passed == Some(false)),
        "not_evaluated": ids(&|r| !r.evaluated),
        "override": e.override_.as_ref().map(|o| o.reason.as_str()),
        "results": e.results.iter().map(|(id, r)| (id.clone(), serde_json::json!({
            "value": r.value, "drop": r.drop, "passed": r.passed,
        }))).collect::<serde_json::Map<_, _>>(),
    })
}

/// The release the baseline cohort really gets: the baseline (the newest release without a
/// plan), or when that is revoked, the newest release older than it that is not.
fn served_baseline(
    plan: Option<&RolloutPlan>,
    newest_first: &[Arc<Release>],
    revoked: Option<&ferry_shared::trust::revocation::RevocationList>,
) -> Option<Version> {
    let top = match plan {
        Some(p) => p.baseline.clone()?,
        None => newest_first.first()?.manifest.version.clone(),
    };
    newest_first
        .iter()
        .map(|r| &r.manifest.version)
        .filter(|v| **v <= top)
        .find(|v| revoked.is_none_or(|l| l.revokes(v).is_none()))
        .cloned()
}

/// A release's place in the lifecycle: `live` (the baseline), `staged 5%` (with `paused` or
/// `halted` when so), `published` (newer than the baseline, not staged: no device gets it) or
/// `retired` (older than the baseline: served only to devices that no newer live release fits).
fn release_state(v: &Version, plan: Option<&RolloutPlan>, all: &[Arc<Release>]) -> String {
    let baseline = match plan {
        Some(p) => p.baseline.clone(),
        None => all.first().map(|r| r.manifest.version.clone()),
    };
    if let Some(p) = plan
        && p.staged.as_ref() == Some(v)
        && p.state != RolloutState::Completed
    {
        let pct = format_percent(p.basis_points);
        // Halted: no device gets it (but pinned test devices), whatever share it had.
        return match p.state {
            RolloutState::Active => format!("staged {pct}%"),
            RolloutState::Halted if p.action == "rollback" => {
                format!("rolled back (was staged {pct}%)")
            }
            RolloutState::Halted => format!("halted (was staged {pct}%)"),
            other => format!("staged {pct}% ({})", other.as_str()),
        };
    }
    match &baseline {
        Some(b) if b == v => "live".into(),
        Some(b) if v < b => "retired".into(),
        _ => "published".into(),
    }
}

pub(crate) async fn get_release(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config().tokens, Scope::Read)?;
    let (model, version) = path.into_inner();
    let (model, version, release) =
        crate::api::extract::published_release(&state, &model, &version)?;
    let mut view = release_view(&release);
    // The inspector's report is read when asked for (the catalog does not hold it: a cold
    // start reads one file per release, not two).
    if release.inspection.is_none() {
        use object_store::ObjectStoreExt as _;
        let key = crate::storage::StorageKey::inspection(&model, &version);
        match state.store().get(&key).await {
            Ok(got) => {
                let bytes = got
                    .bytes()
                    .await
                    .map_err(|e| ApiError::from(crate::storage::StoreError::from(e)))?;
                view["inspection"] = serde_json::from_slice(&bytes).unwrap_or_default();
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(crate::storage::StoreError::from(e).into()),
        }
    }
    Ok(HttpResponse::Ok().json(view))
}

/// `POST /v1/admin/keyring` (scope `publish`): the next keyring version, signed offline by
/// the root keys (`ferry keys rotate` writes it, `ferry keys push` sends it). It is checked
/// like devices check it, must keep this server's online key, and is stored for every replica
/// with an audit record; 201 when it came into force now, 200 when it already was.
pub async fn post_keyring(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let caller = authorize(&req, &state.config().tokens, Scope::Publish)?;
    let body = read_body(payload, &state.config().limits, 256 * 1024).await?;
    require_object(&body, ErrorCode::KeyringInvalid, "keyring envelope")?;
    let before = state.keys().version;
    let submitted = crate::keyring::submit(&state.fleet().ring, &body, &caller.name).await;
    if state.keys().version != before {
        // Read the catalog again under the keys now in force, as a restart would.
        crate::fleet::reload_under_keys(state.fleet()).await;
    }
    let (version, new) = submitted?;
    let status = if new {
        actix_web::http::StatusCode::CREATED
    } else {
        actix_web::http::StatusCode::OK
    };
    // The keys, not the history: reading the audit records needs the read scope.
    let mut v = keyring_view(&state).await?;
    if let Some(o) = v.as_object_mut() {
        o.remove("history");
    }
    v["adopted"] = serde_json::json!(version);
    v["new"] = serde_json::json!(new);
    Ok(HttpResponse::build(status).json(v))
}

/// `GET /v1/admin/keyring` (scope `read`): the keyring version in force on this replica, its
/// release and online keys, and the audit records of versions taken through the API.
pub async fn get_keyring(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config().tokens, Scope::Read)?;
    Ok(HttpResponse::Ok().json(keyring_view(&state).await?))
}

async fn keyring_view(state: &AppState) -> Result<serde_json::Value, ApiError> {
    let view = state.keys();
    let keys: Vec<serde_json::Value> = view
        .state
        .keys()
        .iter()
        .map(|k| serde_json::json!({"role": k.key.role, "keyid": k.key.keyid, "expires_at": k.expires_at.and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())}))
        .collect();
    let history = crate::keyring::audit(state.store(), view.version)
        .await
        .map_err(ApiError::unavailable)?;
    Ok(serde_json::json!({
        "version": view.version,
        "keys": keys,
        "history": history,
    }))
}
