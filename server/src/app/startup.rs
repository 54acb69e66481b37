//! Starting the server: keys, store, catalog, TLS, listener, background refresh.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use ferry_shared::trust::dsse::KeyRole;

use crate::api::AppState;
use crate::app::config::Config;
use crate::keys;
use crate::storage::catalog::Catalog;

/// How often each replica re-reads the catalog from the store.
pub const CATALOG_REFRESH: Duration = Duration::from_secs(30);

/// Where a server's keys come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// The data directory's `keys/` must already hold `online.key`, `trust.json` and the
    /// keyrings (provisioned with `ferry keys generate`).
    Provisioned,
    /// `ferry serve --demo`: development keys are created in the data directory if it has
    /// none. CAUTION: those keys sit next to the server, so anyone who can read the data
    /// directory can sign releases.
    Development,
}

/// Loads the keys (creating development keys only for [`KeySource::Development`]), opens the
/// store and loads the catalog. Returns the state and the lines worth printing (created keys,
/// skipped releases).
pub async fn build_state(
    config: &Config,
    source: KeySource,
) -> anyhow::Result<(Arc<AppState>, Vec<String>)> {
    // Both ring (ours, ureq) and aws-lc-rs (the S3 client) are linked: pick one for the process
    // so that no TLS builder has to guess. A second call is a harmless no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    warn_sunset(config.protocol_v1_sunset);
    let keys_dir = config.keys_dir();
    let mut notes = match source {
        KeySource::Development => keys::ensure_dev_keys(&keys_dir)?,
        KeySource::Provisioned => Vec::new(),
    };
    let mut server_keys = keys::load_server_keys(&keys_dir)?;
    let store = crate::storage::open(
        &config.storage,
        &config.data,
        Duration::from_secs(config.limits.store_timeout_secs),
    )?;
    // Keyring versions taken through the API (`ferry keys push`) are in the shared store: a
    // replica that starts adopts them before it loads the releases they trust.
    if server_keys.state.is_rooted() {
        let view = crate::snapshot::KeyView::new(
            server_keys.state.clone(),
            server_keys.chain.clone(),
            &server_keys.online.pair.id(),
        );
        match crate::keyring::adopt_stored(&store, &view, &server_keys.online.pair.id()).await {
            Ok(Some(next)) => {
                notes.push(if next.version == view.version + 1 {
                    format!("keyring version {} from the store", next.version)
                } else {
                    format!(
                        "keyring versions {} to {} from the store",
                        view.version + 1,
                        next.version
                    )
                });
                crate::keyring::keep_local(&keys_dir, &next.chain);
                server_keys.state = next.state;
                server_keys.chain = next.chain;
            }
            Ok(None) => {}
            Err(e) => notes.push(format!(
                "warning: keyring versions in the store not read ({e}); serving with version {}",
                view.version
            )),
        }
    }
    let ring = server_keys.state.ring_at(time::OffsetDateTime::now_utc());
    if server_keys.state.is_rooted() {
        notes.push(format!("keyring version {}", server_keys.state.version()));
    }
    if let Some(at) = server_keys.state.expiry_of(&server_keys.online.pair.id()) {
        notes.push(format!("the online key expires at {at}"));
    }
    for k in ring.keys() {
        notes.push(format!("trusting {} key {}", k.role, k.id));
    }
    if !ring.keys().any(|k| k.role == KeyRole::Release) {
        notes.push("warning: no release key is trusted; nothing can be published".into());
    }
    if config.tokens.is_empty() {
        notes.push(
            "warning: no admin token is configured (FERRY_ADMIN_TOKEN or [[tokens]]): every \
             admin call will be refused"
                .into(),
        );
    }
    if keys::key_paths(&keys_dir).release.exists() && source == KeySource::Provisioned {
        notes.push(format!(
            "warning: {} holds a release key; keep release keys off servers",
            keys_dir.display()
        ));
    }
    if matches!(config.storage, crate::storage::config::StorageConfig::Local) {
        let removed = crate::storage::sweep_staging(
            &config.data.join("store"),
            crate::storage::STALE_STAGING,
        );
        if removed > 0 {
            notes.push(format!(
                "removed {removed} staging file(s) left by uploads that were killed"
            ));
        }
    }
    let (catalog, skipped) = Catalog::load(&store, &ring)
        .await
        .context("cannot load the catalog from the store")?;
    for s in skipped {
        notes.push(format!("warning: skipped {}: {}", s.key, s.why));
    }
    notes.push(format!("catalog: {} release(s)", catalog.release_count()));
    let models = catalog.model_names();
    let mut random = [0u8; 4];
    let _ = getrandom::fill(&mut random);
    let node = config
        .node_id
        .clone()
        .unwrap_or_else(|| stored_node_id(&config.data, &random));
    let parts = crate::api::state::Parts {
        store,
        store_name: config.storage.describe(&config.data),
        keys: server_keys,
        catalog,
        node,
        keys_dir,
    };
    let state = AppState::new(config.settings(), parts);
    // Rollout plans and deny lists decide what devices get: load them before the first
    // request is served (the refresh loop keeps them current afterwards).
    crate::fleet::load_state(state.fleet(), models)
        .await
        .map_err(|e| anyhow::anyhow!("cannot load rollout state from the store: {e}"))?;
    // Fleet-wide telemetry: every replica's rollup so far, including this replica's earlier
    // runs, before the first request.
    crate::fleet::persist::flush::flush_rollups(state.fleet()).await;
    // Stopped sealed releases, named in resolve answers from the first one.
    refresh_seal_stops(&state).await;
    open_journal(state.fleet(), &config.data.join("journal"), &mut notes).await;
    let plans = state.rollouts().len();
    notes.push(format!("rollout plans: {plans}"));
    Ok((Arc::new(state), notes))
}

