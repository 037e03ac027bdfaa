//! Which lock service a demo runs on, and one session type over all of them.
//!
//! The demos pick their backend at run time (`--backend`), so they need a
//! value that can be any of them: [`AnySession`] implements the core
//! [`Lock`] trait by delegating, and [`AnyGuard`] is its guard. This is the
//! `AnyLock` enum STYLE.md suggests for the one place that chooses a backend
//! at run time.

use std::time::Duration;

use clap::{Args, ValueEnum};
use palisade::embedded::{EmbeddedGuard, EmbeddedLock, EmbeddedLockClient};
use palisade::etcd::{EtcdConfig, EtcdGuard, EtcdLock, EtcdLockClient};
use palisade::redis::{RedisConfig, RedisGuard, RedisLock, RedisLockClient};
use palisade::{LeaseWatch, Lock, LockError, LockGuard, LockName, Mode, Sequencer, SessionOptions};
use palisade_lock_sql::{SqlConfig, SqlGuard, SqlLock, SqlLockClient};
use serde::{Deserialize, Serialize};

use crate::DemoError;

/// The etcd a demo talks to when neither `--etcd-endpoints` nor
/// `PALISADE_ETCD_ENDPOINTS` says otherwise.
pub const DEFAULT_ETCD_ENDPOINTS: &str = "127.0.0.1:2379";
/// The Redis a demo talks to when neither `--redis-url` nor
/// `PALISADE_REDIS_URL` says otherwise.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// The PostgreSQL a demo uses when neither `--database-url` nor
/// `PALISADE_DATABASE_URL` says otherwise.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// The MariaDB a demo uses when neither `--database-url` nor
/// `PALISADE_DATABASE_URL` says otherwise.
pub const DEFAULT_MARIADB_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// A lock service a demo can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum BackendKind {
    /// The in-process lock service: no server, one process.
    Embedded,
    /// etcd v3 (`--etcd-endpoints`).
    Etcd,
    /// Redis (`--redis-url`).
    Redis,
    /// PostgreSQL (`--database-url`).
    Postgres,
    /// MariaDB or MySQL (`--database-url`).
    #[value(name = "mariadb", alias = "mysql")]
    #[serde(rename = "mariadb")]
    MariaDb,
}

impl BackendKind {
    /// `embedded`, `etcd`, `redis`, `postgres` or `mariadb`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Embedded => "embedded",
            BackendKind::Etcd => "etcd",
            BackendKind::Redis => "redis",
            BackendKind::Postgres => "postgres",
            BackendKind::MariaDb => "mariadb",
        }
    }

    /// Whether the lock service is a server other processes can share.
    pub fn is_shared(self) -> bool {
        self != BackendKind::Embedded
    }

    /// The lease TTL a demo uses unless told otherwise: short on the
    /// in-process backend, 2 s (etcd's smallest lease) on the servers.
    pub fn default_ttl(self) -> Duration {
        match self {
            BackendKind::Embedded => Duration::from_millis(1000),
            _ => Duration::from_millis(2000),
        }
    }
}

/// The lock-service flags every demo takes.
#[derive(Debug, Clone, Args)]
pub struct BackendArgs {
    /// Which lock service: `embedded` (inside this process, no servers),
    /// `etcd`, `redis`, `postgres` or `mariadb` (real servers, see the next
    /// flags).
    #[arg(long, value_enum, default_value_t = BackendKind::Embedded)]
    pub backend: BackendKind,

    /// etcd endpoints for `--backend etcd`, comma-separated
    /// [default: 127.0.0.1:2379].
    #[arg(long, env = "PALISADE_ETCD_ENDPOINTS")]
    pub etcd_endpoints: Option<String>,

    /// Redis URL for `--backend redis` [default: redis://127.0.0.1:6379].
    #[arg(long, env = "PALISADE_REDIS_URL")]
    pub redis_url: Option<String>,

