//! `ferry-client`: the library apps embed to fetch, verify, cache and load ExecuTorch models.
//!
//! ```text
//! load(model, device)
//!   resolve ──(unreachable / 5xx / refused)──────────────► last known good from the cache
//!     │ verify decision (online key, expiry, sequence) and release (release key)
//!     ▼
//!   for each candidate, best first:
//!     cached and intact? ── no ──► resumable download into .part, hashed while streaming
//!     open program → compare method backends with the registered ones → load method
//!     golden check (when the manifest has one)
//!     ok ──► record as last known good, queue telemetry, return
//!     failed ──► queue telemetry (load failed, fallback from → to), next candidate
//! ```
//!
//! The client is blocking (no async runtime), talks HTTP through `ureq` with rustls, and never
//! hands the runtime a byte whose SHA-256 has not matched the signed manifest. Build one with
//! [`ClientBuilder`]. The real ExecuTorch runtime is behind the `executorch` feature
//! ([`executorch_runtime`]); any other runtime implements [`Runtime`].

pub mod cache;
pub mod download;
pub mod error;
#[cfg(feature = "executorch")]
pub mod executorch_runtime;
#[cfg(feature = "ffi")]
pub mod ffi;
pub mod runtime;
pub mod telemetry;
pub mod verify;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_shared::dsse::KeyRing;
use ferry_shared::manifest::{Platform, TensorValue, Variant};
use ferry_shared::resolve::{ErrorBody, ResolveRequest, ResolveResponse};
use ferry_shared::telemetry::{EventKind, Outcome, TelemetryEvent};
use ferry_shared::trust::TrustFile;
use ferry_shared::{BackendId, Sha256Digest};
use semver::Version;
use time::OffsetDateTime;

pub use crate::cache::{Cache, ModelEntry};
pub use crate::download::{DownloadLimits, ProgressFn};
pub use crate::error::{Attempt, ClientError};
pub use crate::runtime::{Program, Runtime, RuntimeError, max_abs_diff};
pub use crate::telemetry::SendReport;
use crate::verify::{Plan, PlannedVariant, verify_release, verify_response};

/// Where time comes from (injectable so tests can play an expired decision).
pub trait Clock: Send + Sync {
    /// The current UTC time.
    fn now(&self) -> OffsetDateTime;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// What the device tells the server about itself (the runtime version and registered backends
/// come from the [`Runtime`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// A stable, app-scoped install id (decides rollout cohorts).
    pub install_id: String,
    /// Platform.
    pub platform: Platform,
    /// OS version.
    pub os_version: String,
    /// Device model.
    pub device_model: String,
    /// System on chip.
    pub soc: String,
    /// RAM in MiB.
    pub ram_mb: u64,
    /// Backends to claim beyond those the runtime registered (testing on a desktop what a
    /// phone would be offered); the runtime's real answer still decides what loads.
    pub claimed_backends: Vec<String>,
}

/// Where the loaded bytes came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Downloaded now.
    Downloaded,
    /// Already in the cache (re-verified before loading).
    Cached,
    /// The server could not be used; the last known good verified variant was loaded.
    LastKnownGood {
        /// Why the server was not used (error code).
        code: String,
        /// Its message.
        reason: String,
    },
}

/// A model loaded into the runtime.
pub struct LoadedModel {
    /// Model name.
    pub model: String,
    /// Release version.
    pub release: String,
    /// Variant id.
    pub variant: String,
    /// Its delegate.
    pub delegate: String,
    /// The verified file on disk.
    pub path: PathBuf,
    /// Where it came from.
    pub source: Source,
    /// Candidates tried before this one, and why each failed.
    pub attempts: Vec<Attempt>,
    /// Largest difference of the golden check, when the manifest had one.
    pub golden_max_abs_diff: Option<f64>,
    /// The method that was loaded.
    pub method: String,
    program: Box<dyn Program>,
    _guard: InUseGuard,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("model", &self.model)
            .field("release", &self.release)
            .field("variant", &self.variant)
            .field("delegate", &self.delegate)
            .field("path", &self.path)
            .field("source", &self.source)
            .field("attempts", &self.attempts)
            .finish()
    }
}

