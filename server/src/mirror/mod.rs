//! A site mirror: `ferry serve --mirror-of URL --trust FILE` runs ferry as a read-only mirror of
//! an origin for the devices of one site (a factory LAN, a depot), which point at it instead of
//! the origin (`docs/operations.md`, "A site mirror").
//!
//! - [`held`]: blobs and release manifests, fetched from the origin once and verified against
//!   their digests before a byte is served, checked again whenever they may have changed.
//! - [`kept`]: the origin's shareable resolve answers, keyrings and trust file, served while
//!   the origin is away (for as long as a kept decision is valid).
//! - [`queue`]: the devices' telemetry, on disk, forwarded in order.
//! - [`routes`]: the HTTP side.
//!
//! A mirror signs nothing and holds no key; it verifies what it keeps with the pinned trust
//! file. To the origin it is one address that forwards its devices' addresses in
//! `X-Forwarded-For` (list it in the origin's `limits.trusted_proxies`).

pub mod held;
pub mod kept;
pub mod queue;
pub mod routes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix_web::http::Method;
use anyhow::Context as _;

use crate::app::config::Config;
use crate::tokens::TokenEntry;

/// What `--mirror-of` and `--trust` say.
#[derive(Debug, Clone)]
pub struct MirrorOptions {
    /// The origin's base URL.
    pub origin: String,
    /// The trust file apps pin (the origin's `trust.json`).
    pub trust: PathBuf,
}

/// An answer relayed from the origin.
#[derive(Debug)]
pub struct Relayed {
    /// Its status.
    pub status: u16,
    /// The headers passed on to the device.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Vec<u8>,
}

/// The headers of an origin answer a device gets.
const PASSED_ON: [&str; 5] = [
    "content-type",
    "cache-control",
    "ferry-protocol-sunset",
    "sunset",
    "retry-after",
];

/// A running mirror's state.
#[derive(Debug)]
pub struct Mirror {
    /// The origin's base URL.
    pub origin: String,
    agent: ureq::Agent,
    /// The files it holds.
    pub held: Arc<held::Held>,
    /// The answers and documents it keeps.
    pub kept: kept::Kept,
    /// The telemetry queue.
    pub queue: Arc<queue::Queue>,
    /// When the origin last answered.
    pub contact: Arc<queue::Contact>,
    tokens: Vec<TokenEntry>,
}

impl Mirror {
    /// Opens the mirror's folders under `<data>/mirror/` and starts its telemetry forwarder.
    pub fn open(config: &Config, opts: &MirrorOptions) -> anyhow::Result<Arc<Self>> {
        let origin = opts.origin.trim_end_matches('/').to_string();
        if !(origin.starts_with("http://") || origin.starts_with("https://")) {
            anyhow::bail!("--mirror-of {origin:?} must be the origin's http:// or https:// URL");
        }
        let text = std::fs::read(&opts.trust)
            .with_context(|| format!("cannot read --trust {}", opts.trust.display()))?;
        let file = ferry_shared::trust::TrustFile::from_json(&text)
            .with_context(|| format!("--trust {} is not a trust file", opts.trust.display()))?;
        let trust = ferry_shared::trust::keyring::TrustState::from_trust_file(&file)
            .with_context(|| format!("--trust {}", opts.trust.display()))?;
        let dir = config.data.join("mirror");
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_recv_response(Some(Duration::from_secs(30)))
            .build()
            .new_agent();
        let contact = Arc::new(queue::Contact::default());
        let queue = queue::Queue::open(&dir.join("telemetry"))?;
        {
            let (q, o, a, c) = (
                queue.clone(),
                origin.clone(),
                agent.clone(),
                contact.clone(),
            );
            std::thread::Builder::new()
                .name("mirror-telemetry".into())
                .spawn(move || q.forward(o, a, c))?;
        }
        Ok(Arc::new(Mirror {
            held: Arc::new(held::Held::new(
                &dir,
                &origin,
                agent.clone(),
                config.limits.max_blob_bytes,
            )),
            kept: kept::Kept::open(&dir, trust)?,
            queue,
            contact,
            origin,
            agent,
            tokens: config.tokens.clone(),
        }))
    }

