//! The client: one ZooKeeper session for reading (inspection, the live
//! check, the floor), shared by the lock sessions opened on it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use palisade_core::{LockError, LockName};
use tokio::runtime::Handle;
use zookeeper_client as zk;

use crate::errors::{self, BACKEND};
use crate::names::Layout;
use crate::{ZkConfig, ZkLiveCheck};
use palisade_core::holds::Waiters;

/// The session timeout of the client's own reading session. It holds no
/// lock, so its length matters only for how long a dead client lingers.
const READER_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How many lock names the regression memory keeps before starting over.
const SEEN_CAPACITY: usize = 100_000;

/// A connection to a ZooKeeper ensemble, from which lock sessions
/// ([`ZkLock`](crate::ZkLock)) are opened. Also gives the backend's live
/// check, [`Inspect`](palisade_core::Inspect),
/// [`ForceRelease`](palisade_core::ForceRelease) and floor raising.
///
/// ```no_run
/// use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
/// use palisade_lock_zookeeper::{ZkConfig, ZkLockClient};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let client = ZkLockClient::connect(ZkConfig::parse("127.0.0.1:2181")?).await?;
/// let session = client.session(SessionOptions::default()).await?;
/// let guard = session.acquire(&LockName::new("orders/42")?, Mode::Exclusive).await?;
/// println!("writing with {}", guard.sequencer()?);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ZkLockClient {
    pub(crate) inner: Arc<ClientInner>,
}

#[derive(Debug)]
pub(crate) struct ClientInner {
    pub(crate) config: ZkConfig,
    pub(crate) layout: Layout,
    /// The client's own session, for reads and administrative writes;
    /// replaced by a new one when ZooKeeper expires it (see
    /// [`ClientInner::reader`]).
    zk: Mutex<zk::Client>,
    /// Put in every sequencer.
    pub(crate) issuer: String,
    /// Blocked acquires per lock in this process: the fail-fast bound.
    pub(crate) waiters: Waiters,
    /// The highest generation granted per lock in this process. A grant
    /// at or below it means the ensemble's zxids went back (its data was
    /// wiped): refused as `GenerationRegression`, after raising the floor.
    seen: Mutex<HashMap<LockName, u64>>,
    /// Where background clean-ups are spawned.
    pub(crate) runtime: Handle,
}

impl ZkLockClient {
    /// Connects to the ensemble and checks the configuration.
    ///
    /// A configuration error comes back as `LockError::Backend` whose
    /// source is a [`ConfigError`](crate::ConfigError).
    pub async fn connect(config: ZkConfig) -> Result<ZkLockClient, LockError> {
        config.validate().map_err(errors::config)?;
        let zk = connect_session(&config, READER_SESSION_TIMEOUT, false).await?;
        let issuer = config.issuer();
        tracing::info!(backend = BACKEND, servers = %config.host_list(), root = %config.root(), session = %zk.session_id(), "connected");
        Ok(ZkLockClient {
            inner: Arc::new(ClientInner {
                layout: Layout::new(config.root()),
                config,
                zk: Mutex::new(zk),
                issuer,
                waiters: Waiters::default(),
                seen: Mutex::default(),
                runtime: Handle::current(),
            }),
        })
    }

    /// The issuer written into this client's sequencers.
    pub fn issuer(&self) -> &str {
        &self.inner.issuer
    }

    /// The configuration.
    pub fn config(&self) -> &ZkConfig {
        &self.inner.config
    }

    /// Chubby's CheckSequencer on this ensemble, for resource servers.
    pub fn live_check(&self) -> ZkLiveCheck {
        ZkLiveCheck {
            client: self.clone(),
        }
    }

    /// Creates the root (persistent nodes along the path) if missing,
    /// through the ZooKeeper session `zk`.
    pub(crate) async fn ensure_root(&self, zk: &zk::Client) -> Result<(), LockError> {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let root = self.inner.layout.root().to_owned();
        let made = zk.mkdir(&root, &options);
        match self.inner.bounded("create root", made).await {
            Ok(()) => Ok(()),
            Err(error) => Err(self.inner.error("create root", error)),
        }
    }

