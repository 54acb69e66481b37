//! Fleet operations over HTTP: rollouts, telemetry ingestion, health, the deny list, and the
//! checks that halt a rollout or deny a variant from what devices report.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use ferry_shared::ModelName;
use ferry_shared::resolve::Cohort;
use ferry_shared::rollout::{RolloutPlan, RolloutState};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::api::{AppState, read_body};
use crate::auth::{Scope, authorize};
use crate::catalog::Release;
use crate::error::ApiError;
use crate::revisions;
use crate::rollout::{self, ChangeRequest};
use crate::telemetry::DenyEntry;

fn now_text() -> String {
    OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn model_param(s: &str) -> Result<ModelName, ApiError> {
    s.parse()
        .map_err(|e: ferry_shared::NameError| ApiError::bad_request("invalid_name", e.to_string()))
}

/// The releases a device in `cohort` may get, in the order to try them.
///
/// Without a plan: every release, newest first. With one: a staged device tries the staged
/// release first; everyone then gets the baseline (or, if the device cannot use it, an older
/// release). Releases newer than the baseline that are not staged are not live.
pub fn releases_for(
    all: &[Arc<Release>],
    plan: Option<&RolloutPlan>,
    cohort: Cohort,
) -> Vec<Arc<Release>> {
    let Some(plan) = plan else {
        return all.to_vec();
    };
    let ceiling = plan.baseline.clone().or_else(|| {
        plan.staged.as_ref().and_then(|s| {
            all.iter()
                .map(|r| r.manifest.version.clone())
                .find(|v| v < s)
        })
    });
    let mut out: Vec<Arc<Release>> = Vec::new();
    if cohort == Cohort::Staged
        && let Some(staged) = &plan.staged
        && let Some(r) = all.iter().find(|r| &r.manifest.version == staged)
    {
        out.push(r.clone());
    }
    out.extend(
        all.iter()
            .filter(|r| ceiling.as_ref().is_some_and(|c| r.manifest.version <= *c))
            .filter(|r| Some(&r.manifest.version) != plan.staged.as_ref())
            .cloned(),
    );
    out
}

/// The common start of an admin view: the `read` scope and the model from the path.
fn read_view(req: &HttpRequest, state: &AppState, model: &str) -> Result<ModelName, ApiError> {
    authorize(req, &state.config.tokens, Scope::Read)?;
    model_param(model)
}

/// The common start of an admin change: the caller (with `scope`), the model from the path,
/// and the JSON body (at most 64 KiB) parsed as `T`, refusals coded `code`.
async fn admin_change<T: serde::de::DeserializeOwned>(
    req: &HttpRequest,
    state: &AppState,
    model: &str,
    payload: web::Payload,
    code: &'static str,
) -> Result<(crate::auth::Caller, ModelName, T), ApiError> {
    let caller = authorize(req, &state.config.tokens, Scope::Rollout)?;
    let model = model_param(model)?;
    let body = read_body(payload, 64 * 1024).await?;
    let change: T = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(code, format!("change: {e}")))?;
    Ok((caller, model, change))
}

/// `POST /v1/admin/models/{model}/rollout`.
pub async fn post_rollout(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (caller, model, change): (_, _, ChangeRequest) =
        admin_change(&req, &state, &model, payload, "rollout_invalid").await?;
    let catalog = state.catalog();
    let at = now_text();
    let plan = rollout::apply(&state.store, &model, |cur| {
        rollout::next_plan(cur, &change, &model, &catalog, &caller.name, &at)
    })
    .await?;
    tracing::info!(caller = caller.name, %model, action = plan.action, revision = plan.revision, "rollout changed");
    state.set_rollout(&model, plan.clone());
    Ok(HttpResponse::Ok().json(plan))
}

/// `GET /v1/admin/models/{model}/rollout`: the plan in force and its history.
pub async fn get_rollout(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let model = read_view(&req, &state, &model)?;
    let history = rollout::history(&state.store, &model).await?;
    let current = history.last().cloned();
    if let Some(p) = &current {
        state.set_rollout(&model, p.clone());
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "model": model,
        "current": current,
        "percent": current.as_ref().map(|p| ferry_shared::rollout::format_percent(p.basis_points)),
        "history": history,
    })))
}

