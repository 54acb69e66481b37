//! Experiments, the operator's side (`/v1/admin/models/{model}/experiment`): start (`POST`,
//! scope `rollout`), status (`GET`, scope `read`), stop (`POST .../stop`, scope `rollout`,
//! optionally rolling the winner out), history (`GET .../history`, scope `read`).
//!
//! A handler gathers the inputs, calls the pure change in `ferry_shared::experiment::change`,
//! writes the revision and puts it in force on this replica (the others read it with their
//! catalog refresh, within 30 s).

use actix_web::{HttpRequest, HttpResponse, web};
use ferry_shared::ModelName;
use ferry_shared::errors::ErrorCode;
use ferry_shared::experiment::change::{self, StartExperiment, StopExperiment};
use ferry_shared::experiment::{ArmName, ExperimentPlan};
use ferry_shared::select::rollout::RolloutChange;

use crate::api::AppState;
use crate::api::auth::authorize;
use crate::api::error::ApiError;
use crate::api::extract::{admin_change, catch_up, known_model};
use crate::plans::experiment::{self as plans, PlanError};
use crate::storage::revisions::now_text;
use crate::tokens::Scope;

impl From<PlanError> for ApiError {
    fn from(e: PlanError) -> Self {
        match e {
            PlanError::Store(s) => s.into(),
            other => ApiError::new(other.code(), other.to_string()),
        }
    }
}

/// `POST /v1/admin/models/{model}/experiment`: starts an experiment.
pub(crate) async fn post_experiment(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (caller, model, start): (_, _, StartExperiment) =
        admin_change(&req, &state, &model, payload, ErrorCode::ExperimentInvalid).await?;
    let arms: Vec<semver::Version> = [&start.control, &start.treatment]
        .iter()
        .filter_map(|a| a.parse::<ferry_shared::experiment::Arm>().ok())
        .map(|a| a.release)
        .collect();
    catch_up(&state, &model, &arms).await;
    let catalog = state.catalog();
    let releases = catalog.releases_newest_first(&model);
    let published: Vec<&ferry_shared::manifest::ReleaseManifest> =
        releases.iter().map(|r| &r.manifest).collect();
    let revocations = state.revocations();
    let revoked = |v: &semver::Version| {
        revocations
            .get(&model)
            .is_some_and(|r| r.list.revokes(v).is_some())
    };
    let (at, random) = (now_text(), plans::random());
    let plan = plans::apply(state.store(), &model, |cur| {
        change::start(
            cur,
            &start,
            &published,
            &revoked,
            plans::made(&model, &caller.name, &at, &random),
        )
    })
    .await?;
    tracing::info!(caller = caller.name, %model, id = plan.id, "experiment started");
    state.views().set_experiment(plan.clone());
    Ok(HttpResponse::Created().json(plan))
}

/// The plan in force for `model` (read from the store, so a change made through another
/// replica is seen at once).
async fn in_force(state: &AppState, model: &ModelName) -> Result<ExperimentPlan, ApiError> {
    let plan = plans::latest(state.store(), model).await?.ok_or_else(|| {
        ApiError::new(
            ErrorCode::ExperimentNotFound,
            format!("{model} has no experiment; start one with ferry experiment start"),
        )
    })?;
    state.views().set_experiment(plan.clone());
    Ok(plan)
}

/// `GET /v1/admin/models/{model}/experiment`: the experiment's status and results.
pub(crate) async fn get_experiment(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config().tokens, Scope::Read)?;
    let model = known_model(&state, &model).await?;
    let plan = in_force(&state, &model).await?;
    let status = state
        .fleet()
        .experiments
        .status(state.store(), &plan, time::OffsetDateTime::now_utc())
        .await?;
    Ok(HttpResponse::Ok()
        .insert_header(("Cache-Control", "no-store"))
        .json(status))
}

/// `GET /v1/admin/models/{model}/experiment/history`: every revision, oldest first.
pub(crate) async fn get_history(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config().tokens, Scope::Read)?;
    let model = known_model(&state, &model).await?;
    let history = plans::history(state.store(), &model).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("Cache-Control", "no-store"))
        .json(serde_json::json!({ "model": model, "revisions": history })))
}

