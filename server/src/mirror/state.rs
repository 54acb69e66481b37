//! A site mirror's state: what it holds, keeps and queues, and how it reaches the origin.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix_web::http::Method;
use anyhow::Context as _;

use super::{held, kept, queue};
use crate::app::config::Config;
use crate::tokens::TokenEntry;

/// What `--mirror-of` and `--trust` say.
#[derive(Debug, Clone)]
pub struct MirrorOptions {
    /// The origin's base URL.
    pub origin: String,
    /// The trust file apps pin (the origin's `trust.json`).
    pub trust: PathBuf,
    /// A token with the read scope on the origin (`FERRY_ORIGIN_TOKEN`), for
    /// `ferry mirror sync` to list releases; `None`: sync is refused.
    pub origin_token: Option<String>,
    /// The CA certificates (PEM) an HTTPS origin's certificate is checked against
    /// (`FERRY_ORIGIN_CA`), when not a public CA's.
    pub origin_ca: Option<PathBuf>,
}

/// The roots of `--origin-ca` (`FERRY_ORIGIN_CA`): every certificate of the PEM file.
fn origin_roots(path: &std::path::Path) -> anyhow::Result<ureq::tls::TlsConfig> {
    let pem = std::fs::read(path)
        .with_context(|| format!("cannot read FERRY_ORIGIN_CA {}", path.display()))?;
    let mut roots = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let ureq::tls::PemItem::Certificate(c) =
            item.with_context(|| format!("bad PEM in {}", path.display()))?
        {
            roots.push(c);
        }
    }
    anyhow::ensure!(!roots.is_empty(), "{} holds no certificate", path.display());
    Ok(ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
        .build())
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
    /// The origin token (see [`MirrorOptions::origin_token`]).
    pub(crate) origin_token: Option<String>,
    /// The tokens `GET /v1/admin/mirror` and `/metrics` accept.
    pub(crate) tokens: Vec<TokenEntry>,
    /// Telemetry limits (batch size, body size, batches per address and minute).
    pub(crate) telemetry: crate::fleet::config::TelemetryConfig,
    /// Request limits (resolve body size, body time).
    pub(crate) limits: crate::api::limits::Limits,
    /// Telemetry batches per address in the current minute.
    batches_by_address: std::sync::Mutex<(u64, std::collections::HashMap<std::net::IpAddr, u32>)>,
}

impl Mirror {
    /// Opens the mirror's folders under `<data>/mirror/` and starts its telemetry forwarder.
    pub fn open(config: &Config, opts: &MirrorOptions) -> anyhow::Result<Arc<Self>> {
        let origin = opts.origin.trim_end_matches('/').to_string();
        let host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .map(|rest| rest.split('/').next().unwrap_or_default());
        let well_formed =
            origin.bytes().all(|b| b.is_ascii_graphic()) && !origin.contains(['?', '#', '@', '\\']);
        if !well_formed || host.is_none_or(str::is_empty) {
            anyhow::bail!(
                "--mirror-of {origin:?} must be the origin's http:// or https:// URL: a host \
                 and maybe a path, without spaces, credentials, a query or a fragment"
            );
        }
        let text = std::fs::read(&opts.trust)
            .with_context(|| format!("cannot read --trust {}", opts.trust.display()))?;
        let file = ferry_shared::trust::TrustFile::from_json(&text)
            .with_context(|| format!("--trust {} is not a trust file", opts.trust.display()))?;
        let trust = ferry_shared::trust::keyring::TrustState::from_trust_file(&file)
            .with_context(|| format!("--trust {}", opts.trust.display()))?;
        let dir = config.data.join("mirror");
        let mut agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_recv_response(Some(Duration::from_secs(30)));
        if let Some(ca) = &opts.origin_ca {
            agent = agent.tls_config(origin_roots(ca)?);
        }
        let agent = agent.build().new_agent();
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
                config.mirror_max_held_bytes,
            )),
            kept: kept::Kept::open(&dir, trust)?,
            queue,
            contact,
            origin,
            agent,
            origin_token: opts.origin_token.clone(),
            tokens: config.tokens.clone(),
            telemetry: config.telemetry,
            limits: config.limits.clone(),
            batches_by_address: std::sync::Mutex::new((0, std::collections::HashMap::new())),
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

    /// Counts a telemetry batch from `addr`; false when the address is past
    /// `telemetry.per_address_per_minute` this minute (one device cannot fill the queue that the
    /// whole site shares).
    pub fn batch_allowed(&self, addr: Option<std::net::IpAddr>) -> bool {
        let Some(addr) = addr else {
            return true;
        };
        let minute = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 60);
        let mut held = ferry_shared::sync::lock(&self.batches_by_address);
        if held.0 != minute || held.1.len() > 100_000 {
            *held = (minute, std::collections::HashMap::new());
        }
        let n = held.1.entry(addr).or_insert(0);
        *n += 1;
        *n <= self.telemetry.per_address_per_minute
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
            "evicted": c.evicted.load(Ordering::Relaxed),
            "max_held_bytes": self.held.budget(),
            "kept_answers": self.kept.len(),
            "queue": {
                "batches": batches,
                "bytes": queued_bytes,
                "forwarded": self.queue.counts.forwarded.load(Ordering::Relaxed),
                "dropped": self.queue.counts.dropped.load(Ordering::Relaxed),
                "rejected_events": self.queue.counts.rejected_events.load(Ordering::Relaxed),
            },
        })
    }
}