    /// Notes a grant of `generation` on `name`; `Err(seen)` when it is not
    /// above what this process saw granted before.
    pub(crate) fn observe(&self, name: &LockName, generation: u64) -> Result<(), u64> {
        let mut seen = lock(&self.inner.seen);
        if let Some(&highest) = seen.get(name)
            && generation <= highest
        {
            return Err(highest);
        }
        if seen.len() >= SEEN_CAPACITY {
            seen.clear();
        }
        seen.insert(name.clone(), generation);
        Ok(())
    }
}

impl ClientInner {
    /// The client's own session; a new one if ZooKeeper ended the last
    /// (an expiry after a partition, or an ensemble that lost its data).
    pub(crate) async fn reader(&self) -> Result<zk::Client, LockError> {
        let current = lock(&self.zk).clone();
        if !current.state().is_terminated() {
            return Ok(current);
        }
        let fresh = connect_session(&self.config, READER_SESSION_TIMEOUT, false).await?;
        tracing::info!(backend = BACKEND, session = %fresh.session_id(), "reader session replaced");
        *lock(&self.zk) = fresh.clone();
        Ok(fresh)
    }

    /// Runs a request with the request timeout; a timeout is
    /// `zk::Error::Timeout`, which [`ClientInner::error`] names.
    pub(crate) async fn bounded<T>(
        &self,
        _operation: &'static str,
        request: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, zk::Error> {
        match tokio::time::timeout(self.config.request_timeout(), request).await {
            Ok(answer) => answer,
            Err(_elapsed) => Err(zk::Error::Timeout),
        }
    }

    /// A client library error of `operation` as a `LockError`.
    pub(crate) fn error(&self, operation: &'static str, error: zk::Error) -> LockError {
        match error {
            zk::Error::Timeout => errors::timed_out(operation, self.config.request_timeout()),
            error => errors::from_zk(operation, error),
        }
    }
}

/// Locks a std mutex, ignoring poisoning (every critical section leaves
/// the state consistent before anything can panic).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Opens a ZooKeeper session asking for `timeout`, within the connect
/// timeout. A `detached` session is not closed when its last client
/// handle drops: the server lets it expire instead.
pub(crate) async fn connect_session(
    config: &ZkConfig,
    timeout: Duration,
    detached: bool,
) -> Result<zk::Client, LockError> {
    let mut connector = zk::Client::connector()
        .with_session_timeout(timeout)
        .with_server_version(3, 8, 0);
    if detached {
        connector = connector.with_detached();
    }
    let hosts = config.host_list();
    match tokio::time::timeout(config.connect_timeout(), connector.connect(&hosts)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(error)) => Err(LockError::Unavailable {
            backend: BACKEND,
            source: format!("cannot open a session on {hosts}: {error}").into(),
        }),
        Err(_elapsed) => Err(errors::timed_out("open session", config.connect_timeout())),
    }
}

/// Re-attaches to `session` from a new connection and closes it: the
/// server ends the session and deletes its ephemeral nodes at once, while
/// the client that owned it learns of it only when it next talks to the
/// server (as after an expiry).
pub(crate) async fn close_from_outside(
    config: &ZkConfig,
    session: zk::SessionInfo,
) -> Result<(), LockError> {
    let hosts = config.host_list();
    let connector = zk::Client::connector().with_session(session);
    match tokio::time::timeout(config.connect_timeout(), connector.connect(&hosts)).await {
        // Dropping the only handle of a non-detached session sends
        // CloseSession; the state turns `Closed` once the server answered.
        Ok(Ok(client)) => {
            let mut state = client.state_watcher();
            drop(client);
            let closed = async { while !state.changed().await.is_terminated() {} };
            tokio::time::timeout(config.request_timeout(), closed)
                .await
                .map_err(|_| errors::timed_out("close session", config.request_timeout()))
        }
        Ok(Err(zk::Error::SessionExpired)) => Ok(()),
        Ok(Err(error)) => Err(errors::from_zk("close session", error)),
        Err(_elapsed) => Err(errors::timed_out("close session", config.connect_timeout())),
    }
}
