//! The site mirror's HTTP routes: what devices call (blobs and release manifests served from
//! what the mirror holds; resolve, keyring, keys and signed time relayed to the origin, with the
//! shareable answers kept; telemetry queued), and `GET /v1/admin/mirror` and `/metrics` for a
//! token with the read scope.

use std::sync::Arc;

use actix_web::http::{Method, StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use ferry_shared::errors::ErrorCode;
use ferry_shared::wire::resolve::ResolveRequest;

use super::held::{HeldError, Kind};
use super::state::{Mirror, Relayed};
use crate::api::error::ApiError;

/// The routes of a mirror.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/blobs/sha256/{hex}", web::get().to(blob))
        .route("/v1/blobs/sha256/{hex}", web::head().to(blob))
        .route("/v1/releases/sha256/{hex}", web::get().to(release))
        .route("/v1/releases/sha256/{hex}", web::head().to(release))
        .route("/v1/resolve", web::post().to(resolve))
        .route("/v1/keyring", web::get().to(keyring))
        .route("/v1/keys", web::get().to(keys))
        .route("/v1/time", web::get().to(signed_time))
        .route("/v1/telemetry", web::post().to(telemetry))
        .route("/v1/admin/mirror", web::get().to(admin_state))
        .route("/v1/admin/mirror/sync", web::post().to(sync))
        .route("/metrics", web::get().to(metrics))
        .route("/healthz", web::get().to(healthz))
        .default_service(web::to(elsewhere));
}

/// Healthy while it serves (what it holds serves devices when the origin is away); says when
/// the origin is unreachable.
async fn healthz(m: web::Data<Arc<Mirror>>) -> HttpResponse {
    match m.contact.get() {
        (_, Some(why)) => {
            HttpResponse::Ok().body(format!("ok; the origin is unreachable: {why}\n"))
        }
        _ => HttpResponse::Ok().body("ok\n"),
    }
}

async fn elsewhere(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(
        ErrorCode::NotFound,
        format!(
            "{} {}: a site mirror serves devices only (blobs, releases, resolve, keyring, \
             time, telemetry) and GET /v1/admin/mirror; send publishing and rollout calls to \
             the origin",
            req.method(),
            req.path()
        ),
    ))
}

fn held_error(e: HeldError) -> ApiError {
    match e {
        HeldError::NotAtOrigin(what) => ApiError::new(
            ErrorCode::BlobNotFound,
            format!("the origin has no file {what}"),
        ),
        HeldError::Unreachable(why) | HeldError::Wrong(why) => ApiError::new(
            ErrorCode::OriginUnavailable,
            format!("the mirror does not hold the file and cannot fetch it: {why}"),
        ),
        HeldError::Disk(why) => ApiError::unavailable(why),
    }
}

async fn blob(
    req: HttpRequest,
    m: web::Data<Arc<Mirror>>,
    hex: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    held_file(&req, &m, Kind::Blob, &hex, "application/octet-stream").await
}

async fn release(
    req: HttpRequest,
    m: web::Data<Arc<Mirror>>,
    hex: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    held_file(&req, &m, Kind::Release, &hex, "application/json").await
}

/// Serves a held file (fetched and verified first when the mirror lacks it), with ranges and
/// validators as the origin serves it.
async fn held_file(
    req: &HttpRequest,
    m: &Mirror,
    kind: Kind,
    hex: &str,
    content_type: &str,
) -> Result<HttpResponse, ApiError> {
    let digest = crate::api::extract::parse_digest(hex)?;
    let path = m.held.ensure(kind, digest).await.map_err(|e| {
        if matches!(e, HeldError::Unreachable(_)) {
            m.contact.failed(&e.to_string());
        }
        held_error(e)
    })?;
    // The file opened is the one verified (a file swapped in between is checked again).
    let mut file = std::fs::File::open(&path).map_err(ApiError::unavailable)?;
    let mut meta = file.metadata().map_err(ApiError::unavailable)?;
    if !m.held.is_verified(kind, &digest, &meta) {
        let path = m.held.ensure(kind, digest).await.map_err(held_error)?;
        file = std::fs::File::open(&path).map_err(ApiError::unavailable)?;
        meta = file.metadata().map_err(ApiError::unavailable)?;
        if !m.held.is_verified(kind, &digest, &meta) {
            return Err(ApiError::unavailable(format!(
                "{} keeps changing on disk; not served",
                path.display()
            )));
        }
    }
    let size = meta.len();
    let etag = format!("\"{}\"", digest.to_hex());
    let (mut b, start, end) =
        match crate::api::blobs::immutable_answer(req, &etag, size, content_type) {
            Ok(head) => head,
            Err(done) => return Ok(*done),
        };
    let len = end - start;
    if req.method() == Method::HEAD {
        let empty = futures_util::stream::empty::<Result<Bytes, std::io::Error>>();
        return Ok(b.body(actix_web::body::SizedStream::new(len, empty)));
    }
    Ok(b.no_chunking(len)
        .streaming(crate::api::blobs::mapped_pieces(file, start, end)))
}

