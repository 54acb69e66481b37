//! Device endpoints: `POST /v1/resolve`, `GET /v1/time`, `GET /v1/keys` and `GET /v1/keyring`.

use actix_web::http::header;
use actix_web::{HttpResponse, web};
use ferry_shared::errors::ErrorCode;
use ferry_shared::wire::protocol::{PROTOCOL_HEADER, Protocol, SDK_HEADER, Sdk};
use ferry_shared::wire::resolve::{
    DECISION_PAYLOAD_TYPE, REQUEST_FIELDS, ReleaseRef, ResolveRequest, ResolveResponse,
};
use serde::Deserialize;
use time::OffsetDateTime;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::{read_body, require_object};
use crate::resolve::answers::Answer;
use crate::resolve::decide::{Decided, ModelState, Policy, Refusal, decide};
use crate::resolve::notes::Notes;

pub(crate) async fn keys(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(state.trust())
}

pub(crate) async fn keyring(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(ferry_shared::trust::keyring::KeyringResponse {
        version: state.keys().version,
        keyrings: state.keys().chain.clone(),
    })
}

#[derive(Debug, Deserialize)]
pub(crate) struct TimeQuery {
    #[serde(default)]
    nonce: Option<String>,
}

/// `GET /v1/time?nonce=…`: the server's time for one nonce, signed by the online key (what a
/// device with no trusted time learns its clock from, before anything else). Each answer costs
/// a signature: it takes from the same per-address allowance as decisions of their own.
pub(crate) async fn signed_time(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    query: Result<web::Query<TimeQuery>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    use ferry_shared::trust::clock::{SignedTime, TIME_PAYLOAD_TYPE, TimeResponse};
    let nonce = query
        .map_err(|e| ApiError::new(ErrorCode::RequestInvalid, format!("bad query string: {e}")))?
        .into_inner()
        .nonce
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::RequestInvalid,
                "a nonce is required: GET /v1/time?nonce=<16 to 32 random bytes, base64url>",
            )
        })?;
    ferry_shared::wire::resolve::check_nonce(&nonce)
        .map_err(|m| ApiError::new(ErrorCode::RequestInvalid, m))?;
    let client = state.client_ip(&req);
    if !state.allow_fresh_decision(client) {
        state.metrics().signed_time("limited");
        return Err(ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "more than {} signed answers with a nonce this minute from {}; retry later",
                state.config().limits.fresh_decisions_per_minute,
                who(client)
            ),
        ));
    }
    let payload = serde_json::to_vec(&SignedTime {
        format: 1,
        nonce,
        time: OffsetDateTime::now_utc(),
        keyring_version: state.keys().version,
    })
    .map_err(ApiError::internal)?;
    let time = state.online().sign(TIME_PAYLOAD_TYPE, &payload);
    state.metrics().signed_time("signed");
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(TimeResponse { time }))
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResolveQuery {
    #[serde(default)]
    explain: bool,
}

pub(crate) async fn resolve(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    query: Result<web::Query<ResolveQuery>, actix_web::Error>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let h = req.headers();
    let client = crate::fleet::census::clients::key(
        Protocol::from_header(h.get(PROTOCOL_HEADER).map(|v| v.as_bytes())),
        Sdk::from_header(h.get(SDK_HEADER).map(|v| v.as_bytes())).as_ref(),
    );
    let peer = state.client_ip(&req);
    let mut notes = Notes::default();
    let outcome = resolve_inner(&state, query, payload, peer, &mut notes).await;
    notes.hand_over(state.telemetry(), &client);
    let label = match &outcome {
        Ok(_) => "ok",
        Err(e) => e.code.as_str(),
    };
    state.metrics().resolve(label);
    outcome
}

/// The error for a resolve body that does not parse: `invalid_name` or `invalid_version` when
/// the model name or a version is what is wrong, else `request_malformed`.
fn resolve_error(body: &[u8], e: serde_json::Error) -> ApiError {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(Err(err)) = v["model"]
            .as_str()
            .map(str::parse::<ferry_shared::ModelName>)
        {
            return ApiError::new(ErrorCode::InvalidName, format!("model: {err}"));
        }
        for field in ["app_version", "runtime_version"] {
            if let Some(Err(err)) = v[field].as_str().map(semver::Version::parse) {
                return ApiError::new(ErrorCode::InvalidVersion, format!("{field}: {err}"));
            }
        }
    }
    ApiError::new(ErrorCode::RequestMalformed, format!("resolve request: {e}"))
}

