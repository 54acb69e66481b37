//! Fleet endpoints: rollouts, telemetry ingestion and the deny list (health views are in
//! `health.rs`).

use actix_web::{HttpRequest, HttpResponse, web};
use ferry_shared::ModelName;
use ferry_shared::errors::ErrorCode;
use ferry_shared::select::deny::{DenyAction, DenyChange};
use ferry_shared::select::rollout::{Preview, RolloutChange, RolloutPlan};
use serde::Deserialize;
use time::OffsetDateTime;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::{admin_change, read_body, read_view, require_object};
use crate::fleet::persist::flush::flush;
use crate::plans::{deny, rollout};
use crate::storage::revisions::now_text;

/// `POST /v1/admin/models/{model}/rollout`.
pub async fn post_rollout(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
    query: Result<web::Query<ChangeQuery>, actix_web::Error>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (caller, model, change): (_, _, RolloutChange) =
        admin_change(&req, &state, &model, payload, ErrorCode::RolloutInvalid).await?;
    let query = query
        .map_err(|e| ApiError::new(ErrorCode::RequestInvalid, format!("bad query string: {e}")))?;
    // A release published through another replica a moment ago.
    if let RolloutChange::Start { release, .. } | RolloutChange::Pin { release, .. } = &change {
        crate::api::extract::catch_up(&state, &model, std::slice::from_ref(release)).await;
    }
    if let RolloutChange::Start { release, .. } | RolloutChange::Pin { release, .. } = &change
        && let Some(r) = state
            .revocations()
            .get(&model)
            .and_then(|r| r.list.revokes(release).cloned())
    {
        return Err(ApiError::new(
            ErrorCode::RolloutInvalid,
            format!(
                "{model} {release} is revoked ({}); no device may get it",
                r.reason
            ),
        ));
    }
    // A revoked staged release moves no further forward (its stage ended when it was revoked).
    if let RolloutChange::Set { .. } | RolloutChange::Resume { .. } | RolloutChange::Complete { .. } =
        &change
        && let Some(staged) = state.rollouts().get(&model).and_then(|p| p.staged.clone())
        && let Some(r) = state
            .revocations()
            .get(&model)
            .and_then(|r| r.list.revokes(&staged).cloned())
    {
        return Err(ApiError::new(
            ErrorCode::RolloutInvalid,
            format!(
                "{model} {staged} is revoked ({}); no device may get it: start a newer release \
                 instead",
                r.reason
            ),
        ));
    }
    let catalog = state.catalog();
    let at = now_text();
    // Before a ramp to a release: which of the fleet's reported runtimes can run it.
    let runtimes = match &change {
        RolloutChange::Start { release, .. } => {
            match catalog.release_named(&model, &release.to_string()) {
                Some(r) => {
                    let census = state.runtime_census(&model).await;
                    let coverage = crate::fleet::census::runtimes::coverage(&census, &r.manifest);
                    let warnings = crate::fleet::census::runtimes::warnings(&coverage, &r.manifest);
                    (!census.is_empty()).then_some((coverage, warnings))
                }
                None => None,
            }
        }
        _ => None,
    };
    let answer = |plan: &RolloutPlan, preview: &Preview, dry_run: bool| {
        let mut v = serde_json::to_value(plan).map_err(ApiError::internal)?;
        v["preview"] = serde_json::to_value(preview).map_err(ApiError::internal)?;
        v["dry_run"] = serde_json::Value::Bool(dry_run);
        let mut all_warnings: Vec<String> = Vec::new();
        if let Some((coverage, warnings)) = &runtimes {
            v["runtimes"] = coverage.clone();
            all_warnings.extend(warnings.iter().cloned());
        }
        // The way back is never refused for the device classes it leaves without a variant
        // (nor a move forward given allow_strand): it says which.
        if !preview.stranded.is_empty() {
            all_warnings.push(format!(
                "{} device class(es) are left with no variant: {}{}",
                preview.stranded.len(),
                preview.stranded.join("; "),
                stranded_devices(&state, &model, preview)
            ));
        }
        if runtimes.is_some() || !all_warnings.is_empty() {
            v["warnings"] = serde_json::json!(all_warnings);
        }
        Ok::<_, ApiError>(HttpResponse::Ok().json(v))
    };
    let (plan, preview) = rollout::change(
        state.store(),
        &catalog,
        &model,
        &change,
        (&caller.name, &at),
        rollout::ChangeMode {
            dry_run: query.dry_run,
            if_revision: query.if_revision,
        },
    )
    .await?;
    if query.dry_run {
        return answer(&plan, &preview, true);
    }
    tracing::info!(caller = caller.name, %model, action = plan.action, revision = plan.revision, share_changing = preview.share_changing, "rollout changed");
    state.set_rollout(&model, plan.clone());
    answer(&plan, &preview, false)
}

