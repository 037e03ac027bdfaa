//! Connecting: [`AnyClient`] (a connected service, which opens sessions),
//! [`AnyLock`] (a session) and [`AnyGuard`] (a hold), each an enum over the
//! backends compiled in.
//!
//! Enums, not `dyn Lock`: the trait's futures are `impl Future + Send`,
//! which a trait object cannot name, and a match over a few variants is
//! cheap. A variant exists only with its backend's feature; the `Never`
//! variant keeps every match whole in a build with none.

use std::convert::Infallible;
use std::time::Duration;

use palisade_core::{
    Generation, LeaseWatch, Lock, LockError, LockGuard, LockName, Mode, Sequencer, SessionOptions,
};
#[cfg(any(
    feature = "embedded",
    feature = "etcd",
    feature = "redis",
    feature = "sql",
    feature = "zookeeper"
))]
use palisade_core::{Signer, SigningKey};

use crate::error::SelectError;
#[cfg(any(feature = "etcd", feature = "redis", feature = "sql"))]
use crate::error::cause_chain;
#[cfg(any(
    feature = "etcd",
    feature = "redis",
    feature = "sql",
    feature = "zookeeper"
))]
use crate::error::lock_error_text;
use crate::spec::{BackendKind, LockSpec, Service};

/// How long [`AnyLock::close`] leaves Redis or SQL to remove an abandoned
/// queue entry (one round trip or statement, normally about a millisecond;
/// a Redis session's close returns as soon as it is done).
#[cfg(any(feature = "redis", feature = "sql"))]
const CLEANUP_GRACE: Duration = Duration::from_millis(200);

/// A connected lock service, on whichever backend a [`LockSpec`] chose:
/// opens sessions, each with its own lease and holder identity.
#[derive(Clone)]
#[non_exhaustive]
pub enum AnyClient {
    /// A fresh in-process service.
    #[cfg(feature = "embedded")]
    Embedded(palisade_lock_embedded::EmbeddedLockClient),
    /// An etcd connection.
    #[cfg(feature = "etcd")]
    Etcd(palisade_lock_etcd::EtcdLockClient),
    /// A Redis client.
    #[cfg(feature = "redis")]
    Redis(palisade_lock_redis::RedisLockClient),
    /// A Redlock client over several Redis masters.
    #[cfg(feature = "redis")]
    Redlock(palisade_lock_redis::RedlockClient),
    /// A PostgreSQL or MariaDB client, and which of the two.
    #[cfg(feature = "sql")]
    Sql(palisade_lock_sql::SqlLockClient, BackendKind),
    /// A ZooKeeper client (one reading session; each lock session is a
    /// ZooKeeper session of its own).
    #[cfg(feature = "zookeeper")]
    ZooKeeper(palisade_lock_zookeeper::ZkLockClient),
    #[doc(hidden)]
    Never(Infallible),
}

/// A lock session on whichever backend granted it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnyLock {
    /// An in-process session.
    #[cfg(feature = "embedded")]
    Embedded(palisade_lock_embedded::EmbeddedLock),
    /// An etcd session (one lease).
    #[cfg(feature = "etcd")]
    Etcd(palisade_lock_etcd::EtcdLock),
    /// A Redis session.
    #[cfg(feature = "redis")]
    Redis(palisade_lock_redis::RedisLock),
    /// A Redlock session over several Redis masters.
    #[cfg(feature = "redis")]
    Redlock(palisade_lock_redis::Redlock),
    /// A PostgreSQL or MariaDB session, and which of the two.
    #[cfg(feature = "sql")]
    Sql(palisade_lock_sql::SqlLock, BackendKind),
    /// A ZooKeeper session (its timeout is the TTL).
    #[cfg(feature = "zookeeper")]
    ZooKeeper(palisade_lock_zookeeper::ZkLock),
    #[doc(hidden)]
    Never(Infallible),
}

