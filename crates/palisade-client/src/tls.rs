//! `https://`: HTTP/1.1 over rustls (the `ring` provider), with a pool of
//! keep-alive connections (hyper-util's client).
//!
//! Why not reqwest's own TLS: its rustls backend looks up a process-wide
//! crypto provider when any `reqwest::Client` is built, TLS or not. Turning
//! it on here would make every plain `reqwest::Client::new()` elsewhere in
//! a program panic unless that program installed a provider first. This
//! transport passes its provider explicitly and touches no global state.

use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::{HeaderMap, Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::ClientError;

/// The certificates a client trusts, from PEM text (one or more
/// `CERTIFICATE` blocks).
pub(crate) fn roots_from_pem(pem: &[u8]) -> Result<rustls::RootCertStore, ClientError> {
    let invalid = |reason: String| ClientError::InvalidOption {
        option: "root CA",
        reason,
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| invalid(format!("not valid PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| invalid(format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(invalid("no CERTIFICATE block".into()));
    }
    Ok(roots)
}

/// The operating system's trusted CAs (`SSL_CERT_FILE` / `SSL_CERT_DIR`
/// first, as OpenSSL does, then the platform's store), through
/// `rustls-native-certs`. Certificates it cannot parse are skipped; none at
/// all is an error.
pub(crate) fn system_roots() -> Result<rustls::RootCertStore, ClientError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _unusable) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let errors = found
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return Err(ClientError::InvalidOption {
            option: "root CA",
            reason: format!(
                "https:// without a CA file, and no system CA was found (set SSL_CERT_FILE or give the server's CA){}",
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(": {errors}")
                }
            ),
        });
    }
    Ok(roots)
}

/// The pooled HTTPS client.
#[derive(Clone)]
pub(crate) struct TlsTransport {
    http: hyper_util::client::legacy::Client<Connector, OneShotBody>,
}

impl TlsTransport {
    pub(crate) fn new(roots: rustls::RootCertStore, connect_timeout: Duration) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let connector = Connector {
            tls: TlsConnector::from(Arc::new(config)),
            connect_timeout,
        };
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(5))
            .build(connector);
        TlsTransport { http }
    }

    /// Sends one request and reads the whole answer.
    pub(crate) async fn send(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Option<Bytes>,
    ) -> Result<(StatusCode, HeaderMap, Bytes), ClientError> {
        let uri: Uri = url.parse().map_err(|_| ClientError::InvalidUrl {
            url: url.to_owned(),
            reason: "not a URL",
        })?;
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .body(OneShotBody(body))
            .map_err(|e| https_error(url, e))?;
        *request.headers_mut() = headers;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|e| https_error(url, e))?;
        let (parts, mut incoming) = response.into_parts();
        let mut chunks: Vec<Bytes> = Vec::new();
        while let Some(frame) =
            std::future::poll_fn(|cx| Pin::new(&mut incoming).poll_frame(cx)).await
        {
            if let Ok(data) = frame.map_err(|e| https_error(url, e))?.into_data() {
                chunks.push(data);
            }
        }
        let body = match chunks.len() {
            1 => chunks.pop().expect("one chunk"),
            _ => Bytes::from(chunks.concat()),
        };
        Ok((parts.status, parts.headers, body))
    }
}

impl std::fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTransport").finish_non_exhaustive()
    }
}

/// A TLS failure (the certificate is not trusted, the server does not speak
/// TLS...) is [`ClientError::Tls`]; anything else (refused, reset) is
/// [`ClientError::Https`].
fn https_error(url: &str, error: impl Into<Box<dyn StdError + Send + Sync>>) -> ClientError {
    let error: Box<dyn StdError + Send + Sync> = error.into();
    let mut cause: Option<&(dyn StdError + 'static)> = Some(error.as_ref());
    let mut tls = false;
    while let Some(current) = cause {
        if current.downcast_ref::<rustls::Error>().is_some() {
            tls = true;
            break;
        }
        let wrapped_tls = current
            .downcast_ref::<io::Error>()
            .and_then(|io_error| io_error.get_ref())
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some());
        if wrapped_tls {
            tls = true;
            break;
        }
        cause = current.source();
    }
    let url = url.to_owned();
    if tls {
        ClientError::Tls { url, source: error }
    } else {
        ClientError::Https { url, source: error }
    }
}

/// TCP connect, then the TLS handshake, for hyper-util's pool.
#[derive(Clone)]
struct Connector {
    tls: TlsConnector,
    connect_timeout: Duration,
}

type ConnectFuture = Pin<Box<dyn Future<Output = Result<TlsConnection, io::Error>> + Send>>;

impl tower::Service<Uri> for Connector {
    type Response = TlsConnection;
    type Error = io::Error;
    type Future = ConnectFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> ConnectFuture {
        let tls = self.tls.clone();
        let connect_timeout = self.connect_timeout;
        Box::pin(async move {
            let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_owned());
            let host = uri.host().ok_or_else(|| invalid("the URL has no host"))?;
            // An IPv6 literal comes bracketed: `[::1]`.
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let port = uri.port_u16().unwrap_or(443);
            let server_name = ServerName::try_from(host.clone())
                .map_err(|_| invalid("the host is not a valid TLS server name"))?;
            let tcp = tokio::time::timeout(connect_timeout, TcpStream::connect((host, port)))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
            let _ = tcp.set_nodelay(true);
            let stream = tokio::time::timeout(connect_timeout, tls.connect(server_name, tcp))
                .await
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")
                })??;
            Ok(TlsConnection(TokioIo::new(stream)))
        })
    }
}

/// A TLS stream as hyper wants it.
struct TlsConnection(TokioIo<TlsStream<TcpStream>>);

impl Connection for TlsConnection {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl Read for TlsConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl Write for TlsConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// A request body sent in one piece (or none).
pub(crate) struct OneShotBody(Option<Bytes>);

impl Body for OneShotBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.get_mut().0.take().map(|data| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.as_ref().map_or(0, |data| data.len() as u64))
    }
}