    // The text is also `--help`'s, where `[default: ...]` is clap's own
    // notation; rustdoc would read it as a link.
    #[allow(rustdoc::broken_intra_doc_links)]
    /// Database URL for `--backend postgres|mariadb`
    /// [default: postgres://postgres@127.0.0.1:5432/postgres,
    /// mysql://root@127.0.0.1:3306/test].
    #[arg(long, env = "PALISADE_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

impl BackendArgs {
    /// The in-process backend.
    pub fn embedded() -> Self {
        BackendArgs {
            backend: BackendKind::Embedded,
            etcd_endpoints: None,
            redis_url: None,
            database_url: None,
        }
    }

    /// etcd at `endpoints` (comma-separated).
    pub fn etcd(endpoints: impl Into<String>) -> Self {
        BackendArgs {
            backend: BackendKind::Etcd,
            etcd_endpoints: Some(endpoints.into()),
            redis_url: None,
            database_url: None,
        }
    }

    /// Redis at `url`.
    pub fn redis(url: impl Into<String>) -> Self {
        BackendArgs {
            backend: BackendKind::Redis,
            etcd_endpoints: None,
            redis_url: Some(url.into()),
            database_url: None,
        }
    }

    /// PostgreSQL or MariaDB at `url` (the scheme says which).
    pub fn sql(url: impl Into<String>) -> Self {
        let url = url.into();
        BackendArgs {
            backend: if url.starts_with("mysql") || url.starts_with("mariadb") {
                BackendKind::MariaDb
            } else {
                BackendKind::Postgres
            },
            etcd_endpoints: None,
            redis_url: None,
            database_url: Some(url),
        }
    }

    /// Where the locks of one demo invocation live. `tag` goes into the key
    /// prefix, so two demos on the same etcd or Redis never share a lock.
    pub(crate) fn target(&self, tag: &str) -> BackendTarget {
        match self.backend {
            BackendKind::Embedded => BackendTarget::Embedded,
            BackendKind::Etcd => BackendTarget::Etcd {
                endpoints: self
                    .etcd_endpoints
                    .clone()
                    .unwrap_or_else(|| DEFAULT_ETCD_ENDPOINTS.to_owned()),
                prefix: format!("/palisade-demo/{tag}"),
            },
            BackendKind::Redis => BackendTarget::Redis {
                url: self
                    .redis_url
                    .clone()
                    .unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned()),
                key_prefix: format!("palisade-demo:{tag}:"),
            },
            // The lock tables have no prefix: a demo's lock name is shared
            // with any other demo on the same database (runs in turn are
            // fine; generations only grow).
            BackendKind::Postgres | BackendKind::MariaDb => BackendTarget::Sql {
                url: self.database_url.clone().unwrap_or_else(|| {
                    if self.backend == BackendKind::Postgres {
                        DEFAULT_POSTGRES_URL
                    } else {
                        DEFAULT_MARIADB_URL
                    }
                    .to_owned()
                }),
            },
        }
    }
}

/// A lock service, resolved: what a client process needs to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "backend", rename_all = "snake_case")]
pub(crate) enum BackendTarget {
    /// A fresh in-process service (never sent to another process).
    Embedded,
    /// etcd at `endpoints`, keys under `prefix`.
    Etcd { endpoints: String, prefix: String },
    /// Redis at `url`, keys under `key_prefix`.
    Redis { url: String, key_prefix: String },
    /// PostgreSQL or MariaDB at `url`.
    Sql { url: String },
}

impl BackendTarget {
    /// For the demo's header line.
    pub(crate) fn describe(&self) -> String {
        match self {
            BackendTarget::Embedded => "embedded (in this process, no server)".to_owned(),
            BackendTarget::Etcd { endpoints, .. } => format!("etcd at {endpoints}"),
            BackendTarget::Redis { url, .. } => format!("Redis at {url}"),
            BackendTarget::Sql { url } => format!("the database at {}", without_password(url)),
        }
    }
}