/// A hold on whichever backend granted it.
// A process holds few guards: their size does not matter, and boxing
// would only add a pointer to every use.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyGuard {
    /// Granted in-process.
    #[cfg(feature = "embedded")]
    Embedded(palisade_lock_embedded::EmbeddedGuard),
    /// Granted by etcd.
    #[cfg(feature = "etcd")]
    Etcd(palisade_lock_etcd::EtcdGuard),
    /// Granted by Redis.
    #[cfg(feature = "redis")]
    Redis(palisade_lock_redis::RedisGuard),
    /// Granted by a majority of Redlock masters.
    #[cfg(feature = "redis")]
    Redlock(palisade_lock_redis::RedlockGuard),
    /// Granted by PostgreSQL or MariaDB.
    #[cfg(feature = "sql")]
    Sql(palisade_lock_sql::SqlGuard),
    /// Granted by ZooKeeper.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(palisade_lock_zookeeper::ZkGuard),
    #[doc(hidden)]
    Never(Infallible),
}

/// The arm of an uninhabited value, owned or borrowed.
fn absurd<T>(never: impl std::borrow::Borrow<Infallible>) -> T {
    match *never.borrow() {}
}

/// Runs `$body` with `$inner` bound to the session of `$lock`, and `$wrap`
/// naming the matching [`AnyGuard`] variant.
macro_rules! each_lock {
    ($lock:expr, $inner:ident, $wrap:ident => $body:expr) => {
        match $lock {
            #[cfg(feature = "embedded")]
            AnyLock::Embedded($inner) => {
                use AnyGuard::Embedded as $wrap;
                $body
            }
            #[cfg(feature = "etcd")]
            AnyLock::Etcd($inner) => {
                use AnyGuard::Etcd as $wrap;
                $body
            }
            #[cfg(feature = "redis")]
            AnyLock::Redis($inner) => {
                use AnyGuard::Redis as $wrap;
                $body
            }
            #[cfg(feature = "redis")]
            AnyLock::Redlock($inner) => {
                use AnyGuard::Redlock as $wrap;
                $body
            }
            #[cfg(feature = "sql")]
            AnyLock::Sql($inner, _) => {
                use AnyGuard::Sql as $wrap;
                $body
            }
            #[cfg(feature = "zookeeper")]
            AnyLock::ZooKeeper($inner) => {
                use AnyGuard::ZooKeeper as $wrap;
                $body
            }
            AnyLock::Never(never) => match *never {},
        }
    };
}

/// Runs `$body` with `$inner` bound to the hold of `$guard`.
macro_rules! each_guard {
    ($guard:expr, $inner:ident => $body:expr) => {
        match $guard {
            #[cfg(feature = "embedded")]
            AnyGuard::Embedded($inner) => $body,
            #[cfg(feature = "etcd")]
            AnyGuard::Etcd($inner) => $body,
            #[cfg(feature = "redis")]
            AnyGuard::Redis($inner) => $body,
            #[cfg(feature = "redis")]
            AnyGuard::Redlock($inner) => $body,
            #[cfg(feature = "sql")]
            AnyGuard::Sql($inner) => $body,
            #[cfg(feature = "zookeeper")]
            AnyGuard::ZooKeeper($inner) => $body,
            AnyGuard::Never(never) => absurd(never),
        }
    };
}

/// Runs `$body` with `$inner` bound to the client of `$client`, for the
/// services with an API of their own beside sessions (inspection, force
/// release): all but Redlock and the embedded backend, which the callers
/// refuse before they connect.
macro_rules! each_service {
    ($client:expr, $inner:ident => $body:expr) => {
        match $client {
            #[cfg(feature = "etcd")]
            AnyClient::Etcd($inner) => $body,
            #[cfg(feature = "redis")]
            AnyClient::Redis($inner) => $body,
            #[cfg(feature = "sql")]
            AnyClient::Sql($inner, _) => $body,
            #[cfg(feature = "zookeeper")]
            AnyClient::ZooKeeper($inner) => $body,
            #[allow(unreachable_patterns)]
            other => unreachable!("{} is refused before it connects", other.kind()),
        }
    };
}
pub(crate) use each_service;

/// A signer for `issuer` with `key`; an issuer a sequencer cannot carry
/// is reported against its flag.
#[cfg(any(
    feature = "embedded",
    feature = "etcd",
    feature = "redis",
    feature = "sql",
    feature = "zookeeper"
))]
fn signer(issuer: &str, key: SigningKey) -> Result<Signer, SelectError> {
    Signer::new(issuer, key)
        .map_err(|error| SelectError::invalid(format!("--issuer {issuer:?}: {error}")))
}