/// Opens the telemetry journal for this run and replays what earlier runs left in it (see
/// [`crate::fleet::persist::journal`]).
async fn open_journal(
    fleet: &Arc<crate::fleet::Fleet>,
    dir: &std::path::Path,
    notes: &mut Vec<String>,
) {
    use crate::fleet::persist::journal::{Hooks, Journal, replay};
    let (for_minute, for_apply) = (Arc::downgrade(fleet), Arc::downgrade(fleet));
    let hooks = Hooks {
        minute: Box::new(move || {
            let now = time::OffsetDateTime::now_utc();
            for_minute.upgrade().map_or_else(
                || crate::fleet::persist::buckets::Level::Minute.floor(now.unix_timestamp()),
                |f| f.telemetry.outbox().minute_of(now),
            )
        }),
        apply: Box::new(move |batch, minute, seq| {
            if let Some(f) = for_apply.upgrade() {
                f.telemetry.apply_in(batch, minute, seq, &f.config);
            }
        }),
    };
    match Journal::open(dir, &fleet.writer, fleet.config.journal_sync, hooks) {
        Ok(Some(journal)) => {
            let journal = fleet.journal.get_or_init(|| journal);
            let left = journal.old_segments().len();
            if left == 0 {
                return;
            }
            if replay::replay(fleet, journal).await {
                // What the replay wrote is in the views before the first request.
                crate::fleet::persist::flush::flush_rollups(fleet).await;
            } else {
                notes.push(format!(
                    "warning: {left} telemetry journal segment(s) of an earlier run could not \
                     be replayed yet (the store did not answer); retried at every flush"
                ));
            }
        }
        Ok(None) => notes.push(format!(
            "warning: another server holds the telemetry journal in {}: this one answers \
             telemetry from memory (a kill loses what it accepted since its last flush)",
            dir.display()
        )),
        Err(e) => notes.push(format!(
            "warning: no telemetry journal in {} ({e}): telemetry is answered from memory",
            dir.display()
        )),
    }
}

/// How long before the online key's expiry the server starts warning.
pub const EXPIRY_WARNING: time::Duration = time::Duration::days(7);

/// Says at start when the announced retirement of protocol v1 is already past or near.
pub fn warn_sunset(day: Option<time::Date>) {
    let Some(day) = day else {
        return;
    };
    let today = time::OffsetDateTime::now_utc().date();
    if day < today {
        tracing::warn!(
            "protocol_v1_sunset {day} is past: devices are told v1 may no longer be answered; \
             remove it unless that is meant"
        );
    } else if day - today < time::Duration::days(180) {
        tracing::warn!(
            "protocol_v1_sunset {day} is less than six months away: apps get less time to update \
             than docs/protocol.md asks (a year)"
        );
    }
}

fn warn_expiry(state: &AppState) {
    let Some(at) = state.keys().online_expires_at else {
        return;
    };
    let left = at - time::OffsetDateTime::now_utc();
    if left <= time::Duration::ZERO {
        tracing::error!(
            "the online key expired at {at}: devices refuse every answer; rotate it with \
             `ferry keys rotate online` (/readyz answers 503)"
        );
    } else if left <= EXPIRY_WARNING {
        tracing::warn!(
            "the online key expires at {at} (in {} hours): rotate it with `ferry keys rotate online`",
            left.whole_hours()
        );
    }
}

/// Lists the stopped sealed releases in the store (written by any replica) for resolve answers.
async fn refresh_seal_stops(state: &AppState) {
    use futures_util::StreamExt as _;
    let mut listing = state
        .store()
        .list(Some(&crate::storage::StorageKey::seal_stops()));
    let mut stopped = Vec::new();
    while let Some(meta) = listing.next().await {
        match meta {
            Ok(m) => stopped.extend(crate::storage::StorageKey::parse_seal_stop(&m.location)),
            Err(e) => {
                tracing::warn!("listing sealed releases' stops failed: {e}");
                return;
            }
        }
    }
    state.key_service().set_stopped(stopped);
}