/// How many of the fleet's devices (with receipts, all time) reported loading what the
/// stranded classes get today, on their platforms: the devices a change leaves without a
/// variant, as far as telemetry knows them.
fn stranded_devices(
    state: &AppState,
    model: &ferry_shared::ModelName,
    preview: &Preview,
) -> String {
    let fleet = state.telemetry().fleet(model.as_str());
    let mut counted = std::collections::BTreeSet::new();
    let mut devices = 0u64;
    for s in &preview.stranded_from {
        if !counted.insert((&s.platform, &s.release, &s.variant)) {
            continue;
        }
        devices += fleet
            .models
            .get(model.as_str())
            .and_then(|r| r.get(&s.release))
            .and_then(|v| v.get(&s.variant))
            .and_then(|c| c.by_platform.get(&s.platform))
            .map_or(0, |c| c.devices.estimate() as u64);
    }
    format!(" ({devices} device(s) in the fleet reported loading what those classes get today)")
}

/// Query of a rollout change: `?dry_run=true` computes and previews without writing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeQuery {
    /// Preview only.
    #[serde(default)]
    pub dry_run: bool,
    /// Change only if the plan in force is this revision (409 rollout_changed otherwise).
    #[serde(default)]
    pub if_revision: Option<u64>,
}

/// Query of the rollout view: `?limit=N` newest revisions of the history (default 100).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// How many of the newest revisions to list: any non-negative integer, clamped to 1 to
    /// 10,000 (one too large for a number is clamped too, as the document promises).
    pub limit: Option<String>,
}

/// `limit` as a count: digits only (saturating), else `None`.
fn history_limit(text: &str) -> Option<usize> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.parse::<usize>().unwrap_or(usize::MAX))
}

/// `GET /v1/admin/models/{model}/rollout`: the plan in force and its newest history.
pub async fn get_rollout(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
    query: Result<web::Query<HistoryQuery>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    let model = read_view(&req, &state, &model).await?;
    let limit = match query
        .map_err(|e| ApiError::new(ErrorCode::RequestInvalid, format!("bad query string: {e}")))?
        .into_inner()
        .limit
    {
        None => 100,
        Some(text) => history_limit(&text).ok_or_else(|| {
            ApiError::new(
                ErrorCode::RequestInvalid,
                format!(
                    "limit must be a non-negative integer, not {:?}",
                    text.chars().take(64).collect::<String>()
                ),
            )
        })?,
    }
    .clamp(1, 10_000);
    let mut history = rollout::history(state.store(), &model).await?;
    let total = history.len();
    history.drain(..total.saturating_sub(limit));
    let current = history.last().cloned();
    if let Some(p) = &current {
        state.set_rollout(&model, p.clone());
    }
    let ramp = current.as_ref().and_then(|p| {
        let r = p.ramp.as_ref()?;
        let (verdict, health) = crate::fleet::actions::ramp::status(state.fleet(), &model, p);
        Some(serde_json::json!({
            "step": r.step + 1,
            "steps": r.steps.iter().map(|b| ferry_shared::select::rollout::format_percent(*b)).collect::<Vec<_>>(),
            "every_secs": r.every_secs,
            "step_started": r.step_started,
            "next": r.next().map(ferry_shared::select::rollout::format_percent),
            "now": verdict,
            "step_health": health,
        }))
    });
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "model": model,
        "current": current,
        "percent": current.as_ref().map(|p| ferry_shared::select::rollout::format_percent(p.basis_points)),
        "ramp": ramp,
        "history_total": total,
        "history": history,
    })))
}

