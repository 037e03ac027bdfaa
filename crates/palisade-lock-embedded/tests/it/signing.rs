//! Signed sequencers from the embedded backend: the testkit's signing
//! cases, and the key id a service reports.

use palisade_core::SessionOptions;
use palisade_core::Signer;
use palisade_lock_embedded::{EmbeddedLock, EmbeddedLockClient};
use palisade_testkit::signing_suite::{SigningBackend, key, signer};

/// Each client is a service of its own, signing with its signer.
struct EmbeddedSigning;

impl SigningBackend for EmbeddedSigning {
    type Client = EmbeddedLockClient;
    type Lock = EmbeddedLock;
    type Check = EmbeddedLockClient;

    async fn client(&self, signer: Option<Signer>) -> EmbeddedLockClient {
        match signer {
            Some(signer) => EmbeddedLockClient::with_signer(signer),
            None => EmbeddedLockClient::new(),
        }
    }

    fn issuer(&self, service: &EmbeddedLockClient) -> String {
        service.issuer().to_owned()
    }

    async fn session(&self, service: &EmbeddedLockClient) -> EmbeddedLock {
        service.session(SessionOptions::default()).unwrap()
    }

    /// The service is its own live check; its issuer is already the
    /// signer's.
    async fn live_check(
        &self,
        service: &EmbeddedLockClient,
        _signer: Signer,
    ) -> EmbeddedLockClient {
        service.clone()
    }

    fn clients_share_a_service(&self) -> bool {
        false
    }
}

palisade_testkit::signing_tests!(EmbeddedSigning);

#[test]
fn the_service_names_its_signing_key() {
    let signed = EmbeddedLockClient::with_signer(signer(key("k1", 1)));
    assert_eq!(signed.signing_key_id(), Some("k1"));
    assert_eq!(EmbeddedLockClient::new().signing_key_id(), None);
}
