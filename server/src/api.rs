//! The HTTP API: device endpoints, admin endpoints, operations endpoints, and the middleware
//! that gives every request an id, an access-log line and metrics.
//!
//! | route | who | what |
//! |---|---|---|
//! | `POST /v1/resolve` | device | capabilities in, signed decision + signed manifest out |
//! | `GET, HEAD /v1/blobs/sha256/{hex}` | device, mirror | blob bytes with `Range`, `ETag`, immutable caching |
//! | `GET /v1/keys` | device | the public keys to trust |
//! | `PUT /v1/admin/blobs/sha256/{hex}` | `publish` | streamed, hashed upload |
//! | `POST /v1/admin/models/{model}/releases` | `publish` | admit a signed release |
//! | `GET /v1/admin/models[/{model}[/releases/{version}]]` | `read` | catalog views |
//! | `GET /healthz`, `/readyz`, `/metrics` | ops | liveness, readiness, Prometheus |

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use actix_web::body::BoxBody;
use actix_web::dev::{Service as _, ServiceResponse};
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use ferry_shared::dsse::{KeyPair, KeyRing};
use ferry_shared::resolve::{
    Candidate, Cohort, DECISION_PAYLOAD_TYPE, Decision, ResolveRequest, ResolveResponse,
};
use ferry_shared::select::{self, Preference};
use ferry_shared::trust::TrustFile;
use ferry_shared::{ModelName, Sha256Digest};
use futures_util::{StreamExt as _, TryStreamExt as _};
use object_store::{GetOptions, GetRange, ObjectStoreExt as _};
use semver::Version;
use serde::Deserialize;
use time::OffsetDateTime;

use crate::auth::{Scope, authorize};
use crate::catalog::{Catalog, Release};
use crate::config::Config;
use crate::error::{ApiError, REQUEST_ID};
use crate::metrics::Metrics;
use crate::publish::{BlobOutcome, publish_release, put_blob};
use crate::storage::{StorageKey, Store};
use crate::telemetry::{DenyEntry, Telemetry};
use ferry_shared::rollout::RolloutPlan;

/// Everything the handlers share.
pub struct AppState {
    /// Configuration.
    pub config: Config,
    /// The object store.
    pub store: Store,
    /// Keys trusted to sign releases.
    pub release_ring: KeyRing,
    /// Signs decisions.
    pub online: KeyPair,
    /// Published at `GET /v1/keys`.
    pub trust: TrustFile,
    /// The catalog (replaced wholesale on change).
    pub catalog: RwLock<Arc<Catalog>>,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Rollout plans in force (newest revision per model).
    pub rollouts: RwLock<Arc<BTreeMap<ModelName, RolloutPlan>>>,
    /// Deny lists in force per model.
    pub deny: RwLock<Arc<BTreeMap<ModelName, Vec<DenyEntry>>>>,
    /// Telemetry aggregates.
    pub telemetry: Telemetry,
    /// This replica's id in telemetry file names.
    pub node: String,
    /// Bounds telemetry parsing to half the cores, so resolve always has CPU left.
    pub ingest_permits: tokio::sync::Semaphore,
    sequence: AtomicU64,
    request_counter: AtomicU64,
    request_prefix: String,
}

impl AppState {
    /// Builds the state.
    pub fn new(
        config: Config,
        store: Store,
        release_ring: KeyRing,
        online: KeyPair,
        trust: TrustFile,
        catalog: Catalog,
    ) -> Self {
        let mut prefix = [0u8; 4];
        let _ = getrandom::fill(&mut prefix);
        Self {
            config,
            store,
            release_ring,
            online,
            trust,
            catalog: RwLock::new(Arc::new(catalog)),
            metrics: Metrics::default(),
            rollouts: RwLock::new(Arc::new(BTreeMap::new())),
            deny: RwLock::new(Arc::new(BTreeMap::new())),
            telemetry: Telemetry::default(),
            node: format!("node-{}", hex::encode(prefix)),
            ingest_permits: tokio::sync::Semaphore::new(
                (std::thread::available_parallelism().map_or(2, |n| n.get()) / 2).max(1),
            ),
            sequence: AtomicU64::new(0),
            request_counter: AtomicU64::new(0),
            request_prefix: hex::encode(prefix),
        }
    }