impl AnyClient {
    /// Connects to the service `spec` names (for the embedded backend:
    /// creates a fresh one). A backend not compiled in is refused with the
    /// feature to turn on.
    pub async fn connect(spec: &LockSpec) -> Result<AnyClient, SelectError> {
        if !spec.kind().is_compiled() {
            return Err(SelectError::NotCompiled(spec.kind()));
        }
        match spec.service() {
            #[cfg(feature = "embedded")]
            Service::Embedded => connect_embedded(spec),
            #[cfg(feature = "etcd")]
            Service::Etcd { endpoints } => connect_etcd(spec, endpoints).await,
            #[cfg(feature = "redis")]
            Service::Redis { url } => connect_redis(spec, redis_config(spec, url)).await,
            #[cfg(feature = "redis")]
            Service::RedisCluster { nodes } => {
                let seeds = palisade_lock_redis::RedisConfig::cluster(nodes.iter().cloned());
                connect_redis(spec, configure_redis(spec, seeds)).await
            }
            #[cfg(feature = "redis")]
            Service::Redlock { masters } => connect_redlock(spec, masters).await,
            #[cfg(feature = "sql")]
            Service::Sql { kind, url } => connect_sql(spec, *kind, url).await,
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper { connect } => connect_zookeeper(spec, connect).await,
            #[allow(unreachable_patterns)]
            _ => unreachable!("refused above: {} is not compiled in", spec.kind()),
        }
    }

    /// Connects and opens one session.
    pub async fn open(spec: &LockSpec, options: SessionOptions) -> Result<AnyLock, SelectError> {
        AnyClient::connect(spec).await?.session(options).await
    }

    /// The kind of service.
    pub fn kind(&self) -> BackendKind {
        match self {
            #[cfg(feature = "embedded")]
            AnyClient::Embedded(_) => BackendKind::Embedded,
            #[cfg(feature = "etcd")]
            AnyClient::Etcd(_) => BackendKind::Etcd,
            #[cfg(feature = "redis")]
            AnyClient::Redis(_) => BackendKind::Redis,
            #[cfg(feature = "redis")]
            AnyClient::Redlock(_) => BackendKind::Redlock,
            #[cfg(feature = "sql")]
            AnyClient::Sql(_, kind) => *kind,
            #[cfg(feature = "zookeeper")]
            AnyClient::ZooKeeper(_) => BackendKind::ZooKeeper,
            AnyClient::Never(never) => match *never {},
        }
    }

    /// Opens a session of its own (its own lease and holder identity).
    pub async fn session(&self, options: SessionOptions) -> Result<AnyLock, SelectError> {
        #[cfg(any(
            feature = "embedded",
            feature = "etcd",
            feature = "redis",
            feature = "sql",
            feature = "zookeeper"
        ))]
        let refused = |error: &dyn std::fmt::Display| {
            SelectError::Unreachable(format!("cannot open a {} session: {error}", self.kind()))
        };
        Ok(match self {
            #[cfg(feature = "embedded")]
            AnyClient::Embedded(client) => {
                AnyLock::Embedded(client.session(options).map_err(|error| refused(&error))?)
            }
            #[cfg(feature = "etcd")]
            AnyClient::Etcd(client) => AnyLock::Etcd(
                client
                    .session(options)
                    .await
                    .map_err(|error| refused(&lock_error_text(&error)))?,
            ),
            #[cfg(feature = "redis")]
            AnyClient::Redis(client) => {
                AnyLock::Redis(client.session(options).map_err(|error| refused(&error))?)
            }
            #[cfg(feature = "redis")]
            AnyClient::Redlock(client) => {
                AnyLock::Redlock(client.session(options).map_err(|error| refused(&error))?)
            }
            #[cfg(feature = "sql")]
            AnyClient::Sql(client, kind) => AnyLock::Sql(
                client
                    .session(options)
                    .await
                    .map_err(|error| refused(&sql_error_text(&error)))?,
                *kind,
            ),
            #[cfg(feature = "zookeeper")]
            AnyClient::ZooKeeper(client) => AnyLock::ZooKeeper(
                client
                    .session(options)
                    .await
                    .map_err(|error| refused(&lock_error_text(&error)))?,
            ),
            AnyClient::Never(never) => match *never {},
        })
    }
}

