//! The listener: the HTTP/1 service over every accepted connection, plain or TLS, each stream
//! under the [`Guarded`] rules (bounded read-ahead, a write timeout), each connection counted
//! against its address's limit as it opens.
//!
//! Built from actix's parts rather than `HttpServer`, which offers no way to wrap the stream a
//! connection is served over: the same HTTP/1 dispatcher, timeouts and graceful stop.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_http::HttpService;
use actix_service::{ServiceFactoryExt as _, fn_service, map_config};
use actix_web::dev::{AppConfig, Extensions};
use actix_web::rt::net::TcpStream;
use anyhow::Context as _;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::api::AppState;
use crate::api::connections::Connections;
use crate::api::router::app;
use crate::app::config::Config;
use crate::app::guard::Guarded;

/// A TLS connection after its handshake.
type TlsStream = actix_tls::accept::rustls_0_23::TlsStream<TcpStream>;

/// Longest a TLS handshake may take.
const TLS_HANDSHAKE: Duration = Duration::from_secs(3);

/// What [`bind`] made.
pub struct Bound {
    /// The server (not yet awaited).
    pub server: actix_web::dev::Server,
    /// Where devices and operators reach it.
    pub addr: SocketAddr,
    /// Where the `metrics_listen` listener is, when configured.
    pub metrics: Option<SocketAddr>,
}

/// Binds the listener (and the metrics listener, when configured) and builds the server.
pub fn bind(state: Arc<AppState>, config: &Config) -> anyhow::Result<Bound> {
    let listener = TcpListener::bind(config.listen)
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let metrics_state = state.clone();
    let tls = match &config.tls {
        Some(t) => Some(tls_config(&t.cert, &t.key)?),
        None => None,
    };
    let write_timeout = Duration::from_secs(config.limits.write_timeout_secs);
    let builder = actix_server::Server::build()
        .workers(
            std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .clamp(2, 16),
        )
        .shutdown_timeout(5);
    let stopping = builder.graceful_shutdown_signal();
    let name = format!("ferry-{addr}");
    let builder = match tls {
        None => builder.listen(name, listener, move || {
            let http = http_service::<Guarded<TcpStream>>(&state, &stopping, Guarded::get_ref);
            fn_service(move |io: TcpStream| {
                let peer = io.peer_addr().ok();
                std::future::ready(Ok((Guarded::new(io, write_timeout), peer)))
            })
            .and_then(http.map_err(|e| tracing::debug!("connection ended: {e:?}")))
        })?,
        Some(cfg) => {
            let acceptor = actix_tls::accept::rustls_0_23::Acceptor::new(cfg);
            builder.listen(name, listener, move || {
                let mut acceptor = acceptor.clone();
                acceptor.set_handshake_timeout(TLS_HANDSHAKE);
                let http = http_service::<Guarded<TlsStream>>(&state, &stopping, |g| {
                    g.get_ref().get_ref().0
                });
                acceptor
                    .map_init_err(|()| ())
                    .map_err(|e| tracing::debug!("TLS connection not accepted: {e:?}"))
                    .map(move |io: TlsStream| {
                        let peer = io.get_ref().0.peer_addr().ok();
                        (Guarded::new(io, write_timeout), peer)
                    })
                    .and_then(http.map_err(|e| tracing::debug!("connection ended: {e:?}")))
            })?
        }
    };
    let (builder, metrics) = match config.metrics_listen {
        None => (builder, None),
        Some(at) => {
            let l = TcpListener::bind(at)
                .with_context(|| format!("cannot listen on {at} (metrics_listen)"))?;
            let bound = l.local_addr()?;
            let builder = builder.listen(format!("ferry-metrics-{bound}"), l, move || {
                let app = map_config(
                    actix_service::IntoServiceFactory::into_factory(
                        crate::api::router::metrics_app(metrics_state.clone()),
                    ),
                    |()| AppConfig::default(),
                );
                fn_service(|io: TcpStream| {
                    let peer = io.peer_addr().ok();
                    let _ = io.set_nodelay(true);
                    std::future::ready(Ok((io, peer)))
                })
                .and_then(
                    HttpService::<TcpStream, _, _, _, _>::build()
                        .client_request_timeout(Duration::from_secs(5))
                        .h1(app)
                        .map_err(|e| tracing::debug!("metrics connection ended: {e:?}")),
                )
            })?;
            (builder, Some(bound))
        }
    };
    Ok(Bound {
        server: builder.run(),
        addr,
        metrics,
    })
}

/// Bytes of response a connection gathers before it writes them to the socket: a blob's
/// pieces (`api/blobs.rs`) go out in writes of this size, not of actix's default 32 KiB.
const WRITE_BUFFER: usize = 256 << 10;

/// The HTTP/1 service of the application over streams of type `T` (`tcp` finds the TCP
/// stream under one): actix's own defaults (5 s keep-alive, 5 s to send a request's head, 1 s
/// to close), the graceful stop, and [`on_connect`].
fn http_service<T>(
    state: &Arc<AppState>,
    stopping: &actix_server::GracefulShutdownSignal,
    tcp: fn(&T) -> &TcpStream,
) -> impl actix_service::ServiceFactory<
    (T, Option<SocketAddr>),
    Config = (),
    Response = (),
    Error = actix_http::error::DispatchError,
    InitError = (),
> + use<T>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    let stopping = stopping.clone();
    let connections = state.connections().clone();
    HttpService::<T, _, _, _, _>::build()
        .keep_alive(actix_http::KeepAlive::Timeout(Duration::from_secs(5)))
        .client_request_timeout(Duration::from_secs(5))
        .client_disconnect_timeout(Duration::from_secs(1))
        .h1_write_buffer_size(WRITE_BUFFER)
        .graceful_shutdown_signal(move || {
            let stopping = stopping.clone();
            async move { stopping.notified().await }
        })
        .on_connect_ext(move |io: &T, ext| on_connect(&connections, tcp(io), ext))
        .h1(app_factory(state))
}

/// The application for one worker, as the HTTP service takes it.
fn app_factory(
    state: &Arc<AppState>,
) -> impl actix_service::ServiceFactory<
    actix_http::Request,
    Config = (),
    Response = actix_web::dev::ServiceResponse<actix_web::body::BoxBody>,
    Error = actix_web::Error,
    InitError = (),
> + use<> {
    use actix_service::IntoServiceFactory as _;
    map_config(app(state.clone()).into_factory(), |()| AppConfig::default())
}

/// On every accepted connection: disables Nagle's algorithm (responses are written as headers
/// then body, and with Nagle on, a keep-alive client's delayed ACK stalls each small response
/// by tens of milliseconds), and takes the connection's slot among its address's connections.
fn on_connect(connections: &Arc<Connections>, tcp: &TcpStream, ext: &mut Extensions) {
    let _ = tcp.set_nodelay(true);
    if let Some(slot) = connections.open(tcp.peer_addr().ok().map(|a| a.ip())) {
        if slot.over() {
            // Over its address's limit: close it now, so it holds no descriptor while it waits
            // for a request (the slot is freed when the connection is dropped).
            let _ = socket2::SockRef::from(tcp).shutdown(std::net::Shutdown::Both);
        }
        ext.insert(slot);
    }
}

/// Loads a rustls server configuration from PEM files, with the ring provider chosen
/// explicitly (never the process default, which is ambiguous when two providers are linked).
pub fn tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<rustls::ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read certificate {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("bad certificate PEM in {}", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("{} holds no certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("cannot read private key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("certificate and key do not match")?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}
