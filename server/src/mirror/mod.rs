//! A site mirror: `ferry serve --mirror-of URL --trust FILE` runs ferry as a read-only mirror of
//! an origin for the devices of one site (a factory LAN, a depot), which point at it instead of
//! the origin (`docs/operations.md`, "A site mirror").
//!
//! - [`held`]: blobs and release manifests, fetched from the origin once and verified against
//!   their digests before a byte is served, checked again whenever they may have changed.
//! - [`kept`]: the origin's shareable resolve answers, keyrings and trust file, served while
//!   the origin is away (for as long as a kept decision is valid).
//! - [`queue`]: the devices' telemetry, on disk, forwarded in order.
//! - [`sync`]: filling the mirror ahead of a rollout (`ferry mirror sync`).
//! - [`routes`]: the HTTP side; [`state`]: what ties them together.
//!
//! A mirror signs nothing and holds no key; it verifies what it keeps with the pinned trust
//! file. To the origin it is one address that forwards its devices' addresses in
//! `X-Forwarded-For` (list it in the origin's `limits.trusted_proxies`).

pub mod held;
pub mod kept;
pub mod queue;
pub mod routes;
pub mod state;
pub mod sync;

pub use state::{Mirror, MirrorOptions, Relayed};

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;

use crate::app::config::Config;

/// A mirror running on its own thread (for tests and embedding).
pub struct RunningMirror {
    /// Where it listens.
    pub addr: SocketAddr,
    tls: bool,
    /// Its state.
    pub mirror: Arc<Mirror>,
    serving: crate::app::startup::ServerThread,
}

impl RunningMirror {
    /// `http://addr` (or `https://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops the mirror (its telemetry forwarder, then its server) and waits for its thread.
    pub fn stop(mut self) {
        self.mirror.queue.stop();
        self.serving.stop();
    }
}

impl Drop for RunningMirror {
    fn drop(&mut self) {
        self.mirror.queue.stop();
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
    let ids = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let http = actix_web::HttpServer::new(move || {
        let ids = ids.clone();
        actix_web::App::new()
            .app_data(data.clone())
            .app_data(actix_web::web::PayloadConfig::new(max_body))
            .configure(routes::configure)
            .wrap_fn(move |req, srv| {
                use actix_web::dev::Service as _;
                // A caller's request id is kept (and relayed to the origin), else one is made,
                // so logs line up across the device, the mirror and the origin.
                let id =
                    crate::api::router::incoming_request_id(req.headers()).unwrap_or_else(|| {
                        let n = ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        format!("mirror-{n:x}")
                    });
                let (method, path) = (req.method().clone(), req.path().to_string());
                let started = std::time::Instant::now();
                let fut = crate::api::error::REQUEST_ID.scope(id.clone(), srv.call(req));
                async move {
                    let mut res = fut.await?;
                    if let Ok(v) = actix_web::http::header::HeaderValue::from_str(&id) {
                        res.headers_mut().insert(
                            actix_web::http::header::HeaderName::from_static("x-request-id"),
                            v,
                        );
                    }
                    // Every answer says which protocol it speaks, as the origin's do.
                    res.headers_mut().insert(
                        actix_web::http::header::HeaderName::from_static("ferry-protocol"),
                        actix_web::http::header::HeaderValue::from(
                            ferry_shared::wire::protocol::PROTOCOL,
                        ),
                    );
                    tracing::debug!(
                        request_id = %id,
                        %method,
                        path,
                        status = res.status().as_u16(),
                        ms = started.elapsed().as_secs_f64() * 1000.0,
                        "request"
                    );
                    Ok(res)
                }
            })
    })
    .workers(2);
    // HTTPS with the configured certificate ([tls] or FERRY_TLS_CERT/FERRY_TLS_KEY), as the
    // origin serves it.
    let http = match &config.tls {
        Some(tls) => http.bind_rustls_0_23(
            config.listen,
            crate::app::listen::tls_config(&tls.cert, &tls.key)?,
        ),
        None => http.bind(config.listen),
    }
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
    let tls = config.tls.is_some();
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
        tls,
        mirror,
        serving: crate::app::startup::ServerThread::new(handle, thread),
    })
}