/// The device's address for the origin: what a trusted proxy in front of the mirror said, then
/// the peer the mirror saw, as `X-Forwarded-For` lists them.
fn forwarded_for(req: &HttpRequest) -> Option<String> {
    let peer = req.peer_addr().map(|a| a.ip().to_string());
    let before = req
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match (before, peer) {
        (Some(b), Some(p)) => Some(format!("{b}, {p}")),
        (b, p) => b.or(p),
    }
}

/// The device headers relayed to the origin.
fn device_headers(req: &HttpRequest) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for name in [
        ferry_shared::wire::protocol::PROTOCOL_HEADER,
        ferry_shared::wire::protocol::SDK_HEADER,
        "content-type",
    ] {
        if let Some(v) = req.headers().get(name).and_then(|v| v.to_str().ok()) {
            out.push((name.to_string(), v.to_string()));
        }
    }
    if let Some(f) = forwarded_for(req) {
        out.push(("x-forwarded-for".into(), f));
    }
    if let Ok(id) = crate::api::error::REQUEST_ID.try_with(String::clone) {
        out.push(("x-request-id".into(), id));
    }
    out
}

/// The origin's answer as the device gets it.
fn relayed(answer: Relayed) -> HttpResponse {
    let mut b =
        HttpResponse::build(StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY));
    for (k, v) in &answer.headers {
        b.insert_header((k.as_str(), v.as_str()));
    }
    b.insert_header(("ferry-mirror", "relayed"));
    b.body(answer.body)
}

async fn resolve(
    req: HttpRequest,
    m: web::Data<Arc<Mirror>>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body =
        crate::api::extract::read_body(payload, &m.limits, m.limits.max_resolve_bytes).await?;
    let request: ResolveRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            ErrorCode::RequestMalformed,
            format!("not a resolve request: {e}"),
        )
    })?;
    let path = match req.query_string() {
        "" => "/v1/resolve".to_string(),
        q => format!("/v1/resolve?{q}"),
    };
    let got = m
        .relay(
            Method::POST,
            &path,
            Some(body.to_vec()),
            device_headers(&req),
        )
        .await;
    match got {
        Ok(answer) if answer.status < 500 => {
            // An answer to `?explain=true` (or any query) is for the one who asked.
            if answer.status == 200 && req.query_string().is_empty() {
                m.kept
                    .consider(&request, &answer.body, time::OffsetDateTime::now_utc());
            } else if (400..500).contains(&answer.status) && answer.status != 429 {
                // The origin refuses this class now (a revocation, a deny entry): what was
                // kept for it is not served in an outage.
                m.kept.forget(&request);
            }
            Ok(relayed(answer))
        }
        Ok(answer) => kept_answer(&m, &request, &format!("HTTP {}", answer.status)),
        Err(why) => kept_answer(&m, &request, &why),
    }
}

/// The kept answer for `request` while the origin is away (`why`), or a clear error.
fn kept_answer(m: &Mirror, request: &ResolveRequest, why: &str) -> Result<HttpResponse, ApiError> {
    match m.kept.answer(request, time::OffsetDateTime::now_utc()) {
        Ok(body) => Ok(HttpResponse::Ok()
            .content_type("application/json")
            .insert_header(("ferry-mirror", "kept"))
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .body(body)),
        Err(not) => Err(ApiError::new(
            ErrorCode::OriginUnavailable,
            format!(
                "the origin is unreachable ({why}) and {not}; the device keeps its last known good model"
            ),
        )),
    }
}

