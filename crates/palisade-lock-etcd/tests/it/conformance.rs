//! The shared lock backend conformance suite, against a real etcd started
//! by the testkit (or the one named by `PALISADE_ETCD_ENDPOINTS`).

use std::future::Future;
use std::time::Duration;

use palisade_core::SessionOptions;
use palisade_lock_etcd::{EtcdConfig, EtcdLock, EtcdLockClient};
use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::lock_suite::{self, SuiteBackend, SuiteInspect, SuiteRaiseFloor};

/// The etcd backend as the suite drives it: sessions on one connection.
struct EtcdBackend {
    connection: EtcdLockClient,
    /// Keeps the spawned etcd alive for the whole suite.
    _etcd: EtcdServer,
}

impl SuiteBackend for EtcdBackend {
    type Lock = EtcdLock;

    fn name(&self) -> &'static str {
        "etcd"
    }

    fn session(&self, options: SessionOptions) -> impl Future<Output = EtcdLock> + Send {
        let connection = self.connection.clone();
        async move {
            connection
                .session(options)
                .await
                .expect("opening an etcd session")
        }
    }

    /// Revokes the session's lease on the server without releasing anything,
    /// with the keep-alive stopped, as a crash would; the lock-delay runs
    /// from now (see `EtcdLock::simulate_crash`).
    fn kill_lease(&self, session: &EtcdLock) -> impl Future<Output = ()> + Send {
        let session = session.clone();
        async move {
            session
                .simulate_crash()
                .await
                .expect("revoking the session's lease");
        }
    }

    /// etcd's smallest lease TTL with the default 1 s election timeout.
    fn min_ttl(&self) -> Duration {
        Duration::from_secs(2)
    }
}

impl SuiteInspect for EtcdBackend {
    type Inspector = EtcdLockClient;

    fn inspector(&self) -> &EtcdLockClient {
        &self.connection
    }
}

impl SuiteRaiseFloor for EtcdBackend {
    type Floor = EtcdLockClient;

    fn floor(&self) -> &EtcdLockClient {
        &self.connection
    }

    /// One put per revision: a few hundred.
    fn floor_gap(&self) -> u64 {
        500
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_passes_the_lock_suite() {
    let etcd = EtcdServer::start();
    let prefix = format!(
        "/palisade-test/suite-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    let config = EtcdConfig::new(etcd.endpoints())
        .expect("valid endpoints")
        .with_prefix(prefix)
        .expect("valid prefix");
    let connection = EtcdLockClient::connect(config)
        .await
        .expect("connecting to etcd");
    lock_suite::test_all(EtcdBackend {
        connection,
        _etcd: etcd,
    })
    .await;
}
