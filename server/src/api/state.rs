//! The state every handler shares: the API's config section, the fleet handle (store, views,
//! telemetry), the online key, and per-process HTTP limits. Only `api` and `app` name it;
//! fleet jobs get [`Fleet`], keyring work gets its `Ring`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferry_shared::ModelName;
use ferry_shared::select::Preference;
use ferry_shared::select::rollout::RolloutPlan;
use ferry_shared::trust::TrustFile;
use ferry_shared::trust::dsse::KeyPair;

use crate::api::limits::Limits;
use crate::fleet::Fleet;
use crate::fleet::config::TelemetryConfig;
use crate::fleet::intake::aggregate::Telemetry;
use crate::metrics::Metrics;
use crate::snapshot::{DenyInForce, KeyView, Revocations, Views};
use crate::storage::Store;
use crate::storage::catalog::{Catalog, Release};
use crate::storage::config::StorageConfig;
use crate::tokens::TokenEntry;

/// What the HTTP layer reads of the configuration (assembled by `app::config`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The URL devices reach this server at (blob URLs in answers), when not the request's.
    pub public_url: Option<String>,
    /// The blob sources decisions list, in order (empty: none listed; see
    /// [`ferry_shared::wire::sources`]).
    pub sources: Vec<String>,
    /// Request limits.
    pub limits: Limits,
    /// Admin tokens.
    pub tokens: Vec<TokenEntry>,
    /// Delegate preference order.
    pub preference: Preference,
    /// Lifetime of a signed decision, in seconds.
    pub decision_ttl_secs: u64,
    /// Whether a newly published release goes live at once.
    pub publish_goes_live: bool,
    /// The announced end of protocol v1, if any.
    pub protocol_v1_sunset: Option<time::Date>,
    /// Where the store lives.
    pub storage: StorageConfig,
    /// Telemetry limits and thresholds.
    pub telemetry: TelemetryConfig,
    /// Which requests get an access-log line at INFO.
    pub request_log: RequestLog,
    /// The key-release policy of sealed variants.
    pub sealing: crate::release::attest::SealingConfig,
}

/// Which requests the access log writes at INFO (the others at DEBUG, seen with
/// `FERRY_LOG=debug`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RequestLog {
    /// Every request.
    All,
    /// Every server error (5xx), slow (over 1 s) or successful admin request, client errors
    /// (4xx, admin ones too) up to
    /// [`CLIENT_ERROR_LINES_PER_SECOND`], and one in [`REQUEST_LOG_SAMPLE`] of the others (the
    /// default: a fleet's resolves would otherwise be most of the log).
    #[default]
    Sampled,
    /// Server errors, slow and admin requests, and client errors up to
    /// [`CLIENT_ERROR_LINES_PER_SECOND`], only.
    Errors,
}

/// One in this many ordinary requests is logged under [`RequestLog::Sampled`].
pub const REQUEST_LOG_SAMPLE: u64 = 100;

/// Most access-log lines of client errors (4xx) written a second under [`RequestLog::Sampled`]
/// and [`RequestLog::Errors`]: a client that sends bad requests on purpose cannot fill the
/// disk with log lines. The rest are counted (`ferry_request_log_lines_dropped_total`) and one
/// warning a second says how many were left out.
pub const CLIENT_ERROR_LINES_PER_SECOND: u32 = 20;

/// True when a request to `route` that answered `status` in `secs` is logged at INFO under
/// `level`; `seq` numbers the ordinary requests (called only for them), `budget` says whether
/// a client error's line fits this second (called only for them).
fn request_logged(
    level: RequestLog,
    route: &str,
    status: u16,
    secs: f64,
    seq: impl FnOnce() -> u64,
    budget: impl FnOnce() -> bool,
) -> bool {
    match level {
        RequestLog::All => true,
        _ if status >= 500 || secs >= 1.0 => true,
        // Admin calls that failed (a missing or wrong token) are client errors like any other:
        // anyone can send them.
        _ if status >= 400 => budget(),
        _ if route.starts_with("/v1/admin") => true,
        RequestLog::Sampled => seq().is_multiple_of(REQUEST_LOG_SAMPLE),
        RequestLog::Errors => false,
    }
}