/// The rollout a stop with `roll_out` starts: the winner's release to every device, unless it
/// already is the baseline.
fn rollout_of(
    state: &AppState,
    model: &ModelName,
    plan: &ExperimentPlan,
    winner: ArmName,
) -> Result<Option<RolloutChange>, ApiError> {
    let arm = plan.arm(winner);
    if arm.variant.is_some() {
        return Err(ApiError::new(
            ErrorCode::ExperimentInvalid,
            format!(
                "the {} arm is variant {arm}: a rollout ships releases, not one variant of \
                 them; publish a release whose only variant for these devices is it, then roll \
                 that out",
                winner.as_str()
            ),
        ));
    }
    let baseline = state.rollouts().get(model).and_then(|p| p.baseline.clone());
    if baseline.as_ref() == Some(&arm.release) {
        return Ok(None);
    }
    let change = serde_json::from_value(serde_json::json!({
        "action": "start",
        "release": arm.release.to_string(),
        "percent": 100,
        "reason": format!("experiment {} won by {}", plan.id, winner.as_str()),
    }))
    .map_err(ApiError::internal)?;
    Ok(Some(change))
}

/// `POST /v1/admin/models/{model}/experiment/stop`: stops the running experiment (and, with
/// `roll_out`, first starts the winner's rollout to 100%: refused, nothing stops).
pub(crate) async fn post_stop(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (caller, model, stop): (_, _, StopExperiment) =
        admin_change(&req, &state, &model, payload, ErrorCode::ExperimentInvalid).await?;
    let current = in_force(&state, &model).await?;
    if !current.is_running() {
        return Err(ApiError::new(
            ErrorCode::ExperimentNotFound,
            format!(
                "experiment {} of {model} is already stopped; no experiment is running",
                current.id
            ),
        ));
    }
    let at = now_text();
    let mut rollout = None;
    if stop.roll_out
        && let Some(winner) = stop.winner
        && let Some(change) = rollout_of(&state, &model, &current, winner)?
    {
        let (plan, _) = crate::plans::rollout::change(
            state.store(),
            &state.catalog(),
            &model,
            &change,
            (&caller.name, &at),
            crate::plans::rollout::ChangeMode::default(),
        )
        .await?;
        state.set_rollout(&model, plan.clone());
        rollout = Some(plan);
    }
    let plan = plans::apply(state.store(), &model, |cur| {
        change::stop(
            cur,
            &stop,
            "stop",
            plans::made(&model, &caller.name, &at, ""),
        )
    })
    .await?;
    tracing::info!(caller = caller.name, %model, id = plan.id, "experiment stopped");
    state.views().set_experiment(plan.clone());
    let mut v = serde_json::to_value(&plan).map_err(ApiError::internal)?;
    v["rollout"] = serde_json::to_value(&rollout).map_err(ApiError::internal)?;
    Ok(HttpResponse::Ok().json(v))
}

/// Stops `model`'s running experiment when one of its arms' release is revoked (called after a
/// revocation list is accepted); the plan it wrote, if it stopped one.
pub(crate) async fn stop_if_revoked(state: &AppState, model: &ModelName) -> Option<ExperimentPlan> {
    let plan = state.experiments().get(model).cloned()?;
    let revocations = state.revocations();
    let list = revocations.get(model)?;
    let hit = [ArmName::Control, ArmName::Treatment]
        .into_iter()
        .find(|a| list.list.revokes(&plan.arm(*a).release).is_some());
    let arm = hit.filter(|_| plan.is_running())?;
    let at = now_text();
    let stop = StopExperiment {
        winner: None,
        roll_out: false,
        reason: format!(
            "the {} arm's release {} was revoked",
            arm.as_str(),
            plan.arm(arm).release
        ),
    };
    match plans::apply(state.store(), model, |cur| {
        change::stop(cur, &stop, "revoked", plans::made(model, "ferry", &at, ""))
    })
    .await
    {
        Ok(p) => {
            tracing::warn!(%model, id = p.id, "experiment stopped: {}", stop.reason);
            state.views().set_experiment(p.clone());
            Some(p)
        }
        Err(PlanError::Refused(_)) => None,
        Err(e) => {
            tracing::warn!(%model, "experiment not stopped after a revocation: {e}");
            None
        }
    }
}