/// `url` with any password replaced by `***`.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((credentials, host)) => match credentials.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Whether a session will be paused on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Renewed in the background as usual.
    KeepAlive,
    /// A session the demo will pause in-process: on Redis it is opened
    /// without the watchdog (a Redis hold cannot have its watchdog stopped
    /// afterwards), elsewhere [`AnySession::stop_renewal`] stops the
    /// keep-alive when the pause starts.
    Pausable,
}

/// A connected lock service: makes sessions.
#[derive(Clone)]
pub(crate) enum Locks {
    Embedded(EmbeddedLockClient),
    Etcd(EtcdLockClient),
    Redis(RedisLockClient),
    Sql(SqlLockClient),
}

impl Locks {
    /// Connects (or, for the embedded backend, creates a fresh service).
    pub(crate) async fn connect(target: &BackendTarget) -> Result<Locks, DemoError> {
        match target {
            BackendTarget::Embedded => Ok(Locks::Embedded(EmbeddedLockClient::new())),
            BackendTarget::Etcd { endpoints, prefix } => {
                let config = EtcdConfig::from_endpoint_list(endpoints)?.with_prefix(prefix)?;
                let connection = EtcdLockClient::connect(config).await.map_err(|error| {
                    DemoError::story(format!(
                        "cannot reach etcd at {endpoints}: {error} (start etcd, or pass --etcd-endpoints or PALISADE_ETCD_ENDPOINTS)"
                    ))
                })?;
                Ok(Locks::Etcd(connection))
            }
            BackendTarget::Redis { url, key_prefix } => {
                let config = RedisConfig::new(url.clone()).with_key_prefix(key_prefix.clone());
                let client = RedisLockClient::connect(config).await.map_err(|error| {
                    DemoError::story(format!(
                        "cannot reach Redis at {url}: {error} (start redis-server, or pass --redis-url or PALISADE_REDIS_URL)"
                    ))
                })?;
                Ok(Locks::Redis(client))
            }
            BackendTarget::Sql { url } => {
                let client = SqlLockClient::connect(SqlConfig::new(url.clone()))
                    .await
                    .map_err(|error| {
                        DemoError::story(format!(
                            "cannot reach the database at {}: {error} (start it, or pass --database-url or PALISADE_DATABASE_URL)",
                            without_password(url)
                        ))
                    })?;
                Ok(Locks::Sql(client))
            }
        }
    }

    /// Opens a session of its own (its own lease and holder identity).
    pub(crate) async fn session(
        &self,
        options: &SessionOptions,
        renewal: Renewal,
    ) -> Result<AnySession, DemoError> {
        Ok(match self {
            Locks::Embedded(service) => AnySession::Embedded(service.session(options.clone())?),
            Locks::Etcd(connection) => AnySession::Etcd(connection.session(options.clone()).await?),
            Locks::Redis(client) => {
                let session = client.session(options.clone())?;
                AnySession::Redis(match renewal {
                    Renewal::KeepAlive => session,
                    Renewal::Pausable => session.without_watchdog(),
                })
            }
            Locks::Sql(client) => {
                let session = client.session(options.clone()).await.map_err(|error| {
                    DemoError::story(format!("cannot open a database lock session: {error}"))
                })?;
                AnySession::Sql(session, options.ttl())
            }
        })
    }
}

impl From<palisade::embedded::EmbeddedError> for DemoError {
    fn from(error: palisade::embedded::EmbeddedError) -> Self {
        DemoError::story(format!("embedded lock service: {error}"))
    }
}

/// A session on any backend.
#[derive(Clone, Debug)]
pub(crate) enum AnySession {
    Embedded(EmbeddedLock),
    Etcd(EtcdLock),
    Redis(RedisLock),
    /// A SQL session and its lease TTL.
    Sql(SqlLock, Duration),
}

