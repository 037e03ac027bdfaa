//! Shared by the test binaries: a real Redis per test, clients with a key
//! prefix unique to the test, and reading `INFO commandstats`.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use palisade_core::SessionOptions;
use palisade_lock_redis::{RedisConfig, RedisLockClient};
use palisade_testkit::redis::{RedisServer, commandstat_calls};

/// A key prefix no other test (or rerun against an external Redis) uses.
pub(crate) fn unique_prefix(test: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or_default();
    format!(
        "palisade-test:{test}:{}-{nanos}-{}:",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Session options with a short TTL for tests: a quarter of it as the safety
/// margin and as the keep-alive interval.
pub(crate) fn options(ttl: Duration) -> SessionOptions {
    SessionOptions::default()
        .with_ttl(ttl)
        .with_safety_margin(ttl / 4)
        .with_keepalive_interval(ttl / 4)
}

/// A client on `url` with a prefix unique to `test`.
pub(crate) async fn client(url: &str, test: &str) -> RedisLockClient {
    client_with(RedisConfig::new(url).with_key_prefix(unique_prefix(test))).await
}

pub(crate) async fn client_with(config: RedisConfig) -> RedisLockClient {
    RedisLockClient::connect(config)
        .await
        .expect("connect to the test Redis")
}

/// The number of calls of `command` (lower case) so far.
pub(crate) fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server
        .command(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    commandstat_calls(&info, command)
}

/// Installs a `tracing` subscriber once, honouring `RUST_LOG`.
pub(crate) fn trace() {
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
    });
}

/// The conformance suite's view of this backend: sessions on one client,
/// `kill_lease` = force-expire the session's holds.
pub(crate) struct SuiteRedis<K: Send + Sync + 'static> {
    pub(crate) client: RedisLockClient,
    /// Keeps the server (or cluster) alive as long as the backend.
    pub(crate) _servers: K,
}

impl<K: Send + Sync + 'static> palisade_testkit::lock_suite::SuiteBackend for SuiteRedis<K> {
    type Lock = palisade_lock_redis::RedisLock;

    fn name(&self) -> &'static str {
        "redis"
    }

    async fn session(&self, options: SessionOptions) -> Self::Lock {
        self.client
            .session(options)
            .expect("the suite's session options are valid")
    }

    async fn kill_lease(&self, session: &Self::Lock) {
        session
            .expire_session()
            .await
            .expect("force-expire the session's holds");
    }

    fn min_ttl(&self) -> Duration {
        Duration::from_secs(1)
    }
}

impl<K: Send + Sync + 'static> palisade_testkit::lock_suite::SuiteInspect for SuiteRedis<K> {
    type Inspector = RedisLockClient;

    fn inspector(&self) -> &RedisLockClient {
        &self.client
    }

    fn can_list(&self) -> bool {
        !self.client.config().is_cluster()
    }
}

impl<K: Send + Sync + 'static> palisade_testkit::lock_suite::SuiteRaiseFloor for SuiteRedis<K> {
    type Floor = RedisLockClient;

    fn floor(&self) -> &RedisLockClient {
        &self.client
    }
}