#[cfg(feature = "embedded")]
fn connect_embedded(spec: &LockSpec) -> Result<AnyClient, SelectError> {
    use palisade_lock_embedded::EmbeddedLockClient;
    if let Some(prefix) = spec.prefix() {
        return Err(SelectError::invalid(format!(
            "--prefix {prefix:?} does not apply to the embedded backend: each service is new and its own"
        )));
    }
    let client = match (spec.issuer(), spec.signing_key()) {
        (issuer, Some(key)) => {
            EmbeddedLockClient::with_signer(signer(issuer.unwrap_or("embedded"), key.clone())?)
        }
        (Some(issuer), None) => EmbeddedLockClient::with_issuer(issuer)
            .map_err(|error| SelectError::invalid(format!("--issuer {issuer:?}: {error}")))?,
        (None, None) => EmbeddedLockClient::new(),
    };
    Ok(AnyClient::Embedded(client))
}

#[cfg(feature = "etcd")]
pub(crate) fn etcd_config(
    spec: &LockSpec,
    endpoints: &str,
) -> Result<palisade_lock_etcd::EtcdConfig, SelectError> {
    use palisade_lock_etcd::EtcdConfig;
    let invalid = |error: palisade_lock_etcd::ConfigError| SelectError::invalid(error.to_string());
    let mut config = EtcdConfig::from_endpoint_list(endpoints).map_err(invalid)?;
    if let Some(prefix) = spec.prefix() {
        config = config.with_prefix(prefix).map_err(invalid)?;
    }
    if let Some(issuer) = spec.issuer() {
        config = config.with_issuer(issuer).map_err(invalid)?;
    }
    Ok(config)
}

#[cfg(feature = "etcd")]
async fn connect_etcd(spec: &LockSpec, endpoints: &str) -> Result<AnyClient, SelectError> {
    use palisade_lock_etcd::EtcdLockClient;
    let unreachable = |error: LockError| SelectError::unreachable(spec, &lock_error_text(&error));
    let mut config = etcd_config(spec, endpoints)?;
    let client = EtcdLockClient::connect(config.clone())
        .await
        .map_err(unreachable)?;
    let Some(key) = spec.signing_key() else {
        return Ok(AnyClient::Etcd(client));
    };
    // Without --issuer, sign as the cluster itself (`etcd-<cluster id>`),
    // the id a live check derives too: learnt from the first connection.
    let issuer = spec.issuer().unwrap_or(client.issuer()).to_owned();
    config = config.with_signer(signer(&issuer, key.clone())?);
    let client = EtcdLockClient::connect(config).await.map_err(unreachable)?;
    Ok(AnyClient::Etcd(client))
}

#[cfg(feature = "redis")]
pub(crate) fn redis_config(spec: &LockSpec, url: &str) -> palisade_lock_redis::RedisConfig {
    configure_redis(spec, palisade_lock_redis::RedisConfig::new(url))
}

/// `config` (one server's or a cluster's) with `spec`'s Redis settings.
#[cfg(feature = "redis")]
fn configure_redis(
    spec: &LockSpec,
    config: palisade_lock_redis::RedisConfig,
) -> palisade_lock_redis::RedisConfig {
    use palisade_lock_redis::GenerationScheme;
    let mut config = config.with_generation_scheme(match spec.redis_generations() {
        crate::RedisGenerations::Clock => GenerationScheme::ServerClock,
        crate::RedisGenerations::Counter => GenerationScheme::Counter,
    });
    if let Some(prefix) = spec.prefix() {
        config = config.with_key_prefix(prefix);
    }
    if let Some(pem) = spec.redis_ca_pem() {
        config = config.with_tls_root_cert_pem(pem.to_vec());
    }
    if let Some(issuer) = spec.issuer() {
        config = config.with_issuer(issuer);
    }
    config
}

/// A Redis client error as one line, secrets scrubbed by the caller.
#[cfg(feature = "redis")]
pub(crate) fn redis_error_text(error: &palisade_lock_redis::RedisLockError) -> String {
    match error {
        palisade_lock_redis::RedisLockError::Lock(error) => lock_error_text(error),
        other => cause_chain(other),
    }
}