    /// The current catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        match self.catalog.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The rollout plans in force.
    pub fn rollouts(&self) -> Arc<BTreeMap<ModelName, RolloutPlan>> {
        match self.rollouts.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Replaces one model's plan in memory.
    pub fn set_rollout(&self, model: &ModelName, plan: RolloutPlan) {
        let mut next = (*self.rollouts()).clone();
        next.insert(model.clone(), plan);
        self.replace_rollouts(next);
    }

    /// Replaces all plans in memory.
    pub fn replace_rollouts(&self, plans: BTreeMap<ModelName, RolloutPlan>) {
        let next = Arc::new(plans);
        match self.rollouts.write() {
            Ok(mut g) => *g = next,
            Err(p) => *p.into_inner() = next,
        }
    }

    /// The deny lists in force.
    pub fn deny_lists(&self) -> Arc<BTreeMap<ModelName, Vec<DenyEntry>>> {
        match self.deny.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Replaces one model's deny list in memory.
    pub fn set_deny(&self, model: &ModelName, entries: Vec<DenyEntry>) {
        let mut next = (*self.deny_lists()).clone();
        next.insert(model.clone(), entries);
        let next = Arc::new(next);
        match self.deny.write() {
            Ok(mut g) => *g = next,
            Err(p) => *p.into_inner() = next,
        }
    }

    /// Adds a release to the catalog.
    pub fn add_release(&self, release: Release) {
        let mut next = (*self.catalog()).clone();
        next.insert(release);
        self.replace_catalog(next);
    }

    /// Replaces the catalog.
    pub fn replace_catalog(&self, catalog: Catalog) {
        let next = Arc::new(catalog);
        match self.catalog.write() {
            Ok(mut g) => *g = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
    }

    /// The next decision sequence number: milliseconds since the epoch, strictly increasing
    /// within this process (so replicas agree roughly and one replica never repeats).
    fn next_sequence(&self, now: OffsetDateTime) -> u64 {
        let ms = (now.unix_timestamp_nanos() / 1_000_000).max(0) as u64;
        let mut cur = self.sequence.load(Ordering::Relaxed);
        loop {
            let next = ms.max(cur + 1);
            match self
                .sequence
                .compare_exchange(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => cur = seen,
            }
        }
    }

    fn next_request_id(&self) -> String {
        let n = self.request_counter.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n:08x}", self.request_prefix)
    }
}

/// Registers every route on an actix `ServiceConfig`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz))
        .route("/metrics", web::get().to(metrics))
        .service(resource("/v1/keys").route(web::get().to(keys)))
        .service(resource("/v1/resolve").route(web::post().to(resolve)))
        .service(
            resource("/v1/blobs/sha256/{hex}")
                .route(web::get().to(get_blob))
                .route(web::head().to(get_blob)),
        )
        .service(resource("/v1/admin/blobs/sha256/{hex}").route(web::put().to(put_blob_handler)))
        .service(resource("/v1/admin/models").route(web::get().to(list_models)))
        .service(resource("/v1/admin/models/{model}").route(web::get().to(get_model)))
        .service(resource("/v1/admin/models/{model}/releases").route(web::post().to(post_release)))
        .service(
            resource("/v1/admin/models/{model}/releases/{version}")
                .route(web::get().to(get_release)),
        )
        .service(resource("/v1/telemetry").route(web::post().to(crate::fleet::post_telemetry)))
        .service(
            resource("/v1/admin/models/{model}/rollout")
                .route(web::get().to(crate::fleet::get_rollout))
                .route(web::post().to(crate::fleet::post_rollout)),
        )
        .service(
            resource("/v1/admin/models/{model}/health")
                .route(web::get().to(crate::fleet::get_health)),
        )
        .service(
            resource("/v1/admin/models/{model}/deny")
                .route(web::get().to(crate::fleet::get_deny))
                .route(web::post().to(crate::fleet::post_deny)),
        );
}

fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(method_not_allowed))
}

async fn method_not_allowed(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", req.method(), req.path()),
    ))
}