pub(crate) async fn resolve_inner(
    state: &AppState,
    query: Result<web::Query<ResolveQuery>, actix_web::Error>,
    payload: web::Payload,
    peer: Option<std::net::IpAddr>,
    notes: &mut Notes,
) -> Result<HttpResponse, ApiError> {
    let explain = query
        .map_err(|e| ApiError::new(ErrorCode::RequestInvalid, format!("bad query string: {e}")))?
        .explain;
    let body = read_body(
        payload,
        &state.config().limits,
        state.config().limits.max_resolve_bytes,
    )
    .await?;
    require_object(&body, ErrorCode::RequestMalformed, "resolve request")?;
    let device: ResolveRequest =
        serde_json::from_slice(&body).map_err(|e| resolve_error(&body, e))?;
    // Protocol v1: fields a newer client added are ignored, and counted by name.
    let unknown = ferry_shared::wire::protocol::unknown_fields(&body, &REQUEST_FIELDS);
    if !unknown.is_empty() {
        state.metrics().protocol.unknown_fields("resolve", &unknown);
    }
    // Versions first (their own code), then the rest: each checked once per request.
    if let Some(why) = device.version_error() {
        return Err(ApiError::new(ErrorCode::InvalidVersion, why));
    }
    device
        .check_fields()
        .map_err(|m| ApiError::new(ErrorCode::RequestInvalid, m))?;
    // An explain is an operator's probe, not a device: it counts in no census, cohort or
    // health figure (it still counts against the address's request limits).
    if !explain {
        notes.device(device.model.as_str(), &device.install_id);
    }
    if device.nonce.is_some() {
        fresh_allowed(state, peer)?;
    }
    let catalog = state.catalog();
    let published = catalog.release_count_of(&device.model);
    if published == 0 {
        return Err(Refusal::NotPublished(device.model.to_string()).into());
    }
    let (operators, operators_wanted) = runtime_operators(state, &device, peer, notes).await?;
    notes.counted();
    let now = OffsetDateTime::now_utc();
    let (revocations, rollouts, deny_lists) =
        (state.revocations(), state.rollouts(), state.deny_lists());
    let deny_in_force = deny_lists.get(&device.model);
    let experiments = state.experiments();
    let model_state = ModelState {
        experiment: experiments.get(&device.model),
        published,
        plan: rollouts.get(&device.model),
        deny: deny_in_force.map_or(&[], |d| d.entries.as_slice()),
        deny_revision: deny_in_force.map_or(0, |d| d.revision),
        revocations: revocations.get(&device.model),
    };
    let generation = model_state.generation();
    let key = model_state.share_key(&device, now);
    let shared = !explain
        && !operators_wanted
        && device.nonce.is_none()
        && model_state.pin_of(&device.install_id, now).is_none();
    if shared && let Some(answer) = state.answers().get(&key, generation, now) {
        notes.served(answer.cohort);
        return Ok(render(state, &device, &answer, false));
    }
    let base = state.config().public_url.clone().unwrap_or_default();
    let policy = Policy {
        preference: &state.config().preference,
        base_url: &base,
        sources: &state.config().sources,
        ttl_secs: state.config().decision_ttl_secs,
        keyring_version: state.keys().version,
        operators: operators.as_deref(),
    };
    let releases = catalog.releases_newest_first(&device.model);
    let decided = decide(&device, &model_state, &releases, &policy, now).inspect_err(|r| {
        if r.code() == ErrorCode::NoCompatibleVariant {
            state.metrics().no_compatible_variant(device.model.as_str());
        }
    })?;
    let Decided {
        decision,
        release,
        explain: explanation,
    } = decided;
    let cohort = decision.cohort;
    if decision.nonce.is_some() {
        state.metrics().fresh_decision("signed");
    }
    let revocations = model_state.revocations;
    let payload = serde_json::to_vec(&decision).map_err(ApiError::internal)?;
    let signed = state.online().sign(DECISION_PAYLOAD_TYPE, &payload);
    let release_ref = ReleaseRef {
        sha256: release.envelope_sha256,
        size: release.envelope_json.len() as u64,
        url: format!(
            "{base}/v1/releases/sha256/{}",
            release.envelope_sha256.to_hex()
        ),
    };
    let revocations_env = revocations.and_then(|r| r.envelope.as_deref().cloned());
    let answer = Answer {
        generation,
        revocations: revocations.and_then(|r| r.json.clone()),
        reuse_until: now
            + time::Duration::seconds((state.config().decision_ttl_secs / 4).max(1) as i64),
        head: {
            let mut head = Vec::with_capacity(payload.len() * 2 + 512);
            head.extend_from_slice(b"{\"decision\":");
            serde_json::to_writer(&mut head, &signed).map_err(ApiError::internal)?;
            head.extend_from_slice(b",\"release_ref\":");
            serde_json::to_writer(&mut head, &release_ref).map_err(ApiError::internal)?;
            head.into()
        },
        release: decision.release.to_string(),
        variants: decision
            .candidates
            .iter()
            .map(|c| c.variant.as_str().to_string())
            .collect(),
        cohort,
        arm: decision
            .experiment
            .as_ref()
            .map(|e| format!("@{}={}", e.id, e.arm)),
    };
    if !explain {
        let answer = std::sync::Arc::new(answer);
        if shared {
            state.answers().put(key, answer.clone());
        }
        notes.served(answer.cohort);
        return Ok(render(state, &device, &answer, operators_wanted));
    }
    let rollout = crate::resolve::stance::stance(
        model_state.plan,
        cohort,
        model_state.pin_of(&device.install_id, now).as_ref(),
        &decision.release.to_string(),
    );
    let response = ResolveResponse {
        decision: signed,
        release_ref,
        release: Some(release.envelope.clone()),
        revocations: revocations_env,
        receipt: Some(receipt(state, &device, &answer)),
        explain: Some(explanation),
        operators_wanted,
        rollout: Some(rollout),
        sealed_stopped: state.key_service().stopped_of(&device.model),
    };
    notes.served(cohort);
    Ok(no_store(response))
}