#[derive(Debug, Deserialize)]
struct BatchShape {
    events: Vec<serde_json::Value>,
}

/// `POST /v1/telemetry`.
pub async fn post_telemetry(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let cfg = state.config.telemetry;
    let addr = req
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    if !state.telemetry.allow_address(&addr, &cfg) {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!(
                "more than {} telemetry requests a minute from {addr}",
                cfg.per_address_per_minute
            ),
        ));
    }
    let body = read_body(payload, cfg.max_body_bytes).await?;
    // Parsing and aggregating is CPU work: keep it off the event loops that serve resolve, and
    // on at most half the cores.
    let _permit = state
        .ingest_permits
        .acquire()
        .await
        .map_err(ApiError::internal)?;
    let worker = state.clone().into_inner();
    let (report, models) = web::block(move || -> Result<_, ApiError> {
        let batch: BatchShape = serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(
                "telemetry_malformed",
                format!("expected {{\"events\": [...]}}: {e}"),
            )
        })?;
        if batch.events.len() > cfg.max_events {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_many_events",
                format!(
                    "{} events; a batch holds at most {}",
                    batch.events.len(),
                    cfg.max_events
                ),
            ));
        }
        let report = worker
            .telemetry
            .ingest(&batch.events, OffsetDateTime::now_utc(), &cfg);
        let mut models: Vec<String> = batch
            .events
            .iter()
            .filter_map(|e| e.get("model").and_then(|m| m.as_str()).map(str::to_string))
            .collect();
        models.sort();
        models.dedup();
        Ok((report, models))
    })
    .await
    .map_err(ApiError::internal)??;
    state.metrics.inc(
        "ferry_telemetry_events_total",
        &[("outcome", "accepted")],
        report.accepted as u64,
    );
    state.metrics.inc(
        "ferry_telemetry_events_total",
        &[("outcome", "rejected")],
        report.rejected.len() as u64,
    );
    for m in models.into_iter().take(16) {
        if let Ok(model) = m.parse::<ModelName>()
            && state.telemetry.due(model.as_str(), &cfg)
        {
            evaluate(&state, &model).await;
        }
    }
    if state.telemetry.wants_flush(&cfg) {
        let s = state.clone().into_inner();
        actix_web::rt::spawn(async move { flush(&s).await });
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "accepted": report.accepted,
        "rejected": report.rejected,
    })))
}

