//! The shared lock backend conformance suite, against a real standalone
//! ZooKeeper and a real 3-member ensemble started by the testkit.

use std::future::Future;
use std::time::Duration;

use palisade_core::SessionOptions;
use palisade_lock_zookeeper::{ZkLock, ZkLockClient};
use palisade_testkit::lock_suite::{self, SuiteBackend, SuiteInspect, SuiteRaiseFloor};
use palisade_testkit::zookeeper::{ZooKeeperEnsemble, ZooKeeperServer};

use crate::fixtures::{client, config, unique_prefix};

/// The ZooKeeper backend as the suite drives it: sessions on one client.
struct ZooKeeperBackend<S> {
    name: &'static str,
    client: ZkLockClient,
    /// The suite's TTL; its hand-off bound is half of it.
    ttl: Duration,
    /// Keeps the spawned server or ensemble alive for the whole suite.
    _servers: S,
}

impl<S: Send + Sync + 'static> SuiteBackend for ZooKeeperBackend<S> {
    type Lock = ZkLock;

    fn name(&self) -> &'static str {
        self.name
    }

    fn session(&self, options: SessionOptions) -> impl Future<Output = ZkLock> + Send {
        let client = self.client.clone();
        async move {
            client
                .session(options)
                .await
                .expect("opening a ZooKeeper session")
        }
    }

    /// Ends the ZooKeeper session on the server without releasing
    /// anything, as an expiry after a crash would (see
    /// `ZkLock::simulate_crash`).
    fn kill_lease(&self, session: &ZkLock) -> impl Future<Output = ()> + Send {
        let session = session.clone();
        async move {
            session
                .simulate_crash()
                .await
                .expect("ending the ZooKeeper session");
        }
    }

    /// Two ticks of the testkit's servers (ZooKeeper's smallest session
    /// timeout is two ticks) would be 1 s; 2 s on a standalone server
    /// leaves the keep-alive and the margins room on a loaded machine, as
    /// on etcd. An ensemble's every write is a quorum's fsync on three
    /// data directories of one loaded disk: 4 s (hand-offs within 2 s).
    fn min_ttl(&self) -> Duration {
        self.ttl
    }
}

impl<S: Send + Sync + 'static> SuiteInspect for ZooKeeperBackend<S> {
    type Inspector = ZkLockClient;

    fn inspector(&self) -> &ZkLockClient {
        &self.client
    }
}

impl<S: Send + Sync + 'static> SuiteRaiseFloor for ZooKeeperBackend<S> {
    type Floor = ZkLockClient;

    fn floor(&self) -> &ZkLockClient {
        &self.client
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standalone_zookeeper_passes_the_lock_suite() {
    let server = ZooKeeperServer::start();
    let client = client(config(&server.connect_string(), &unique_prefix("suite"))).await;
    lock_suite::test_all(ZooKeeperBackend {
        name: "zookeeper",
        client,
        ttl: Duration::from_secs(2),
        _servers: server,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_three_member_ensemble_passes_the_lock_suite() {
    let ensemble = ZooKeeperEnsemble::start();
    let client = client(config(&ensemble.connect_string(), &unique_prefix("suite"))).await;
    lock_suite::test_all(ZooKeeperBackend {
        name: "zookeeper ensemble",
        client,
        ttl: Duration::from_secs(4),
        _servers: ensemble,
    })
    .await;
}