/// The client-error lines written in the current second, and those left out.
#[derive(Debug, Default)]
struct LogBudget {
    /// (the second, lines written in it, lines left out since the last report).
    state: Mutex<(u64, u32, u64)>,
}

impl LogBudget {
    /// Whether one more line fits second `now`, and how many lines were left out in the
    /// seconds before it (reported once, when a new second starts).
    fn take(&self, now: u64) -> (bool, u64) {
        let mut s = ferry_shared::sync::lock(&self.state);
        let mut report = 0;
        if s.0 != now {
            report = s.2;
            *s = (now, 0, 0);
        }
        if s.1 < CLIENT_ERROR_LINES_PER_SECOND {
            s.1 += 1;
            (true, report)
        } else {
            s.2 += 1;
            (false, report)
        }
    }
}

#[cfg(test)]
mod log_tests {
    use super::*;

    #[test]
    fn the_sampled_log_keeps_failures_slow_and_admin_requests_and_one_in_100_others() {
        let mut n = 0u64;
        let mut logged = |level, route: &str, status, secs| {
            request_logged(
                level,
                route,
                status,
                secs,
                || {
                    n += 1;
                    n - 1
                },
                || true,
            )
        };
        let ordinary = (0..1000)
            .filter(|_| logged(RequestLog::Sampled, "/v1/resolve", 200, 0.001))
            .count();
        assert_eq!(ordinary, 10);
        for (route, status, secs) in [
            ("/v1/resolve", 429, 0.0),
            ("/v1/resolve", 503, 0.0),
            ("/v1/resolve", 200, 1.5),
            ("/v1/admin/models/{model}/rollout", 200, 0.0),
        ] {
            assert!(logged(RequestLog::Sampled, route, status, secs));
            assert!(logged(RequestLog::Errors, route, status, secs));
        }
        assert!(!logged(RequestLog::Errors, "/v1/resolve", 200, 0.001));
        assert!(logged(RequestLog::All, "/v1/resolve", 200, 0.001));
    }

    #[test]
    fn client_error_lines_are_bounded_a_second_and_the_rest_reported() {
        let b = LogBudget::default();
        let written = (0..1000).filter(|_| b.take(7).0).count();
        assert_eq!(written, CLIENT_ERROR_LINES_PER_SECOND as usize);
        assert_eq!(
            b.take(8),
            (true, 1000 - 20),
            "the next second reports the rest"
        );
        assert_eq!(b.take(8), (true, 0));
        // Server errors, slow requests and admin calls that succeeded never wait for the
        // budget; an admin call refused (no token) does.
        assert!(!request_logged(
            RequestLog::Sampled,
            "/v1/admin/models/{model}/rollout",
            401,
            0.0,
            || 0,
            || false
        ));
        for (route, status, secs) in [
            ("/v1/resolve", 503, 0.0),
            ("/v1/resolve", 404, 1.5),
            ("/v1/admin/models/{model}/rollout", 200, 0.0),
        ] {
            assert!(request_logged(
                RequestLog::Errors,
                route,
                status,
                secs,
                || 0,
                || false
            ));
        }
        assert!(!request_logged(
            RequestLog::Sampled,
            "/v1/resolve",
            429,
            0.0,
            || 0,
            || false
        ));
    }
}

/// Where this replica's pieces come from (built by `app::startup`).
#[derive(Debug)]
pub struct Parts {
    /// The object store.
    pub store: Store,
    /// How errors name it ([`StorageConfig::describe`]).
    pub store_name: String,
    /// The server's keys.
    pub keys: crate::keys::ServerKeys,
    /// The catalog read at start.
    pub catalog: Catalog,
    /// This replica's id.
    pub node: String,
    /// The key folder.
    pub keys_dir: PathBuf,
}