/// A decision of its own costs a signature: bounded per client address (an IPv4 address, an
/// IPv6 /64).
fn fresh_allowed(state: &AppState, peer: Option<std::net::IpAddr>) -> Result<(), ApiError> {
    if state.allow_fresh_decision(peer) {
        return Ok(());
    }
    state.metrics().fresh_decision("limited");
    Err(ApiError::new(
        ErrorCode::RateLimited,
        format!(
            "more than {} decisions with a nonce this minute from {}; retry later",
            state.config().limits.fresh_decisions_per_minute,
            who(peer)
        ),
    ))
}

/// How a refusal names the client: its address (the one a trusted proxy named).
fn who(client: Option<std::net::IpAddr>) -> String {
    client.map_or_else(|| "this address".into(), |a| a.to_canonical().to_string())
}

/// An explain answer: never cached.
fn no_store(response: ResolveResponse) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(response)
}

/// What the device's runtime can execute, when it says: the list it sent (recorded for every
/// replica), or the set its digest names; a digest no replica knows is answered without the
/// check and with `operators_wanted` (the second value). A list costs a store write: it takes
/// from the per-address allowance of signed answers; a digest not in memory (a store read)
/// from `limits.unknown_digests_per_minute` (`429` past either; the client then uses the
/// answer it has). The device is counted in the model's runtime census once its set is known
/// (made-up digests count nowhere).
async fn runtime_operators(
    state: &AppState,
    device: &ResolveRequest,
    peer: Option<std::net::IpAddr>,
    notes: &mut Notes,
) -> Result<
    (
        Option<std::sync::Arc<std::collections::BTreeSet<String>>>,
        bool,
    ),
    ApiError,
> {
    let found = match (&device.operators, &device.operators_digest) {
        (Some(list), _) => {
            if !state.allow_fresh_decision(peer) {
                return Err(ApiError::new(
                    ErrorCode::RateLimited,
                    format!(
                        "more than {} operator lists and signed answers this minute from {}; \
                         retry later",
                        state.config().limits.fresh_decisions_per_minute,
                        who(peer)
                    ),
                ));
            }
            let (set, how) = state
                .operator_sets()
                .remember(
                    state.store(),
                    list,
                    device.model.as_str(),
                    crate::fleet::intake::limits::IpKey::of(peer),
                )
                .await;
            state.metrics().operator_set(how.label());
            Some(set)
        }
        (None, Some(d)) => match state.operator_sets().cached(d) {
            Some(set) => {
                state.metrics().operator_set("known");
                Some(set)
            }
            // A digest not in memory may cost a store read and an answer signed for it alone:
            // bounded per address (made-up digests cannot make every resolve that expensive).
            None if !state.allow_digest_lookup(peer) => {
                state.metrics().operator_set("limited");
                return Err(ApiError::new(
                    ErrorCode::RateLimited,
                    format!(
                        "more than {} operator digests this server does not know this minute \
                         from {}; retry later",
                        state.config().limits.unknown_digests_per_minute,
                        who(peer)
                    ),
                ));
            }
            None => {
                let found = state.operator_sets().lookup(state.store(), d).await;
                state
                    .metrics()
                    .operator_set(if found.is_some() { "found" } else { "unknown" });
                found
            }
        },
        (None, None) => return Ok((None, false)),
    };
    if let (Some(_), Some(d)) = (&found, &device.operators_digest) {
        notes.runtime(crate::fleet::census::runtimes::key(&device.app_version, d));
    }
    let wanted = found.is_none();
    Ok((found, wanted))
}

