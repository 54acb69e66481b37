//! [`ClientBuilder`]: the settings of a [`Client`] and their defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_shared::trust::TrustFile;
use ferry_shared::trust::keyring::TrustState;
use semver::Version;

use crate::Client;
use crate::cache::Cache;
use crate::error::ClientError;
use crate::runtime::Runtime;
use crate::telemetry;
use crate::transfer::download::{DownloadLimits, ProgressFn};
use crate::trust::timekeeping::{Clock, SystemClock};

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
    time_runs: bool,
    record_flights: bool,
    reverify_after: Duration,
    sdk: String,
    key_store: Option<Arc<dyn crate::seal::keys::KeyStore>>,
    attest: Option<Arc<dyn crate::seal::keys::Attest>>,
}

/// The SDK this crate names itself as in the `Ferry-Sdk` header when used from Rust.
pub const RUST_SDK: &str = concat!("ferry-client-rust/", env!("CARGO_PKG_VERSION"));

impl ClientBuilder {
    /// A builder for `server` (base URL) trusting `trust` (the `trust.json` made by
    /// `ferry keys generate`, pinned in the app: root keys whose keyrings the client follows
    /// through rotations; or a fixed list of release and online keys).
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
            time_runs: true,
            record_flights: true,
            reverify_after: crate::cache::REVERIFY_AFTER,
            sdk: RUST_SDK.to_string(),
            key_store: None,
            attest: None,
        }
    }

    /// Where the keys of sealed variants are kept once the server released them: the app's
    /// platform key store (Android Keystore, the iOS Keychain, a TPM). The default,
    /// [`crate::seal::keys::FileKeyStore`] in the cache's `sealed-keys/` folder, keeps them in files
    /// and protects nothing against whoever copies the app's data (`docs/client.md`).
    pub fn key_store(mut self, store: Arc<dyn crate::seal::keys::KeyStore>) -> Self {
        self.key_store = Some(store);
        self
    }

    /// Adds a platform attestation (Play Integrity, App Attest) to every key request for a
    /// sealed variant (servers that require one refuse requests without it).
    pub fn attestation(mut self, attest: Arc<dyn crate::seal::keys::Attest>) -> Self {
        self.attest = Some(attest);
        self
    }

    /// How old a cached file's last full hash may be before a load that trusted it by its
    /// stamp and head has it hashed again in the background (default a day; `Duration::ZERO`
    /// re-hashes after every load). A load never waits for this pass; a file that no longer
    /// matches is removed and reported, and its model fetched again at the next load
    /// (`docs/client.md`, "Verify once").
    pub fn reverify_after(mut self, after: Duration) -> Self {
        self.reverify_after = after;
        self
    }

    /// The `NAME/VERSION` this client sends in the `Ferry-Sdk` header (default
    /// [`RUST_SDK`]; the C ABI sends `ferry-client-c/VERSION`). Bindings built on this crate
    /// name themselves so operators see them apart in `ferry fleet clients`; a value the
    /// header rule refuses (`[a-z0-9._-]{1,40}/[A-Za-z0-9.+-]{1,24}`) keeps the default.
    pub fn sdk(mut self, name_version: impl Into<String>) -> Self {
        let v = name_version.into();
        if ferry_shared::wire::protocol::Sdk::from_header(Some(v.as_bytes())).is_some() {
            self.sdk = v;
        }
        self
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

    /// Whether runs are timed and reported as `inference` events (default on; see
    /// docs/client.md, field latency). Off, `run` goes straight to the runtime.
    pub fn time_runs(mut self, on: bool) -> Self {
        self.time_runs = on;
        self
    }

    /// Whether each native step of a load and each run is marked in the cache's flight
    /// recorder (default on; see docs/client.md, "Crash-safe loading"). Off, a variant that
    /// crashes this process natively is loaded again at the next launch, and crashes again:
    /// turn it off only to measure what it costs. Crashes other processes recorded are still
    /// honoured.
    pub fn record_flights(mut self, on: bool) -> Self {
        self.record_flights = on;
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
        let mut trust = TrustState::from_trust_file(&self.trust)
            .map_err(|e| ClientError::Config(e.to_string()))?;
        if !trust.is_rooted() && trust.keys().is_empty() {
            return Err(ClientError::Config("the trust file lists no key".into()));
        }
        let base = || {
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(self.connect_timeout))
                .timeout_recv_response(Some(self.response_timeout))
                .user_agent(concat!("ferry-client/", env!("CARGO_PKG_VERSION")))
                .middleware(protocol_headers(&self.sdk))
        };
        let (mut cache, recovery) = Cache::open(&cache_dir, self.cache_budget)?;
        cache.set_reverify_after(self.reverify_after);
        if trust.is_rooted() {
            // Walk the keyrings accepted before from the pinned root again. A stored version
            // that no longer verifies stops the walk there (the versions before it stay; the
            // next resolve fetches the server's chain).
            let _ = trust.advance_all(cache.keyrings());
        }
        let time = Arc::new(crate::trust::timekeeping::TimeKeeper::open(&cache_dir));
        let (keeper, clock) = (time.clone(), self.clock.clone());
        // The time pool follows no redirect: its answers are trusted for their signature
        // alone, and nothing should take its requests anywhere else, or to plain HTTP.
        let https = self.server.starts_with("https://");
        let pool = |dates: crate::transfer::tls::Dates| {
            let config = match dates {
                crate::transfer::tls::Dates::Unchecked => {
                    base().max_redirects(0).https_only(https).build()
                }
                crate::transfer::tls::Dates::Trusted(_) => base().build(),
            };
            crate::transfer::tls::client_config(&self.root_certs, dates)
                .map(|tls| {
                    ureq::Agent::with_parts(
                        config,
                        crate::transfer::tls::connector(tls),
                        ureq::unversioned::resolver::DefaultResolver::default(),
                    )
                })
                .map_err(|e| ClientError::Config(format!("TLS: {e}")))
        };
        let agent = pool(crate::transfer::tls::Dates::Trusted(Arc::new(move || {
            keeper.now(&*clock)
        })))?;
        let time_agent = pool(crate::transfer::tls::Dates::Unchecked)?;
        let key_store = self.key_store.unwrap_or_else(|| {
            Arc::new(crate::seal::keys::FileKeyStore::new(
                cache_dir.join("sealed-keys"),
            ))
        });
        let client = Client {
            key_store,
            attest: self.attest,
            server: self.server,
            trust: Mutex::new(trust),
            agent,
            time_agent,
            flights: Arc::new(crate::crash::flight::Recorder::new(&cache_dir)),
            record_flights: self.record_flights,
            crash_ledger: crate::crash::ledger::Ledger::new(&cache_dir),
            unsaved_crashes: Mutex::new(Vec::new()),
            source_book: Default::default(),
            telemetry: Arc::new(telemetry::TelemetryQueue::new(
                &cache_dir,
                self.max_telemetry_events,
            )),
            autosend: self.autosend,
            time_runs: self.time_runs,
            sending: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            cache: Arc::new(Mutex::new(cache)),
            rechecking: Arc::default(),
            runtime,
            app_version,
            clock: self.clock,
            limits: self.limits,
            max_response_bytes: self.max_response_bytes,
            progress: self.progress,
            method: self.method,
            in_use: Arc::new(Mutex::new(BTreeMap::new())),
            inference: Arc::new(crate::run::inference::Registry::default()),
            updating: Mutex::new(Default::default()),
            sunset: Mutex::new(None),
            time,
        };
        // An app or runtime update since the cache was last used: mark what no longer fits.
        // A cache that cannot record it now is checked again on every load anyway.
        let _ = client.note_versions();
        // A lost index: each model's last known good is found again from the signed releases
        // and files the cache still holds.
        if recovery.rebuilt_index || recovery.index_missing {
            client.heal_last_good();
        }
        Ok(client)
    }
}

/// A middleware that adds `Ferry-Protocol` and `Ferry-Sdk` to every request the client makes
/// (resolve, manifests, keyrings, blobs, telemetry), so servers and mirrors can tell which
/// clients are in the field (`docs/protocol.md`).
fn protocol_headers(sdk: &str) -> impl ureq::middleware::Middleware {
    use ureq::http::HeaderValue;
    let protocol = HeaderValue::from(ferry_shared::wire::protocol::PROTOCOL);
    // Checked by [`ClientBuilder::sdk`]: ASCII without control characters.
    let sdk = HeaderValue::from_str(sdk).unwrap_or(HeaderValue::from_static(RUST_SDK));
    move |mut req: ureq::http::Request<ureq::SendBody>, next: ureq::middleware::MiddlewareNext| {
        let headers = req.headers_mut();
        headers.insert(
            ferry_shared::wire::protocol::PROTOCOL_HEADER,
            protocol.clone(),
        );
        headers.insert(ferry_shared::wire::protocol::SDK_HEADER, sdk.clone());
        next.handle(req)
    }
}