/// Everything the handlers share.
pub struct AppState {
    settings: Settings,
    fleet: Arc<Fleet>,
    online: KeyPair,
    trust: TrustFile,
    receipts: crate::fleet::intake::receipt::ReceiptKey,
    answers: crate::resolve::answers::Answers,
    connections: Arc<crate::api::connections::Connections>,
    upload_slots: tokio::sync::Semaphore,
    ingest_permits: tokio::sync::Semaphore,
    ingest_pool: crate::api::ingest_pool::IngestPool,
    fresh_limiter: crate::fleet::intake::limits::Limiter,
    /// Lookups of operator digests not in memory, per client network.
    digest_limiter: crate::fleet::intake::limits::Limiter,
    request_counter: AtomicU64,
    /// Ordinary requests seen by the sampled access log.
    logged_requests: AtomicU64,
    /// Client-error log lines this second.
    log_budget: LogBudget,
    request_prefix: String,
    started: std::time::Instant,
    catalog_reloaded_ms: AtomicU64,
    store_name: Arc<str>,
    key_service: Arc<crate::release::key_release::KeyService>,
}

impl AppState {
    /// Builds the state.
    pub fn new(settings: Settings, parts: Parts) -> Self {
        let Parts {
            store,
            store_name,
            keys,
            catalog,
            node,
            keys_dir,
        } = parts;
        let online = keys.online.pair;
        let key_service = crate::release::key_release::KeyService::new(
            keys.key_release,
            settings.limits.key_requests_per_minute,
            6,
        )
        .with_attestation(
            settings
                .sealing
                .verifier()
                .map(|v| Arc::new(v) as Arc<dyn crate::release::key_release::AttestationVerifier>),
            settings.sealing.require_attestation,
        );
        let view = KeyView::new(keys.state, keys.chain, &online.id());
        let receipts = crate::fleet::intake::receipt::ReceiptKey::derive(&online);
        let mut prefix = [0u8; 4];
        let _ = getrandom::fill(&mut prefix);
        let mut run = [0u8; 4];
        let _ = getrandom::fill(&mut run);
        let uploads = settings.limits.max_concurrent_uploads.max(1);
        let per_address = settings.limits.max_connections_per_address;
        let proxies = settings.limits.trusted_proxies.clone();
        let digest_limiter = crate::fleet::intake::limits::Limiter::new(
            settings.limits.unknown_digests_per_minute,
            1,
        );
        let fresh_limiter = crate::fleet::intake::limits::Limiter::new(
            settings.limits.fresh_decisions_per_minute,
            1,
        );
        let views = Arc::new(Views::new(catalog, view));
        let fleet = Fleet {
            ring: crate::keyring::Ring {
                store: store.clone(),
                views: views.clone(),
                online: online.id(),
                keys_dir,
            },
            store,
            views,
            telemetry: Telemetry::new(&settings.telemetry),
            ramp_marks: Default::default(),
            metrics: Arc::new(Metrics::default()),
            config: settings.telemetry,
            preference: settings.preference.clone(),
            writer: format!("{node}.{}", hex::encode(run)),
            node,
            evaluations: Default::default(),
            store_cache: Default::default(),
            operators: Default::default(),
            journal: Default::default(),
            flushing: Default::default(),
            experiments: Default::default(),
        };
        // Telemetry parsing takes at most half the cores, so resolve always has CPU left.
        let ingest_threads =
            (std::thread::available_parallelism().map_or(2, |n| n.get()) / 2).max(1);
        Self {
            settings,
            fleet: Arc::new(fleet),
            online,
            trust: keys.trust,
            receipts,
            upload_slots: tokio::sync::Semaphore::new(uploads),
            answers: Default::default(),
            connections: crate::api::connections::Connections::new(per_address, proxies),
            ingest_permits: tokio::sync::Semaphore::new(ingest_threads),
            ingest_pool: crate::api::ingest_pool::IngestPool::new(ingest_threads),
            fresh_limiter,
            digest_limiter,
            request_counter: AtomicU64::new(0),
            logged_requests: AtomicU64::new(0),
            log_budget: LogBudget::default(),
            started: std::time::Instant::now(),
            catalog_reloaded_ms: AtomicU64::new(0),
            request_prefix: hex::encode(prefix),
            store_name: store_name.into(),
            key_service: Arc::new(key_service),
        }
    }