impl LoadedModel {
    /// Runs the loaded method.
    pub fn run(&mut self, inputs: &[TensorValue]) -> Result<Vec<TensorValue>, RuntimeError> {
        let method = self.method.clone();
        self.program.run(&method, inputs)
    }
}

/// A model's cached, verified variant (for offline use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedModel {
    /// Release version.
    pub release: String,
    /// Variant id.
    pub variant: String,
    /// Delegate.
    pub delegate: String,
    /// File on disk.
    pub path: PathBuf,
    /// Digest.
    pub sha256: Sha256Digest,
}

/// A failed load: stable code and message.
type LoadFailure = (String, String);

/// Blobs held by live [`LoadedModel`]s (never evicted).
type InUse = Arc<Mutex<BTreeMap<Sha256Digest, usize>>>;

struct InUseGuard {
    set: InUse,
    digest: Sha256Digest,
}

impl InUseGuard {
    fn new(set: &InUse, digest: Sha256Digest) -> Self {
        if let Ok(mut g) = set.lock() {
            *g.entry(digest).or_default() += 1;
        }
        Self {
            set: set.clone(),
            digest,
        }
    }
}

impl Drop for InUseGuard {
    fn drop(&mut self) {
        if let Ok(mut g) = self.set.lock()
            && let Some(n) = g.get_mut(&self.digest)
        {
            *n -= 1;
            if *n == 0 {
                g.remove(&self.digest);
            }
        }
    }
}

/// Builds a [`Client`].
pub struct ClientBuilder {
    server: String,
    trust: TrustFile,
    cache_dir: Option<PathBuf>,
    cache_budget: u64,
    app_version: Option<Version>,
    runtime: Option<Arc<dyn Runtime>>,
    clock: Arc<dyn Clock>,
    limits: DownloadLimits,
    connect_timeout: Duration,
    response_timeout: Duration,
    max_response_bytes: u64,
    progress: Option<ProgressFn>,
    method: String,
    max_telemetry_events: usize,
    root_certs: Vec<Vec<u8>>,
    autosend: bool,
}

impl ClientBuilder {
    /// A builder for `server` (base URL) trusting the keys in `trust` (a server's
    /// `keys/trust.json`, pinned in the app).
    pub fn new(server: impl Into<String>, trust: TrustFile) -> Self {
        Self {
            server: server.into().trim_end_matches('/').to_string(),
            trust,
            cache_dir: None,
            cache_budget: 512 << 20,
            app_version: None,
            runtime: None,
            clock: Arc::new(SystemClock),
            limits: DownloadLimits::default(),
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(30),
            max_response_bytes: 4 << 20,
            progress: None,
            method: "forward".into(),
            max_telemetry_events: telemetry::DEFAULT_MAX_EVENTS,
            root_certs: Vec::new(),
            autosend: false,
        }
    }

    /// The cache folder (required).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// Byte budget of the cache (default 512 MiB).
    pub fn cache_budget(mut self, bytes: u64) -> Self {
        self.cache_budget = bytes;
        self
    }

    /// The app's version (required).
    pub fn app_version(mut self, v: Version) -> Self {
        self.app_version = Some(v);
        self
    }

    /// The runtime programs are loaded into (required).
    pub fn runtime(mut self, r: Arc<dyn Runtime>) -> Self {
        self.runtime = Some(r);
        self
    }

    /// The clock (default: the system clock).
    pub fn clock(mut self, c: Arc<dyn Clock>) -> Self {
        self.clock = c;
        self
    }

    /// Download limits and retry policy.
    pub fn download_limits(mut self, l: DownloadLimits) -> Self {
        self.limits = l;
        self
    }

