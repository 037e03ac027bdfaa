//! TLS for the resource server: rustls on the `ring` provider, HTTP/1.1.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::ServerError;

/// A server certificate chain and its private key, ready to accept TLS
/// connections. Cheap to clone.
///
/// The chain is the server's certificate first, then any intermediates
/// (the usual `fullchain.pem`). Clients are not asked for certificates:
/// they authenticate with bearer tokens (see docs/SECURITY.md).
#[derive(Clone)]
pub struct TlsConfig {
    acceptor: TlsAcceptor,
}

impl TlsConfig {
    /// From PEM text: `cert_chain_pem` holds one or more `CERTIFICATE`
    /// blocks, `key_pem` one private key (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem(cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<Self, ServerError> {
        let tls = |reason: String| ServerError::Tls { reason };
        let chain = CertificateDer::pem_slice_iter(cert_chain_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| tls(format!("the certificate chain is not valid PEM: {e}")))?;
        if chain.is_empty() {
            return Err(tls("the certificate file has no CERTIFICATE block".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| tls(format!("no usable private key in the key file: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| {
                tls(format!(
                    "the certificate and the key do not go together: {e}"
                ))
            })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsConfig {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// From the PEM files `--tls-cert` and `--tls-key` name.
    pub fn from_pem_files(cert_chain: &Path, key: &Path) -> Result<Self, ServerError> {
        let cert_chain_pem = crate::config::read_file("--tls-cert", cert_chain)?;
        let key_pem = crate::config::read_file("--tls-key", key)?;
        Self::from_pem(&cert_chain_pem, &key_pem)
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig").finish_non_exhaustive()
    }
}