/// Checks `model`'s aggregates: halts a staged release over its thresholds and denies
/// variants to device classes over the fallback threshold. Errors are logged, never returned:
/// telemetry must not fail because state could not be written (the next batch retries).
pub async fn evaluate(state: &AppState, model: &ModelName) {
    let plans = state.rollouts();
    if let Some(plan) = plans.get(model)
        && plan.state == RolloutState::Active
        && let Some(staged) = &plan.staged
    {
        let (loads, failures, fallbacks) = state
            .telemetry
            .release_totals(model.as_str(), &staged.to_string());
        let t = plan.thresholds;
        if loads >= t.min_samples && loads > 0 {
            let fr = failures as f64 / loads as f64;
            let fb = fallbacks as f64 / loads as f64;
            let why = match (t.max_failure_rate, t.max_fallback_rate) {
                (Some(max), _) if fr > max => Some(format!(
                    "load-failure rate {:.1}% of {staged} exceeds {:.1}% (n={loads})",
                    fr * 100.0,
                    max * 100.0
                )),
                (_, Some(max)) if fb > max => Some(format!(
                    "fallback rate {:.1}% of {staged} exceeds {:.1}% (n={loads})",
                    fb * 100.0,
                    max * 100.0
                )),
                _ => None,
            };
            if let Some(reason) = why {
                let at = now_text();
                let staged = staged.clone();
                let result = rollout::apply(&state.store, model, |cur| match cur {
                    Some(p)
                        if p.state == RolloutState::Active
                            && p.staged.as_ref() == Some(&staged) =>
                    {
                        Ok(RolloutPlan {
                            revision: p.revision + 1,
                            state: RolloutState::Halted,
                            action: "auto-halt".into(),
                            actor: "ferry".into(),
                            at: at.clone(),
                            reason: reason.clone(),
                            ..p.clone()
                        })
                    }
                    _ => Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "rollout_changed",
                        "the rollout changed meanwhile",
                    )),
                })
                .await;
                match result {
                    Ok(p) => {
                        tracing::warn!(%model, reason, "rollout halted automatically");
                        state.set_rollout(model, p);
                    }
                    Err(e) if e.code == "rollout_changed" => {}
                    Err(e) => tracing::error!(%model, "automatic halt could not be written: {e}"),
                }
            }
        }
    }
    let candidates = state
        .telemetry
        .deny_candidates(model.as_str(), &state.config.telemetry);
    if candidates.is_empty() {
        return;
    }
    let current = state.deny_lists().get(model).cloned().unwrap_or_default();
    let same = |a: &DenyEntry, b: &DenyEntry| {
        a.release == b.release && a.variant == b.variant && a.class == b.class && a.value == b.value
    };
    let fresh: Vec<DenyEntry> = candidates
        .into_iter()
        .filter(|c| !current.iter().any(|e| same(e, c)))
        .collect();
    if fresh.is_empty() {
        return;
    }
    let at = now_text();
    let result = revisions::append::<DenyList>(&state.store, &deny_prefix(model), |cur| {
        let mut entries = cur.map(|(_, l)| l.entries.clone()).unwrap_or_default();
        for c in &fresh {
            if !entries.iter().any(|e| same(e, c)) {
                entries.push(c.clone());
            }
        }
        Ok(DenyList {
            entries,
            action: "telemetry".into(),
            actor: "ferry".into(),
            at: at.clone(),
        })
    })
    .await;
    match result {
        Ok((_, list)) => {
            for c in &fresh {
                tracing::warn!(%model, "{} {}: {}", c.release, c.variant, c.reason());
            }
            state.set_deny(model, list.entries);
        }
        Err(e) => tracing::error!(%model, "deny list could not be written: {e}"),
    }
}

/// One revision of a model's deny list.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DenyList {
    /// The entries in force.
    pub entries: Vec<DenyEntry>,
    /// What changed (`telemetry`, `override`, `clear`, `deny`).
    pub action: String,
    /// Who.
    pub actor: String,
    /// When.
    pub at: String,
}

fn deny_prefix(model: &ModelName) -> String {
    format!("state/{model}/deny")
}

/// Loads the rollout plans and deny lists of `models` into memory.
pub async fn load_state(state: &AppState, models: Vec<ModelName>) -> Result<(), ApiError> {
    let plans = rollout::load_all(&state.store, models.iter()).await?;
    state.replace_rollouts(plans);
    for m in &models {
        if let Some((_, list)) =
            revisions::latest::<DenyList>(&state.store, &deny_prefix(m)).await?
        {
            state.set_deny(m, list.entries);
        }
    }
    Ok(())
}

/// `GET /v1/admin/models/{model}/health`.
pub async fn get_health(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let model = read_view(&req, &state, &model)?;
    let mut h = state.telemetry.health(model.as_str());
    h["model"] = serde_json::json!(model);
    h["rollout"] = serde_json::json!(state.rollouts().get(&model));
    h["deny"] = serde_json::json!(state.deny_lists().get(&model).cloned().unwrap_or_default());
    Ok(HttpResponse::Ok().json(h))
}

