//! HTTPS whose certificate checks do not rest on the device's wall clock.
//!
//! A certificate is valid between two dates, so a device whose clock says 1970 (no
//! battery-backed clock) or 2040 (set by hand) fails every handshake before it could learn the
//! time. The client therefore holds two connection pools to its server:
//!
//! - **checked** ([`Dates::Trusted`]): every request. Certificates are checked in full at the
//!   time the client trusts ([`crate::Client::now`]: the server's signed time carried by the
//!   boot clock while that holds, else the wall clock).
//! - **time** ([`Dates::Unchecked`]): only `GET /v1/time`, whose answer is the server's time
//!   bound to this request's nonce and signed by the online key, and the `GET /v1/keyring`
//!   walk it may need first (each version signed by the root keys of the one before).
//!   Certificates are checked in full (chain to a trusted root, name, signatures) except their
//!   validity dates: the answers need no clock to trust and carry nothing secret, the requests
//!   carry only a nonce, and the pool follows no redirect.
//!
//! TLS here goes through a connector of our own (ureq's `unversioned` transport API) because
//! ureq builds its rustls configuration itself and offers no hook for the verification time.

use std::fmt;
use std::io::{Read as _, Write as _};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use time::OffsetDateTime;
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout,
    TcpConnector, Transport, TransportAdapter,
};

/// The time source of the checked pool: what the client trusts as "now".
pub(crate) type TrustedNow = Arc<dyn Fn() -> OffsetDateTime + Send + Sync>;

/// How a pool judges certificate validity dates.
#[derive(Clone)]
pub(crate) enum Dates {
    /// At the client's trusted time.
    Trusted(TrustedNow),
    /// Not at all (everything else is checked): for the signed-time request only.
    Unchecked,
}

impl fmt::Debug for Dates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dates::Trusted(_) => "Trusted",
            Dates::Unchecked => "Unchecked",
        })
    }
}

/// The rustls client configuration for one pool: web roots (or the app's own roots) and a
/// verifier that judges dates as `dates` says.
pub(crate) fn client_config(
    roots: &[Vec<u8>],
    dates: Dates,
) -> Result<Arc<ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut store = RootCertStore::empty();
    if roots.is_empty() {
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    } else {
        let (_added, ignored) = store.add_parsable_certificates(
            roots.iter().map(|der| CertificateDer::from(der.as_slice())),
        );
        if store.is_empty() {
            return Err(rustls::Error::General(format!(
                "none of the {ignored} root certificates parses"
            )));
        }
    }
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ClockedVerifier { inner, dates }))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The error for a request to `url` that failed with `e`: [`ClientError::Certificate`] when
/// the handshake refused the server's certificate (retrying cannot help), else `None` (a
/// network failure, for the caller's retries).
pub(crate) fn certificate_error(url: &str, e: &ureq::Error) -> Option<crate::ClientError> {
    match e {
        ureq::Error::Rustls(rustls::Error::InvalidCertificate(c)) => {
            Some(crate::ClientError::Certificate {
                url: url.to_string(),
                message: rustls::Error::InvalidCertificate(c.clone()).to_string(),
            })
        }
        _ => None,
    }
}

/// The web-PKI verifier with the verification time chosen by [`Dates`].
#[derive(Debug)]
struct ClockedVerifier {
    inner: Arc<WebPkiServerVerifier>,
    dates: Dates,
}

/// The most validity windows the unchecked mode steps through before it gives up (a chain
/// whose windows do not overlap is never valid at any time).
const MAX_DATE_STEPS: usize = 8;

fn unix(t: OffsetDateTime) -> UnixTime {
    UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        u64::try_from(t.unix_timestamp()).unwrap_or(0),
    ))
}

impl ServerCertVerifier for ClockedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verify = |at: UnixTime| {
            self.inner
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, at)
        };
        match &self.dates {
            Dates::Trusted(trusted) => verify(unix(trusted())),
            Dates::Unchecked => {
                // Move the verification time into the window the chain claims: a time at
                // which every certificate is valid exists exactly when the windows overlap,
                // and every other check is the same at any time.
                let mut at = now;
                for _ in 0..MAX_DATE_STEPS {
                    match verify(at) {
                        Err(rustls::Error::InvalidCertificate(
                            CertificateError::NotValidYetContext { not_before, .. },
                        )) => at = not_before,
                        Err(rustls::Error::InvalidCertificate(
                            CertificateError::ExpiredContext { not_after, .. },
                        )) => at = not_after,
                        other => return other,
                    }
                }
                Err(rustls::Error::InvalidCertificate(CertificateError::Expired))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The connector chain of one pool: an HTTP `CONNECT` proxy when configured, TCP, then TLS
/// with `config` for `https` URLs.
pub(crate) fn connector(config: Arc<ClientConfig>) -> impl Connector {
    ().chain(ConnectProxyConnector::default())
        .chain(TcpConnector::default())
        .chain(TlsConnector { config })
}

/// Wraps the chained transport in TLS for `https` URLs.
#[derive(Debug)]
struct TlsConnector {
    config: Arc<ClientConfig>,
}

impl<In: Transport> Connector<In> for TlsConnector {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let host = details
            .uri
            .host()
            .ok_or(ureq::Error::Tls("an https URL without a host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| ureq::Error::Tls("the server's host is not a valid TLS name"))?;
        let mut conn = ClientConnection::new(self.config.clone(), name)?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        if let Err(e) = conn.complete_io(&mut sock) {
            // A handshake refused by rustls (a certificate, say) as rustls said it, so that
            // callers can tell a certificate's dates from a network failure.
            let tls = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                .cloned();
            return Err(match tls {
                Some(t) => ureq::Error::Rustls(t),
                None => e.into(),
            });
        }
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(TlsTransport {
            buffers,
            stream: StreamOwned::new(conn, sock),
        })))
    }
}

/// An HTTP/1.1 transport over a rustls stream.
pub(crate) struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTransport").finish_non_exhaustive()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let out = &self.buffers.output()[..amount];
        self.stream.write_all(out)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let into = self.buffers.input_append_buf();
        let read = self.stream.read(into)?;
        self.buffers.input_appended(read);
        Ok(read > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}