/// Re-reads the catalog and rollout state every [`CATALOG_REFRESH`] (picks up changes made by
/// other replicas sharing the store), and flushes telemetry every `telemetry.flush_secs`; warns
/// (hourly) when the online key is within [`EXPIRY_WARNING`] of its expiry.
pub fn spawn_refresh(state: Arc<AppState>, config: &Config) {
    let fleet = state.fleet().clone();
    let ramp_secs = config.ramp_check_secs.max(1);
    actix_web::rt::spawn(async move {
        let mut tick = actix_web::rt::time::interval(CATALOG_REFRESH);
        tick.tick().await;
        refresh_seal_stops(&state).await;
        let mut ticks = 0u64;
        loop {
            tick.tick().await;
            refresh_seal_stops(&state).await;
            // About once an hour, and on the first tick: say so before the online key expires.
            if ticks.is_multiple_of(120) {
                warn_expiry(&state);
            }
            ticks += 1;
            match Catalog::refresh(state.store(), &state.keys().release_ring, &state.catalog())
                .await
            {
                Ok((c, _)) => {
                    let models = c.model_names();
                    state.replace_catalog(c);
                    if let Err(e) = crate::fleet::load_state(state.fleet(), models).await {
                        tracing::warn!("rollout state refresh failed: {e}");
                    }
                }
                Err(e) => tracing::warn!("catalog refresh failed: {e}"),
            }
        }
    });
    let ramp_fleet = fleet.clone();
    actix_web::rt::spawn(async move {
        let mut tick = actix_web::rt::time::interval(Duration::from_secs(ramp_secs));
        loop {
            tick.tick().await;
            crate::fleet::actions::ramp::tick(&ramp_fleet).await;
        }
    });
    actix_web::rt::spawn(crate::fleet::actions::evaluate::run_queue(fleet.clone()));
    let flush_state = fleet;
    actix_web::rt::spawn(async move {
        let secs = flush_state.config.flush_secs.max(1);
        let mut tick = actix_web::rt::time::interval(Duration::from_secs(secs));
        tick.tick().await;
        loop {
            tick.tick().await;
            // Idle rate-limit buckets go at each flush (intake's housekeeping, not the flush's).
            flush_state.telemetry.prune_limits();
            crate::fleet::persist::flush::flush(&flush_state).await;
            // The merged view just changed: check every model's halts and deny list against
            // the whole fleet (in this background task, never on a request worker).
            let models = flush_state.views.catalog.get().model_names();
            for m in models {
                crate::fleet::actions::evaluate::evaluate(&flush_state, &m).await;
            }
        }
    });
}

/// An HTTP server running on a thread of its own: stopped (and its thread joined) by
/// [`ServerThread::stop`] or when dropped. The origin's and a site mirror's share it.
pub struct ServerThread {
    handle: actix_web::dev::ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    /// The server `handle` runs on `thread`.
    pub fn new(handle: actix_web::dev::ServerHandle, thread: std::thread::JoinHandle<()>) -> Self {
        ServerThread {
            handle,
            thread: Some(thread),
        }
    }

    /// Stops the server and waits for its thread (once; later calls do nothing).
    pub fn stop(&mut self) {
        if let Some(t) = self.thread.take() {
            let h = self.handle.clone();
            // Stopping needs an executor; the server's own thread has one.
            std::thread::spawn(move || actix_web::rt::System::new().block_on(h.stop(false)))
                .join()
                .ok();
            let _ = t.join();
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A server running on its own thread (for tests and embedding).
pub struct RunningServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where its `metrics_listen` listener is, when configured.
    pub metrics_addr: Option<SocketAddr>,
    /// Its state.
    pub state: Arc<AppState>,
    tls: bool,
    serving: ServerThread,
}

impl RunningServer {
    /// `http://addr` (or `https://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops the server and waits for its thread, then (at most 2 s) for its connections to
    /// close: a forced stop does not wait for the workers, and until each has taken its stop,
    /// a connection it holds (a client's pooled keep-alive connection) is still answered.
    pub fn stop(mut self) {
        self.serving.stop();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while self.state.connections().addresses() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// Starts a server for `config` on a new thread with its own runtime; `demo` creates
/// development keys when there are none and publishes the demo model first. Returns once it
/// is listening.
pub fn spawn(config: Config, demo: bool) -> anyhow::Result<RunningServer> {
    let tls = config.tls.is_some();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let sys = actix_web::rt::System::new();
        let result = sys.block_on(async {
            let source = if demo {
                KeySource::Development
            } else {
                KeySource::Provisioned
            };
            let (state, _) = build_state(&config, source).await?;
            if demo {
                crate::app::demo::publish_demo(&state, &config).await?;
            }
            let bound = crate::app::listen::bind(state.clone(), &config)?;
            anyhow::Ok((bound, state))
        });
        match result {
            Ok((bound, state)) => {
                sys.block_on(async { spawn_refresh(state.clone(), &config) });
                let _ = tx.send(Ok((
                    bound.server.handle(),
                    bound.addr,
                    bound.metrics,
                    state,
                )));
                let _ = sys.block_on(bound.server);
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
    });
    let (handle, addr, metrics_addr, state) = rx
        .recv()
        .map_err(|_| anyhow::anyhow!("server thread died while starting"))??;
    Ok(RunningServer {
        addr,
        metrics_addr,
        state,
        tls,
        serving: ServerThread::new(handle, thread),
    })
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