#[cfg(feature = "redis")]
async fn connect_redis(
    spec: &LockSpec,
    mut config: palisade_lock_redis::RedisConfig,
) -> Result<AnyClient, SelectError> {
    use palisade_lock_redis::RedisLockClient;
    let unreachable = |error: palisade_lock_redis::RedisLockError| {
        SelectError::unreachable(spec, &redis_error_text(&error))
    };
    let client = RedisLockClient::connect(config.clone())
        .await
        .map_err(unreachable)?;
    let Some(key) = spec.signing_key() else {
        return Ok(AnyClient::Redis(client));
    };
    // Without --issuer, sign as the deployment itself (`redis@<host:port>`),
    // the id a live check derives too.
    let issuer = spec.issuer().unwrap_or(client.issuer()).to_owned();
    config = config.with_signer(signer(&issuer, key.clone())?);
    let client = RedisLockClient::connect(config)
        .await
        .map_err(unreachable)?;
    Ok(AnyClient::Redis(client))
}

#[cfg(feature = "redis")]
async fn connect_redlock(spec: &LockSpec, masters: &[String]) -> Result<AnyClient, SelectError> {
    use palisade_lock_redis::{RedlockClient, RedlockConfig};
    if masters.len() < 3 {
        return Err(SelectError::invalid(format!(
            "redlock needs at least 3 independent masters, one --redis-url each (got {})",
            masters.len()
        )));
    }
    let unreachable = |error: palisade_lock_redis::RedisLockError| {
        SelectError::Unreachable(format!(
            "cannot reach a majority of {spec}: {}",
            crate::error::scrub_spec(spec, &redis_error_text(&error))
        ))
    };
    let mut config = RedlockConfig::from_masters(masters.iter().map(|url| redis_config(spec, url)));
    if let Some(issuer) = spec.issuer() {
        config = config.with_issuer(issuer);
    }
    let client = RedlockClient::connect(config.clone())
        .await
        .map_err(unreachable)?;
    let Some(key) = spec.signing_key() else {
        return Ok(AnyClient::Redlock(client));
    };
    // Without --issuer, sign as the deployment (`redlock@<host:port>,...`).
    let issuer = spec.issuer().unwrap_or(client.issuer()).to_owned();
    config = config.with_signer(signer(&issuer, key.clone())?);
    let client = RedlockClient::connect(config).await.map_err(unreachable)?;
    Ok(AnyClient::Redlock(client))
}

/// A SQL client error as one line, secrets scrubbed by the caller.
#[cfg(feature = "sql")]
pub(crate) fn sql_error_text(error: &palisade_lock_sql::SqlLockError) -> String {
    match error {
        palisade_lock_sql::SqlLockError::Lock(error) => lock_error_text(error),
        other => cause_chain(other),
    }
}

/// The SQL backend keeps every lock in fixed tables, so a key prefix is
/// refused rather than ignored: two deployments that meant to be apart
/// would share locks.
#[cfg(feature = "sql")]
pub(crate) fn refuse_sql_prefix(spec: &LockSpec, kind: BackendKind) -> Result<(), SelectError> {
    match spec.prefix() {
        Some(prefix) => Err(SelectError::invalid(format!(
            "--prefix {prefix:?} does not apply to --backend {kind}: its locks live in fixed tables (use a separate database to keep deployments apart)"
        ))),
        None => Ok(()),
    }
}

/// A default issuer for signed SQL sequencers: the database's address,
/// without credentials (`postgres@127.0.0.1:5432/app`). The live check
/// derives the same from its own URL.
pub fn sql_default_issuer(kind: BackendKind, url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let address = rest.rsplit_once('@').map_or(rest, |(_, address)| address);
    let address = address
        .split_once('?')
        .map_or(address, |(address, _)| address);
    format!("{kind}@{address}")
}

