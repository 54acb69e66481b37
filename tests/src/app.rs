//! `TestApp`: a real ferry server on a loopback port with its own data directory, an admin
//! token, and helpers to sign and publish fixture releases over HTTP.

use std::path::{Path, PathBuf};

use ferry_server::app::config::{Config, Flags};
use ferry_server::app::startup::{RunningServer, spawn};
use ferry_server::keys::{self, RoleKey};
use ferry_server::release::sign::VariantsFile;
use ferry_shared::manifest::ReleaseManifest;
use ferry_shared::trust::TrustFile;
use ferry_shared::trust::dsse::{DsseLimits, Envelope, KeyRole, Verified, verify};
use ferry_shared::trust::keyring::TrustState;
use ferry_shared::wire::resolve::{DECISION_PAYLOAD_TYPE, Decision, ResolveResponse};

pub use crate::releases::*;

/// The admin token every test server accepts (all scopes).
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";
/// A token with only the `read` scope.
pub const READ_TOKEN: &str = "test-read-token-0123456789";

/// A running test server.
pub struct TestApp {
    /// The server.
    pub server: RunningServer,
    /// Its data directory (removed on drop).
    pub dir: tempfile::TempDir,
    /// An HTTP agent that reports every status.
    pub agent: ureq::Agent,
}

/// A change to the configuration before the server starts.
pub type ConfigTweak = Box<dyn FnOnce(&mut Config)>;

/// Options for [`TestApp::start_with`].
#[derive(Default)]
pub struct Options {
    /// Publish the demo model.
    pub demo: bool,
    /// Change the config before start.
    pub tweak: Option<ConfigTweak>,
    /// Take the server's keys from this folder (its `online.key`, `trust.json` and
    /// `keyring/`, as an operator copies them) instead of generating new ones.
    pub keys: Option<PathBuf>,
    /// Start on a copy of this local object store (a recorded store, as a replica of another
    /// version left it) instead of an empty one.
    pub store: Option<PathBuf>,
}

/// The configuration of a test server on `data`, listening on `listen`, with the admin and
/// read tokens.
pub fn test_config(data: &Path, listen: &str) -> Config {
    let env = |k: &str| (k == "FERRY_ADMIN_TOKEN").then(|| ADMIN_TOKEN.to_string());
    let flags = Flags {
        config: None,
        listen: Some(listen.into()),
        data: Some(data.to_path_buf()),
    };
    let mut config = Config::load(&flags, &env).expect("config");
    crate::one_host_fleet(&mut config);
    config
        .tokens
        .push(ferry_server::tokens::TokenEntry::from_secret(
            "reader",
            READ_TOKEN,
            vec![ferry_server::tokens::Scope::Read],
        ));
    config
}

impl TestApp {
    /// Starts a plain server.
    pub fn start() -> TestApp {
        Self::start_with(Options::default())
    }

    /// Starts a server with options.
    pub fn start_with(opts: Options) -> TestApp {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = test_config(dir.path(), "127.0.0.1:0");
        if let Some(f) = opts.tweak {
            f(&mut config);
        }
        if let Some(from) = &opts.store {
            copy_tree(from, &config.store_dir()).expect("copy the store");
        }
        if let Some(from) = &opts.keys {
            let to = config.keys_dir();
            std::fs::create_dir_all(to.join("keyring")).expect("keys dir");
            for f in ["online.key", "trust.json", "key-release.key"] {
                if from.join(f).exists() {
                    std::fs::copy(from.join(f), to.join(f)).expect("copy key");
                }
            }
            for e in std::fs::read_dir(from.join("keyring"))
                .expect("keyring")
                .flatten()
            {
                std::fs::copy(e.path(), to.join("keyring").join(e.file_name())).expect("copy");
            }
        } else if !opts.demo {
            // What an operator does: keys made by `ferry keys generate`, copied to the server.
            keys::generate_keyset(&config.keys_dir()).expect("keys");
        }
        let server = spawn(config, opts.demo).expect("server starts");
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        TestApp { server, dir, agent }
    }