#[derive(Debug, Deserialize)]
pub(crate) struct BatchShape<'a> {
    /// Each event's JSON text, borrowed from the body: parsed one by one, so that one bad
    /// event is refused alone.
    #[serde(borrow)]
    pub(crate) events: Vec<&'a serde_json::value::RawValue>,
}

/// A telemetry batch's events (each one's JSON text), within `max_events`: what the origin and a
/// site mirror both read before they look at any event.
pub(crate) fn read_batch(body: &[u8], max_events: usize) -> Result<BatchShape<'_>, ApiError> {
    // The envelope is an object (no client sends an array, and the document allows none).
    require_object(
        body,
        ErrorCode::TelemetryMalformed,
        "expected {\"events\": [...]}",
    )?;
    let batch: BatchShape = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            ErrorCode::TelemetryMalformed,
            format!("expected {{\"events\": [...]}}: {e}"),
        )
    })?;
    if batch.events.len() > max_events {
        return Err(ApiError::new(
            ErrorCode::TooManyEvents,
            format!(
                "{} events; a batch holds at most {max_events}",
                batch.events.len()
            ),
        ));
    }
    Ok(batch)
}

/// `POST /v1/telemetry`.
pub async fn post_telemetry(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let cfg = state.config().telemetry;
    let addr = state.client_ip(&req);
    if !state.telemetry().allow_address(addr, &cfg) {
        return Err(ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "more than {} telemetry requests a minute from {}, or too many senders at once",
                cfg.per_address_per_minute,
                addr.map_or_else(|| "this address".into(), |a| a.to_string())
            ),
        ));
    }
    let body = read_body(payload, &state.config().limits, cfg.max_body_bytes).await?;
    // Parsing and aggregating is CPU work: keep it off the event loops that serve resolve, on
    // at most half the cores, at a lower priority (api/ingest_pool.rs).
    let _permit = state
        .ingest_permits()
        .acquire()
        .await
        .map_err(ApiError::internal)?;
    let worker = state.clone().into_inner();
    let report = state
        .ingest_pool()
        .run(move || -> Result<_, ApiError> {
            let batch = read_batch(&body, cfg.max_events)?;
            let receipts = worker.receipts().clone();
            let catalog = worker.catalog();
            // A valid receipt proves some replica answered for that release (this one may not
            // have read the catalog since it was published).
            let known = |e: &ferry_shared::wire::telemetry::TelemetryEvent| {
                known_target(&catalog, e)
                    .or_else(|m| if receipts.verifies(e) { Ok(()) } else { Err(m) })
            };
            let (report, accepted) = worker.telemetry().ingest(
                &batch.events.iter().map(|e| e.get()).collect::<Vec<_>>(),
                OffsetDateTime::now_utc(),
                &cfg,
                &known,
                &|e| receipts.verifies(e),
                addr,
            );
            Ok((report, accepted))
        })
        .await
        .ok_or_else(|| ApiError::internal("the telemetry batch could not be read"))??;
    let (report, accepted) = report;
    // Receipted events that weigh in vouch for the name of the SDK that sent them.
    if report.weighed
        && let Some(sdk) = ferry_shared::wire::protocol::Sdk::from_header(
            req.headers()
                .get(ferry_shared::wire::protocol::SDK_HEADER)
                .map(actix_web::http::header::HeaderValue::as_bytes),
        )
    {
        state.telemetry().vouch(&sdk.header_value(), addr);
    }
    for a in accepted
        .events
        .iter()
        .filter(|a| !a.event.sources.is_empty())
    {
        (state.metrics().sources).report(&a.event.sources, &state.config().sources);
    }
    // Accepted means durable: answered only once the journal holds the batch (then counted).
    if !accepted.events.is_empty() {
        match state.fleet().journal.get() {
            Some(journal) => journal.commit(accepted).await.map_err(|why| {
                ApiError::new(
                    ErrorCode::StorageUnavailable,
                    format!("{why}; nothing was kept: send the events again"),
                )
            })?,
            None => state.telemetry().apply(accepted, 0, &cfg),
        }
    }
    state.metrics().telemetry(
        report.accepted as u64,
        report.rejected.len() as u64,
        report.unweighed as u64,
    );
    if !report.unknown_fields.is_empty() {
        state
            .metrics()
            .protocol
            .unknown_fields("telemetry", &report.unknown_fields);
    }
    for m in &report.counted_models {
        if let Ok(model) = m.parse::<ModelName>()
            && state.telemetry().due(model.as_str(), &cfg)
        {
            state.evaluations().request(model);
        }
    }
    if state.telemetry().outbox().wants_flush(&cfg) {
        let fleet = state.fleet().clone();
        actix_web::rt::spawn(async move { flush(&fleet).await });
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "accepted": report.accepted,
        "unverified": report.unverified,
        "rejected": report.rejected,
        "ignored": report.ignored,
    })))
}