/// The catch-all for unknown paths.
pub async fn not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::not_found(
        "not_found",
        format!("no route for {} {}", req.method(), req.path()),
    ))
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
    actix_web::App::new()
        .app_data(data)
        .configure(routes)
        .default_service(web::to(not_found))
        .wrap_fn(move |req, srv| {
            let state = state.clone();
            let id = state.next_request_id();
            let started = Instant::now();
            let method = req.method().clone();
            let fut = srv.call(req);
            async move {
                let mut res: ServiceResponse<BoxBody> = REQUEST_ID.scope(id.clone(), fut).await?;
                if let Ok(v) = HeaderValue::from_str(&id) {
                    res.headers_mut()
                        .insert(header::HeaderName::from_static("x-request-id"), v);
                }
                let route = res
                    .request()
                    .match_pattern()
                    .unwrap_or_else(|| "unmatched".to_string());
                let status = res.status().as_u16().to_string();
                let secs = started.elapsed().as_secs_f64();
                state.metrics.inc(
                    "ferry_http_requests_total",
                    &[
                        ("route", &route),
                        ("method", method.as_str()),
                        ("status", &status),
                    ],
                    1,
                );
                state.metrics.observe(
                    "ferry_http_request_duration_seconds",
                    &[("route", &route)],
                    secs,
                );
                tracing::info!(
                    request_id = %id,
                    method = %method,
                    route = %route,
                    status = res.status().as_u16(),
                    ms = secs * 1000.0,
                    "request"
                );
                Ok(res)
            }
        })
}

/// Reads a request body up to `limit` bytes.
pub(crate) async fn read_body(mut payload: web::Payload, limit: usize) -> Result<Bytes, ApiError> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::bad_request("body_unreadable", format!("cannot read the body: {e}"))
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the body is larger than the limit of {limit} bytes"),
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

fn parse_model(s: &str) -> Result<ModelName, ApiError> {
    s.parse()
        .map_err(|e: ferry_shared::NameError| ApiError::bad_request("invalid_name", e.to_string()))
}

fn parse_digest(s: &str) -> Result<Sha256Digest, ApiError> {
    if s.len() != 64
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(ApiError::bad_request(
            "invalid_digest",
            "a blob is named by 64 lowercase hex characters of its sha256",
        ));
    }
    Sha256Digest::from_hex(s).map_err(|e| ApiError::bad_request("invalid_digest", e.to_string()))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    // A cheap round trip to the store: a missing key answers NotFound when the store works.
    match state
        .store
        .head(&object_store::path::Path::from("readyz-probe"))
        .await
    {
        Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(ApiError::unavailable(e)),
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "status": "ready",
        "releases": state.catalog().release_count(),
    })))
}

async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(format!(
            "{}# TYPE ferry_telemetry_raw_dropped_total counter\nferry_telemetry_raw_dropped_total {}\n",
            state.metrics.render(),
            state.telemetry.dropped()
        ))
}

async fn keys(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(&state.trust)
}

#[derive(Debug, Deserialize)]
struct ResolveQuery {
    #[serde(default)]
    explain: bool,
}

async fn resolve(
    state: web::Data<AppState>,
    query: Result<web::Query<ResolveQuery>, actix_web::Error>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let outcome = resolve_inner(&state, query, payload).await;
    let label = match &outcome {
        Ok(_) => "ok",
        Err(e) => e.code,
    };
    state
        .metrics
        .inc("ferry_resolves_total", &[("outcome", label)], 1);
    outcome
}

