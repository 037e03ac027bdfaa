//! What the tests share: unique roots, configurations, sessions.

use std::time::Duration;

use palisade_core::SessionOptions;
use palisade_lock_zookeeper::{ZkConfig, ZkLock, ZkLockClient};
use palisade_testkit::zookeeper::ZooKeeperServer;

/// A root no other test (or earlier run) uses.
pub(crate) fn unique_prefix(test: &str) -> String {
    format!(
        "/palisade-test/{test}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    )
}

/// A configuration for `connect` under `prefix`.
pub(crate) fn config(connect: &str, prefix: &str) -> ZkConfig {
    ZkConfig::parse(connect)
        .expect("a valid connect string")
        .with_prefix(prefix)
        .expect("a valid prefix")
}

/// A connected client.
pub(crate) async fn client(config: ZkConfig) -> ZkLockClient {
    ZkLockClient::connect(config)
        .await
        .expect("connecting to ZooKeeper")
}

/// Session options with a TTL of `ttl_ms`, a quarter of it as margin and
/// keep-alive interval.
pub(crate) fn options(ttl: Duration) -> SessionOptions {
    SessionOptions::default()
        .with_ttl(ttl)
        .with_safety_margin(ttl / 4)
        .with_keepalive_interval(ttl / 4)
}

/// A session on `client`.
pub(crate) async fn session(client: &ZkLockClient, options: SessionOptions) -> ZkLock {
    client.session(options).await.expect("opening a session")
}

/// A standalone server the testkit starts, and a client under a root of
/// `test`'s own.
pub(crate) async fn started(test: &str) -> (ZooKeeperServer, ZkLockClient) {
    let server = ZooKeeperServer::start();
    let client = client(config(&server.connect_string(), &unique_prefix(test))).await;
    (server, client)
}