    /// The key-release service of sealed variants.
    pub fn key_service(&self) -> &Arc<crate::release::key_release::KeyService> {
        &self.key_service
    }

    /// The store as errors name it ("the local store at ...", "the S3 bucket ...").
    pub fn store_name(&self) -> Arc<str> {
        self.store_name.clone()
    }

    /// The API's config section.
    pub fn config(&self) -> &Settings {
        &self.settings
    }

    /// The fleet handle the background jobs work with.
    pub fn fleet(&self) -> &Arc<Fleet> {
        &self.fleet
    }

    /// The views resolve reads.
    pub fn views(&self) -> &Views {
        &self.fleet.views
    }

    /// The object store.
    pub fn store(&self) -> &Store {
        &self.fleet.store
    }

    /// The key that signs decisions.
    pub fn online(&self) -> &KeyPair {
        &self.online
    }

    /// The trust file published at `GET /v1/keys`.
    pub fn trust(&self) -> &TrustFile {
        &self.trust
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Metrics {
        &self.fleet.metrics
    }

    /// Telemetry aggregates.
    pub fn telemetry(&self) -> &Telemetry {
        &self.fleet.telemetry
    }

    /// Keys telemetry receipts (derived from the online key: the same on every replica).
    pub fn receipts(&self) -> &crate::fleet::intake::receipt::ReceiptKey {
        &self.receipts
    }

    /// Signed resolve answers kept for reuse.
    pub fn answers(&self) -> &crate::resolve::answers::Answers {
        &self.answers
    }

    /// Open connections per client address.
    pub fn connections(&self) -> &Arc<crate::api::connections::Connections> {
        &self.connections
    }

    /// One permit per blob upload that may run at once.
    pub fn upload_slots(&self) -> &tokio::sync::Semaphore {
        &self.upload_slots
    }

    /// Bounds telemetry parsing to half the cores, so resolve always has CPU left.
    pub fn ingest_permits(&self) -> &tokio::sync::Semaphore {
        &self.ingest_permits
    }

    /// The lower-priority threads telemetry batches are parsed and aggregated on.
    pub fn ingest_pool(&self) -> &crate::api::ingest_pool::IngestPool {
        &self.ingest_pool
    }

    /// True when a request to `route` that answered `status` in `secs` gets an access-log
    /// line at INFO ([`RequestLog`]).
    pub fn log_request(&self, route: &str, status: u16, secs: f64) -> bool {
        let level = self.settings.request_log;
        request_logged(
            level,
            route,
            status,
            secs,
            || self.logged_requests.fetch_add(1, Ordering::Relaxed),
            || {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let (fits, left_out) = self.log_budget.take(now);
                if left_out > 0 {
                    tracing::warn!(
                        "{left_out} access-log lines of client errors (4xx) left out: more \
                         than {CLIENT_ERROR_LINES_PER_SECOND} a second \
                         (ferry_http_requests_total counts every request)"
                    );
                }
                if !fits {
                    self.fleet.metrics.log_lines_dropped(1);
                }
                fits
            },
        )
    }

    /// The client of `req`: its peer, or the client a trusted proxy names
    /// ([`crate::api::forwarded`]).
    pub fn client_ip(&self, req: &actix_web::HttpRequest) -> Option<std::net::IpAddr> {
        self.settings
            .limits
            .proxies()
            .client(req.peer_addr().map(|a| a.ip()), req.headers())
    }

    /// Takes one decision of its own from the allowance of `addr`'s network: false when it is
    /// spent for this minute.
    pub fn allow_fresh_decision(&self, addr: Option<std::net::IpAddr>) -> bool {
        self.settings.limits.fresh_decisions_per_minute == 0
            || self
                .fresh_limiter
                .address(crate::fleet::intake::limits::IpKey::of(addr))
    }

    /// Takes one lookup of an operator digest not in memory from the allowance of `addr`'s
    /// network: false when it is spent for this minute.
    pub fn allow_digest_lookup(&self, addr: Option<std::net::IpAddr>) -> bool {
        self.settings.limits.unknown_digests_per_minute == 0
            || self
                .digest_limiter
                .address(crate::fleet::intake::limits::IpKey::of(addr))
    }

    /// The operator sets devices' runtimes reported.
    pub fn operator_sets(&self) -> &crate::fleet::census::operators::OperatorSets {
        &self.fleet.operators
    }

    /// The fleet's runtimes for `model` (merged across replicas), with their operator sets.
    pub async fn runtime_census(
        &self,
        model: &ferry_shared::ModelName,
    ) -> Vec<crate::fleet::census::runtimes::Runtime> {
        let fleet = self.telemetry().fleet(model.as_str());
        crate::fleet::census::runtimes::census(
            fleet.runtimes.get(model.as_str()),
            self.operator_sets(),
            self.store(),
        )
        .await
    }

    /// Models telemetry asked to evaluate.
    pub fn evaluations(&self) -> &crate::fleet::actions::queue::Queue {
        &self.fleet.evaluations
    }

    /// This replica's id in telemetry file names.
    pub fn node(&self) -> &str {
        &self.fleet.node
    }

    /// The keyring in force.
    pub fn keys(&self) -> Arc<KeyView> {
        self.fleet.views.keys.get()
    }

    /// The current catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.fleet.views.catalog.get()
    }