async fn resolve_inner(
    state: &AppState,
    query: Result<web::Query<ResolveQuery>, actix_web::Error>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let explain = query
        .map_err(|e| ApiError::bad_request("request_invalid", format!("bad query string: {e}")))?
        .explain;
    let body = read_body(payload, state.config.limits.max_resolve_bytes).await?;
    let device: ResolveRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request("request_malformed", format!("resolve request: {e}")))?;
    device
        .validate()
        .map_err(|m| ApiError::bad_request("request_invalid", m))?;
    let catalog = state.catalog();
    if !catalog.has_model(&device.model) {
        return Err(ApiError::not_found(
            "model_not_found",
            format!("no release of {} is published", device.model),
        ));
    }
    let all = catalog.releases_newest_first(&device.model);
    let plan = state.rollouts().get(&device.model).cloned();
    let wanted_cohort = plan
        .as_ref()
        .map_or(Cohort::Baseline, |p| p.cohort(&device.install_id));
    let releases = crate::fleet::releases_for(&all, plan.as_ref(), wanted_cohort);
    let manifests: Vec<&ferry_shared::manifest::ReleaseManifest> =
        releases.iter().map(|r| &r.manifest).collect();
    let pref: &Preference = &state.config.preference;
    let deny_lists = state.deny_lists();
    let deny_entries: &[DenyEntry] = deny_lists.get(&device.model).map_or(&[], Vec::as_slice);
    let deny = |m: &ferry_shared::manifest::ReleaseManifest,
                v: &ferry_shared::manifest::Variant,
                d: &ResolveRequest| {
        let release = m.version.to_string();
        deny_entries
            .iter()
            .find(|e| e.matches(&release, v.id.as_str(), &d.soc, &d.device_model))
            .map(DenyEntry::reason)
    };
    let selection = match select::select(&manifests, &device, pref, &deny) {
        Ok(s) => s,
        Err(explain) => {
            let first: Vec<String> = explain
                .iter()
                .take(6)
                .map(|e| format!("{}/{}: {}", e.release, e.variant, e.reasons.join(", ")))
                .collect();
            return Err(ApiError::not_found(
                "no_compatible_variant",
                format!(
                    "no variant of {} fits this device: {}",
                    device.model,
                    first.join("; ")
                ),
            )
            .with_details(serde_json::json!({ "explain": explain })));
        }
    };
    let release = releases
        .iter()
        .find(|r| r.manifest.version == selection.manifest.version)
        .ok_or_else(|| ApiError::internal("selected release vanished from the catalog"))?;
    let cohort = match plan.as_ref().and_then(|p| p.staged.as_ref()) {
        Some(staged)
            if wanted_cohort == Cohort::Staged && *staged == selection.manifest.version =>
        {
            Cohort::Staged
        }
        _ => Cohort::Baseline,
    };
    state.telemetry.record_cohort(
        device.model.as_str(),
        if cohort == Cohort::Staged {
            "staged"
        } else {
            "baseline"
        },
        &device.install_id,
    );
    let base = state.config.public_url.clone().unwrap_or_default();
    let now = OffsetDateTime::now_utc();
    let decision = Decision {
        model: device.model.clone(),
        release: selection.manifest.version.clone(),
        cohort,
        install_id: device.install_id.clone(),
        issued_at: now,
        expires_at: now + time::Duration::seconds(state.config.decision_ttl_secs as i64),
        sequence: state.next_sequence(now),
        candidates: selection
            .candidates
            .iter()
            .map(|v| Candidate {
                variant: v.id.clone(),
                delegate: v.delegate,
                backends: v.backends.clone(),
                sha256: v.sha256,
                size: v.size,
                url: format!("{base}/v1/blobs/sha256/{}", v.sha256.to_hex()),
            })
            .collect(),
    };
    let payload = serde_json::to_vec(&decision).map_err(ApiError::internal)?;
    let response = ResolveResponse {
        decision: state.online.sign(DECISION_PAYLOAD_TYPE, &payload),
        release: release.envelope.clone(),
        explain: explain.then_some(selection.explain),
    };
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(response))
}

/// A parsed single byte range, inclusive end.
#[derive(Debug, PartialEq, Eq)]
enum RangeSpec {
    /// No usable Range header: send everything.
    Full,
    /// Bytes `start..=end`.
    Part(u64, u64),
    /// Cannot be satisfied.
    Unsatisfiable,
}

/// Parses a `Range` header for a resource of `size` bytes. Multiple ranges and malformed
/// headers are ignored (RFC 9110 allows serving the whole resource instead).
fn parse_range(value: Option<&str>, size: u64) -> RangeSpec {
    let Some(spec) = value.and_then(|v| v.trim().strip_prefix("bytes=")) else {
        return RangeSpec::Full;
    };
    if spec.contains(',') {
        return RangeSpec::Full;
    }
    let Some((a, b)) = spec.split_once('-') else {
        return RangeSpec::Full;
    };
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        let Ok(n) = b.parse::<u64>() else {
            return RangeSpec::Full;
        };
        if n == 0 || size == 0 {
            return RangeSpec::Unsatisfiable;
        }
        return RangeSpec::Part(size.saturating_sub(n), size - 1);
    }
    let Ok(start) = a.parse::<u64>() else {
        return RangeSpec::Full;
    };
    let end = if b.is_empty() {
        size.saturating_sub(1)
    } else {
        match b.parse::<u64>() {
            Ok(e) if e >= start => e.min(size.saturating_sub(1)),
            _ => return RangeSpec::Full,
        }
    };
    if start >= size {
        return RangeSpec::Unsatisfiable;
    }
    RangeSpec::Part(start, end)
}

fn etag_matches(value: Option<&str>, etag: &str) -> bool {
    value.is_some_and(|v| {
        v.split(',').any(|t| {
            let t = t.trim();
            t == "*" || t == etag || t.strip_prefix("W/") == Some(etag)
        })
    })
}

