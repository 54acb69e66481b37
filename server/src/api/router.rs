//! The router: every route, the catch-alls, and the middleware that gives each request an id,
//! an access-log line and metrics.

use ferry_shared::errors::ErrorCode;
use std::sync::Arc;
use std::time::Instant;

use actix_web::body::BoxBody;
use actix_web::dev::{Service as _, ServiceResponse};
use actix_web::http::header;
use actix_web::http::header::HeaderValue;
use actix_web::{HttpRequest, HttpResponse, web};

use crate::api::AppState;
use crate::api::admin::{get_model, get_release, list_models, post_release};
use crate::api::blobs::{get_blob, put_blob_handler, put_grouped_zstd_handler};
use crate::api::device::{keyring, keys, release_by_digest, resolve, signed_time};
use crate::api::error::{ApiError, REQUEST_ID, STORE_NAME};
use crate::api::ops::{healthz, metrics, metrics_open, readyz};
use crate::api::revocations;
use ferry_shared::wire::protocol::{PROTOCOL, PROTOCOL_HEADER, Protocol, SDK_HEADER, Sdk};

/// A GET route and the HEAD route HTTP requires beside it (actix sends HEAD answers without
/// their body).
fn get_head<F, Args>(r: actix_web::Resource, handler: F) -> actix_web::Resource
where
    F: actix_web::Handler<Args> + Clone,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    r.route(web::get().to(handler.clone()))
        .route(web::head().to(handler))
}

/// What a route adds to its resource.
type Routes = fn(actix_web::Resource) -> actix_web::Resource;

/// Every route: path, the methods it answers (the `Allow` header of its 405), and its handlers.
fn table() -> Vec<(&'static str, &'static str, Routes)> {
    use crate::api::{admin, fleet, health, ui};
    const GET: &str = "GET, HEAD";
    const GET_POST: &str = "GET, HEAD, POST";
    vec![
        ("/", GET, |r| get_head(r, ui::to_dashboard)),
        ("/healthz", GET, |r| get_head(r, healthz)),
        ("/ui", GET, |r| get_head(r, ui::index)),
        ("/ui/", GET, |r| get_head(r, ui::index)),
        ("/ui/{file}", GET, |r| get_head(r, ui::file)),
        ("/readyz", GET, |r| get_head(r, readyz)),
        ("/metrics", GET, |r| get_head(r, metrics)),
        ("/v1/keys", GET, |r| get_head(r, keys)),
        ("/v1/keyring", GET, |r| get_head(r, keyring)),
        ("/v1/resolve", "POST", |r| r.route(web::post().to(resolve))),
        ("/v1/time", GET, |r| get_head(r, signed_time)),
        ("/v1/keys/release", "POST", |r| {
            r.route(web::post().to(crate::api::keys::release_keys))
        }),
        ("/v1/releases/sha256/{hex}", GET, |r| {
            get_head(r, release_by_digest)
        }),
        ("/v1/blobs/sha256/{hex}", GET, |r| get_head(r, get_blob)),
        ("/v1/admin/blobs/sha256/{hex}", "PUT", |r| {
            r.route(web::put().to(put_blob_handler))
        }),
        ("/v1/admin/blobs/sha256/{hex}/grouped-zstd", "PUT", |r| {
            r.route(web::put().to(put_grouped_zstd_handler))
        }),
        ("/v1/admin/models", GET, |r| get_head(r, list_models)),
        ("/v1/admin/token", GET, |r| {
            get_head(r, crate::api::auth::whoami)
        }),
        ("/v1/admin/keyring", GET_POST, |r| {
            get_head(r, admin::get_keyring).route(web::post().to(admin::post_keyring))
        }),
        ("/v1/admin/models/{model}", GET, |r| get_head(r, get_model)),
        ("/v1/admin/models/{model}/releases", "POST", |r| {
            r.route(web::post().to(post_release))
        }),
        ("/v1/admin/models/{model}/revocations", GET_POST, |r| {
            get_head(r, revocations::get_revocations)
                .route(web::post().to(revocations::post_revocations))
        }),
        ("/v1/admin/models/{model}/releases/{version}", GET, |r| {
            get_head(r, get_release)
        }),
        (
            "/v1/admin/models/{model}/releases/{version}/seal-stop",
            "PUT, DELETE",
            |r| {
                r.route(web::put().to(crate::api::seal_admin::put_seal_stop))
                    .route(web::delete().to(crate::api::seal_admin::delete_seal_stop))
            },
        ),
        (
            "/v1/admin/models/{model}/releases/{version}/key-releases",
            GET,
            |r| get_head(r, crate::api::seal_admin::get_key_releases),
        ),
        ("/v1/telemetry", "POST", |r| {
            r.route(web::post().to(fleet::post_telemetry))
        }),
        ("/v1/admin/models/{model}/rollout", GET_POST, |r| {
            get_head(r, fleet::get_rollout).route(web::post().to(fleet::post_rollout))
        }),
        ("/v1/admin/models/{model}/experiment", GET_POST, |r| {
            get_head(r, crate::api::experiments::get_experiment)
                .route(web::post().to(crate::api::experiments::post_experiment))
        }),
        ("/v1/admin/models/{model}/experiment/stop", "POST", |r| {
            r.route(web::post().to(crate::api::experiments::post_stop))
        }),
        ("/v1/admin/models/{model}/experiment/history", GET, |r| {
            get_head(r, crate::api::experiments::get_history)
        }),
        ("/v1/admin/models/{model}/health", GET, |r| {
            get_head(r, health::get_health)
        }),
        ("/v1/admin/models/{model}/health/series", GET, |r| {
            get_head(r, health::get_health_series)
        }),
        ("/v1/admin/models/{model}/deny", GET_POST, |r| {
            get_head(r, fleet::get_deny).route(web::post().to(fleet::post_deny))
        }),
    ]
}

