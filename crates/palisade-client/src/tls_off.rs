//! `https://` in a build without the `tls` feature: refused when the
//! client is built, so none of these values can exist.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use hyper::{HeaderMap, Method, StatusCode};

use crate::ClientError;

/// Trusted roots; none can be had without TLS.
pub(crate) struct Roots(Infallible);

fn no_tls() -> ClientError {
    ClientError::InvalidOption {
        option: "https:// URL",
        reason: "this build of palisade-client has no TLS (cargo feature `tls`)".into(),
    }
}

pub(crate) fn roots_from_pem(_pem: &[u8]) -> Result<Roots, ClientError> {
    Err(no_tls())
}

pub(crate) fn system_roots() -> Result<Roots, ClientError> {
    Err(no_tls())
}

/// The `https://` transport; never built without TLS.
#[derive(Debug, Clone)]
pub(crate) struct TlsTransport(Infallible);

impl TlsTransport {
    pub(crate) fn new(roots: Roots, _connect_timeout: Duration) -> Self {
        match roots.0 {}
    }

    pub(crate) async fn send(
        &self,
        _method: Method,
        _url: &str,
        _headers: HeaderMap,
        _body: Option<Bytes>,
    ) -> Result<(StatusCode, HeaderMap, Bytes), ClientError> {
        match self.0 {}
    }
}
