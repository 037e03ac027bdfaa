//! The recipe suite (`palisade_testkit::recipe_suite`) on every lock
//! backend there is, each against a real server the testkit starts
//! (embedded, etcd, Redis, a Redis Cluster with replicas, Redlock for
//! striping, PostgreSQL, MariaDB, ZooKeeper), through `palisade-lock-any`
//! as the CLI reaches them.

use std::any::Any;
use std::time::Duration;

use palisade_core::{Changes, Inspect, LockError, LockInfo, LockName, SessionOptions};
use palisade_lock_any::{AnyClient, AnyInspector, AnyLock, LockSpec};
use palisade_lock_embedded::EmbeddedLockClient;
use palisade_testkit::lock_suite::{SuiteBackend, SuiteInspect};
use palisade_testkit::recipe_suite;

mod sql_fence;

/// A backend as the suites drive it: sessions on one client, its inspector,
/// and the server it runs on.
struct Backend {
    name: &'static str,
    client: AnyClient,
    inspector: Inspector,
    ttl: Duration,
    _server: Box<dyn Any + Send + Sync>,
}

/// The inspection API of the backend: the embedded service itself (it
/// lives in this process), or `palisade-lock-any`'s.
#[derive(Clone)]
enum Inspector {
    Embedded(EmbeddedLockClient),
    Any(AnyInspector),
}

impl Inspect for Inspector {
    async fn inspect(&self, name: &LockName) -> Result<LockInfo, LockError> {
        match self {
            Inspector::Embedded(inner) => inner.inspect(name).await,
            Inspector::Any(inner) => inner.inspect(name).await,
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        match self {
            Inspector::Embedded(inner) => inner.list(prefix).await,
            Inspector::Any(inner) => inner.list(prefix).await,
        }
    }

    async fn changes(&self, prefix: &str, every: Duration) -> Result<Changes, LockError> {
        match self {
            Inspector::Embedded(inner) => inner.changes(prefix, every).await,
            Inspector::Any(inner) => inner.changes(prefix, every).await,
        }
    }
}

impl Backend {
    async fn start(
        name: &'static str,
        spec: LockSpec,
        ttl: Duration,
        server: impl Any + Send + Sync,
    ) -> Backend {
        let client = AnyClient::connect(&spec)
            .await
            .unwrap_or_else(|error| panic!("connecting to {name}: {error}"));
        let inspector = match &client {
            AnyClient::Embedded(service) => Inspector::Embedded(service.clone()),
            AnyClient::Redlock(_) => Inspector::Embedded(EmbeddedLockClient::new()),
            _ => Inspector::Any(
                AnyInspector::connect(&spec)
                    .await
                    .unwrap_or_else(|error| panic!("inspecting {name}: {error}")),
            ),
        };
        Backend {
            name,
            client,
            inspector,
            ttl,
            _server: Box::new(server),
        }
    }
}

impl SuiteBackend for Backend {
    type Lock = AnyLock;

    fn name(&self) -> &'static str {
        self.name
    }

    async fn session(&self, options: SessionOptions) -> AnyLock {
        self.client
            .session(options)
            .await
            .unwrap_or_else(|error| panic!("opening a {} session: {error}", self.name))
    }

    /// Ends the session's lease on the lock service without releasing
    /// anything, as a crash or a pause past the lease would.
    async fn kill_lease(&self, session: &AnyLock) {
        let ended = match session {
            AnyLock::Embedded(session) => {
                session.kill_lease();
                Ok(())
            }
            AnyLock::Etcd(session) => session.simulate_crash().await,
            AnyLock::Redis(session) => session.expire_session().await,
            AnyLock::Redlock(session) => session.expire_session().await,
            AnyLock::Sql(session, _) => session.expire_session().await,
            AnyLock::ZooKeeper(session) => session.simulate_crash().await,
            _ => unreachable!("every backend is compiled in"),
        };
        ended.unwrap_or_else(|error| panic!("ending a {} lease: {error}", self.name));
    }

    fn min_ttl(&self) -> Duration {
        self.ttl
    }
}

impl SuiteInspect for Backend {
    type Inspector = Inspector;

    fn inspector(&self) -> &Inspector {
        &self.inspector
    }

    fn watches(&self) -> bool {
        matches!(self.name, "embedded" | "etcd" | "zookeeper")
    }
}

/// The recipes' sessions' lease: twice the lock suite's shortest, since
/// every case here keeps several sessions alive at once (candidates,
/// permit holders, observers) on a machine that may be running other test
/// binaries: a 1 s lease lost its keep-alive window there, and the cases
/// that wait for an expiry scale their bounds with it.
const SHORT: Duration = Duration::from_secs(2);
/// Twice etcd's and ZooKeeper's shortest leases as their lock suites use
/// them, for the same reason.
const SERVER_MIN: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recipes_on_embedded() {
    let backend = Backend::start("embedded", LockSpec::embedded(), SHORT, ()).await;
    recipe_suite::test_all(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recipes_on_etcd() {
    let etcd = palisade_testkit::etcd::EtcdServer::start();
    let hosts = etcd.endpoint().trim_start_matches("http://").to_owned();
    let backend = Backend::start("etcd", LockSpec::etcd(hosts), SERVER_MIN, etcd).await;
    recipe_suite::test_all(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recipes_on_redis() {
    let redis = palisade_testkit::redis::RedisServer::start();
    let backend = Backend::start("redis", LockSpec::redis(redis.url()), SHORT, redis).await;
    recipe_suite::test_all(&backend).await;
}

/// A Redis Cluster with a replica per master: the lock and its
/// publications or permits hash to different slots, and listing walks
/// every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recipes_on_redis_cluster() {
    let cluster = palisade_testkit::redis::RedisCluster::start_with_replicas();
    let spec = LockSpec::redis_cluster(cluster.urls().to_vec());
    let backend = Backend::start("redis-cluster", spec, SHORT, cluster).await;
    recipe_suite::test_all(&backend).await;
}

/// Redlock has no inspection API: the election and the semaphore, which
/// read holders, do not apply; striping, which needs `Lock` alone, does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn striping_on_redlock() {
    let masters: Vec<_> = (0..3)
        .map(|_| palisade_testkit::redis::RedisServer::start())
        .collect();
    let spec = LockSpec::redlock(masters.iter().map(|master| master.url()));
    let backend = Backend::start("redlock", spec, SHORT, masters).await;
    recipe_suite::test_striping(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recipes_on_postgres() {
    let postgres = palisade_testkit::sql::SqlServer::postgres();
    let spec = LockSpec::sql(postgres.url()).expect("a PostgreSQL URL");
    let backend = Backend::start("postgres", spec, SHORT, postgres).await;
    recipe_suite::test_all(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recipes_on_mariadb() {
    let mariadb = palisade_testkit::sql::SqlServer::mariadb();
    let spec = LockSpec::sql(mariadb.url()).expect("a MariaDB URL");
    let backend = Backend::start("mariadb", spec, SHORT, mariadb).await;
    recipe_suite::test_all(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recipes_on_zookeeper() {
    let zookeeper = palisade_testkit::zookeeper::ZooKeeperServer::start();
    let spec = LockSpec::zookeeper(zookeeper.connect_string());
    let backend = Backend::start("zookeeper", spec, SERVER_MIN, zookeeper).await;
    recipe_suite::test_all(&backend).await;
}