    /// Connect timeout (default 10 s) and time to the response headers (default 30 s).
    pub fn timeouts(mut self, connect: Duration, response: Duration) -> Self {
        self.connect_timeout = connect;
        self.response_timeout = response;
        self
    }

    /// A progress callback for downloads.
    pub fn progress(mut self, f: ProgressFn) -> Self {
        self.progress = Some(f);
        self
    }

    /// The method to load and check (default `forward`).
    pub fn method(mut self, m: impl Into<String>) -> Self {
        self.method = m.into();
        self
    }

    /// Bound on queued telemetry events (default 1000).
    pub fn max_telemetry_events(mut self, n: usize) -> Self {
        self.max_telemetry_events = n;
        self
    }

    /// After every load, send queued telemetry on a background thread (default off: call
    /// [`Client::send_telemetry`] yourself). At most one send runs at a time; a load never
    /// waits for it.
    pub fn telemetry_autosend(mut self, on: bool) -> Self {
        self.autosend = on;
        self
    }

    /// Trust this CA certificate (DER) for HTTPS in addition to nothing else (replaces the
    /// built-in web roots).
    pub fn root_certificate_der(mut self, der: Vec<u8>) -> Self {
        self.root_certs.push(der);
        self
    }

    /// Builds the client, opening (and repairing) the cache.
    pub fn build(self) -> Result<Client, ClientError> {
        let cache_dir = self
            .cache_dir
            .ok_or_else(|| ClientError::Config("cache_dir is required".into()))?;
        let app_version = self
            .app_version
            .ok_or_else(|| ClientError::Config("app_version is required".into()))?;
        let runtime = self
            .runtime
            .ok_or_else(|| ClientError::Config("a runtime is required".into()))?;
        if !(self.server.starts_with("http://") || self.server.starts_with("https://")) {
            return Err(ClientError::Config(format!(
                "server {:?} must be an http(s) URL",
                self.server
            )));
        }
        let trust = self
            .trust
            .to_keyring()
            .map_err(|e| ClientError::Config(e.to_string()))?;
        if trust.is_empty() {
            return Err(ClientError::Config("the trust file lists no key".into()));
        }
        let mut cfg = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(self.connect_timeout))
            .timeout_recv_response(Some(self.response_timeout))
            .user_agent(concat!("ferry-client/", env!("CARGO_PKG_VERSION")));
        if !self.root_certs.is_empty() {
            let certs = self
                .root_certs
                .into_iter()
                .map(|d| ureq::tls::Certificate::from_der(&d).to_owned())
                .collect();
            cfg = cfg.tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)))
                    .build(),
            );
        }
        let (cache, _) = Cache::open(&cache_dir, self.cache_budget)?;
        Ok(Client {
            server: self.server,
            trust,
            agent: cfg.build().new_agent(),
            telemetry: Arc::new(telemetry::TelemetryQueue::new(
                &cache_dir,
                self.max_telemetry_events,
            )),
            autosend: self.autosend,
            sending: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            cache: Mutex::new(cache),
            runtime,
            app_version,
            clock: self.clock,
            limits: self.limits,
            max_response_bytes: self.max_response_bytes,
            progress: self.progress,
            method: self.method,
            in_use: Arc::new(Mutex::new(BTreeMap::new())),
        })
    }
}

/// The client. Cheap to share behind an `Arc`; calls are blocking.
pub struct Client {
    server: String,
    trust: KeyRing,
    agent: ureq::Agent,
    cache: Mutex<Cache>,
    runtime: Arc<dyn Runtime>,
    app_version: Version,
    clock: Arc<dyn Clock>,
    limits: DownloadLimits,
    max_response_bytes: u64,
    progress: Option<ProgressFn>,
    method: String,
    telemetry: Arc<telemetry::TelemetryQueue>,
    autosend: bool,
    sending: Arc<std::sync::atomic::AtomicBool>,
    in_use: InUse,
}

/// What [`Client::prefetch`] stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefetched {
    /// Release.
    pub release: String,
    /// Variant downloaded.
    pub variant: String,
    /// File.
    pub path: PathBuf,
}