/// `GET /v1/admin/models/{model}/deny`.
pub async fn get_deny(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let model = read_view(&req, &state, &model)?;
    let history: Vec<DenyList> = revisions::all::<DenyList>(&state.store, &deny_prefix(&model))
        .await?
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "model": model,
        "entries": history.last().map(|l| l.entries.clone()).unwrap_or_default(),
        "history": history,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DenyChange {
    action: String,
    release: String,
    variant: String,
    class: String,
    value: String,
}

/// `POST /v1/admin/models/{model}/deny`: `override` (allow despite telemetry), `clear`
/// (remove the entry), or `deny` (add one by hand).
pub async fn post_deny(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (caller, model, change): (_, _, DenyChange) =
        admin_change(&req, &state, &model, payload, "deny_invalid").await?;
    if !matches!(change.class.as_str(), "soc" | "device_model") {
        return Err(ApiError::bad_request(
            "deny_invalid",
            "class must be soc or device_model",
        ));
    }
    if [&change.release, &change.variant, &change.value]
        .iter()
        .any(|s| s.is_empty() || s.len() > 128)
    {
        return Err(ApiError::bad_request(
            "deny_invalid",
            "release, variant and value are 1 to 128 bytes",
        ));
    }
    if !matches!(change.action.as_str(), "override" | "clear" | "deny") {
        return Err(ApiError::bad_request(
            "deny_invalid",
            "action must be override, clear or deny",
        ));
    }
    let at = now_text();
    let (_, list) = revisions::append::<DenyList>(&state.store, &deny_prefix(&model), |cur| {
        let mut entries = cur.map(|(_, l)| l.entries.clone()).unwrap_or_default();
        let pos = entries.iter().position(|e| {
            e.release == change.release
                && e.variant == change.variant
                && e.class == change.class
                && e.value == change.value
        });
        match (change.action.as_str(), pos) {
            ("clear", Some(i)) => {
                entries.remove(i);
            }
            ("clear", None) => return Err(ApiError::not_found("deny_not_found", "no such entry")),
            ("override", Some(i)) => entries[i].state = "allow".into(),
            ("deny", Some(i)) => entries[i].state = "deny".into(),
            (action, None) => entries.push(DenyEntry {
                release: change.release.clone(),
                variant: change.variant.clone(),
                class: change.class.clone(),
                value: change.value.clone(),
                fallback_rate: 0.0,
                samples: 0,
                source: "ops".into(),
                state: if action == "override" {
                    "allow".into()
                } else {
                    "deny".into()
                },
            }),
            _ => {}
        }
        Ok(DenyList {
            entries,
            action: change.action.clone(),
            actor: caller.name.clone(),
            at: at.clone(),
        })
    })
    .await?;
    state.set_deny(&model, list.entries.clone());
    Ok(HttpResponse::Ok().json(serde_json::json!({ "model": model, "entries": list.entries })))
}

/// Flushes buffered raw events and rollups to the store.
pub async fn flush(state: &AppState) {
    use object_store::{ObjectStoreExt as _, PutPayload};
    let lines = state.telemetry.take_raw();
    if !lines.is_empty() {
        let now = OffsetDateTime::now_utc();
        let key = object_store::path::Path::from(format!(
            "telemetry/raw/date={:04}-{:02}-{:02}/hour={:02}/{}-{}.ndjson",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            state.node,
            now.unix_timestamp_nanos()
        ));
        let mut text = lines.join("\n");
        text.push('\n');
        if let Err(e) = state
            .store
            .put(&key, PutPayload::from(text.into_bytes()))
            .await
        {
            tracing::warn!(
                "telemetry flush failed, keeping {} events: {e}",
                lines.len()
            );
            state.telemetry.restore_raw(lines);
        }
    }
    let models: Vec<ModelName> = state.catalog().models().map(|(m, _)| m.clone()).collect();
    let mut rollups = BTreeMap::new();
    for m in models {
        let h = state.telemetry.health(m.as_str());
        if h["releases"].as_array().is_some_and(|r| !r.is_empty()) {
            rollups.insert(m, h);
        }
    }
    for (m, h) in rollups {
        let key =
            object_store::path::Path::from(format!("telemetry/rollup/{m}/{}.json", state.node));
        if let Ok(bytes) = serde_json::to_vec(&h) {
            let _ = state.store.put(&key, PutPayload::from(bytes)).await;
        }
    }
}