impl AnySession {
    /// Stops renewing the lease, as a stop-the-world pause would, and says
    /// how (for the timeline).
    pub(crate) fn stop_renewal(&self) -> &'static str {
        match self {
            AnySession::Embedded(session) => {
                session.stop_keepalive();
                "its keep-alive stops with it"
            }
            AnySession::Etcd(session) => {
                session.stop_keepalive();
                "its etcd lease keep-alive stops with it"
            }
            AnySession::Redis(_) => {
                "its hold has no watchdog (a stopped world renews nothing), so it lapses one TTL after the grant"
            }
            AnySession::Sql(session, ttl) => {
                // The session's keep-alive cannot be stopped from outside, so
                // the demo does what the database's clock would do to a
                // stopped process: one TTL on, the session row expires.
                let session = session.clone();
                let ttl = *ttl;
                tokio::spawn(async move {
                    tokio::time::sleep(ttl).await;
                    if let Err(error) = session.expire_session().await {
                        tracing::warn!(%error, "expiring the paused session failed");
                    }
                });
                "its session row stops being renewed and expires one TTL later by the database's clock"
            }
        }
    }
}

impl Lock for AnySession {
    type Guard = AnyGuard;

    async fn acquire(&self, name: &LockName, mode: Mode) -> Result<AnyGuard, LockError> {
        Ok(match self {
            AnySession::Embedded(session) => AnyGuard::Embedded(session.acquire(name, mode).await?),
            AnySession::Etcd(session) => AnyGuard::Etcd(session.acquire(name, mode).await?),
            AnySession::Redis(session) => AnyGuard::Redis(session.acquire(name, mode).await?),
            AnySession::Sql(session, _) => AnyGuard::Sql(session.acquire(name, mode).await?),
        })
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        mode: Mode,
    ) -> Result<Option<AnyGuard>, LockError> {
        Ok(match self {
            AnySession::Embedded(session) => session
                .try_acquire(name, mode)
                .await?
                .map(AnyGuard::Embedded),
            AnySession::Etcd(session) => session.try_acquire(name, mode).await?.map(AnyGuard::Etcd),
            AnySession::Redis(session) => {
                session.try_acquire(name, mode).await?.map(AnyGuard::Redis)
            }
            AnySession::Sql(session, _) => {
                session.try_acquire(name, mode).await?.map(AnyGuard::Sql)
            }
        })
    }
}

/// A guard from any backend.
#[derive(Debug)]
pub(crate) enum AnyGuard {
    Embedded(EmbeddedGuard),
    Etcd(EtcdGuard),
    Redis(RedisGuard),
    Sql(SqlGuard),
}

impl LockGuard for AnyGuard {
    fn issued(&self) -> &Sequencer {
        match self {
            AnyGuard::Embedded(guard) => guard.issued(),
            AnyGuard::Etcd(guard) => guard.issued(),
            AnyGuard::Redis(guard) => guard.issued(),
            AnyGuard::Sql(guard) => guard.issued(),
        }
    }

    fn lease(&self) -> LeaseWatch {
        match self {
            AnyGuard::Embedded(guard) => guard.lease(),
            AnyGuard::Etcd(guard) => guard.lease(),
            AnyGuard::Redis(guard) => guard.lease(),
            AnyGuard::Sql(guard) => guard.lease(),
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            AnyGuard::Embedded(guard) => guard.release().await,
            AnyGuard::Etcd(guard) => guard.release().await,
            AnyGuard::Redis(guard) => guard.release().await,
            AnyGuard::Sql(guard) => guard.release().await,
        }
    }
}

/// Session options for a demo client with lease `ttl`: renewals four times
/// per TTL, a safety margin of a fifth of it.
pub(crate) fn session_options(ttl: Duration) -> SessionOptions {
    SessionOptions::default()
        .with_ttl(ttl)
        .with_keepalive_interval(ttl / 4)
        .with_safety_margin(ttl / 5)
}

/// A tag unique to this demo invocation, for key prefixes.
pub(crate) fn invocation_tag() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis())
        .unwrap_or(0);
    format!("{}-{millis}", std::process::id())
}