async fn get_blob(
    req: HttpRequest,
    state: web::Data<AppState>,
    hex: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let digest = parse_digest(&hex)?;
    let key = StorageKey::blob(&digest);
    let meta = state.store.head(&key).await.map_err(|e| match e {
        object_store::Error::NotFound { .. } => {
            ApiError::not_found("blob_not_found", format!("no blob {digest}"))
        }
        other => ApiError::unavailable(other),
    })?;
    let size = meta.size;
    let etag = format!("\"{}\"", digest.to_hex());
    let header_str =
        |name: header::HeaderName| req.headers().get(name).and_then(|v| v.to_str().ok());
    let builder = |status: StatusCode| {
        let mut b = HttpResponse::build(status);
        b.insert_header((header::ETAG, etag.clone()))
            .insert_header((header::CACHE_CONTROL, "public, max-age=31536000, immutable"))
            .insert_header((header::ACCEPT_RANGES, "bytes"));
        b
    };
    if etag_matches(header_str(header::IF_NONE_MATCH), &etag) {
        return Ok(builder(StatusCode::NOT_MODIFIED).finish());
    }
    let range = parse_range(header_str(header::RANGE), size);
    let (status, start, end) = match range {
        RangeSpec::Full => (StatusCode::OK, 0, size),
        RangeSpec::Part(a, b) => (StatusCode::PARTIAL_CONTENT, a, b + 1),
        RangeSpec::Unsatisfiable => {
            return Ok(builder(StatusCode::RANGE_NOT_SATISFIABLE)
                .insert_header((header::CONTENT_RANGE, format!("bytes */{size}")))
                .finish());
        }
    };
    let mut b = builder(status);
    b.content_type("application/octet-stream");
    if status == StatusCode::PARTIAL_CONTENT {
        b.insert_header((
            header::CONTENT_RANGE,
            format!("bytes {start}-{}/{size}", end - 1),
        ));
    }
    let len = end - start;
    if req.method() == Method::HEAD {
        // The body is never sent for HEAD, but its declared size becomes Content-Length.
        let empty = futures_util::stream::empty::<Result<Bytes, std::io::Error>>();
        return Ok(b.body(actix_web::body::SizedStream::new(len, empty)));
    }
    let opts = GetOptions {
        range: Some(GetRange::Bounded(start..end)),
        ..GetOptions::default()
    };
    let got = state
        .store
        .get_opts(&key, opts)
        .await
        .map_err(ApiError::unavailable)?;
    state.metrics.inc("ferry_blob_bytes_served_total", &[], len);
    let range = got.range.clone();
    match got.payload {
        // The local store would stream a file in 8 KiB pieces; read it in larger ones on the
        // blocking pool instead (bench/server.sh: about 5x the throughput on a 64 MiB blob).
        object_store::GetResultPayload::File(file, _) => Ok(b
            .no_chunking(len)
            .streaming(file_chunks(file, range.start, range.end))),
        object_store::GetResultPayload::Stream(stream) => {
            let stream = stream.map_err(|e| {
                tracing::error!("blob stream failed: {e}");
                std::io::Error::other(e.to_string())
            });
            Ok(b.no_chunking(len).streaming(stream))
        }
    }
}

/// Bytes `start..end` of `file` as a stream of chunks of up to 256 KiB, read on the blocking
/// pool.
fn file_chunks(
    file: std::fs::File,
    start: u64,
    end: u64,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    const CHUNK: u64 = 256 * 1024;
    futures_util::stream::try_unfold((file, start), move |(mut file, pos)| async move {
        if pos >= end {
            return Ok(None);
        }
        let want = (end - pos).min(CHUNK) as usize;
        let (file, buf) = web::block(move || -> std::io::Result<_> {
            use std::io::{Read as _, Seek as _, SeekFrom};
            file.seek(SeekFrom::Start(pos))?;
            let mut buf = vec![0u8; want];
            file.read_exact(&mut buf)?;
            Ok((file, buf))
        })
        .await
        .map_err(std::io::Error::other)??;
        Ok(Some((Bytes::from(buf), (file, pos + want as u64))))
    })
}

async fn put_blob_handler(
    req: HttpRequest,
    state: web::Data<AppState>,
    hex: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let caller = authorize(&req, &state.config.tokens, Scope::Publish)?;
    let digest = parse_digest(&hex)?;
    let max = state.config.limits.max_blob_bytes;
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > max
    {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "blob_too_large",
            format!("blob is {len} bytes; the limit is {max}"),
        ));
    }
    let outcome = put_blob(&state.store, &digest, payload, max).await?;
    let (status, size, created) = match outcome {
        BlobOutcome::Created { size } => (StatusCode::CREATED, size, true),
        BlobOutcome::Existed { size } => (StatusCode::OK, size, false),
    };
    tracing::info!(caller = caller.name, %digest, size, created, "blob upload");
    Ok(HttpResponse::build(status).json(serde_json::json!({
        "sha256": digest.to_hex(),
        "size": size,
        "created": created,
    })))
}

