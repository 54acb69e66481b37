//! Fleet endpoints: rollouts, telemetry ingestion, health and the deny list.

use actix_web::{HttpRequest, HttpResponse, web};
use ferry_shared::ModelName;
use ferry_shared::errors::ErrorCode;
use ferry_shared::select::deny::{DenyAction, DenyChange};
use ferry_shared::select::rollout::{Preview, RolloutChange, RolloutPlan};
use serde::Deserialize;
use time::OffsetDateTime;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::{admin_change, read_body, read_view};
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
        if let Some((coverage, warnings)) = &runtimes {
            v["runtimes"] = coverage.clone();
            v["warnings"] = serde_json::json!(warnings);
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
                format!("limit must be a non-negative integer, not {text:?}"),
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
struct BatchShape<'a> {
    /// Each event's JSON text, borrowed from the body: parsed one by one, so that one bad
    /// event is refused alone.
    #[serde(borrow)]
    events: Vec<&'a serde_json::value::RawValue>,
}

/// `POST /v1/telemetry`.
pub async fn post_telemetry(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let cfg = state.config().telemetry;
    let addr = req.peer_addr().map(|a| a.ip());
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
    // Parsing and aggregating is CPU work: keep it off the event loops that serve resolve, and
    // on at most half the cores.
    let _permit = state
        .ingest_permits()
        .acquire()
        .await
        .map_err(ApiError::internal)?;
    let worker = state.clone().into_inner();
    let report = web::block(move || -> Result<_, ApiError> {
        // The envelope is an object: serde would also read a struct from an array (its fields
        // in order), which no client sends and the document does not allow.
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::new(
                ErrorCode::TelemetryMalformed,
                "expected {\"events\": [...]}: the body is not a JSON object",
            ));
        }
        let batch: BatchShape = serde_json::from_slice(&body).map_err(|e| {
            ApiError::new(
                ErrorCode::TelemetryMalformed,
                format!("expected {{\"events\": [...]}}: {e}"),
            )
        })?;
        if batch.events.len() > cfg.max_events {
            return Err(ApiError::new(
                ErrorCode::TooManyEvents,
                format!(
                    "{} events; a batch holds at most {}",
                    batch.events.len(),
                    cfg.max_events
                ),
            ));
        }
        let receipts = worker.receipts().clone();
        let catalog = worker.catalog();
        // A valid receipt proves some replica answered for that release (this one may not
        // have read the catalog since it was published).
        let known = |e: &ferry_shared::wire::telemetry::TelemetryEvent| {
            known_target(&catalog, e)
                .or_else(|m| if receipts.verifies(e) { Ok(()) } else { Err(m) })
        };
        Ok(worker.telemetry().ingest(
            &batch.events.iter().map(|e| e.get()).collect::<Vec<_>>(),
            OffsetDateTime::now_utc(),
            &cfg,
            &known,
            &|e| receipts.verifies(e),
            crate::fleet::intake::limits::IpKey::network(addr),
        ))
    })
    .await
    .map_err(ApiError::internal)??;
    state
        .metrics()
        .telemetry(report.accepted as u64, report.rejected.len() as u64);
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

/// `GET /v1/admin/models/{model}/health`.
pub async fn get_health(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let model = read_view(&req, &state, &model).await?;
    let since = health_since(&req, &state, &model)?;
    let (rollup, window) = match since {
        None => (state.telemetry().fleet(model.as_str()), None),
        Some(since) => {
            let (rollup, from) = state.telemetry().window(model.as_str(), since);
            (rollup, Some((since, from)))
        }
    };
    let mut h = rollup.health(model.as_str());
    if let Some((since, from)) = window {
        let stamp = |t: i64| {
            OffsetDateTime::from_unix_timestamp(t).ok().and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
        };
        h["window"] = serde_json::json!({"since": stamp(since), "from": stamp(from)});
    }
    // Each variant's delegate as its signed manifest says (not as devices report it).
    let catalog = state.catalog();
    for r in h["releases"].as_array_mut().into_iter().flatten() {
        let release = catalog.release_named(&model, r["release"].as_str().unwrap_or(""));
        for v in r["variants"].as_array_mut().into_iter().flatten() {
            let signed = release.as_ref().and_then(|rel| {
                rel.manifest
                    .variant_named(v["variant"].as_str().unwrap_or(""))
                    .map(|x| x.delegate.clone())
            });
            if let Some(delegate) = signed {
                v["delegate"] = serde_json::json!(delegate);
            }
        }
    }
    crate::fleet::counts::gates::add_budgets(&mut h, &rollup, model.as_str(), &|r, v| {
        catalog
            .release_named(&model, r)?
            .manifest
            .variant_named(v)?
            .latency_budget_ms
    });
    h["model"] = serde_json::json!(model);
    h["rollout"] = serde_json::json!(state.rollouts().get(&model));
    h["deny"] = serde_json::json!(
        state
            .deny_lists()
            .get(&model)
            .map(|d| d.entries.clone())
            .unwrap_or_default()
    );
    Ok(HttpResponse::Ok().json(h))
}

/// Most points `GET .../health/series` answers.
const MAX_SERIES_POINTS: i64 = 1440;