    /// Stops the server and starts it again on the same data directory and address (what an
    /// operator's restart does: keys, keyrings and the store are read afresh).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        let addr = self.server.addr.to_string();
        let placeholder = self.try_replica_at("127.0.0.1:0")?;
        let old = std::mem::replace(&mut self.server, placeholder);
        old.stop();
        let fresh = self.try_replica_at(&addr)?;
        let _ = std::mem::replace(&mut self.server, fresh);
        // Connections pooled to the stopped server are dead: a device's HTTP client would open
        // new ones, and so does the test's (a POST is never retried on a stale connection).
        self.agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(())
    }

    /// Starts another server on this data directory at `listen`, or says why it cannot.
    pub fn try_replica_at(&self, listen: &str) -> anyhow::Result<RunningServer> {
        spawn(test_config(self.dir.path(), listen), false)
    }

    /// [`TestApp::try_replica_at`] with a change to its configuration.
    pub fn try_replica_at_with(
        &self,
        listen: &str,
        tweak: ConfigTweak,
    ) -> anyhow::Result<RunningServer> {
        let mut config = test_config(self.dir.path(), listen);
        tweak(&mut config);
        spawn(config, false)
    }

    /// Base URL.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The server's `/metrics` text, read with the read token.
    pub fn metrics(&self) -> String {
        let mut r = self
            .agent
            .get(self.at("/metrics"))
            .header("authorization", format!("Bearer {READ_TOKEN}"))
            .call()
            .expect("metrics");
        assert_eq!(r.status().as_u16(), 200, "/metrics with the read token");
        r.body_mut().read_to_string().expect("text")
    }

    /// The value of the first `/metrics` line that starts with `series` (a name, or a name and
    /// its labels), when there is one.
    pub fn counter(&self, series: &str) -> Option<u64> {
        self.metrics()
            .lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
            .map(|v| v as u64)
    }

    /// The server's count of blob bytes it served (`ferry_blob_bytes_served` in `/metrics`).
    pub fn blob_bytes_served(&self) -> u64 {
        self.counter("ferry_blob_bytes_served")
            .expect("ferry_blob_bytes_served in /metrics")
    }

    /// `url() + path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url())
    }

    /// The key folder `ferry keys generate` made for this server (root, release, online and
    /// key-release keys, trust.json, keyring/).
    pub fn keys_dir(&self) -> PathBuf {
        self.dir.path().join("keys")
    }

    /// The data directory's release key (trusted by the server).
    pub fn release_key(&self) -> RoleKey {
        keys::load(&self.dir.path().join("keys/release.key")).expect("release key")
    }

    /// The trust file clients should pin (the root key).
    pub fn trust(&self) -> TrustFile {
        let bytes = std::fs::read(self.dir.path().join("keys/trust.json")).expect("trust.json");
        TrustFile::from_json(&bytes).expect("trust")
    }

    /// The pinned root walked through the server's keyrings: the current release and online
    /// keys.
    pub fn trust_state(&self) -> TrustState {
        keys::load_trust(&self.dir.path().join("keys"))
            .expect("keyrings verify")
            .1
    }

    /// The object store's root folder.
    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Every file under the store (relative paths, sorted).
    pub fn stored_files(&self) -> Vec<String> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
            if let Ok(rd) = std::fs::read_dir(dir) {
                for e in rd.flatten() {
                    let p = e.path();
                    if p.is_dir() {
                        walk(root, &p, out);
                    } else if let Ok(rel) = p.strip_prefix(root) {
                        out.push(rel.to_string_lossy().into_owned());
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.store_dir(), &self.store_dir(), &mut out);
        out.sort();
        out
    }

    /// Uploads `bytes` as a blob with the admin token; returns the status.
    pub fn put_blob(&self, bytes: &[u8]) -> u16 {
        let digest = ferry_shared::Sha256Digest::of(bytes);
        self.agent
            .put(self.at(&format!("/v1/admin/blobs/sha256/{}", digest.to_hex())))
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .send(bytes)
            .expect("upload")
            .status()
            .as_u16()
    }

    /// Posts a signed release; returns status and JSON body.
    pub fn post_release(&self, model: &str, envelope: &Envelope) -> (u16, serde_json::Value) {
        let body = serde_json::to_vec(envelope).expect("json");
        self.post_raw(
            &format!("/v1/admin/models/{model}/releases"),
            &body,
            Some(ADMIN_TOKEN),
        )
    }

    /// Posts raw bytes; returns status and JSON body (Null when not JSON).
    pub fn post_raw(
        &self,
        path: &str,
        body: &[u8],
        token: Option<&str>,
    ) -> (u16, serde_json::Value) {
        let mut req = self
            .agent
            .post(self.at(path))
            .header("content-type", "application/json");
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let mut resp = req.send(body).expect("request");
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }

    /// Waits until the fleet evaluations (halts, deny entries) asked for by telemetry sent so
    /// far have run: they run in the background, after the telemetry answer.
    pub fn settle(&self) {
        let q = &self.server.state.evaluations();
        let asked = q.asked();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !q.done_through(asked) {
            assert!(
                std::time::Instant::now() < until,
                "fleet evaluation did not finish"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// GETs a path; returns status and JSON body.
    pub fn get_json(&self, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
        let mut req = self.agent.get(self.at(path));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let mut resp = req.call().expect("request");
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }

    /// Uploads the release's blobs from the fixtures folder and publishes it; panics on failure.
    pub fn publish(&self, spec: &VariantsFile) -> (ReleaseManifest, Envelope) {
        self.publish_with(spec, |_| {})
    }

    /// [`TestApp::publish`], with `edit` applied to the manifest before it is signed (what
    /// `ferry sign` adds after building it, such as an evaluation).
    pub fn publish_with(
        &self,
        spec: &VariantsFile,
        edit: impl FnOnce(&mut ReleaseManifest),
    ) -> (ReleaseManifest, Envelope) {
        let read = |p: &Path| -> anyhow::Result<Vec<u8>> { Ok(std::fs::read(p)?) };
        let built = ferry_server::release::sign::build(
            spec,
            &crate::fixtures_dir().join("pte"),
            &read,
            time::OffsetDateTime::now_utc(),
        )
        .expect("manifest builds");
        let mut manifest = built.manifest;
        edit(&mut manifest);
        let envelope =
            ferry_server::release::sign::sign(&manifest, &self.release_key()).expect("signs");
        for (v, f) in manifest.variants.iter().zip(&built.files) {
            let files = std::iter::once(f)
                .chain(&f.data)
                .chain(&f.assets)
                .map(|s| &s.path);
            for path in files {
                let status = self.put_blob(&std::fs::read(path).expect("release file"));
                assert!(
                    status == 201 || status == 200,
                    "upload {} {}: {status}",
                    v.id,
                    path.display()
                );
            }
        }
        // The chunk indexes the release signs, as `ferry publish` uploads them.
        for (v, f) in manifest.variants.iter().zip(&built.files) {
            let indexes = std::iter::once(v.chunk_index)
                .chain(v.side_files().map(|x| x.chunk_index))
                .zip(std::iter::once(f).chain(&f.data).chain(&f.assets));
            for (index, file) in indexes {
                if index.is_some() {
                    let made = ferry_server::release::sign::chunks::index_of_file(&file.path)
                        .expect("chunk index");
                    assert_eq!(Some(made.reference()), index);
                    assert!(matches!(self.put_blob(&made.to_bytes()), 200 | 201));
                }
            }
        }
        let (status, body) = self.post_release(manifest.model.as_str(), &envelope);
        assert_eq!(status, 201, "publish: {body}");
        (manifest, envelope)
    }

    /// POSTs a resolve request (JSON value); returns status and body.
    pub fn resolve(&self, device: &serde_json::Value, explain: bool) -> (u16, serde_json::Value) {
        let path = if explain {
            "/v1/resolve?explain=true"
        } else {
            "/v1/resolve"
        };
        self.post_raw(path, &serde_json::to_vec(device).expect("json"), None)
    }

    /// Verifies a resolve response against this server's trust file: the decision with the
    /// online key, the release with a release key. Returns the decision and the manifest.
    pub fn verify_response(&self, body: &serde_json::Value) -> (Decision, ReleaseManifest) {
        let resp: ResolveResponse =
            serde_json::from_value(body.clone()).expect("resolve response shape");
        let ring = self.trust_state().ring_at(time::OffsetDateTime::now_utc());
        let d: Verified<Vec<u8>> = verify(
            &resp.decision,
            DECISION_PAYLOAD_TYPE,
            &ring,
            KeyRole::Online,
            1,
            &DsseLimits::default(),
        )
        .expect("decision verifies");
        let release = resp.release.clone().unwrap_or_else(|| {
            // Fetched by the digest the answer names, as a client does.
            let mut r = self
                .agent
                .get(self.at(&format!(
                    "/v1/releases/sha256/{}",
                    resp.release_ref.sha256.to_hex()
                )))
                .call()
                .expect("release by digest");
            let bytes = r.body_mut().read_to_vec().expect("bytes");
            assert_eq!(
                ferry_shared::Sha256Digest::of(&bytes),
                resp.release_ref.sha256,
                "the served release hashes to its digest"
            );
            serde_json::from_slice(&bytes).expect("envelope")
        });
        let m = verify(
            &release,
            ferry_shared::manifest::RELEASE_PAYLOAD_TYPE,
            &ring,
            KeyRole::Release,
            1,
            &DsseLimits::default(),
        )
        .expect("release verifies");
        let decision: Decision = serde_json::from_slice(d.value()).expect("decision json");
        let manifest = ReleaseManifest::from_json(m.value()).expect("manifest json");
        (decision, manifest)
    }
}

impl TestApp {
    /// Another server on the same state: the same data directory, or (with `storage`) a fresh
    /// data directory with this server's keys and the given shared object store.
    pub fn replica(
        &self,
        storage: Option<ferry_server::storage::config::StorageConfig>,
    ) -> RunningServer {
        self.replica_with(storage, Box::new(|_| {}))
    }

    /// [`TestApp::replica`] with a change to its configuration.
    pub fn replica_with(
        &self,
        storage: Option<ferry_server::storage::config::StorageConfig>,
        tweak: ConfigTweak,
    ) -> RunningServer {
        let env = |k: &str| (k == "FERRY_ADMIN_TOKEN").then(|| ADMIN_TOKEN.to_string());
        let data = match &storage {
            None => self.dir.path().to_path_buf(),
            Some(_) => tempfile::tempdir().expect("tmp").keep(),
        };
        let flags = Flags {
            config: None,
            listen: Some("127.0.0.1:0".into()),
            data: Some(data),
        };
        let mut config = Config::load(&flags, &env).expect("config");
        crate::one_host_fleet(&mut config);
        tweak(&mut config);
        if let Some(s) = storage {
            config.storage = s;
            // Replicas share keys (a real deployment provisions them).
            std::fs::create_dir_all(config.keys_dir()).expect("keys dir");
            for f in ["online.key", "trust.json", "key-release.key"] {
                std::fs::copy(
                    self.dir.path().join("keys").join(f),
                    config.keys_dir().join(f),
                )
                .expect("copy key");
            }
            let chain = config.keys_dir().join("keyring");
            std::fs::create_dir_all(&chain).expect("keyring dir");
            for e in std::fs::read_dir(self.dir.path().join("keys/keyring")).expect("keyrings") {
                let e = e.expect("entry");
                std::fs::copy(e.path(), chain.join(e.file_name())).expect("copy keyring");
            }
        }
        spawn(config, false).expect("replica starts")
    }

    /// Posts `events` to the server at `url` as devices that resolved would (each with its
    /// receipt, see [`TestApp::with_receipts`]) and asserts every one was accepted and
    /// verified.
    pub fn post_receipted(&self, url: &str, events: &[serde_json::Value]) {
        let events = self.with_receipts(events);
        let mut r = self
            .agent
            .post(format!("{url}/v1/telemetry"))
            .header("content-type", "application/json")
            .send(serde_json::to_vec(&serde_json::json!({ "events": events })).expect("json"))
            .expect("post");
        let body: serde_json::Value =
            serde_json::from_reader(r.body_mut().as_reader()).expect("json");
        assert_eq!(r.status().as_u16(), 200, "{body}");
        assert_eq!(
            body["accepted"].as_u64(),
            Some(events.len() as u64),
            "{body}"
        );
        assert_eq!(body["unverified"], 0, "{body}");
    }

    /// Stamps each telemetry event with the receipt this server gives its install id for its
    /// model, release, device class and variants (the variant and any `to_variant`): what a
    /// device that resolved would send. Uses the server's online key, as the server does.
    pub fn with_receipts(&self, events: &[serde_json::Value]) -> Vec<serde_json::Value> {
        crate::reports::with_receipts_of(self.dir.path(), events)
    }

    /// Makes `version` of `mlp` the baseline through a full rollout (start at 100%, complete),
    /// as an operator ships a release that publishing alone does not.
    pub fn ship(&self, version: &str) {
        self.ship_model("mlp", version);
    }

    /// [`TestApp::ship`] for any model.
    pub fn ship_model(&self, model: &str, version: &str) {
        for body in [
            serde_json::json!({"action": "start", "release": version, "percent": "100"}),
            serde_json::json!({"action": "complete"}),
        ] {
            let (s, b) = self.post_raw(
                &format!("/v1/admin/models/{model}/rollout"),
                &serde_json::to_vec(&body).expect("json"),
                Some(ADMIN_TOKEN),
            );
            assert_eq!(s, 200, "{b}");
        }
    }

    /// Races `threads` writers, each sending `per_thread` distinct `set` changes to the rollout
    /// of `mlp` on `urls` (round robin), then checks that the history holds all of them.
    pub fn race_rollout(&self, urls: &[String], threads: usize, per_thread: usize) {
        let (s, h) = self.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
        assert_eq!(s, 200);
        let earlier = h["history"].as_array().map_or(0, Vec::len);
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let url = urls[t % urls.len()].clone();
                std::thread::spawn(move || {
                    let agent = ureq::Agent::config_builder().http_status_as_error(false).build().new_agent();
                    for i in 0..per_thread {
                        let body = serde_json::json!({"action": "set", "percent": format!("{}.{:02}", 2 + t, i + 1)});
                        let mut r = agent
                            .post(format!("{url}/v1/admin/models/mlp/rollout"))
                            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
                            .header("content-type", "application/json")
                            .send(serde_json::to_vec(&body).expect("json").as_slice())
                            .expect("request");
                        let status = r.status().as_u16();
                        assert_eq!(status, 200, "{}", r.body_mut().read_to_string().unwrap_or_default());
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("writer thread");
        }
        let (s, h) = self.get_json("/v1/admin/models/mlp/rollout", Some(READ_TOKEN));
        assert_eq!(s, 200);
        let history = h["history"].as_array().expect("history");
        let n = threads * per_thread + earlier;
        assert_eq!(
            history.len(),
            n,
            "{earlier} earlier revisions + {} sets, none lost",
            n - earlier
        );
        let revisions: Vec<u64> = history
            .iter()
            .filter_map(|p| p["revision"].as_u64())
            .collect();
        assert_eq!(revisions, (1..=n as u64).collect::<Vec<_>>());
        let got: std::collections::BTreeSet<u64> = history
            .iter()
            .skip(earlier)
            .filter_map(|p| p["basis_points"].as_u64())
            .collect();
        let want: std::collections::BTreeSet<u64> = (0..threads as u64)
            .flat_map(|t| (0..per_thread as u64).map(move |i| (2 + t) * 100 + i + 1))
            .collect();
        assert_eq!(got, want, "every write is in the history");
    }
}

/// Copies the folder `from` into `to` (created), files and subfolders.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), target)?;
        }
    }
    Ok(())
}