/// Relays a `GET` document the mirror keeps (`keyring`, `keys`), serving the kept copy while
/// the origin is away.
async fn document(req: &HttpRequest, m: &Mirror, name: &str) -> Result<HttpResponse, ApiError> {
    let path = format!("/v1/{name}");
    match m.relay(Method::GET, &path, None, device_headers(req)).await {
        Ok(answer) if answer.status == 200 => {
            m.kept.keep_document(name, &answer.body);
            Ok(relayed(answer))
        }
        Ok(answer) if answer.status < 500 => Ok(relayed(answer)),
        other => {
            let why = match other {
                Ok(a) => format!("HTTP {}", a.status),
                Err(e) => e,
            };
            match m.kept.document(name) {
                Some(bytes) => Ok(HttpResponse::Ok()
                    .content_type("application/json")
                    .insert_header(("ferry-mirror", "kept"))
                    .body(bytes)),
                None => Err(ApiError::new(
                    ErrorCode::OriginUnavailable,
                    format!("the origin is unreachable ({why}) and the mirror holds no {name}"),
                )),
            }
        }
    }
}

async fn keyring(req: HttpRequest, m: web::Data<Arc<Mirror>>) -> Result<HttpResponse, ApiError> {
    document(&req, &m, "keyring").await
}

async fn keys(req: HttpRequest, m: web::Data<Arc<Mirror>>) -> Result<HttpResponse, ApiError> {
    document(&req, &m, "keys").await
}

async fn signed_time(
    req: HttpRequest,
    m: web::Data<Arc<Mirror>>,
) -> Result<HttpResponse, ApiError> {
    let path = match req.query_string() {
        "" => "/v1/time".to_string(),
        q => format!("/v1/time?{q}"),
    };
    match m
        .relay(Method::GET, &path, None, device_headers(&req))
        .await
    {
        Ok(answer) if answer.status < 500 => Ok(relayed(answer)),
        Ok(answer) => Err(ApiError::new(
            ErrorCode::OriginUnavailable,
            format!(
                "the origin answered HTTP {}; signed time is made by the origin alone",
                answer.status
            ),
        )),
        Err(why) => Err(ApiError::new(
            ErrorCode::OriginUnavailable,
            format!("the origin is unreachable ({why}); signed time is made by the origin alone"),
        )),
    }
}

/// The events of a batch as the origin would take them: the known ones that pass the origin's
/// own checks (their text kept byte for byte), the rejected with why, and how many are of a
/// kind this build does not know (ignored, as the origin ignores them).
fn checked_events(
    body: &[u8],
    cfg: &crate::fleet::config::TelemetryConfig,
) -> Result<(Vec<String>, Vec<serde_json::Value>, usize), ApiError> {
    let batch = crate::api::fleet::read_batch(body, cfg.max_events)?;
    let now = time::OffsetDateTime::now_utc();
    let (mut kept, mut rejected, mut ignored) = (Vec::new(), Vec::new(), 0);
    for (i, raw) in batch.events.iter().enumerate() {
        let peek = ferry_shared::wire::telemetry::peek_event(raw.get());
        if peek.unknown_kind {
            ignored += 1;
            continue;
        }
        let checked = if peek.malformed_kind {
            Err((
                ErrorCode::EventInvalid,
                "kind is not an event kind name".to_string(),
            ))
        } else {
            crate::fleet::intake::ingest::validate(raw.get(), now, cfg).map(|_| ())
        };
        match checked {
            Ok(()) => kept.push(raw.get().to_string()),
            Err((code, message)) => rejected.push(serde_json::json!({
                "index": i,
                "code": code.as_str(),
                "message": if rejected.len() < 32 { message } else { String::new() },
            })),
        }
    }
    Ok((kept, rejected, ignored))
}