    /// The rollout plans in force.
    pub fn rollouts(&self) -> Arc<BTreeMap<ModelName, RolloutPlan>> {
        self.fleet.views.rollouts.get()
    }

    /// The experiment plans in force.
    pub fn experiments(
        &self,
    ) -> Arc<BTreeMap<ModelName, ferry_shared::experiment::ExperimentPlan>> {
        self.fleet.views.experiments.get()
    }

    /// The deny lists in force.
    pub fn deny_lists(&self) -> Arc<BTreeMap<ModelName, DenyInForce>> {
        self.fleet.views.deny.get()
    }

    /// The revocation lists in force.
    pub fn revocations(&self) -> Arc<BTreeMap<ModelName, Revocations>> {
        self.fleet.views.revocations.get()
    }

    /// Replaces one model's plan in memory.
    pub fn set_rollout(&self, model: &ModelName, plan: RolloutPlan) {
        self.fleet.set_rollout(model, plan);
    }

    /// Adds a release to the catalog.
    pub fn add_release(&self, release: Release) {
        self.fleet.views.add_release(release);
    }

    /// Replaces the catalog.
    pub fn replace_catalog(&self, catalog: Catalog) {
        self.fleet.views.catalog.replace(catalog);
    }

    /// True at most once every 5 s: whether a request that missed the catalog may reload it
    /// from the store (another replica may have published since the last refresh).
    pub fn catalog_reload_due(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let now = (self.started.elapsed().as_millis() as u64).max(1);
        let last = self.catalog_reloaded_ms.load(Relaxed);
        (last == 0 || now.saturating_sub(last) >= 5000)
            && self
                .catalog_reloaded_ms
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
    }

    pub(crate) fn next_request_id(&self) -> String {
        let n = self.request_counter.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n:08x}", self.request_prefix)
    }
}
