//! The state every handler shares: configuration, store, keys, and the in-memory snapshots
//! (catalog, rollout plans, deny lists) that resolve reads without touching storage.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::{Arc, RwLock};

use ferry_shared::ModelName;
use ferry_shared::dsse::{Envelope, KeyPair};
use ferry_shared::revocation::RevocationList;
use ferry_shared::rollout::RolloutPlan;
use ferry_shared::trust::TrustFile;

use crate::app::config::Config;
use crate::app::metrics::Metrics;
use crate::fleet::aggregate::Telemetry;
use crate::storage::Store;
use crate::storage::catalog::{Catalog, Release};
use ferry_shared::deny::DenyEntry;

/// A model's deny list in force and the revision it came from.
#[derive(Debug, Clone, Default)]
pub struct DenyInForce {
    /// The deny-list revision (part of the decision sequence).
    pub revision: u64,
    /// The entries.
    pub entries: Vec<DenyEntry>,
}

/// A model's revocation list in force and the envelope it came in (sent with every answer).
#[derive(Debug, Clone)]
pub struct Revocations {
    /// The list (always in force on the server).
    pub list: Arc<RevocationList>,
    /// As signed, when a current release key signed it (sent to devices); `None` after the
    /// signing key was rotated out, until the list is signed again.
    pub envelope: Option<Arc<Envelope>>,
    /// [`Revocations::envelope`] rendered as JSON once, shared by every answer that sends it.
    pub json: Option<bytes::Bytes>,
}

/// Everything the handlers share.
pub struct AppState {
    /// Configuration.
    pub config: Config,
    /// The object store.
    pub store: Store,
    /// Signs decisions.
    pub online: KeyPair,
    /// Published at `GET /v1/keys`.
    pub trust: TrustFile,
    /// The keyring in force: release keys, the chain, the version (replaced when a newer
    /// version is adopted; see [`crate::app::keyring`]).
    keys: crate::app::keyring::SharedView,
    /// The catalog (replaced wholesale on change).
    pub catalog: RwLock<Arc<Catalog>>,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Rollout plans in force (newest revision per model).
    pub rollouts: RwLock<Arc<BTreeMap<ModelName, RolloutPlan>>>,
    /// Deny lists in force per model, with their revision.
    pub deny: RwLock<Arc<BTreeMap<ModelName, DenyInForce>>>,
    /// The revocation list in force per model, with its signed envelope.
    revocations: RwLock<Arc<BTreeMap<ModelName, Revocations>>>,
    /// Telemetry aggregates.
    pub telemetry: Telemetry,
    /// Keys telemetry receipts (derived from the online key: the same on every replica).
    pub receipts: crate::fleet::receipt::ReceiptKey,
    /// Where each ramp step began in this replica's telemetry.
    pub ramp_marks: crate::fleet::ramp::RampMarks,
    /// This replica's id in telemetry file names.
    pub node: String,
    /// This run's name in the telemetry buckets: `<node>.<random>`, new at every start, so
    /// that a restart never overwrites what the previous run wrote.
    pub writer: String,
    /// Signed resolve answers kept for reuse.
    pub answers: crate::api::answers::Answers,
    /// Open connections per client address.
    pub connections: Arc<crate::app::connections::Connections>,
    /// One permit per blob upload that may run at once.
    pub upload_slots: tokio::sync::Semaphore,
    /// Models telemetry asked to evaluate (drained by a background task).
    pub evaluations: crate::fleet::evaluate::Queue,
    /// Bounds telemetry parsing to half the cores, so resolve always has CPU left.
    pub ingest_permits: tokio::sync::Semaphore,
    request_counter: AtomicU64,
    request_prefix: String,
    started: std::time::Instant,
    catalog_reloaded_ms: AtomicU64,
}