async fn telemetry(
    req: HttpRequest,
    m: web::Data<Arc<Mirror>>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    if !m.batch_allowed(req.peer_addr().map(|a| a.ip())) {
        return Err(ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "more than {} telemetry batches a minute from this address",
                m.telemetry.per_address_per_minute
            ),
        ));
    }
    let body =
        crate::api::extract::read_body(payload, &m.limits, m.telemetry.max_body_bytes).await?;
    let (kept, rejected, ignored) = checked_events(&body, &m.telemetry)?;
    let accepted = kept.len();
    if accepted > 0 {
        let text = format!("{{\"events\":[{}]}}", kept.join(","));
        let header = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let queue = m.queue.clone();
        let (from, sdk, protocol) = (
            forwarded_for(&req),
            header(ferry_shared::wire::protocol::SDK_HEADER),
            header(ferry_shared::wire::protocol::PROTOCOL_HEADER),
        );
        web::block(move || queue.push(text, from, sdk, protocol))
            .await
            .map_err(ApiError::internal)?
            .map_err(|e| match e {
                super::queue::QueueError::Full(_) => {
                    ApiError::new(ErrorCode::RateLimited, e.to_string())
                }
                super::queue::QueueError::Disk(_) => ApiError::unavailable(e.to_string()),
            })?;
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "accepted": accepted, "ignored": ignored, "rejected": rejected, "queued": true,
    })))
}

async fn admin_state(
    req: HttpRequest,
    m: web::Data<Arc<Mirror>>,
) -> Result<HttpResponse, ApiError> {
    crate::api::auth::authorize(&req, &m.tokens, crate::tokens::Scope::Read)?;
    let m2 = m.clone();
    let state = web::block(move || m2.state())
        .await
        .map_err(ApiError::internal)?;
    Ok(HttpResponse::Ok().json(state))
}

/// `POST /v1/admin/mirror/sync` `{"model": …, "release": …}` (the publish scope).
async fn sync(
    req: HttpRequest,
    m: web::Data<Arc<Mirror>>,
    body: Bytes,
) -> Result<HttpResponse, ApiError> {
    crate::api::auth::authorize(&req, &m.tokens, crate::tokens::Scope::Publish)?;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Sync {
        model: String,
        release: Option<String>,
    }
    let ask: Sync = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            ErrorCode::RequestMalformed,
            format!("expected {{\"model\": …, \"release\": …}}: {e}"),
        )
    })?;
    let done = super::sync::sync(&m, &ask.model, ask.release.as_deref()).await?;
    Ok(HttpResponse::Ok().json(done))
}

async fn metrics(req: HttpRequest, m: web::Data<Arc<Mirror>>) -> Result<HttpResponse, ApiError> {
    crate::api::auth::authorize(&req, &m.tokens, crate::tokens::Scope::Read)?;
    let m2 = m.clone();
    let s = web::block(move || m2.state())
        .await
        .map_err(ApiError::internal)?;
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    let text = format!(
        "# TYPE ferry_mirror_hits counter\nferry_mirror_hits_total {}\n\
         # TYPE ferry_mirror_misses counter\nferry_mirror_misses_total {}\n\
         # TYPE ferry_mirror_origin_bytes counter\nferry_mirror_origin_bytes_total {}\n\
         # TYPE ferry_mirror_altered_files counter\nferry_mirror_altered_files_total {}\n\
         # TYPE ferry_mirror_held_bytes gauge\nferry_mirror_held_bytes {}\n\
         # TYPE ferry_mirror_queue_batches gauge\nferry_mirror_queue_batches {}\n\
         # TYPE ferry_mirror_forwarded_batches counter\nferry_mirror_forwarded_batches_total {}\n\
         # TYPE ferry_mirror_rejected_events counter\nferry_mirror_rejected_events_total {}\n\
         # TYPE ferry_mirror_origin_up gauge\nferry_mirror_origin_up {}\n# EOF\n",
        n("hits"),
        n("misses"),
        n("origin_bytes"),
        n("altered"),
        s["held"]["bytes"].as_u64().unwrap_or(0),
        s["queue"]["batches"].as_u64().unwrap_or(0),
        s["queue"]["forwarded"].as_u64().unwrap_or(0),
        s["queue"]["rejected_events"].as_u64().unwrap_or(0),
        u8::from(s["origin_up"].as_bool().unwrap_or(false)),
    );
    Ok(HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(text))
}