impl Client {
    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        match self.cache.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Backends the runtime really registered.
    pub fn registered_backends(&self) -> Vec<String> {
        self.runtime.registered_backends()
    }

    fn request(&self, model: &str, device: &DeviceInfo) -> Result<ResolveRequest, ClientError> {
        let mut backends: Vec<String> = self.runtime.registered_backends();
        for b in &device.claimed_backends {
            if !backends.contains(b) {
                backends.push(b.clone());
            }
        }
        Ok(ResolveRequest {
            model: model
                .parse()
                .map_err(|e| ClientError::Config(format!("model: {e}")))?,
            install_id: device.install_id.clone(),
            app_version: self.app_version.clone(),
            runtime_version: self.runtime.version(),
            backends: backends
                .iter()
                .filter_map(|b| BackendId::new(b.as_str()).ok())
                .collect(),
            platform: device.platform,
            os_version: device.os_version.clone(),
            device_model: device.device_model.clone(),
            soc: device.soc.clone(),
            ram_mb: device.ram_mb,
        })
    }

    /// Posts the resolve request (retrying transient failures) and verifies the answer.
    fn resolve(&self, model: &str, device: &DeviceInfo) -> Result<Plan, ClientError> {
        let url = format!("{}/v1/resolve", self.server);
        let body = serde_json::to_vec(&self.request(model, device)?)
            .map_err(|e| ClientError::Config(e.to_string()))?;
        let mut failures = 0u32;
        let (status, text) = loop {
            if failures > 0 {
                std::thread::sleep(download::backoff(&self.limits, failures));
            }
            let result = self
                .agent
                .post(&url)
                .header("content-type", "application/json")
                .send(&body[..]);
            let problem = match result {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    if status >= 500 && failures < self.limits.retries {
                        format!("HTTP {status}")
                    } else if status >= 500 {
                        return Err(ClientError::Server { url, status });
                    } else {
                        let text = resp
                            .body_mut()
                            .with_config()
                            .limit(self.max_response_bytes)
                            .read_to_string()
                            .map_err(|e| ClientError::BadResponse {
                                url: url.clone(),
                                message: e.to_string(),
                            })?;
                        break (status, text);
                    }
                }
                Err(e) => e.to_string(),
            };
            failures += 1;
            if failures > self.limits.retries {
                return Err(ClientError::Network {
                    url,
                    message: problem,
                });
            }
        };
        if status != 200 {
            return Err(match serde_json::from_str::<ErrorBody>(&text) {
                Ok(e) => ClientError::Rejected {
                    code: e.code,
                    message: e.message,
                    status,
                },
                Err(_) => ClientError::BadResponse {
                    url,
                    message: format!("HTTP {status} without an error body"),
                },
            });
        }
        let resp: ResolveResponse =
            serde_json::from_str(&text).map_err(|e| ClientError::BadResponse {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let last = self.cache().last_sequence(model);
        let plan = verify_response(&resp, model, &self.trust, self.clock.now(), last)?.into_inner();
        self.cache()
            .record_sequence(model, plan.decision.sequence)?;
        Ok(plan)
    }

    fn url_for(&self, url: &str) -> String {
        if url.starts_with("http://") || url.starts_with("https://") {
            url.to_string()
        } else {
            format!("{}{url}", self.server)
        }
    }

    /// Makes sure the variant's verified bytes are in the cache; returns the path and whether
    /// they were downloaded now.
    fn ensure_blob(&self, c: &PlannedVariant) -> Result<(PathBuf, bool), ClientError> {
        let v = &c.variant;
        {
            let mut cache = self.cache();
            if cache.check_blob(&v.sha256, v.size)? {
                cache.mark_used(&v.sha256, v.size)?;
                return Ok((cache.blob_path(&v.sha256), false));
            }
        }
        let part = self.cache().part_path(&v.sha256);
        let result = download::fetch(
            &self.agent,
            &self.url_for(&c.url),
            &part,
            v,
            &self.limits,
            self.progress.as_ref(),
        );
        if let Err(e) = result {
            if matches!(e, ClientError::DiskFull { .. }) {
                // Free what the failed download took; the cache stays as it was.
                let _ = std::fs::remove_file(&part);
            }
            return Err(e);
        }
        let path = self.cache().commit_part(&v.sha256, v.size)?;
        Ok((path, true))
    }

    fn event(
        &self,
        kind: EventKind,
        release: &str,
        model: &str,
        v: Option<&Variant>,
        device: &DeviceInfo,
    ) -> TelemetryEvent {
        TelemetryEvent {
            kind,
            model: model.to_string(),
            release: release.to_string(),
            variant: v.map(|v| v.id.to_string()).unwrap_or_default(),
            delegate: v.map(|v| v.delegate.to_string()).unwrap_or_default(),
            outcome: Outcome::Ok,
            error_code: None,
            load_ms: None,
            install_id: device.install_id.clone(),
            platform: device.platform.to_string(),
            soc: device.soc.clone(),
            device_model: device.device_model.clone(),
            os_version: device.os_version.clone(),
            app_version: self.app_version.to_string(),
            runtime_version: self.runtime.version().to_string(),
            at: self
                .clock
                .now()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            to_variant: None,
        }
    }

    /// Opens the program, checks backends, loads the method, runs the golden check.
    fn open_and_check(
        &self,
        path: &Path,
        v: &Variant,
    ) -> Result<(Box<dyn Program>, Option<f64>), LoadFailure> {
        let registered = self.runtime.registered_backends();
        let mut program = self
            .runtime
            .open(path)
            .map_err(|e| (e.code.to_string(), e.message))?;
        let needed = program
            .method_backends(&self.method)
            .map_err(|e| (e.code.to_string(), e.message))?;
        let missing: Vec<String> = needed
            .into_iter()
            .filter(|b| !registered.contains(b))
            .collect();
        if let Err(e) = program.load_method(&self.method) {
            let msg = if missing.is_empty() {
                e.message
            } else {
                format!(
                    "{}; method {} needs {}, which this runtime does not register",
                    e.message,
                    self.method,
                    missing.join(", ")
                )
            };
            return Err((e.code.to_string(), msg));
        }
        let mut diff = None;
        if let Some(g) = &v.golden {
            let out = program
                .run(&self.method, &g.input)
                .map_err(|e| (e.code.to_string(), e.message))?;
            match max_abs_diff(&out, &g.output) {
                Some(d) if d <= g.atol => diff = Some(d),
                Some(d) => {
                    return Err((
                        "golden_mismatch".into(),
                        format!("golden check: max |diff| {d:e} exceeds atol {:e}", g.atol),
                    ));
                }
                None => {
                    return Err((
                        "golden_mismatch".into(),
                        "golden check: output shapes differ".into(),
                    ));
                }
            }
        }
        Ok((program, diff))
    }

    /// Resolves, downloads, verifies, caches and loads `model` for `device`, falling back
    /// through the candidates; serves the last known good cached variant when the server
    /// cannot be used.
    pub fn load(&self, model: &str, device: &DeviceInfo) -> Result<LoadedModel, ClientError> {
        let result = self.load_inner(model, device);
        if self.autosend {
            self.send_in_background();
        }
        result
    }

    /// Starts a background send unless one is running.
    fn send_in_background(&self) {
        use std::sync::atomic::Ordering;
        if self.sending.swap(true, Ordering::AcqRel) {
            return;
        }
        let (queue, agent, server, flag) = (
            self.telemetry.clone(),
            self.agent.clone(),
            self.server.clone(),
            self.sending.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("ferry-telemetry".into())
            .spawn(move || {
                queue.send(&agent, &server);
                flag.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.sending.store(false, Ordering::Release);
        }
    }

    fn load_inner(&self, model: &str, device: &DeviceInfo) -> Result<LoadedModel, ClientError> {
        let plan = match self.resolve(model, device) {
            Ok(p) => p,
            Err(e) => {
                if matches!(
                    e,
                    ClientError::Verify { .. }
                        | ClientError::Expired { .. }
                        | ClientError::Replay { .. }
                ) {
                    let ev = TelemetryEvent {
                        outcome: Outcome::Failed,
                        error_code: Some(e.code().to_string()),
                        ..self.event(EventKind::Verify, "", model, None, device)
                    };
                    let _ = self.telemetry.push(&[ev]);
                }
                return self.load_last_good(model, e);
            }
        };
        let release = plan.manifest.version.to_string();
        let mut attempts = Vec::new();
        let mut events = Vec::new();
        for (i, c) in plan.candidates.iter().enumerate() {
            let v = &c.variant;
            let fail = |code: &str,
                        message: String,
                        events: &mut Vec<TelemetryEvent>,
                        attempts: &mut Vec<Attempt>| {
                attempts.push(Attempt {
                    variant: v.id.to_string(),
                    delegate: v.delegate.to_string(),
                    error_code: code.to_string(),
                    message,
                });
                if let Some(next) = plan.candidates.get(i + 1) {
                    events.push(TelemetryEvent {
                        error_code: Some(code.to_string()),
                        outcome: Outcome::Failed,
                        to_variant: Some(next.variant.id.to_string()),
                        ..self.event(EventKind::Fallback, &release, model, Some(v), device)
                    });
                }
            };
            let (path, downloaded) = match self.ensure_blob(c) {
                Ok(x) => x,
                Err(e) => {
                    events.push(TelemetryEvent {
                        outcome: Outcome::Failed,
                        error_code: Some(e.code().to_string()),
                        ..self.event(EventKind::Download, &release, model, Some(v), device)
                    });
                    if matches!(e, ClientError::DiskFull { .. }) {
                        let _ = self.telemetry.push(&events);
                        return Err(e);
                    }
                    fail(e.code(), e.to_string(), &mut events, &mut attempts);
                    continue;
                }
            };
            if downloaded {
                events.push(self.event(EventKind::Download, &release, model, Some(v), device));
            }
            let started = Instant::now();
            match self.open_and_check(&path, v) {
                Ok((program, golden)) => {
                    let ms = started.elapsed().as_secs_f64() * 1000.0;
                    events.push(TelemetryEvent {
                        load_ms: Some(ms),
                        ..self.event(EventKind::Load, &release, model, Some(v), device)
                    });
                    let _ = self.telemetry.push(&events);
                    let entry = ModelEntry {
                        release: release.clone(),
                        variant: v.id.to_string(),
                        delegate: v.delegate.to_string(),
                        sha256: v.sha256,
                        size: v.size,
                        release_envelope: plan.release_envelope.clone(),
                    };
                    let guard = InUseGuard::new(&self.in_use, v.sha256);
                    {
                        let mut cache = self.cache();
                        cache.set_last_good(model, entry)?;
                        let in_use: BTreeSet<Sha256Digest> = self
                            .in_use
                            .lock()
                            .map(|g| g.keys().copied().collect())
                            .unwrap_or_default();
                        cache.evict(&in_use)?;
                    }
                    return Ok(LoadedModel {
                        model: model.to_string(),
                        release,
                        variant: v.id.to_string(),
                        delegate: v.delegate.to_string(),
                        path,
                        source: if downloaded {
                            Source::Downloaded
                        } else {
                            Source::Cached
                        },
                        attempts,
                        golden_max_abs_diff: golden,
                        method: self.method.clone(),
                        program,
                        _guard: guard,
                    });
                }
                Err((code, message)) => {
                    events.push(TelemetryEvent {
                        outcome: Outcome::Failed,
                        error_code: Some(code.clone()),
                        load_ms: Some(started.elapsed().as_secs_f64() * 1000.0),
                        ..self.event(EventKind::Load, &release, model, Some(v), device)
                    });
                    fail(&code, message, &mut events, &mut attempts);
                }
            }
        }
        let _ = self.telemetry.push(&events);
        Err(ClientError::AllCandidatesFailed { attempts })
    }

    /// Loads the last known good variant after the server could not be used (`cause`).
    fn load_last_good(&self, model: &str, cause: ClientError) -> Result<LoadedModel, ClientError> {
        let Some(entry) = self.cache().last_good(model).cloned() else {
            return Err(if cause.is_unavailable() {
                ClientError::NothingCached {
                    model: model.to_string(),
                    reason: cause.to_string(),
                }
            } else {
                cause
            });
        };
        let manifest = verify_release(&entry.release_envelope, &self.trust)?.into_inner();
        let variant = manifest
            .variants
            .iter()
            .find(|v| v.id.as_str() == entry.variant && v.sha256 == entry.sha256)
            .cloned()
            .ok_or_else(|| {
                ClientError::DecisionMismatch(
                    "the cached entry is not in its signed release".into(),
                )
            })?;
        if !self.cache().check_blob(&variant.sha256, variant.size)? {
            return Err(ClientError::NothingCached {
                model: model.to_string(),
                reason: format!(
                    "{cause} (the cached copy failed its integrity check and was removed)"
                ),
            });
        }
        let path = self.cache().blob_path(&variant.sha256);
        let (program, golden) =
            self.open_and_check(&path, &variant)
                .map_err(|(code, message)| ClientError::AllCandidatesFailed {
                    attempts: vec![Attempt {
                        variant: variant.id.to_string(),
                        delegate: variant.delegate.to_string(),
                        error_code: code,
                        message,
                    }],
                })?;
        Ok(LoadedModel {
            model: model.to_string(),
            release: entry.release,
            variant: entry.variant,
            delegate: entry.delegate,
            path,
            source: Source::LastKnownGood {
                code: cause.code().to_string(),
                reason: cause.to_string(),
            },
            attempts: Vec::new(),
            golden_max_abs_diff: golden,
            method: self.method.clone(),
            program,
            _guard: InUseGuard::new(&self.in_use, variant.sha256),
        })
    }

    /// Resolves and downloads (without loading) the best candidate whose backends the runtime
    /// registered, falling back to the last candidate (XNNPACK).
    pub fn prefetch(&self, model: &str, device: &DeviceInfo) -> Result<Prefetched, ClientError> {
        let plan = self.resolve(model, device)?;
        let registered = self.runtime.registered_backends();
        let c = plan
            .candidates
            .iter()
            .find(|c| {
                c.variant
                    .backends
                    .iter()
                    .all(|b| registered.iter().any(|r| r == b.as_str()))
            })
            .or(plan.candidates.last())
            .ok_or_else(|| ClientError::DecisionMismatch("no candidate".into()))?;
        let (path, _) = self.ensure_blob(c)?;
        Ok(Prefetched {
            release: plan.manifest.version.to_string(),
            variant: c.variant.id.to_string(),
            path,
        })
    }

    /// The model's last known good variant on disk (usable offline), after re-checking its
    /// signature and its bytes.
    pub fn cached(&self, model: &str) -> Option<CachedModel> {
        let entry = self.cache().last_good(model).cloned()?;
        verify_release(&entry.release_envelope, &self.trust).ok()?;
        let mut cache = self.cache();
        if !cache.check_blob(&entry.sha256, entry.size).ok()? {
            return None;
        }
        Some(CachedModel {
            release: entry.release,
            variant: entry.variant,
            delegate: entry.delegate,
            path: cache.blob_path(&entry.sha256),
            sha256: entry.sha256,
        })
    }

    /// Queued telemetry events.
    pub fn telemetry_pending(&self) -> Vec<TelemetryEvent> {
        self.telemetry.pending()
    }

    /// Sends queued telemetry (call it from a background thread; it never affects loads).
    pub fn send_telemetry(&self) -> SendReport {
        self.telemetry.send(&self.agent, &self.server)
    }
}