/// The telemetry receipt of `device` for `answer`.
fn receipt(state: &AppState, device: &ResolveRequest, answer: &Answer) -> String {
    // The experiment arm rides in the variant list as `@<id>=<arm>` (no variant id starts with
    // `@`), so replicas that do not know experiments still verify the receipt.
    let ids: Vec<&str> = answer
        .variants
        .iter()
        .map(String::as_str)
        .chain(answer.arm.as_deref())
        .collect();
    state.receipts().issue(
        &crate::fleet::intake::receipt::Facts {
            install_id: &device.install_id,
            model: device.model.as_str(),
            release: &answer.release,
            platform: device.platform.as_str(),
            soc: &device.soc,
            device_model: &device.device_model,
        },
        &ids,
    )
}

/// The answer's bytes for `device`: the shared head, then this device's receipt (and
/// `operators_wanted` when the server needs the device's operator list).
fn render(
    state: &AppState,
    device: &ResolveRequest,
    answer: &Answer,
    operators_wanted: bool,
) -> HttpResponse {
    let receipt = receipt(state, device, answer);
    let revocations = answer.revocations.as_deref().unwrap_or_default();
    let mut body = Vec::with_capacity(answer.head.len() + revocations.len() + receipt.len() + 32);
    body.extend_from_slice(&answer.head);
    if !revocations.is_empty() {
        body.extend_from_slice(b",\"revocations\":");
        body.extend_from_slice(revocations);
    }
    // A receipt is `v1.<variant ids>.<base64url>` (variant ids are `[a-z0-9._-]`): nothing in
    // it needs escaping in JSON.
    body.extend_from_slice(b",\"receipt\":\"");
    body.extend_from_slice(receipt.as_bytes());
    body.extend_from_slice(b"\"");
    if operators_wanted {
        body.extend_from_slice(b",\"operators_wanted\":true");
    }
    // Sealed releases whose keys are stopped (none, and no lock taken, almost always).
    let stopped = state.key_service().stopped_of(&device.model);
    if let Some(json) = (!stopped.is_empty())
        .then(|| serde_json::to_vec(&stopped).ok())
        .flatten()
    {
        body.extend_from_slice(b",\"sealed_stopped\":");
        body.extend_from_slice(&json);
    }
    body.extend_from_slice(b"}");
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .content_type("application/json")
        .body(body)
}

/// `GET /v1/releases/sha256/{hex}`: a signed release manifest envelope by the digest resolve
/// answers name (immutable, so cacheable for ever).
pub(crate) async fn release_by_digest(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    hex: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let digest = crate::api::extract::parse_digest(&hex)?;
    let mut found = state.catalog().by_digest(&digest);
    if found.is_none() && state.catalog_reload_due() {
        // Another replica may have published it since this one last read the catalog.
        match crate::storage::catalog::Catalog::refresh(
            state.store(),
            &state.keys().release_ring,
            &state.catalog(),
        )
        .await
        {
            Ok((c, _)) => {
                found = c.by_digest(&digest);
                state.replace_catalog(c);
            }
            Err(e) => tracing::warn!("catalog reload failed: {e}"),
        }
    }
    let release = found.ok_or_else(|| {
        ApiError::new(
            ErrorCode::ReleaseNotFound,
            format!("no published release has the digest {digest}"),
        )
    })?;
    let etag = format!("\"{}\"", digest.to_hex());
    if crate::api::blobs::etag_matches(
        req.headers()
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok()),
        &etag,
    ) {
        return Ok(HttpResponse::NotModified()
            .insert_header((header::ETAG, etag))
            .finish());
    }
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "public, max-age=31536000, immutable"))
        .insert_header((header::ETAG, etag))
        .content_type("application/json")
        .body(release.envelope_json.clone()))
}