/// Every route's path and the methods it answers, as its 405 `Allow` header says (for the
/// tests that hold the OpenAPI document to the server).
pub fn allowed_methods() -> Vec<(&'static str, &'static str)> {
    table().into_iter().map(|(p, m, _)| (p, m)).collect()
}

/// Registers every route on an actix `ServiceConfig`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    for (path, allow, add) in table() {
        cfg.service(add(resource(path, allow)));
    }
}

/// A resource whose other methods get 405 with `Allow: allow`.
pub(crate) fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(move |req: HttpRequest| async move {
        let mut res = actix_web::ResponseError::error_response(&ApiError::new(
            ErrorCode::MethodNotAllowed,
            format!(
                "{} is not allowed on {}; allowed: {allow}",
                req.method(),
                req.path()
            ),
        ));
        res.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
        Ok::<_, actix_web::Error>(res)
    }))
}

/// The catch-all for unknown paths.
pub async fn not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(
        ErrorCode::NotFound,
        format!("no route for {} {}", req.method(), req.path()),
    ))
}

/// The `X-Request-Id` header when it is 1 to 128 characters of `[A-Za-z0-9._:-]` (anything
/// else is ignored: it goes into logs and error bodies).
pub(crate) fn incoming_request_id(headers: &actix_web::http::header::HeaderMap) -> Option<String> {
    let v = headers.get("x-request-id")?.to_str().ok()?;
    (!v.is_empty()
        && v.len() <= 128
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:".contains(&b)))
    .then(|| v.to_string())
}

/// The trace id of a valid W3C `traceparent` header (`00-<32 hex>-<16 hex>-<2 hex>`, not all
/// zeros).
fn trace_id(headers: &actix_web::http::header::HeaderMap) -> Option<String> {
    let v = headers.get("traceparent")?.to_str().ok()?;
    let parts: Vec<&str> = v.trim().split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if parts.len() != 4
        || !hex(parts[0], 2)
        || parts[0] == "ff"
        || !hex(parts[1], 32)
        || !hex(parts[2], 16)
        || !hex(parts[3], 2)
        || parts[1].bytes().all(|b| b == b'0')
    {
        return None;
    }
    Some(parts[1].to_ascii_lowercase())
}

/// The device endpoint a path belongs to (for the protocol counters), if any.
fn device_endpoint(path: &str) -> Option<&'static str> {
    match path {
        "/v1/resolve" => Some("resolve"),
        "/v1/telemetry" => Some("telemetry"),
        "/v1/keys" => Some("keys"),
        "/v1/keys/release" => Some("key_release"),
        "/v1/keyring" => Some("keyring"),
        _ if path.starts_with("/v1/blobs/") => Some("blobs"),
        _ if path.starts_with("/v1/releases/") => Some("releases"),
        _ => None,
    }
}

/// The `Ferry-Protocol-Sunset` and `Sunset` (RFC 8594, an HTTP date) values for `day`: the
/// end of that day, UTC.
pub fn sunset_headers(day: time::Date) -> Option<(HeaderValue, HeaderValue)> {
    let next = day.next_day()?;
    let http = time::format_description::parse_borrowed::<1>(
        "[weekday repr:short], [day] [month repr:short] [year] 00:00:00 GMT",
    )
    .ok()?;
    let iso = time::format_description::parse_borrowed::<1>("[year]-[month]-[day]").ok()?;
    Some((
        HeaderValue::from_str(&day.format(&iso).ok()?).ok()?,
        HeaderValue::from_str(&next.format(&http).ok()?).ok()?,
    ))
}

/// The application of the `metrics_listen` listener: `/metrics` without a token, `/healthz`
/// and `/readyz`; nothing else.
pub fn metrics_app(
    state: Arc<AppState>,
) -> actix_web::App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = ServiceResponse<BoxBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    actix_web::App::new()
        .app_data(web::Data::from(state))
        .service(get_head(web::resource("/metrics"), metrics_open))
        .service(get_head(web::resource("/healthz"), healthz))
        .service(get_head(web::resource("/readyz"), readyz))
        .default_service(web::to(not_found))
}

