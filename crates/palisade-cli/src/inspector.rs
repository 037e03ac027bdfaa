//! `AnyInspector`: the inspection API ([`Inspect`], [`ForceRelease`]) of
//! whichever lock service the backend flags chose, for `palisade locks` and
//! `palisade unlock --force`.

use palisade_core::{ForceRelease, Generation, Inspect, LockError, LockInfo, LockName};

use crate::backend::BackendKind;
#[cfg(feature = "sql")]
use crate::backend::SqlTarget;
#[cfg(any(feature = "etcd", feature = "sql"))]
use crate::backend::lock_error_text;

/// A lock service's inspection API.
#[cfg_attr(
    not(any(feature = "etcd", feature = "redis", feature = "sql")),
    allow(unused_variables, dead_code)
)]
#[derive(Debug)]
pub(crate) enum AnyInspector {
    /// etcd's connection.
    #[cfg(feature = "etcd")]
    Etcd(palisade_lock_etcd::EtcdLockClient),
    /// Redis's client.
    #[cfg(feature = "redis")]
    Redis(palisade_lock_redis::RedisLockClient),
    /// The SQL lock tables' client.
    #[cfg(feature = "sql")]
    Sql(palisade_lock_sql::SqlLockClient),
    /// A build without any backend feature inspects nothing.
    #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
    Unsupported(std::convert::Infallible),
}

impl AnyInspector {
    #[cfg(feature = "etcd")]
    pub(crate) async fn etcd(endpoints: &str, prefix: Option<&str>) -> anyhow::Result<Self> {
        use palisade_lock_etcd::{EtcdConfig, EtcdLockClient};
        let mut config = EtcdConfig::from_endpoint_list(endpoints)?;
        if let Some(prefix) = prefix {
            config = config.with_prefix(prefix)?;
        }
        let connection = EtcdLockClient::connect(config).await.map_err(|error| {
            anyhow::anyhow!(
                "cannot connect to etcd at {endpoints}: {}",
                lock_error_text(&error)
            )
        })?;
        Ok(AnyInspector::Etcd(connection))
    }

    #[cfg(not(feature = "etcd"))]
    pub(crate) async fn etcd(_endpoints: &str, _prefix: Option<&str>) -> anyhow::Result<Self> {
        anyhow::bail!("this build of palisade has no etcd support (feature `etcd`)")
    }

    #[cfg(feature = "redis")]
    pub(crate) async fn redis(
        url: &str,
        prefix: Option<&str>,
        ca_pem: Option<Vec<u8>>,
    ) -> anyhow::Result<Self> {
        let config = crate::backend::redis_config(url, prefix, ca_pem);
        let client = palisade_lock_redis::RedisLockClient::connect(config)
            .await
            .map_err(|error| crate::backend::redis_unreachable(url, &error))?;
        Ok(AnyInspector::Redis(client))
    }

    #[cfg(not(feature = "redis"))]
    pub(crate) async fn redis(
        _url: &str,
        _prefix: Option<&str>,
        _ca_pem: Option<Vec<u8>>,
    ) -> anyhow::Result<Self> {
        anyhow::bail!("this build of palisade has no Redis support (feature `redis`)")
    }

    #[cfg(feature = "sql")]
    pub(crate) async fn sql(_kind: BackendKind, target: SqlTarget) -> anyhow::Result<Self> {
        let config = palisade_lock_sql::SqlConfig::new(target.url.clone());
        let client = palisade_lock_sql::SqlLockClient::connect(config)
            .await
            .map_err(|error| crate::backend::sql_unreachable(&target.url, &error))?;
        Ok(AnyInspector::Sql(client))
    }

    #[cfg(not(feature = "sql"))]
    pub(crate) async fn sql(
        _kind: BackendKind,
        _target: crate::backend::SqlTarget,
    ) -> anyhow::Result<Self> {
        anyhow::bail!("this build of palisade has no SQL support (feature `sql`)")
    }
}

#[cfg_attr(
    not(any(feature = "etcd", feature = "redis", feature = "sql")),
    allow(unused_variables, dead_code)
)]
impl Inspect for AnyInspector {
    async fn inspect(&self, name: &LockName) -> Result<LockInfo, LockError> {
        match self {
            #[cfg(feature = "etcd")]
            AnyInspector::Etcd(inner) => inner.inspect(name).await,
            #[cfg(feature = "redis")]
            AnyInspector::Redis(inner) => inner.inspect(name).await,
            #[cfg(feature = "sql")]
            AnyInspector::Sql(inner) => inner.inspect(name).await,
            #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
            AnyInspector::Unsupported(never) => match *never {},
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
            #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
            AnyInspector::Unsupported(never) => match *never {},
        }
    }
}

#[cfg_attr(
    not(any(feature = "etcd", feature = "redis", feature = "sql")),
    allow(unused_variables, dead_code)
)]
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
            #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
            AnyInspector::Unsupported(never) => match *never {},
        }
    }
}