#[cfg(feature = "sql")]
async fn connect_sql(
    spec: &LockSpec,
    kind: BackendKind,
    url: &str,
) -> Result<AnyClient, SelectError> {
    use palisade_lock_sql::{SqlConfig, SqlLockClient};
    refuse_sql_prefix(spec, kind)?;
    let mut config = SqlConfig::new(url);
    match (spec.issuer(), spec.signing_key()) {
        (issuer, Some(key)) => {
            let issuer = issuer.map_or_else(|| sql_default_issuer(kind, url), str::to_owned);
            config = config.with_signer(signer(&issuer, key.clone())?);
        }
        (Some(issuer), None) => {
            return Err(SelectError::invalid(format!(
                "--issuer {issuer:?} on --backend {kind}: the SQL backend stamps an issuer only on signed sequencers; add --sign-key-file"
            )));
        }
        (None, None) => {}
    }
    let client = SqlLockClient::connect(config)
        .await
        .map_err(|error| SelectError::unreachable(spec, &sql_error_text(&error)))?;
    Ok(AnyClient::Sql(client, kind))
}

/// The ZooKeeper configuration `spec` names, unsigned.
#[cfg(feature = "zookeeper")]
pub(crate) fn zookeeper_config(
    spec: &LockSpec,
    connect: &str,
) -> Result<palisade_lock_zookeeper::ZkConfig, SelectError> {
    use palisade_lock_zookeeper::{NodeNames, ZkConfig};
    let invalid = |error: palisade_lock_zookeeper::ConfigError| {
        SelectError::invalid(format!("--zookeeper: {error}"))
    };
    let mut config = ZkConfig::parse(connect).map_err(invalid)?.with_node_names(
        match spec.zookeeper_node_names() {
            crate::ZooKeeperNodeNames::Kazoo => NodeNames::Kazoo,
            crate::ZooKeeperNodeNames::CuratorMutex => NodeNames::CuratorMutex,
            crate::ZooKeeperNodeNames::CuratorRw => NodeNames::CuratorReadWrite,
        },
    );
    if let Some(prefix) = spec.prefix() {
        config = config.with_prefix(prefix).map_err(invalid)?;
    }
    if let Some(issuer) = spec.issuer() {
        config = config.with_issuer(issuer).map_err(invalid)?;
    }
    Ok(config)
}

#[cfg(feature = "zookeeper")]
async fn connect_zookeeper(spec: &LockSpec, connect: &str) -> Result<AnyClient, SelectError> {
    use palisade_lock_zookeeper::ZkLockClient;
    let mut config = zookeeper_config(spec, connect)?;
    if let Some(key) = spec.signing_key() {
        // Without --issuer, sign as the ensemble itself (`zookeeper-<hash of
        // the servers and root>`), the id a live check derives too.
        let issuer = spec.issuer().map_or_else(|| config.issuer(), str::to_owned);
        config = config.with_signer(signer(&issuer, key.clone())?);
    }
    let client = ZkLockClient::connect(config)
        .await
        .map_err(|error| SelectError::unreachable(spec, &lock_error_text(&error)))?;
    Ok(AnyClient::ZooKeeper(client))
}

impl AnyLock {
    /// The kind of service the session is on.
    pub fn kind(&self) -> BackendKind {
        match self {
            #[cfg(feature = "embedded")]
            AnyLock::Embedded(_) => BackendKind::Embedded,
            #[cfg(feature = "etcd")]
            AnyLock::Etcd(_) => BackendKind::Etcd,
            #[cfg(feature = "redis")]
            AnyLock::Redis(_) => BackendKind::Redis,
            #[cfg(feature = "redis")]
            AnyLock::Redlock(_) => BackendKind::Redlock,
            #[cfg(feature = "sql")]
            AnyLock::Sql(_, kind) => *kind,
            #[cfg(feature = "zookeeper")]
            AnyLock::ZooKeeper(_) => BackendKind::ZooKeeper,
            AnyLock::Never(never) => match *never {},
        }
    }