    /// Sends `method path` with `body` and `headers` to the origin (on the blocking pool).
    /// `Err`: the origin could not be reached.
    pub async fn relay(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: Vec<(String, String)>,
    ) -> Result<Relayed, String> {
        let url = format!("{}{path}", self.origin);
        let agent = self.agent.clone();
        let got = actix_web::web::block(move || -> Result<Relayed, String> {
            let mut resp = if method == Method::POST {
                let mut r = agent.post(&url);
                for (k, v) in &headers {
                    r = r.header(k.as_str(), v.as_str());
                }
                r.send(body.unwrap_or_default().as_slice())
            } else {
                let mut r = agent.get(&url);
                for (k, v) in &headers {
                    r = r.header(k.as_str(), v.as_str());
                }
                r.call()
            }
            .map_err(|e| format!("{url}: {e}"))?;
            let status = resp.status().as_u16();
            let headers = PASSED_ON
                .iter()
                .filter_map(|n| {
                    resp.headers()
                        .get(*n)
                        .and_then(|v| v.to_str().ok())
                        .map(|v| (n.to_string(), v.to_string()))
                })
                .collect();
            let body = resp
                .body_mut()
                .with_config()
                .limit(16 << 20)
                .read_to_vec()
                .map_err(|e| format!("{url}: {e}"))?;
            Ok(Relayed {
                status,
                headers,
                body,
            })
        })
        .await
        .map_err(|e| e.to_string())?;
        match &got {
            Ok(r) if r.status < 500 => self.contact.reached(),
            Ok(r) => self.contact.failed(&format!("HTTP {}", r.status)),
            Err(e) => self.contact.failed(e),
        }
        got
    }

    /// What `GET /v1/admin/mirror` shows.
    pub fn state(&self) -> serde_json::Value {
        let c = &self.held.counts;
        let (hits, misses) = (
            c.hits.load(Ordering::Relaxed),
            c.misses.load(Ordering::Relaxed),
        );
        let (files, bytes) = self.held.totals();
        let (batches, queued_bytes) = self.queue.depth();
        let (reached, failure) = self.contact.get();
        let rfc3339 = |t: time::OffsetDateTime| {
            t.format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default()
        };
        serde_json::json!({
            "origin": self.origin,
            "origin_up": failure.is_none() && reached.is_some(),
            "origin_last_reached": reached.map(rfc3339),
            "origin_last_failure": failure,
            "held": {"files": files, "bytes": bytes},
            "hits": hits,
            "misses": misses,
            "hit_ratio": if hits + misses == 0 { 0.0 } else { hits as f64 / (hits + misses) as f64 },
            "origin_bytes": c.origin_bytes.load(Ordering::Relaxed),
            "altered": c.altered.load(Ordering::Relaxed),
            "kept_answers": self.kept.len(),
            "queue": {
                "batches": batches,
                "bytes": queued_bytes,
                "forwarded": self.queue.counts.forwarded.load(Ordering::Relaxed),
                "dropped": self.queue.counts.dropped.load(Ordering::Relaxed),
            },
        })
    }
}

/// A mirror running on its own thread (for tests and embedding).
pub struct RunningMirror {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its state.
    pub mirror: Arc<Mirror>,
    handle: actix_web::dev::ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunningMirror {
    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the mirror and waits for its thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(t) = self.thread.take() {
            self.mirror.queue.stop();
            let h = self.handle.clone();
            std::thread::spawn(move || actix_web::rt::System::new().block_on(h.stop(false)))
                .join()
                .ok();
            let _ = t.join();
        }
    }
}

impl Drop for RunningMirror {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The HTTP server of `mirror` on `config.listen`.
fn server(
    mirror: Arc<Mirror>,
    config: &Config,
) -> anyhow::Result<(actix_web::dev::Server, SocketAddr)> {
    let max_body = config
        .limits
        .max_resolve_bytes
        .max(config.telemetry.max_body_bytes);
    let data = actix_web::web::Data::new(mirror);
    let http = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .app_data(data.clone())
            .app_data(actix_web::web::PayloadConfig::new(max_body))
            .configure(routes::configure)
    })
    .workers(2)
    .bind(config.listen)
    .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = http
        .addrs()
        .first()
        .copied()
        .ok_or_else(|| anyhow::anyhow!("no address bound"))?;
    Ok((http.run(), addr))
}

/// Runs a mirror until the process is stopped (`ferry serve --mirror-of`); `listening` is told
/// where, once it is.
pub fn run(
    config: &Config,
    opts: &MirrorOptions,
    listening: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    let mirror = Mirror::open(config, opts)?;
    let sys = actix_web::rt::System::new();
    sys.block_on(async {
        let (server, addr) = server(mirror, config)?;
        listening(addr);
        server.await.context("the mirror stopped")
    })
}

/// Starts a mirror on a new thread; returns once it is listening.
pub fn spawn(config: Config, opts: MirrorOptions) -> anyhow::Result<RunningMirror> {
    let mirror = Mirror::open(&config, &opts)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let m = mirror.clone();
    let thread = std::thread::spawn(move || {
        let sys = actix_web::rt::System::new();
        match sys.block_on(async { server(m, &config) }) {
            Ok((server, addr)) => {
                let _ = tx.send(Ok((server.handle(), addr)));
                let _ = sys.block_on(server);
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
    });
    let (handle, addr) = rx
        .recv()
        .map_err(|_| anyhow::anyhow!("mirror thread died while starting"))??;
    Ok(RunningMirror {
        addr,
        mirror,
        handle,
        thread: Some(thread),
    })
}