/// Builds the actix `App` for `state`, with middleware.
pub fn app(
    state: Arc<AppState>,
) -> actix_web::App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = ServiceResponse<BoxBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let data = web::Data::from(state.clone());
    let sunset = state.config().protocol_v1_sunset.and_then(sunset_headers);
    actix_web::App::new()
        .app_data(data)
        .configure(routes)
        .default_service(web::to(not_found))
        .wrap_fn(move |req, srv| {
            let state = state.clone();
            let sunset = sunset.clone();
            // Which protocol and SDK call the device endpoints (protocol v1: counted, never
            // refused; a newer protocol is answered in v1).
            let device = device_endpoint(req.path());
            if let Some(endpoint) = device {
                let h = req.headers();
                state.metrics().protocol.client(
                    endpoint,
                    Protocol::from_header(h.get(PROTOCOL_HEADER).map(HeaderValue::as_bytes)),
                    Sdk::from_header(h.get(SDK_HEADER).map(HeaderValue::as_bytes)).as_ref(),
                    &|name| state.telemetry().sdk_vouched(name),
                );
            }
            // A caller's request id (a proxy's, a client's) is kept, so logs line up across
            // hops; otherwise one is made. A W3C `traceparent` adds its trace id to the log.
            let id = incoming_request_id(req.headers()).unwrap_or_else(|| state.next_request_id());
            let trace_id = trace_id(req.headers());
            let started = Instant::now();
            let method = req.method().clone();
            let store_name = state.store_name();
            let over = req
                .conn_data::<crate::api::connections::ConnSlot>()
                .is_some_and(crate::api::connections::ConnSlot::over);
            let fut = if over {
                // Rendered here, before the request reaches the scope below: give the body
                // the request's id too.
                let limit = state.config().limits.max_connections_per_address;
                let mut res = REQUEST_ID.sync_scope(id.clone(), || {
                    req.error_response(ApiError::new(
                        ErrorCode::RateLimited,
                        format!("more than {limit} open connections from this address"),
                    ))
                });
                res.response_mut()
                    .head_mut()
                    .set_connection_type(actix_web::http::ConnectionType::Close);
                futures_util::future::Either::Left(std::future::ready(Ok(res)))
            } else {
                futures_util::future::Either::Right(srv.call(req))
            };
            async move {
                let mut res: ServiceResponse<BoxBody> = REQUEST_ID
                    .scope(id.clone(), STORE_NAME.scope(store_name, fut))
                    .await?;
                if let Ok(v) = HeaderValue::from_str(&id) {
                    res.headers_mut()
                        .insert(header::HeaderName::from_static("x-request-id"), v);
                }
                // Every answer says which protocol it speaks; device answers also say when
                // v1 is being retired.
                res.headers_mut().insert(
                    header::HeaderName::from_static("ferry-protocol"),
                    HeaderValue::from(PROTOCOL),
                );
                if let (Some(_), Some((day, http))) = (device, sunset) {
                    res.headers_mut().insert(
                        header::HeaderName::from_static("ferry-protocol-sunset"),
                        day,
                    );
                    res.headers_mut()
                        .insert(header::HeaderName::from_static("sunset"), http);
                }
                let route = res
                    .request()
                    .match_pattern()
                    .unwrap_or_else(|| "unmatched".to_string());
                let secs = started.elapsed().as_secs_f64();
                state
                    .metrics()
                    .http_request(&route, method.as_str(), res.status().as_u16(), secs);
                let status = res.status().as_u16();
                let ms = (secs * 1e6).round() / 1e3;
                if state.log_request(&route, status, secs) {
                    // The client as limits see it (behind a trusted proxy, the device it
                    // names): worked out only for the lines written.
                    let client = state
                        .client_ip(res.request())
                        .map(|a| a.to_canonical().to_string())
                        .unwrap_or_default();
                    tracing::info!(
                        request_id = %id,
                        trace_id = trace_id.as_deref().unwrap_or(""),
                        method = %method,
                        route = %route,
                        status,
                        ms,
                        client = %client,
                        "request"
                    );
                } else {
                    tracing::debug!(
                        request_id = %id,
                        trace_id = trace_id.as_deref().unwrap_or(""),
                        method = %method,
                        route = %route,
                        status,
                        ms,
                        "request"
                    );
                }
                Ok(res)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            HeaderName::from_static(name),
            HeaderValue::from_str(value).expect("value"),
        );
        h
    }

    #[test]
    fn caller_request_ids_and_trace_ids_are_kept_only_when_well_formed() {
        assert_eq!(
            incoming_request_id(&headers("x-request-id", "lb-7f3a:42")).as_deref(),
            Some("lb-7f3a:42")
        );
        for bad in ["", "has space", "quote\"", &"a".repeat(129), "newline%0A"] {
            if let Ok(v) = HeaderValue::from_str(bad) {
                let mut h = HeaderMap::new();
                h.insert(HeaderName::from_static("x-request-id"), v);
                assert_eq!(incoming_request_id(&h), None, "{bad:?}");
            }
        }
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            trace_id(&headers("traceparent", tp)).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "garbage",
        ] {
            assert_eq!(trace_id(&headers("traceparent", bad)), None, "{bad}");
        }
    }
}