/// Refuses an event about a model, release or variant that is not published (such events
/// would only create state). Revoked releases are still published: their devices report.
fn known_target(
    catalog: &crate::storage::catalog::Catalog,
    e: &ferry_shared::wire::telemetry::TelemetryEvent,
) -> Result<(), String> {
    let model: ModelName = e.model.parse().map_err(|err| format!("model: {err}"))?;
    if !catalog.has_model(&model) {
        return Err(format!("{model} is not a published model"));
    }
    if e.release.is_empty() {
        // Without a release no variant can be checked: none may be named.
        if !e.variant.is_empty() || e.to_variant.as_deref().is_some_and(|t| !t.is_empty()) {
            return Err("an event that names a variant must name its release".into());
        }
        return Ok(());
    }
    let release = catalog
        .release_named(&model, &e.release)
        .ok_or_else(|| format!("{model} {} is not published", e.release))?;
    for id in std::iter::once(e.variant.as_str()).chain(e.to_variant.as_deref()) {
        if !id.is_empty() && release.manifest.variant_named(id).is_none() {
            return Err(format!("{model} {} has no variant {id:?}", e.release));
        }
    }
    Ok(())
}

/// `GET /v1/admin/models/{model}/deny`.
pub async fn get_deny(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let model = read_view(&req, &state, &model).await?;
    let history = deny::history(state.store(), &model).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "model": model,
        "entries": history.last().map(|l| l.entries.clone()).unwrap_or_default(),
        "history": history,
    })))
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
        admin_change(&req, &state, &model, payload, ErrorCode::DenyInvalid).await?;
    if !req.query_string().is_empty() {
        // No preview here (`?dry_run=true` on a rollout): a parameter the server would ignore
        // must not let a caller believe nothing changed.
        return Err(ApiError::new(
            ErrorCode::DenyInvalid,
            "a deny change takes no query parameters (deny changes have no dry run)",
        ));
    }
    if change.action == DenyAction::Deny {
        // A hand-made entry must name a real variant: a typo would deny nothing, silently.
        let catalog = state.catalog();
        let release = catalog
            .release_named(&model, &change.release)
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::ReleaseNotFound,
                    format!(
                        "{model} {} is not published",
                        change.release.chars().take(64).collect::<String>()
                    ),
                )
            })?;
        if release.manifest.variant_named(&change.variant).is_none() {
            let ids: Vec<&str> = release
                .manifest
                .variants
                .iter()
                .map(|v| v.id.as_str())
                .collect();
            return Err(ApiError::new(
                ErrorCode::DenyInvalid,
                format!(
                    "{model} {} has no variant {:?}; it has {}",
                    release.manifest.version,
                    change.variant.chars().take(64).collect::<String>(),
                    ids.join(", ")
                ),
            ));
        }
    }
    let (revision, entries) =
        deny::change(state.store(), &model, &change, &caller.name, &now_text()).await?;
    tracing::info!(caller = caller.name, %model, action = change.action.as_str(), "deny list changed");
    state.views().set_deny(&model, revision, entries.clone());
    Ok(HttpResponse::Ok().json(serde_json::json!({ "model": model, "entries": entries })))
}
