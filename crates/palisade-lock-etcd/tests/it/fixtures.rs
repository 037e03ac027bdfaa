//! What every test here shares: a real etcd, configurations with a prefix
//! of their own, sessions, and a raw etcd client for observing and
//! injecting faults from outside the backend.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions};
use palisade_core::{LockName, SessionOptions};
use palisade_lock_etcd::{EtcdConfig, EtcdConnection, EtcdLock, EtcdLockClient};
use palisade_testkit::etcd::EtcdServer;

/// Installs a `tracing` subscriber once, honouring `RUST_LOG`: the
/// backend's and the testkit's logs, for a failure that needs them.
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

/// A real etcd (spawned, or from `PALISADE_ETCD_ENDPOINTS`); fails the test
/// with an install hint when etcd is missing.
pub(crate) fn etcd() -> EtcdServer {
    EtcdServer::start()
}

/// A key prefix no other test (or earlier run against an external etcd)
/// uses.
pub(crate) fn unique_prefix(test: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "/palisade-test/{test}-{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A configuration for `endpoints` under `prefix`, with a 3 s request
/// timeout.
pub(crate) fn config(endpoints: &[String], prefix: &str) -> EtcdConfig {
    config_with(endpoints, prefix, |connection| connection)
}

/// [`config`], its connection (timeouts, user) changed by `change`.
pub(crate) fn config_with(
    endpoints: &[String],
    prefix: &str,
    change: impl FnOnce(EtcdConnection) -> EtcdConnection,
) -> EtcdConfig {
    let connection = EtcdConnection::new(endpoints.iter().cloned())
        .expect("valid endpoints")
        .with_request_timeout(Duration::from_secs(3));
    EtcdConfig::with_connection(change(connection))
        .with_prefix(prefix)
        .expect("valid prefix")
}

/// Session options with `ttl_secs` and a 500 ms safety margin.
pub(crate) fn options(ttl_secs: u64) -> SessionOptions {
    SessionOptions::default()
        .with_ttl(Duration::from_secs(ttl_secs))
        .with_safety_margin(Duration::from_millis(500))
}

pub(crate) async fn connect(endpoints: &[String], prefix: &str) -> EtcdLockClient {
    EtcdLockClient::connect(config(endpoints, prefix))
        .await
        .expect("connect to etcd")
}

pub(crate) async fn session(connection: &EtcdLockClient, options: SessionOptions) -> EtcdLock {
    connection.session(options).await.expect("open a session")
}

pub(crate) fn name(text: &str) -> LockName {
    LockName::new(text).expect("valid lock name")
}

/// A plain etcd client, for looking at keys and injecting faults.
pub(crate) async fn raw(endpoints: &[String]) -> Client {
    Client::connect(endpoints, None)
        .await
        .expect("raw etcd client")
}

/// The keys under `dir` (a directory with its trailing `/`).
pub(crate) async fn keys_under(raw: &mut Client, dir: &str) -> Vec<String> {
    raw.get(
        dir,
        Some(
            etcd_client::GetOptions::new()
                .with_prefix()
                .with_keys_only(),
        ),
    )
    .await
    .expect("get")
    .kvs()
    .iter()
    .map(|kv| kv.key_str().expect("utf-8 key").to_owned())
    .collect()
}

/// The directory of `lock` under `prefix` (the documented key layout:
/// `<prefix>/<key segment>/`, holding contender keys named by lease id and
/// lock-delay markers `delay-<lease id>`).
pub(crate) fn lock_dir(prefix: &str, lock: &LockName) -> String {
    format!("{prefix}/{}/", lock.key_segment())
}

/// Watches a directory from now on and yields its events: the way a test
/// waits for "a waiter has queued" or "a key was deleted" without sleeping.
pub(crate) struct DirWatch {
    stream: etcd_client::WatchStream,
    /// Events of the last answer not yet yielded: one answer can carry
    /// several (one transaction's writes, or a catch-up batch from a member
    /// that lagged), and every one of them counts.
    pending: VecDeque<(bool, String)>,
}

impl DirWatch {
    pub(crate) async fn start(raw: &Client, dir: &str) -> DirWatch {
        let mut client = raw.watch_client();
        let mut stream = client
            .watch(dir, Some(WatchOptions::new().with_prefix()))
            .await
            .expect("watch");
        // The first answer confirms the watch exists.
        let created = stream
            .message()
            .await
            .expect("watch answer")
            .expect("watch open");
        assert!(created.created());
        DirWatch {
            stream,
            pending: VecDeque::new(),
        }
    }

    /// The next event: (`true` for a put, `false` for a delete, key).
    pub(crate) async fn next(&mut self) -> (bool, String) {
        let deadline = Duration::from_secs(20);
        while self.pending.is_empty() {
            let message = tokio::time::timeout(deadline, self.stream.message())
                .await
                .expect("an etcd event within 20 s")
                .expect("watch stream")
                .expect("watch open");
            for event in message.events() {
                let kv = event.kv().expect("event kv");
                self.pending.push_back((
                    event.event_type() == EventType::Put,
                    kv.key_str().expect("utf-8").to_owned(),
                ));
            }
        }
        self.pending.pop_front().expect("filled just above")
    }

    /// Waits for the next put of a new key; returns the key.
    pub(crate) async fn next_put(&mut self) -> String {
        loop {
            let (put, key) = self.next().await;
            if put {
                return key;
            }
        }
    }

    /// Waits for the put of the contender key of the session with `lease`.
    pub(crate) async fn queued(&mut self, lease: i64) {
        let suffix = format!("/{lease:016x}");
        while !self.next_put().await.ends_with(&suffix) {}
    }

    /// Waits for the deletion of `key`.
    pub(crate) async fn deleted(&mut self, key: &str) {
        loop {
            let (put, seen) = self.next().await;
            if !put && seen == key {
                return;
            }
        }
    }
}

/// One answer of a watch can carry several events (here the two puts of one
/// transaction): `DirWatch` yields every one of them.
#[tokio::test]
async fn dir_watch_yields_every_event_of_one_answer() {
    let server = etcd();
    let prefix = unique_prefix("dir-watch");
    let dir = format!("{prefix}/batch/");
    let mut raw = raw(&server.endpoints()).await;
    let mut watch = DirWatch::start(&raw, &dir).await;
    raw.txn(etcd_client::Txn::new().and_then([
        etcd_client::TxnOp::put(format!("{dir}a"), "1", None),
        etcd_client::TxnOp::put(format!("{dir}b"), "2", None),
    ]))
    .await
    .expect("txn");
    assert_eq!(watch.next_put().await, format!("{dir}a"));
    assert_eq!(watch.next_put().await, format!("{dir}b"));
}
