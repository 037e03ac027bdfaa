//! Signed sequencers from the ZooKeeper backend: the testkit's signing
//! cases.

use std::time::Duration;

use palisade_core::Signer;
use palisade_lock_zookeeper::{ZkConfig, ZkLiveCheck, ZkLock, ZkLockClient};
use palisade_testkit::signing_suite::{ISSUER, SigningBackend};
use palisade_testkit::zookeeper::ZooKeeperServer;

use crate::fixtures::{config, options, unique_prefix};

/// A real ZooKeeper and a root of the test's own.
struct ZkSigning {
    server: ZooKeeperServer,
    prefix: String,
}

impl ZkSigning {
    fn start() -> Self {
        Self {
            server: ZooKeeperServer::start(),
            prefix: unique_prefix("signing"),
        }
    }

    fn config(&self, signer: Option<Signer>) -> ZkConfig {
        let config = config(&self.server.connect_string(), &self.prefix);
        match signer {
            Some(signer) => config.with_signer(signer),
            None => config,
        }
    }
}

impl SigningBackend for ZkSigning {
    type Client = ZkLockClient;
    type Lock = ZkLock;
    type Check = ZkLiveCheck;

    async fn client(&self, signer: Option<Signer>) -> ZkLockClient {
        ZkLockClient::connect(self.config(signer))
            .await
            .expect("connect to ZooKeeper")
    }

    fn issuer(&self, client: &ZkLockClient) -> String {
        client.issuer().to_owned()
    }

    async fn session(&self, client: &ZkLockClient) -> ZkLock {
        client
            .session(options(Duration::from_secs(10)))
            .await
            .expect("open a session")
    }

    async fn live_check(&self, _client: &ZkLockClient, signer: Signer) -> ZkLiveCheck {
        let check = ZkLiveCheck::connect(self.config(Some(signer)))
            .await
            .unwrap();
        assert_eq!(check.issuer(), ISSUER);
        check
    }
}

palisade_testkit::signing_tests!(ZkSigning::start());