    /// Ends the session.
    ///
    /// For etcd this revokes the lease, which deletes any key the session
    /// still has (a waiter's place in a queue included) at once instead of
    /// one TTL later; for ZooKeeper it closes the ZooKeeper session, which
    /// deletes its nodes at once. A Redis session has nothing to end, but an abandoned
    /// acquire (Ctrl-C, a wait run out) removes its queue entry in a
    /// background task, and dropping a SQL session ends its row in one:
    /// with `abandoned_attempt` this gives that task a short grace before
    /// the process exits. Without it the entry would expire by itself,
    /// delaying the next waiter.
    pub async fn close(self, abandoned_attempt: bool) -> Result<(), LockError> {
        match self {
            #[cfg(feature = "embedded")]
            AnyLock::Embedded(_) => Ok(()),
            #[cfg(feature = "etcd")]
            AnyLock::Etcd(lock) => lock.close().await,
            #[cfg(feature = "redis")]
            AnyLock::Redis(lock) => {
                if abandoned_attempt {
                    // Returns as soon as the entry is gone; bounded, since
                    // an unreachable Redis would keep it retrying.
                    let _ = tokio::time::timeout(CLEANUP_GRACE, lock.client().settle()).await;
                }
                Ok(())
            }
            #[cfg(feature = "redis")]
            AnyLock::Redlock(_) => {
                if abandoned_attempt {
                    tokio::time::sleep(CLEANUP_GRACE).await;
                }
                Ok(())
            }
            #[cfg(feature = "sql")]
            AnyLock::Sql(lock, _) => {
                drop(lock);
                if abandoned_attempt {
                    tokio::time::sleep(CLEANUP_GRACE).await;
                }
                Ok(())
            }
            #[cfg(feature = "zookeeper")]
            AnyLock::ZooKeeper(lock) => lock.close().await,
            AnyLock::Never(never) => absurd(never),
        }
    }
}

impl Lock for AnyLock {
    type Guard = AnyGuard;

    async fn acquire(&self, name: &LockName, mode: Mode) -> Result<AnyGuard, LockError> {
        each_lock!(self, lock, Wrap => lock.acquire(name, mode).await.map(Wrap))
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        mode: Mode,
    ) -> Result<Option<AnyGuard>, LockError> {
        each_lock!(self, lock, Wrap => Ok(lock.try_acquire(name, mode).await?.map(Wrap)))
    }

    /// Delegates, so a backend that cleans up its queue entry before
    /// returning `Timeout` (etcd) keeps doing so.
    async fn acquire_timeout(
        &self,
        name: &LockName,
        mode: Mode,
        timeout: Duration,
    ) -> Result<AnyGuard, LockError> {
        each_lock!(self, lock, Wrap => lock.acquire_timeout(name, mode, timeout).await.map(Wrap))
    }
}

impl LockGuard for AnyGuard {
    fn issued(&self) -> &Sequencer {
        each_guard!(self, guard => guard.issued())
    }

    fn lease(&self) -> LeaseWatch {
        each_guard!(self, guard => guard.lease())
    }

    async fn release(self) -> Result<(), LockError> {
        each_guard!(self, guard => guard.release().await)
    }

    fn generation(&self) -> Generation {
        self.issued().generation()
    }
}

#[cfg(all(test, feature = "embedded"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_embedded_session_grants_and_excludes() {
        let client = AnyClient::connect(&LockSpec::embedded())
            .await
            .expect("connect");
        let first = client
            .session(SessionOptions::default())
            .await
            .expect("session");
        let second = client
            .session(SessionOptions::default())
            .await
            .expect("session");
        let name = LockName::new("orders/42").expect("name");
        let guard = first.acquire(&name, Mode::Exclusive).await.expect("grant");
        assert!(
            second
                .try_acquire(&name, Mode::Exclusive)
                .await
                .expect("try")
                .is_none(),
            "one client of the same service must be excluded"
        );
        let generation = guard.generation();
        guard.release().await.expect("release");
        let next = second
            .try_acquire(&name, Mode::Exclusive)
            .await
            .expect("try");
        assert!(next.expect("granted after release").generation() > generation);
    }

    #[tokio::test]
    async fn a_signed_embedded_session_signs_as_its_issuer() {
        let key = SigningKey::new("k1", vec![9u8; 32]).expect("key");
        let spec = LockSpec::embedded()
            .with_issuer("drill")
            .with_signing_key(key);
        let lock = AnyClient::open(&spec, SessionOptions::default())
            .await
            .expect("open");
        let guard = lock
            .acquire(&LockName::new("a").expect("name"), Mode::Exclusive)
            .await
            .expect("grant");
        assert_eq!(guard.issued().issuer(), Some("drill"));
        assert!(guard.issued().signature().is_some());
    }
}
