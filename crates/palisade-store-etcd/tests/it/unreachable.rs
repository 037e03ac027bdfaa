//! An etcd that is not running: the engine says so when it connects, at
//! once, rather than after the request timeout.

use std::time::{Duration, Instant};

use palisade_store::StoreError;
use palisade_store_etcd::{EtcdConnection, EtcdEngine, EtcdEngineConfig};
use palisade_testkit::process::ClosedPort;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_is_unavailable_at_once() {
    // A port nobody listens on, nor can while the test runs.
    let closed = ClosedPort::new();
    let connection = EtcdConnection::from_endpoint_list(&format!("127.0.0.1:{}", closed.port()))
        .unwrap()
        .with_request_timeout(Duration::from_secs(20));
    let config = EtcdEngineConfig::with_connection(connection).unwrap();
    let started = Instant::now();
    match EtcdEngine::connect(config).await {
        Err(StoreError::Unavailable { engine, message }) => {
            assert_eq!(engine, "etcd");
            assert!(message.contains("connection refused"), "{message}");
        }
        other => panic!("expected Unavailable, got {:?}", other.map(|_| "an engine")),
    }
    // Time is the subject: well inside the 20 s request timeout.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}