/// The longest step of a health series: 30 days (points are aligned to multiples of the step,
/// so a longer one would start the series decades before the window).
const MAX_SERIES_STEP_SECS: i64 = 30 * 86_400;

/// `GET /v1/admin/models/{model}/health/series?since=6h&step_secs=60`: per step, each
/// release's loads, load failures and fallbacks (telemetry with valid receipts, every
/// replica's buckets), for charts of the staged and baseline rates over time. `since`
/// defaults to 6 hours back; `step_secs` to the smallest step that keeps the answer within
/// 1,440 points (at least 60).
pub async fn get_health_series(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let model = read_view(&req, &state, &model).await?;
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let since = health_since(&req, &state, &model)?
        .unwrap_or(now - 6 * 3600)
        .min(now);
    let pairs = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default();
    let span = (now - since).max(60);
    let least = (span + MAX_SERIES_POINTS - 1) / MAX_SERIES_POINTS;
    let given: Vec<&String> = pairs
        .iter()
        .filter(|(k, _)| k == "step_secs")
        .map(|(_, v)| v)
        .collect();
    let step = match given.as_slice() {
        [] => least.max(60),
        [_, _, ..] => {
            return Err(ApiError::new(
                ErrorCode::RequestInvalid,
                "step_secs is given more than once",
            ));
        }
        [raw] => {
            let step: i64 = raw
                .parse()
                .ok()
                .filter(|s| (60..=MAX_SERIES_STEP_SECS).contains(s))
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::RequestInvalid,
                        format!(
                            "step_secs must be a whole number of seconds from 60 to \
                             {MAX_SERIES_STEP_SECS} (30 days)"
                        ),
                    )
                })?;
            if step < least {
                return Err(ApiError::new(
                    ErrorCode::RequestInvalid,
                    format!(
                        "step_secs {step} gives more than {MAX_SERIES_POINTS} points since then; \
                         use at least {least}"
                    ),
                ));
            }
            step
        }
    };
    let points: Vec<serde_json::Value> = state
        .telemetry()
        .series(model.as_str(), since, step)
        .into_iter()
        // Steps where other models reported but this one did not hold nothing to draw.
        .filter(|(_, rollup)| rollup.models.contains_key(model.as_str()))
        .map(|(at, rollup)| {
            let releases: serde_json::Map<String, serde_json::Value> = rollup
                .models
                .get(model.as_str())
                .into_iter()
                .flat_map(|r| r.keys())
                .map(|release| {
                    let (loads, load_failures, fallbacks) =
                        rollup.release_totals(model.as_str(), release);
                    (
                        release.clone(),
                        serde_json::json!({"loads": loads, "load_failures": load_failures, "fallbacks": fallbacks}),
                    )
                })
                .collect();
            let stamp = OffsetDateTime::from_unix_timestamp(at)
                .ok()
                .and_then(|t| {
                    t.format(&time::format_description::well_known::Rfc3339)
                        .ok()
                });
            serde_json::json!({"at": stamp, "at_unix": at, "releases": releases})
        })
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "model": model,
        "since_unix": since,
        "now_unix": now,
        "step_secs": step,
        "rollout": state.rollouts().get(&model),
        "points": points,
    })))
}

/// The `since` query parameter of the health view, as unix seconds: a duration back from now
/// (`90s`, `30m`, `1h`, `7d`), an RFC 3339 time, or `step` (when the current rollout step, or
/// the current rollout revision, began). `None`: no window (everything). A time in the future
/// gives an empty window.
fn health_since(
    req: &HttpRequest,
    state: &AppState,
    model: &ModelName,
) -> Result<Option<i64>, ApiError> {
    let pairs = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default();
    let mut given = pairs.iter().filter(|(k, _)| k == "since");
    let Some((_, raw)) = given.next() else {
        return Ok(None);
    };
    if given.next().is_some() {
        return Err(ApiError::new(
            ErrorCode::RequestInvalid,
            "since is given more than once",
        ));
    }
    // Quoted back in errors: at most 64 characters of it.
    let shown: String = raw.chars().take(64).collect();
    let raw = raw.clone();
    let now = OffsetDateTime::now_utc();
    let bad = |why: String| {
        ApiError::new(
            ErrorCode::RequestInvalid,
            format!(
                "since {shown:?}: {why}; give a duration (30m, 1h, 7d), an RFC 3339 time or \"step\""
            ),
        )
    };
    let rfc = |s: &str| {
        OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
            .map_err(|e| bad(e.to_string()))
    };
    let t = if raw == "step" {
        let plan = state
            .rollouts()
            .get(model)
            .cloned()
            .ok_or_else(|| bad(format!("{model} has no rollout")))?;
        match plan.ramp.as_ref() {
            Some(r) if !r.step_started.is_empty() => rfc(&r.step_started)?,
            _ => rfc(&plan.at)?,
        }
    } else if raw.contains('T') {
        rfc(&raw)?
    } else {
        let d = humantime::parse_duration(&raw).map_err(|e| bad(e.to_string()))?;
        let d = time::Duration::try_from(d).map_err(|e| bad(e.to_string()))?;
        now.checked_sub(d)
            .ok_or_else(|| bad("too far back".into()))?
    };
    // A time ahead of this server's clock (a dashboard or device whose clock runs ahead) is an
    // empty window, not an error.
    Ok(Some(t.unix_timestamp()))
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