impl AppState {
    /// The keyring in force.
    pub fn keys(&self) -> Arc<crate::app::keyring::KeyView> {
        match self.keys.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Puts a newer keyring in force.
    pub fn set_keys(&self, view: crate::app::keyring::KeyView) {
        let mut g = match self.keys.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if view.version > g.version {
            *g = Arc::new(view);
        }
    }

    /// Builds the state.
    pub fn new(
        config: Config,
        store: Store,
        keys: crate::app::keys::ServerKeys,
        catalog: Catalog,
    ) -> Self {
        let online = keys.online.pair;
        let view = crate::app::keyring::KeyView::new(keys.state, keys.chain, &online.id());
        let receipts = crate::fleet::receipt::ReceiptKey::derive(&online);
        let mut prefix = [0u8; 4];
        let _ = getrandom::fill(&mut prefix);
        let mut run = [0u8; 4];
        let _ = getrandom::fill(&mut run);
        let uploads = config.limits.max_concurrent_uploads.max(1);
        let per_address = config.limits.max_connections_per_address;
        let node = config
            .node_id
            .clone()
            .unwrap_or_else(|| stored_node_id(&config.data, &prefix));
        Self {
            config,
            store,
            online,
            trust: keys.trust,
            keys: std::sync::RwLock::new(Arc::new(view)),
            catalog: RwLock::new(Arc::new(catalog)),
            metrics: Metrics::default(),
            rollouts: RwLock::new(Arc::new(BTreeMap::new())),
            deny: RwLock::new(Arc::new(BTreeMap::new())),
            revocations: RwLock::new(Arc::new(BTreeMap::new())),
            telemetry: Telemetry::default(),
            ramp_marks: Default::default(),
            receipts,
            writer: format!("{node}.{}", hex::encode(run)),
            node,
            upload_slots: tokio::sync::Semaphore::new(uploads),
            answers: Default::default(),
            connections: crate::app::connections::Connections::new(per_address),
            evaluations: Default::default(),
            ingest_permits: tokio::sync::Semaphore::new(
                (std::thread::available_parallelism().map_or(2, |n| n.get()) / 2).max(1),
            ),
            request_counter: AtomicU64::new(0),
            started: std::time::Instant::now(),
            catalog_reloaded_ms: AtomicU64::new(0),
            request_prefix: hex::encode(prefix),
        }
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
        self.ramp_marks.note_revision(&self.telemetry, model, &plan);
        let mut next = (*self.rollouts()).clone();
        next.insert(model.clone(), plan);
        self.replace_rollouts(next);
    }

    /// Replaces all plans in memory.
    pub fn replace_rollouts(&self, plans: BTreeMap<ModelName, RolloutPlan>) {
        for (m, p) in &plans {
            self.ramp_marks.note_revision(&self.telemetry, m, p);
        }
        let next = Arc::new(plans);
        match self.rollouts.write() {
            Ok(mut g) => *g = next,
            Err(p) => *p.into_inner() = next,
        }
    }

    /// The deny lists in force.
    pub fn deny_lists(&self) -> Arc<BTreeMap<ModelName, DenyInForce>> {
        match self.deny.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// The revocation lists in force.
    pub fn revocations(&self) -> Arc<BTreeMap<ModelName, Revocations>> {
        match self.revocations.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Puts `list` in force for its model, unless a newer version already is. `envelope` is
    /// what devices get (`None` when no current release key signed it).
    pub fn set_revocations(&self, list: RevocationList, envelope: Option<Envelope>) {
        let mut g = match self.revocations.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if g.get(&list.model)
            .is_some_and(|r| r.list.version >= list.version)
        {
            return;
        }
        let mut next = (**g).clone();
        next.insert(
            list.model.clone(),
            Revocations {
                list: Arc::new(list),
                json: envelope
                    .as_ref()
                    .and_then(|e| serde_json::to_vec(e).ok())
                    .map(bytes::Bytes::from),
                envelope: envelope.map(Arc::new),
            },
        );
        *g = Arc::new(next);
    }

    /// Replaces one model's deny list (revision `revision`) in memory; an older revision than
    /// the one held is ignored.
    pub fn set_deny(&self, model: &ModelName, revision: u64, entries: Vec<DenyEntry>) {
        let mut g = match self.deny.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if g.get(model).is_some_and(|held| held.revision > revision) {
            return;
        }
        let mut next = (**g).clone();
        next.insert(model.clone(), DenyInForce { revision, entries });
        *g = Arc::new(next);
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

    /// A decision sequence: [`ferry_shared::resolve::SEQUENCE_BASE`] plus the model's state
    /// generation as this replica knows it (rollout revision + deny-list revision + releases
    /// published + revocation list version). Every input only grows and comes from the store,
    /// so replicas that have caught up agree and no clock can push it ahead. Resolve passes
    /// the values it already read, so the hot path takes no lock twice.
    pub(crate) fn sequence(rollout: u64, deny: u64, releases: u64, revocations: u64) -> u64 {
        ferry_shared::resolve::SEQUENCE_BASE + rollout + deny + releases + revocations
    }

    pub(crate) fn next_request_id(&self) -> String {
        let n = self.request_counter.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n:08x}", self.request_prefix)
    }
}

/// The node id generated for this data directory (`<data>/node-id`), created on first start,
/// so a replica without a configured `node_id` keeps its name across restarts. Falls back to a
/// fresh name when the file cannot be read or written.
fn stored_node_id(data: &std::path::Path, random: &[u8; 4]) -> String {
    let path = data.join("node-id");
    let valid = |s: &str| {
        (1..=63).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if let Ok(text) = std::fs::read_to_string(&path) {
        let id = text.trim();
        if valid(id) {
            return id.to_string();
        }
        tracing::warn!("{} holds no valid node id; using a new one", path.display());
    }
    let id = format!("node-{}", hex::encode(random));
    if let Err(e) = std::fs::create_dir_all(data).and_then(|()| std::fs::write(&path, &id)) {
        tracing::warn!("node id not kept in {}: {e}", path.display());
    }
    id
}
