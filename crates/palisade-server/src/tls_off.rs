//! TLS in a build without the `tls` feature: a certificate is refused, so
//! none of these values can exist and every connection is plain HTTP.

use std::convert::Infallible;
use std::path::Path;

use crate::ServerError;

/// A server certificate and key; none can be had without TLS.
#[derive(Clone, Debug)]
pub struct TlsConfig(Infallible);

fn no_tls() -> ServerError {
    ServerError::Tls {
        reason: "this build of palisade-server has no TLS (cargo feature `tls`)".into(),
    }
}

impl TlsConfig {
    /// Refused: this build has no TLS.
    pub fn from_pem(_cert_chain_pem: &[u8], _key_pem: &[u8]) -> Result<Self, ServerError> {
        Err(no_tls())
    }

    /// Refused: this build has no TLS.
    pub fn from_pem_files(_cert_chain: &Path, _key: &Path) -> Result<Self, ServerError> {
        Err(no_tls())
    }

    pub(crate) fn acceptor(&self) -> &Acceptor {
        match self.0 {}
    }
}

/// Stands for the TLS acceptor; never built.
pub(crate) struct Acceptor(Infallible);

impl Acceptor {
    pub(crate) async fn accept<S>(&self, _stream: S) -> std::io::Result<S> {
        match self.0 {}
    }
}
