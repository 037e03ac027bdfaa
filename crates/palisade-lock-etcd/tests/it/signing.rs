//! Signed sequencers from the etcd backend: the testkit's signing cases,
//! and the issuer a connection refuses.

use palisade_core::{LockError, Signer};
use palisade_lock_etcd::{ConfigError, EtcdConfig, EtcdLiveCheck, EtcdLock, EtcdLockClient};
use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::signing_suite::{ISSUER, SigningBackend, key, signer};

use crate::fixtures::*;

/// A real etcd and a key prefix of the test's own.
struct EtcdSigning {
    etcd: EtcdServer,
    prefix: String,
}

impl EtcdSigning {
    fn start() -> Self {
        Self {
            etcd: etcd(),
            prefix: unique_prefix("signing"),
        }
    }

    fn config(&self, signer: Option<Signer>) -> EtcdConfig {
        let config = config(&self.etcd.endpoints(), &self.prefix);
        match signer {
            Some(signer) => config.with_signer(signer),
            None => config,
        }
    }
}

impl SigningBackend for EtcdSigning {
    type Client = EtcdLockClient;
    type Lock = EtcdLock;
    type Check = EtcdLiveCheck;

    async fn client(&self, signer: Option<Signer>) -> EtcdLockClient {
        EtcdLockClient::connect(self.config(signer))
            .await
            .expect("connect to etcd")
    }

    fn issuer(&self, connection: &EtcdLockClient) -> String {
        connection.issuer().to_owned()
    }

    async fn session(&self, connection: &EtcdLockClient) -> EtcdLock {
        session(connection, options(10)).await
    }

    async fn live_check(&self, _connection: &EtcdLockClient, signer: Signer) -> EtcdLiveCheck {
        let check = EtcdLiveCheck::connect(self.config(Some(signer)))
            .await
            .unwrap();
        assert_eq!(check.issuer(), ISSUER);
        check
    }
}

palisade_testkit::signing_tests!(EtcdSigning::start());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_connection_names_etcd_and_a_conflicting_issuer_is_refused() {
    let backend = EtcdSigning::start();
    let connection = backend.client(None).await;
    assert!(connection.issuer().starts_with("etcd-"));

    let conflicting: EtcdConfig = backend
        .config(None)
        .with_issuer("etcd-other")
        .unwrap()
        .with_signer(signer(key("k1", 1)));
    let error = EtcdLockClient::connect(conflicting).await.unwrap_err();
    let LockError::Backend { source, .. } = &error else {
        panic!("expected a configuration error, got {error:?}");
    };
    assert_eq!(
        source.downcast_ref::<ConfigError>(),
        Some(&ConfigError::IssuerConflict {
            configured: "etcd-other".into(),
            signer: ISSUER.into(),
        })
    );
}
