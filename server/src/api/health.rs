//! Fleet health endpoints: the health view of a model over a window, and its series for charts.

use actix_web::{HttpRequest, HttpResponse, web};
use ferry_shared::ModelName;
use ferry_shared::errors::ErrorCode;
use time::OffsetDateTime;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::read_view;

/// `GET /v1/admin/models/{model}/health`.
pub async fn get_health(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let model = read_view(&req, &state, &model).await?;
    only_params(&req, &["since"])?;
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
    let plan = state.rollouts().get(&model).cloned();
    // The staged release's crash rate against the baseline's, over the same window.
    if let Some(staged) = plan.as_ref().and_then(|p| p.staged.as_ref()) {
        let baseline = plan
            .as_ref()
            .and_then(|p| p.baseline.as_ref())
            .map(ToString::to_string);
        h["crash_compare"] = serde_json::json!(crate::fleet::counts::gates::crash_compare(
            &rollup,
            model.as_str(),
            &staged.to_string(),
            baseline.as_deref(),
        ));
    }
    h["rollout"] = serde_json::json!(plan);
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
    only_params(&req, &["since", "step_secs"])?;
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let since = health_since(&req, &state, &model)?
        .unwrap_or(now - 6 * 3600)
        .min(now);
    let pairs = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default();
    let span = (now - since).max(60);
    let least = (span + MAX_SERIES_POINTS - 1) / MAX_SERIES_POINTS;
    if least > MAX_SERIES_STEP_SECS {
        return Err(ApiError::new(
            ErrorCode::RequestInvalid,
            format!(
                "since is too far back for a series: it holds at most {MAX_SERIES_POINTS} points \
                 of at most 30 days (about {} years); ask for a later since",
                MAX_SERIES_POINTS * MAX_SERIES_STEP_SECS / (365 * 86_400)
            ),
        ));
    }
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

/// Refuses a query parameter this view does not take (a misspelt `sinse=1h` would otherwise
/// answer for all time, as if nothing were wrong).
fn only_params(req: &HttpRequest, known: &[&str]) -> Result<(), ApiError> {
    let pairs = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| ApiError::new(ErrorCode::RequestInvalid, format!("bad query string: {e}")))?;
    match pairs.iter().find(|(k, _)| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some((k, _)) => Err(ApiError::new(
            ErrorCode::RequestInvalid,
            format!(
                "unknown query parameter {:?}: this view takes {}",
                k.chars().take(64).collect::<String>(),
                known.join(" and ")
            ),
        )),
    }
}