async fn post_release(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let caller = authorize(&req, &state.config.tokens, Scope::Publish)?;
    let model = parse_model(&model)?;
    let body = read_body(payload, state.config.limits.max_json_bytes).await?;
    let outcome = publish_release(&state.store, &state.release_ring, &model, &body).await;
    let label = match &outcome {
        Ok(_) => "ok",
        Err(e) => e.code,
    };
    state
        .metrics
        .inc("ferry_publishes_total", &[("outcome", label)], 1);
    let release = outcome?;
    tracing::info!(caller = caller.name, model = %release.manifest.model, version = %release.manifest.version, "release published");
    let view = release_view(&release);
    state.add_release(release);
    Ok(HttpResponse::Created().json(view))
}

fn release_view(r: &Release) -> serde_json::Value {
    serde_json::json!({
        "model": r.manifest.model,
        "version": r.manifest.version.to_string(),
        "notes": r.manifest.notes,
        "created": r.manifest.created.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
        "variants": r.manifest.variants,
        "inspection": r.inspection,
        "envelope": r.envelope,
    })
}

async fn list_models(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config.tokens, Scope::Read)?;
    let catalog = state.catalog();
    let models: Vec<serde_json::Value> = catalog
        .models()
        .map(|(m, versions)| {
            serde_json::json!({
                "model": m,
                "releases": versions.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
                "latest": versions.last().map(|v| v.to_string()),
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "models": models })))
}

async fn get_model(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config.tokens, Scope::Read)?;
    let model = parse_model(&model)?;
    let releases = state.catalog().releases_newest_first(&model);
    if releases.is_empty() {
        return Err(ApiError::not_found(
            "model_not_found",
            format!("no release of {model} is published"),
        ));
    }
    let list: Vec<serde_json::Value> = releases
        .iter()
        .map(|r| {
            serde_json::json!({
                "version": r.manifest.version.to_string(),
                "notes": r.manifest.notes,
                "variants": r.manifest.variants.iter().map(|v| serde_json::json!({
                    "id": v.id, "delegate": v.delegate, "quant": v.quant, "size": v.size,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "model": model, "releases": list })))
}

async fn get_release(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    authorize(&req, &state.config.tokens, Scope::Read)?;
    let (model, version) = path.into_inner();
    let model = parse_model(&model)?;
    if version.len() > 64 {
        return Err(ApiError::bad_request(
            "invalid_version",
            "a version is at most 64 characters",
        ));
    }
    let version: Version = version
        .parse()
        .map_err(|e| ApiError::bad_request("invalid_version", format!("{e}")))?;
    let release = state.catalog().release(&model, &version).ok_or_else(|| {
        ApiError::not_found(
            "release_not_found",
            format!("{model} {version} is not published"),
        )
    })?;
    Ok(HttpResponse::Ok().json(release_view(&release)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use RangeSpec::*;
        assert_eq!(parse_range(None, 10), Full);
        assert_eq!(parse_range(Some("bytes=0-4"), 10), Part(0, 4));
        assert_eq!(parse_range(Some("bytes=5-"), 10), Part(5, 9));
        assert_eq!(parse_range(Some("bytes=-3"), 10), Part(7, 9));
        assert_eq!(parse_range(Some("bytes=-30"), 10), Part(0, 9));
        assert_eq!(parse_range(Some("bytes=8-100"), 10), Part(8, 9));
        assert_eq!(parse_range(Some("bytes=10-"), 10), Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=-0"), 10), Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=0-1,3-4"), 10), Full);
        assert_eq!(parse_range(Some("bytes=4-2"), 10), Full);
        assert_eq!(parse_range(Some("items=0-1"), 10), Full);
        assert_eq!(parse_range(Some("bytes=x-y"), 10), Full);
        assert_eq!(
            parse_range(Some("bytes=99999999999999999999999-"), 10),
            Full
        );
    }

    #[test]
    fn etags() {
        assert!(etag_matches(Some("\"ab\""), "\"ab\""));
        assert!(etag_matches(Some("W/\"ab\", \"cd\""), "\"ab\""));
        assert!(etag_matches(Some("*"), "\"ab\""));
        assert!(!etag_matches(Some("\"cd\""), "\"ab\""));
        assert!(!etag_matches(None, "\"ab\""));
    }
}
