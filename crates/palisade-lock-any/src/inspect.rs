//! [`AnyInspector`]: the inspection API ([`Inspect`], [`ForceRelease`]) of
//! whichever lock service a [`LockSpec`] chose. No session, no signing key.

use std::convert::Infallible;

use palisade_core::{ForceRelease, Generation, Inspect, LockError, LockInfo, LockName};

use crate::connect::AnyClient;
use crate::error::SelectError;
use crate::spec::{BackendKind, LockSpec};

/// A lock service's inspection API: who holds a lock, who waits, and
/// ending a stuck hold.
#[derive(Clone)]
#[non_exhaustive]
pub enum AnyInspector {
    /// etcd's connection.
    #[cfg(feature = "etcd")]
    Etcd(palisade_lock_etcd::EtcdLockClient),
    /// Redis's client.
    #[cfg(feature = "redis")]
    Redis(palisade_lock_redis::RedisLockClient),
    /// The SQL lock tables' client.
    #[cfg(feature = "sql")]
    Sql(palisade_lock_sql::SqlLockClient),
    /// ZooKeeper's client.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(palisade_lock_zookeeper::ZkLockClient),
    #[doc(hidden)]
    Never(Infallible),
}

impl AnyInspector {
    /// Connects to the service `spec` names. Redlock (inspect each master
    /// as a Redis) and the embedded backend (nothing outside the process
    /// to inspect) are refused.
    pub async fn connect(spec: &LockSpec) -> Result<AnyInspector, SelectError> {
        match spec.kind() {
            BackendKind::Redlock => {
                return Err(SelectError::Unsupported(
                    "inspecting and force-releasing locks is not available for redlock yet; inspect each master with --backend redis".into(),
                ));
            }
            BackendKind::Embedded => {
                return Err(SelectError::Unsupported(
                    "the embedded backend lives inside one process: there is nothing outside it to inspect".into(),
                ));
            }
            _ => {}
        }
        // Inspection mints no sequencer: no signing key is read or used.
        Ok(match AnyClient::connect(&spec.unsigned()).await? {
            #[cfg(feature = "etcd")]
            AnyClient::Etcd(client) => AnyInspector::Etcd(client),
            #[cfg(feature = "redis")]
            AnyClient::Redis(client) => AnyInspector::Redis(client),
            #[cfg(feature = "sql")]
            AnyClient::Sql(client, _) => AnyInspector::Sql(client),
            #[cfg(feature = "zookeeper")]
            AnyClient::ZooKeeper(client) => AnyInspector::ZooKeeper(client),
            #[allow(unreachable_patterns)]
            _ => unreachable!("redlock and embedded are refused above"),
        })
    }
}

impl Inspect for AnyInspector {
    async fn inspect(&self, name: &LockName) -> Result<LockInfo, LockError> {
        match self {
            #[cfg(feature = "etcd")]
            AnyInspector::Etcd(inner) => inner.inspect(name).await,
            #[cfg(feature = "redis")]
            AnyInspector::Redis(inner) => inner.inspect(name).await,
            #[cfg(feature = "sql")]
            AnyInspector::Sql(inner) => inner.inspect(name).await,
            #[cfg(feature = "zookeeper")]
            AnyInspector::ZooKeeper(inner) => inner.inspect(name).await,
            AnyInspector::Never(never) => match *never {},
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        match self {
            #[cfg(feature = "etcd")]
            AnyInspector::Etcd(inner) => inner.list(prefix).await,
            #[cfg(feature = "redis")]
            AnyInspector::Redis(inner) => inner.list(prefix).await,
            #[cfg(feature = "sql")]
            AnyInspector::Sql(inner) => inner.list(prefix).await,
            #[cfg(feature = "zookeeper")]
            AnyInspector::ZooKeeper(inner) => inner.list(prefix).await,
            AnyInspector::Never(never) => match *never {},
        }
    }
}

impl ForceRelease for AnyInspector {
    async fn force_release(
        &self,
        name: &LockName,
        generation: Generation,
    ) -> Result<bool, LockError> {
        match self {
            #[cfg(feature = "etcd")]
            AnyInspector::Etcd(inner) => inner.force_release(name, generation).await,
            #[cfg(feature = "redis")]
            AnyInspector::Redis(inner) => inner.force_release(name, generation).await,
            #[cfg(feature = "sql")]
            AnyInspector::Sql(inner) => inner.force_release(name, generation).await,
            #[cfg(feature = "zookeeper")]
            AnyInspector::ZooKeeper(inner) => inner.force_release(name, generation).await,
            AnyInspector::Never(never) => match *never {},
        }
    }
}
