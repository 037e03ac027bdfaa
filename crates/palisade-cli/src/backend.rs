//! Choosing a lock backend at runtime: the flags, and [`AnyLock`].
//!
//! This is the one place in Palisade that picks a backend while running
//! (everywhere else is generic over `L: Lock`). The choice is an enum, not
//! a `dyn Lock`: the trait's futures are `impl Future + Send`, which a trait
//! object cannot name, and two variants are cheap to match.

// A build without backends keeps the types (so the rest compiles) but can
// never construct a session.
#![cfg_attr(
    not(any(feature = "etcd", feature = "redis", feature = "sql")),
    allow(unused_variables, dead_code)
)]

use std::time::Duration;

use clap::{Args, ValueEnum};
use palisade_core::{
    Generation, LeaseWatch, Lock, LockError, LockGuard, LockName, Mode, Sequencer, SessionOptions,
    Signer, SigningKey,
};

use crate::duration;
use crate::inspector::AnyInspector;
use crate::signing::SigningArgs;

/// Which lock service to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BackendKind {
    /// etcd v3: generations are raft-committed revisions.
    Etcd,
    /// Redis (single server): generations minted in the lock script.
    Redis,
    /// Redlock over several independent Redis masters (one `--redis-url`
    /// each): a grant on a majority, generations minted by a quorum.
    Redlock,
    /// PostgreSQL: a lock table whose generation column never goes back.
    Postgres,
    /// MariaDB (or MySQL): the same lock table.
    #[value(name = "mariadb", alias = "mysql")]
    MariaDb,
    /// The in-process backend. It cannot exclude another process, so the
    /// command line refuses it; it exists for the demo and for tests.
    Embedded,
}

impl BackendKind {
    fn name(self) -> &'static str {
        match self {
            BackendKind::Etcd => "etcd",
            BackendKind::Redis => "redis",
            BackendKind::Redlock => "redlock",
            BackendKind::Postgres => "postgres",
            BackendKind::MariaDb => "mariadb",
            BackendKind::Embedded => "embedded",
        }
    }

    /// The SQL backend a `--database-url` names by its scheme.
    fn of_database_url(url: &str) -> anyhow::Result<BackendKind> {
        match url.split_once("://").map(|(scheme, _)| scheme) {
            Some("postgres" | "postgresql") => Ok(BackendKind::Postgres),
            Some("mysql" | "mariadb") => Ok(BackendKind::MariaDb),
            _ => anyhow::bail!(
                "--database-url {}: expected postgres://USER@HOST:PORT/DB or mysql://USER@HOST:PORT/DB",
                redact(url)
            ),
        }
    }

    fn is_sql(self) -> bool {
        matches!(self, BackendKind::Postgres | BackendKind::MariaDb)
    }
}

/// `--redis-generations`: how the Redis backend mints generations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RedisGenerations {
    /// max(counter + 1, Redis's time in µs): the default.
    Clock,
    /// A plain counter: small numbers, lost with Redis's data.
    Counter,
}

/// `palisade raise-floor`'s settings for the lock service.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FloorOptions {
    /// etcd: the largest revision gap closed with puts.
    pub(crate) max_gap: u64,
}

/// Where a floor raise stands (etcd's puts can take a while).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FloorStep {
    /// The revision reached so far.
    pub(crate) revision: u64,
    /// The revision to reach.
    pub(crate) target: u64,
    /// Puts acknowledged.
    pub(crate) puts: u64,
}

/// What a floor raise did: the floor before and after. The next holder's
/// generation is above `after`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FloorRaised {
    /// `etcd`, `redis`, `postgres` or `mariadb`.
    pub(crate) backend: &'static str,
    /// The floor before (etcd: the store revision; Redis: the lock's
    /// counter, 0 when it was lost; SQL: the lock row's generation).
    pub(crate) before: u64,
    /// The floor after.
    pub(crate) after: u64,
}

/// Where the lock service is, and the session settings.
///
/// Every flag has an environment variable, so a shell profile or a unit
/// file can set the backend once for every `palisade lock`.
#[derive(Debug, Clone, Args)]
pub(crate) struct BackendArgs {
    /// The lock service. Without it: the one whose endpoint is set (etcd
    /// endpoints, a Redis URL, or a database URL, whose scheme picks
    /// PostgreSQL or MariaDB).
    #[arg(long, env = "PALISADE_BACKEND", value_enum)]
    backend: Option<BackendKind>,

    /// etcd endpoints, comma-separated (`host:port` or `http://host:port`).
    #[arg(long, env = "PALISADE_ETCD_ENDPOINTS", value_name = "ENDPOINTS")]
    etcd_endpoints: Option<String>,

    /// Redis URL (`redis://[user:password@]host:port[/db]`). Repeat it
    /// for `--backend redlock`, once per independent master.
    #[arg(
        long,
        env = "PALISADE_REDIS_URL",
        hide_env_values = true,
        value_name = "URL",
        action = clap::ArgAction::Append
    )]
    redis_url: Vec<String>,

    /// CA certificate (PEM) to trust for a `rediss://` server, instead of
    /// the system's trust store.
    #[arg(long, env = "PALISADE_REDIS_CA_CERT", value_name = "PEM")]
    redis_ca_cert: Option<std::path::PathBuf>,

    /// Database URL for `--backend postgres|mariadb`
    /// (`postgres://user[:password]@host:port/db` or
    /// `mysql://user[:password]@host:port/db`). The lock tables are created
    /// if missing.
    #[arg(
        long,
        env = "PALISADE_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    database_url: Option<String>,

    /// How Redis mints generations: `clock` takes max(counter + 1, Redis's
    /// time in µs) and survives a restart without persistence; `counter`
    /// counts 1, 2, 3, ... and starts over when Redis loses its data
    /// (`palisade raise-floor` recovers). Use one scheme per lock.
    #[arg(
        long,
        env = "PALISADE_REDIS_GENERATIONS",
        value_enum,
        default_value = "clock"
    )]
    redis_generations: RedisGenerations,

    /// Lease TTL: how long the lock service keeps the lock after this
    /// process stops renewing it (etcd rounds up to whole seconds, at least
    /// 2 s).
    #[arg(long, env = "PALISADE_LOCK_TTL", default_value = "10s", value_parser = duration::parse, value_name = "DURATION")]
    ttl: Duration,

    /// Chubby's lock-delay: after a lease is lost without a release, nobody
    /// gets the lock for this long.
    #[arg(long, env = "PALISADE_LOCK_DELAY", default_value = "0s", value_parser = duration::parse, value_name = "DURATION")]
    lock_delay: Duration,

    /// Key prefix in the lock service (default `/palisade/locks` for etcd,
    /// `palisade:` for Redis). A live-checking server must use the same.
    #[arg(long, env = "PALISADE_LOCK_PREFIX", value_name = "PREFIX")]
    prefix: Option<String>,

    #[command(flatten)]
    signing: SigningArgs,
}

/// What the lock side stamps on its sequencers: the issuer, and the key that
/// signs them (none: unsigned).
#[derive(Debug, Clone, Default)]
struct Stamp {
    /// `--issuer`, if given; otherwise the backend's own id.
    issuer: Option<String>,
    /// The key from `--sign-key-file` / `--sign-key-id`.
    key: Option<SigningKey>,
}

impl Stamp {
    /// A signer for `issuer` with `key`; an issuer a sequencer cannot carry
    /// is reported against its flag.
    fn signer(issuer: &str, key: SigningKey) -> anyhow::Result<Signer> {
        Signer::new(issuer, key).map_err(|error| anyhow::anyhow!("--issuer {issuer:?}: {error}"))
    }
}

impl BackendArgs {
    /// The backend these flags select, or why none can be used.
    fn kind(&self) -> anyhow::Result<BackendKind> {
        let kind = match self.backend {
            Some(kind) => kind,
            None => {
                let mut configured = Vec::new();
                if self.etcd_endpoints.is_some() {
                    configured.push(BackendKind::Etcd);
                }
                match self.redis_url.len() {
                    0 => {}
                    1 => configured.push(BackendKind::Redis),
                    _ => configured.push(BackendKind::Redlock),
                }
                if let Some(url) = &self.database_url {
                    configured.push(BackendKind::of_database_url(url)?);
                }
                match configured.as_slice() {
                    [only] => *only,
                    [] => anyhow::bail!(
                        "no lock service configured: pass --backend etcd --etcd-endpoints HOST:PORT, --backend redis --redis-url redis://HOST:PORT or --backend postgres|mariadb --database-url URL (or set PALISADE_BACKEND and PALISADE_ETCD_ENDPOINTS / PALISADE_REDIS_URL / PALISADE_DATABASE_URL)"
                    ),
                    _ => anyhow::bail!(
                        "more than one lock service is set (etcd endpoints, a Redis URL, a database URL); choose one with --backend etcd|redis|postgres|mariadb (or PALISADE_BACKEND)"
                    ),
                }
            }
        };
        if kind == BackendKind::Embedded {
            anyhow::bail!(
                "the embedded backend lives inside one process, so a lock taken here would exclude no other process; use --backend etcd, redis, postgres or mariadb"
            );
        }
        Ok(kind)
    }

    /// The session settings.
    fn options(&self) -> anyhow::Result<SessionOptions> {
        let options = SessionOptions::default()
            .with_ttl(self.ttl)
            .with_lock_delay(self.lock_delay);
        options
            .validate()
            .map_err(|reason| anyhow::anyhow!("--ttl {:?}: {reason}", self.ttl))?;
        Ok(options)
    }

    /// Raises the lock service's generation floor for `name` so that the
    /// next grant is above `above` (`palisade raise-floor`).
    pub(crate) async fn raise_floor(
        &self,
        name: &LockName,
        above: u64,
        options: FloorOptions,
        progress: &mut (dyn FnMut(FloorStep) + Send),
    ) -> anyhow::Result<FloorRaised> {
        match self.kind()? {
            BackendKind::Etcd => {
                let endpoints = self.etcd_endpoints.as_deref().ok_or_else(|| {
                    anyhow::anyhow!(
                        "--backend etcd needs --etcd-endpoints (or PALISADE_ETCD_ENDPOINTS)"
                    )
                })?;
                raise_etcd_floor(endpoints, self.prefix.as_deref(), above, options, progress).await
            }
            BackendKind::Redis => {
                let url = self.single_redis_url()?;
                let ca_pem = read_redis_ca(self.redis_ca_cert.as_deref())?;
                let _ = (options, progress);
                raise_redis_floor(url, self.prefix.as_deref(), ca_pem, name, above).await
            }
            BackendKind::Redlock => anyhow::bail!(
                "raise-floor is not available for --backend redlock: each grant takes max(floor + 1, the clock in µs), which passes a mark minted earlier by the clock"
            ),
            kind @ (BackendKind::Postgres | BackendKind::MariaDb) => {
                let _ = (options, progress);
                let config = self.sql_config(kind)?;
                raise_sql_floor(kind, config, name, above).await
            }
            BackendKind::Embedded => unreachable!("refused by kind()"),
        }
    }

    /// Connects to the chosen lock service and opens one session. A
    /// signing key is read first, so a bad key file fails before anything
    /// is asked of the lock service.
    pub(crate) async fn connect(&self) -> anyhow::Result<AnyLock> {
        let kind = self.kind()?;
        let options = self.options()?;
        let stamp = Stamp {
            issuer: self.signing.issuer.clone(),
            key: self.signing.signing_key()?,
        };
        match kind {
            BackendKind::Etcd => {
                let endpoints = self.etcd_endpoints.as_deref().ok_or_else(|| {
                    anyhow::anyhow!(
                        "--backend etcd needs --etcd-endpoints (or PALISADE_ETCD_ENDPOINTS)"
                    )
                })?;
                connect_etcd(endpoints, self.prefix.as_deref(), options, stamp).await
            }
            BackendKind::Redis => {
                let url = self.single_redis_url()?;
                let ca_pem = read_redis_ca(self.redis_ca_cert.as_deref())?;
                let scheme = self.redis_generations;
                connect_redis(url, self.prefix.as_deref(), ca_pem, scheme, options, stamp).await
            }
            BackendKind::Redlock => {
                if self.redis_url.len() < 3 {
                    anyhow::bail!(
                        "--backend redlock needs at least 3 independent masters, one --redis-url each (got {})",
                        self.redis_url.len()
                    );
                }
                let ca_pem = read_redis_ca(self.redis_ca_cert.as_deref())?;
                connect_redlock(
                    &self.redis_url,
                    self.prefix.as_deref(),
                    ca_pem,
                    options,
                    stamp,
                )
                .await
            }
            kind @ (BackendKind::Postgres | BackendKind::MariaDb) => {
                let config = self.sql_config(kind)?;
                connect_sql(kind, config, options, stamp).await
            }
            BackendKind::Embedded => unreachable!("refused by kind()"),
        }
    }

    /// Connects the chosen lock service's inspection API (`palisade locks`,
    /// `palisade unlock --force`): no session, no signing key.
    pub(crate) async fn connect_inspector(&self) -> anyhow::Result<AnyInspector> {
        match self.kind()? {
            BackendKind::Etcd => {
                let endpoints = self.etcd_endpoints.as_deref().ok_or_else(|| {
                    anyhow::anyhow!(
                        "--backend etcd needs --etcd-endpoints (or PALISADE_ETCD_ENDPOINTS)"
                    )
                })?;
                AnyInspector::etcd(endpoints, self.prefix.as_deref()).await
            }
            BackendKind::Redis => {
                let url = self.single_redis_url()?;
                let ca_pem = read_redis_ca(self.redis_ca_cert.as_deref())?;
                AnyInspector::redis(url, self.prefix.as_deref(), ca_pem).await
            }
            kind @ (BackendKind::Postgres | BackendKind::MariaDb) => {
                AnyInspector::sql(kind, self.sql_config(kind)?).await
            }
            BackendKind::Redlock => anyhow::bail!(
                "`palisade locks` and `unlock --force` do not support --backend redlock yet; inspect each master with --backend redis"
            ),
            BackendKind::Embedded => unreachable!("refused by kind()"),
        }
    }

    /// The one `--redis-url` of `--backend redis`.
    fn single_redis_url(&self) -> anyhow::Result<&str> {
        match self.redis_url.as_slice() {
            [url] => Ok(url),
            [] => anyhow::bail!("--backend redis needs --redis-url (or PALISADE_REDIS_URL)"),
            _ => anyhow::bail!(
                "--backend redis takes one --redis-url; for several independent masters use --backend redlock"
            ),
        }
    }

    /// `--database-url`, checked against the `--backend` it is for.
    fn sql_config(&self, kind: BackendKind) -> anyhow::Result<SqlTarget> {
        let url = self.database_url.as_deref().ok_or_else(|| {
            anyhow::anyhow!(
                "--backend {} needs --database-url (or PALISADE_DATABASE_URL)",
                kind.name()
            )
        })?;
        sql_target(kind, url, self.prefix.as_deref())
    }
}

/// A checked `--database-url`.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "sql"), allow(dead_code))]
pub(crate) struct SqlTarget {
    pub(crate) url: String,
}

/// Checks that `url` is a database of `kind`. The SQL backend keeps every
/// lock in fixed tables, so a key prefix is refused rather than ignored:
/// two deployments that meant to be apart would share locks.
pub(crate) fn sql_target(
    kind: BackendKind,
    url: &str,
    prefix: Option<&str>,
) -> anyhow::Result<SqlTarget> {
    debug_assert!(kind.is_sql());
    let named = BackendKind::of_database_url(url)?;
    if named != kind {
        anyhow::bail!(
            "--backend {} with a {} database URL ({}); give a URL of that database or --backend {}",
            kind.name(),
            named.name(),
            redact(url),
            named.name()
        );
    }
    if let Some(prefix) = prefix {
        anyhow::bail!(
            "--prefix {prefix:?} does not apply to --backend {}: its locks live in fixed tables (use a separate database to keep deployments apart)",
            kind.name()
        );
    }
    Ok(SqlTarget {
        url: url.to_owned(),
    })
}

#[cfg(feature = "sql")]
pub(crate) fn sql_unreachable(url: &str, error: &palisade_lock_sql::SqlLockError) -> anyhow::Error {
    let reason = match error {
        palisade_lock_sql::SqlLockError::Lock(error) => lock_error_text(error),
        other => cause_chain(other),
    };
    anyhow::anyhow!(
        "cannot connect to the database at {}: {reason}",
        redact(url)
    )
}

/// A default issuer for signed SQL sequencers: the database's address,
/// without credentials (`postgres@127.0.0.1:5432/app`). The live check
/// derives the same from its own URL.
pub(crate) fn sql_default_issuer(kind: BackendKind, url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let address = rest.rsplit_once('@').map_or(rest, |(_, address)| address);
    let address = address
        .split_once('?')
        .map_or(address, |(address, _)| address);
    format!("{}@{address}", kind.name())
}

#[cfg(feature = "sql")]
async fn connect_sql(
    kind: BackendKind,
    target: SqlTarget,
    options: SessionOptions,
    stamp: Stamp,
) -> anyhow::Result<AnyLock> {
    use palisade_lock_sql::{SqlConfig, SqlLockClient};
    let mut config = SqlConfig::new(target.url.clone());
    match (stamp.issuer, stamp.key) {
        (issuer, Some(key)) => {
            let issuer = issuer.unwrap_or_else(|| sql_default_issuer(kind, &target.url));
            config = config.with_signer(Stamp::signer(&issuer, key)?);
        }
        (Some(issuer), None) => anyhow::bail!(
            "--issuer {issuer:?} on --backend {}: the SQL backend stamps an issuer only on signed sequencers; add --sign-key-file",
            kind.name()
        ),
        (None, None) => {}
    }
    let client = SqlLockClient::connect(config)
        .await
        .map_err(|error| sql_unreachable(&target.url, &error))?;
    let session = client
        .session(options)
        .await
        .map_err(|error| sql_unreachable(&target.url, &error))?;
    Ok(AnyLock::Sql(session, kind))
}

#[cfg(not(feature = "sql"))]
async fn connect_sql(
    _kind: BackendKind,
    _target: SqlTarget,
    _options: SessionOptions,
    _stamp: Stamp,
) -> anyhow::Result<AnyLock> {
    anyhow::bail!("this build of palisade has no SQL support (feature `sql`)")
}

#[cfg(feature = "sql")]
async fn raise_sql_floor(
    kind: BackendKind,
    target: SqlTarget,
    name: &LockName,
    above: u64,
) -> anyhow::Result<FloorRaised> {
    use palisade_lock_sql::{SqlConfig, SqlLockClient};
    let client = SqlLockClient::connect(SqlConfig::new(target.url.clone()))
        .await
        .map_err(|error| sql_unreachable(&target.url, &error))?;
    let raised = client.raise_floor(name, above).await.map_err(|error| {
        anyhow::anyhow!(
            "raising the floor on the database at {} failed (nothing was changed; run it again): {}",
            redact(&target.url),
            match &error {
                palisade_lock_sql::SqlLockError::Lock(error) => lock_error_text(error),
                other => cause_chain(other),
            }
        )
    })?;
    Ok(FloorRaised {
        backend: kind.name(),
        before: raised.before,
        after: raised.after,
    })
}

#[cfg(not(feature = "sql"))]
async fn raise_sql_floor(
    _kind: BackendKind,
    _target: SqlTarget,
    _name: &LockName,
    _above: u64,
) -> anyhow::Result<FloorRaised> {
    anyhow::bail!("this build of palisade has no SQL support (feature `sql`)")
}

#[cfg(feature = "etcd")]
async fn connect_etcd(
    endpoints: &str,
    prefix: Option<&str>,
    options: SessionOptions,
    stamp: Stamp,
) -> anyhow::Result<AnyLock> {
    use palisade_lock_etcd::{EtcdConfig, EtcdLock, EtcdLockClient};
    let unreachable = |error: LockError| {
        anyhow::anyhow!(
            "cannot open a session on etcd at {endpoints}: {}",
            lock_error_text(&error)
        )
    };
    let mut config = EtcdConfig::from_endpoint_list(endpoints)?;
    if let Some(prefix) = prefix {
        config = config.with_prefix(prefix)?;
    }
    if let Some(issuer) = &stamp.issuer {
        config = config.with_issuer(issuer)?;
    }
    if let Some(key) = stamp.key {
        // Without --issuer, sign as the cluster itself (`etcd-<cluster
        // id>`), the id a live check derives too; learning it takes one
        // short connection.
        let issuer = match stamp.issuer {
            Some(issuer) => issuer,
            None => EtcdLockClient::connect(config.clone())
                .await
                .map_err(unreachable)?
                .issuer()
                .to_owned(),
        };
        config = config.with_signer(Stamp::signer(&issuer, key)?);
    }
    let lock = EtcdLock::connect(config, options)
        .await
        .map_err(unreachable)?;
    Ok(AnyLock::Etcd(lock))
}

#[cfg(not(feature = "etcd"))]
async fn connect_etcd(
    _endpoints: &str,
    _prefix: Option<&str>,
    _options: SessionOptions,
    _stamp: Stamp,
) -> anyhow::Result<AnyLock> {
    anyhow::bail!("this build of palisade has no etcd support (feature `etcd`)")
}

/// The PEM text of `--redis-ca-cert`, read before anything is asked of
/// Redis so a wrong path fails with one clear line.
pub(crate) fn read_redis_ca(path: Option<&std::path::Path>) -> anyhow::Result<Option<Vec<u8>>> {
    path.map(|path| {
        std::fs::read(path).map_err(|error| {
            anyhow::anyhow!("cannot read --redis-ca-cert {}: {error}", path.display())
        })
    })
    .transpose()
}

#[cfg(feature = "etcd")]
async fn raise_etcd_floor(
    endpoints: &str,
    prefix: Option<&str>,
    above: u64,
    options: FloorOptions,
    progress: &mut (dyn FnMut(FloorStep) + Send),
) -> anyhow::Result<FloorRaised> {
    use palisade_lock_etcd::{EtcdConfig, EtcdLockClient, RaiseFloorError, RaiseFloorOptions};
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
    let floor_options = RaiseFloorOptions {
        max_gap: options.max_gap,
        ..RaiseFloorOptions::default()
    };
    let raised = connection
        .raise_floor(above, floor_options, |step| {
            progress(FloorStep {
                revision: step.revision,
                target: step.target,
                puts: step.puts,
            })
        })
        .await
        .map_err(|error| match error {
            RaiseFloorError::Lock(error) => anyhow::anyhow!(
                "raising the floor on etcd at {endpoints} failed (the revision may have moved part of the way; run it again): {}",
                lock_error_text(&error)
            ),
            RaiseFloorError::GapTooLarge { .. } => {
                anyhow::anyhow!("{error}; `--max-gap` sets the limit")
            }
            other => anyhow::anyhow!("{other}"),
        })?;
    Ok(FloorRaised {
        backend: BackendKind::Etcd.name(),
        before: raised.before,
        after: raised.after,
    })
}

#[cfg(not(feature = "etcd"))]
async fn raise_etcd_floor(
    _endpoints: &str,
    _prefix: Option<&str>,
    _above: u64,
    _options: FloorOptions,
    _progress: &mut (dyn FnMut(FloorStep) + Send),
) -> anyhow::Result<FloorRaised> {
    anyhow::bail!("this build of palisade has no etcd support (feature `etcd`)")
}

#[cfg(feature = "redis")]
async fn raise_redis_floor(
    url: &str,
    prefix: Option<&str>,
    ca_pem: Option<Vec<u8>>,
    name: &LockName,
    above: u64,
) -> anyhow::Result<FloorRaised> {
    use palisade_lock_redis::RedisLockClient;
    let config = redis_config(url, prefix, ca_pem);
    let client = RedisLockClient::connect(config)
        .await
        .map_err(|error| redis_unreachable(url, &error))?;
    let failed = |error: LockError| {
        anyhow::anyhow!(
            "raising the floor of lock `{name}` on Redis at {} failed: {}",
            redact(url),
            lock_error_text(&error)
        )
    };
    let before = client
        .generation_counter(name)
        .await
        .map_err(failed)?
        .unwrap_or(0);
    let after = client.raise_floor(name, above).await.map_err(failed)?;
    Ok(FloorRaised {
        backend: BackendKind::Redis.name(),
        before,
        after,
    })
}

#[cfg(not(feature = "redis"))]
async fn raise_redis_floor(
    _url: &str,
    _prefix: Option<&str>,
    _ca_pem: Option<Vec<u8>>,
    _name: &LockName,
    _above: u64,
) -> anyhow::Result<FloorRaised> {
    anyhow::bail!("this build of palisade has no Redis support (feature `redis`)")
}

#[cfg(feature = "redis")]
pub(crate) fn redis_config(
    url: &str,
    prefix: Option<&str>,
    ca_pem: Option<Vec<u8>>,
) -> palisade_lock_redis::RedisConfig {
    let mut config = palisade_lock_redis::RedisConfig::new(url);
    if let Some(prefix) = prefix {
        config = config.with_key_prefix(prefix);
    }
    if let Some(pem) = ca_pem {
        config = config.with_tls_root_cert_pem(pem);
    }
    config
}

#[cfg(feature = "redis")]
pub(crate) fn redis_unreachable(
    url: &str,
    error: &palisade_lock_redis::RedisLockError,
) -> anyhow::Error {
    let reason = match error {
        palisade_lock_redis::RedisLockError::Lock(error) => lock_error_text(error),
        other => cause_chain(other),
    };
    anyhow::anyhow!("cannot connect to Redis at {}: {reason}", redact(url))
}

#[cfg(feature = "redis")]
async fn connect_redis(
    url: &str,
    prefix: Option<&str>,
    ca_pem: Option<Vec<u8>>,
    scheme: RedisGenerations,
    options: SessionOptions,
    stamp: Stamp,
) -> anyhow::Result<AnyLock> {
    use palisade_lock_redis::{GenerationScheme, RedisLockClient, RedisLockError};
    let unreachable = |error: RedisLockError| redis_unreachable(url, &error);
    let mut config = redis_config(url, prefix, ca_pem).with_generation_scheme(match scheme {
        RedisGenerations::Clock => GenerationScheme::ServerClock,
        RedisGenerations::Counter => GenerationScheme::Counter,
    });
    if let Some(issuer) = &stamp.issuer {
        config = config.with_issuer(issuer);
    }
    if let Some(key) = stamp.key {
        // Without --issuer, sign as the deployment itself
        // (`redis@<host:port>`), the id a live check derives too.
        let issuer = match stamp.issuer {
            Some(issuer) => issuer,
            None => RedisLockClient::connect(config.clone())
                .await
                .map_err(unreachable)?
                .issuer()
                .to_owned(),
        };
        config = config.with_signer(Stamp::signer(&issuer, key)?);
    }
    let client = RedisLockClient::connect(config)
        .await
        .map_err(unreachable)?;
    Ok(AnyLock::Redis(client.session(options)?))
}

#[cfg(feature = "redis")]
async fn connect_redlock(
    urls: &[String],
    prefix: Option<&str>,
    ca_pem: Option<Vec<u8>>,
    options: SessionOptions,
    stamp: Stamp,
) -> anyhow::Result<AnyLock> {
    use palisade_lock_redis::{RedlockClient, RedlockConfig};
    let mut config = RedlockConfig::from_masters(
        urls.iter()
            .map(|url| redis_config(url, prefix, ca_pem.clone())),
    );
    if let Some(issuer) = &stamp.issuer {
        config = config.with_issuer(issuer);
    }
    let unreachable = |error: palisade_lock_redis::RedisLockError| {
        let masters: Vec<String> = urls.iter().map(|url| redact(url)).collect();
        let reason = match &error {
            palisade_lock_redis::RedisLockError::Lock(error) => lock_error_text(error),
            other => cause_chain(other),
        };
        anyhow::anyhow!(
            "cannot reach a majority of the Redlock masters {}: {reason}",
            masters.join(", ")
        )
    };
    if let Some(key) = stamp.key {
        // Without --issuer, sign as the deployment itself
        // (`redlock@<host:port>,...`).
        let issuer = match stamp.issuer {
            Some(issuer) => issuer,
            None => RedlockClient::connect(config.clone())
                .await
                .map_err(unreachable)?
                .issuer()
                .to_owned(),
        };
        config = config.with_signer(Stamp::signer(&issuer, key)?);
    }
    let client = RedlockClient::connect(config).await.map_err(unreachable)?;
    Ok(AnyLock::Redlock(client.session(options)?))
}

#[cfg(not(feature = "redis"))]
async fn connect_redlock(
    _urls: &[String],
    _prefix: Option<&str>,
    _ca_pem: Option<Vec<u8>>,
    _options: SessionOptions,
    _stamp: Stamp,
) -> anyhow::Result<AnyLock> {
    anyhow::bail!("this build of palisade has no Redis support (feature `redis`)")
}

#[cfg(not(feature = "redis"))]
async fn connect_redis(
    _url: &str,
    _prefix: Option<&str>,
    _ca_pem: Option<Vec<u8>>,
    _scheme: RedisGenerations,
    _options: SessionOptions,
    _stamp: Stamp,
) -> anyhow::Result<AnyLock> {
    anyhow::bail!("this build of palisade has no Redis support (feature `redis`)")
}

/// A lock error as one readable line.
///
/// Typed errors print as they are. For `Unavailable` and `Backend`, whose
/// source is the client library's error (tonic's `Display` embeds a debug
/// dump of its transport error), only the innermost cause is shown:
/// "Connection refused (os error 111)".
pub(crate) fn lock_error_text(error: &LockError) -> String {
    match error {
        LockError::Unavailable { backend, source } => {
            format!(
                "lock service {backend} is unavailable: {}",
                root_cause(source.as_ref())
            )
        }
        LockError::Backend { backend, source } => {
            format!(
                "lock service {backend} failed: {}",
                root_cause(source.as_ref())
            )
        }
        other => other.to_string(),
    }
}

/// The innermost cause of `error`.
pub(crate) fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    loop {
        #[cfg(feature = "etcd")]
        if let Some(text) = etcd_status_text(current) {
            return text;
        }
        match current.source() {
            Some(source) => current = source,
            None => return current.to_string(),
        }
    }
}

/// etcd-client's gRPC error as `<status message>: <innermost cause>`,
/// e.g. "tcp connect error: Connection refused (os error 111)". Its own
/// `Display` prints the transport error with `{:?}`, and it does not expose
/// the status as its `source`.
#[cfg(feature = "etcd")]
fn etcd_status_text(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let etcd_client::Error::GRpcStatus(status) = error.downcast_ref::<etcd_client::Error>()? else {
        return None;
    };
    let message = status.message();
    let message = if message.is_empty() {
        format!("{:?}", status.code())
    } else {
        message.to_owned()
    };
    Some(match std::error::Error::source(status) {
        Some(source) => {
            let cause = root_cause(source);
            if cause.contains(&message) {
                cause
            } else {
                format!("{message}: {cause}")
            }
        }
        None => message,
    })
}

/// An error and its sources, joined by `: `, with repeats dropped (client
/// libraries often repeat their source in their own message).
pub(crate) fn cause_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(error) = current {
        let text = error.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        current = error.source();
    }
    parts.join(": ")
}

/// A URL with any password replaced by `***`, for messages.
#[cfg_attr(not(any(feature = "redis", feature = "sql")), allow(dead_code))]
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..])
                }
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// How long an exiting `palisade lock` leaves the Redis backend to remove
/// an abandoned queue entry (one round trip, normally about a millisecond).
#[cfg(feature = "redis")]
const REDIS_CLEANUP_GRACE: Duration = Duration::from_millis(200);

/// How long an exiting `palisade lock` leaves the SQL backend to end an
/// abandoned session's row (one statement).
#[cfg(feature = "sql")]
const SQL_CLEANUP_GRACE: Duration = Duration::from_millis(200);

/// A lock session on whichever backend the flags chose.
#[derive(Debug)]
pub(crate) enum AnyLock {
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
    /// A build without any backend feature has no sessions.
    #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
    Unsupported(std::convert::Infallible),
}

/// A hold on whichever backend granted it.
// One guard per `palisade lock` process: its size does not matter, and
// boxing it would only add a pointer to every use.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum AnyGuard {
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
    /// A build without any backend feature has no holds.
    #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
    Unsupported(std::convert::Infallible),
}

impl AnyLock {
    /// `etcd`, `redis`, `postgres` or `mariadb`.
    pub(crate) fn backend_name(&self) -> &'static str {
        match self {
            #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
            AnyLock::Unsupported(never) => match *never {},
            #[cfg(feature = "etcd")]
            AnyLock::Etcd(_) => BackendKind::Etcd.name(),
            #[cfg(feature = "redis")]
            AnyLock::Redis(_) => BackendKind::Redis.name(),
            #[cfg(feature = "redis")]
            AnyLock::Redlock(_) => BackendKind::Redlock.name(),
            #[cfg(feature = "sql")]
            AnyLock::Sql(_, kind) => kind.name(),
        }
    }

    /// Ends the session.
    ///
    /// For etcd this revokes the lease, which deletes any key the session
    /// still has (a waiter's place in a queue included) at once instead of
    /// one TTL later. A Redis session has nothing to end, but an abandoned
    /// acquire (Ctrl-C, `--wait` over) removes its queue entry in a
    /// background task: with `abandoned_attempt` this gives that task
    /// `REDIS_CLEANUP_GRACE` to finish before the process exits. Without
    /// it the entry would expire by itself, delaying the next waiter.
    pub(crate) async fn close(self, abandoned_attempt: bool) -> Result<(), LockError> {
        match self {
            #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
            AnyLock::Unsupported(never) => match never {},
            #[cfg(feature = "etcd")]
            AnyLock::Etcd(lock) => {
                let _ = abandoned_attempt;
                lock.close().await
            }
            #[cfg(feature = "redis")]
            AnyLock::Redis(_) | AnyLock::Redlock(_) => {
                if abandoned_attempt {
                    tokio::time::sleep(REDIS_CLEANUP_GRACE).await;
                }
                Ok(())
            }
            // Dropping the session ends its row (and with it any queue
            // entry) in a background task; an abandoned attempt gives that
            // task time to run, like Redis's cleanup.
            #[cfg(feature = "sql")]
            AnyLock::Sql(lock, _) => {
                drop(lock);
                if abandoned_attempt {
                    tokio::time::sleep(SQL_CLEANUP_GRACE).await;
                }
                Ok(())
            }
        }
    }
}

impl Lock for AnyLock {
    type Guard = AnyGuard;

    async fn acquire(&self, name: &LockName, mode: Mode) -> Result<AnyGuard, LockError> {
        match self {
            #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
            AnyLock::Unsupported(never) => match *never {},
            #[cfg(feature = "etcd")]
            AnyLock::Etcd(lock) => lock.acquire(name, mode).await.map(AnyGuard::Etcd),
            #[cfg(feature = "redis")]
            AnyLock::Redis(lock) => lock.acquire(name, mode).await.map(AnyGuard::Redis),
            #[cfg(feature = "redis")]
            AnyLock::Redlock(lock) => lock.acquire(name, mode).await.map(AnyGuard::Redlock),
            #[cfg(feature = "sql")]
            AnyLock::Sql(lock, _) => lock.acquire(name, mode).await.map(AnyGuard::Sql),
        }
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        mode: Mode,
    ) -> Result<Option<AnyGuard>, LockError> {
        match self {
            #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
            AnyLock::Unsupported(never) => match *never {},
            #[cfg(feature = "etcd")]
            AnyLock::Etcd(lock) => Ok(lock.try_acquire(name, mode).await?.map(AnyGuard::Etcd)),
            #[cfg(feature = "redis")]
            AnyLock::Redis(lock) => Ok(lock.try_acquire(name, mode).await?.map(AnyGuard::Redis)),
            #[cfg(feature = "redis")]
            AnyLock::Redlock(lock) => {
                Ok(lock.try_acquire(name, mode).await?.map(AnyGuard::Redlock))
            }
            #[cfg(feature = "sql")]
            AnyLock::Sql(lock, _) => Ok(lock.try_acquire(name, mode).await?.map(AnyGuard::Sql)),
        }
    }

    /// Delegates, so a backend that cleans up its queue entry before
    /// returning `Timeout` (etcd) keeps doing so.
    async fn acquire_timeout(
        &self,
        name: &LockName,
        mode: Mode,
        timeout: Duration,
    ) -> Result<AnyGuard, LockError> {
        match self {
            #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
            AnyLock::Unsupported(never) => match *never {},
            #[cfg(feature = "etcd")]
            AnyLock::Etcd(lock) => lock
                .acquire_timeout(name, mode, timeout)
                .await
                .map(AnyGuard::Etcd),
            #[cfg(feature = "redis")]
            AnyLock::Redis(lock) => lock
                .acquire_timeout(name, mode, timeout)
                .await
                .map(AnyGuard::Redis),
            #[cfg(feature = "redis")]
            AnyLock::Redlock(lock) => lock
                .acquire_timeout(name, mode, timeout)
                .await
                .map(AnyGuard::Redlock),
            #[cfg(feature = "sql")]
            AnyLock::Sql(lock, _) => lock
                .acquire_timeout(name, mode, timeout)
                .await
                .map(AnyGuard::Sql),
        }
    }
}

impl LockGuard for AnyGuard {
    fn issued(&self) -> &Sequencer {
        match self {
            #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
            AnyGuard::Unsupported(never) => match *never {},
            #[cfg(feature = "etcd")]
            AnyGuard::Etcd(guard) => guard.issued(),
            #[cfg(feature = "redis")]
            AnyGuard::Redis(guard) => guard.issued(),
            #[cfg(feature = "redis")]
            AnyGuard::Redlock(guard) => guard.issued(),
            #[cfg(feature = "sql")]
            AnyGuard::Sql(guard) => guard.issued(),
        }
    }

    fn lease(&self) -> LeaseWatch {
        match self {
            #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
            AnyGuard::Unsupported(never) => match *never {},
            #[cfg(feature = "etcd")]
            AnyGuard::Etcd(guard) => guard.lease(),
            #[cfg(feature = "redis")]
            AnyGuard::Redis(guard) => guard.lease(),
            #[cfg(feature = "redis")]
            AnyGuard::Redlock(guard) => guard.lease(),
            #[cfg(feature = "sql")]
            AnyGuard::Sql(guard) => guard.lease(),
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            #[cfg(not(any(feature = "etcd", feature = "redis", feature = "sql")))]
            AnyGuard::Unsupported(never) => match never {},
            #[cfg(feature = "etcd")]
            AnyGuard::Etcd(guard) => guard.release().await,
            #[cfg(feature = "redis")]
            AnyGuard::Redis(guard) => guard.release().await,
            #[cfg(feature = "redis")]
            AnyGuard::Redlock(guard) => guard.release().await,
            #[cfg(feature = "sql")]
            AnyGuard::Sql(guard) => guard.release().await,
        }
    }

    fn generation(&self) -> Generation {
        self.issued().generation()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        backend: BackendArgs,
    }

    fn flags(args: &[&str]) -> BackendArgs {
        Flags::try_parse_from(std::iter::once("palisade").chain(args.iter().copied()))
            .expect("flags parse")
            .backend
    }

    #[test]
    fn the_backend_follows_the_endpoint_given() {
        // Environment variables would leak into these cases: they only use
        // flags, and a test environment does not set PALISADE_BACKEND.
        if std::env::var_os("PALISADE_BACKEND").is_some() {
            return;
        }
        let etcd = flags(&["--etcd-endpoints", "127.0.0.1:2379"]);
        if std::env::var_os("PALISADE_REDIS_URL").is_none() {
            assert_eq!(etcd.kind().unwrap(), BackendKind::Etcd);
        }
        let redis = flags(&["--backend", "redis", "--redis-url", "redis://x"]);
        assert_eq!(redis.kind().unwrap(), BackendKind::Redis);
        if std::env::var_os("PALISADE_REDIS_URL").is_none()
            && std::env::var_os("PALISADE_ETCD_ENDPOINTS").is_none()
            && std::env::var_os("PALISADE_DATABASE_URL").is_none()
        {
            let masters = flags(&[
                "--redis-url",
                "redis://a",
                "--redis-url",
                "redis://b",
                "--redis-url",
                "redis://c",
            ]);
            assert_eq!(masters.kind().unwrap(), BackendKind::Redlock);
        }
    }

    #[test]
    fn redis_takes_one_url_and_redlock_at_least_three() {
        let two = flags(&[
            "--backend",
            "redis",
            "--redis-url",
            "redis://a",
            "--redis-url",
            "redis://b",
        ]);
        let error = two.single_redis_url().unwrap_err().to_string();
        assert!(error.contains("--backend redlock"), "{error}");
    }

    #[test]
    fn embedded_is_refused_with_the_reason() {
        let error = flags(&["--backend", "embedded"]).kind().unwrap_err();
        let text = error.to_string();
        assert!(text.contains("inside one process"), "{text}");
        assert!(text.contains("--backend etcd"), "{text}");
    }

    #[test]
    fn a_ttl_below_the_safety_margin_is_refused() {
        let error = flags(&["--backend", "redis", "--ttl", "400ms"])
            .options()
            .unwrap_err();
        assert!(error.to_string().contains("--ttl"), "{error}");
    }

    #[test]
    fn passwords_are_not_echoed() {
        assert_eq!(
            redact("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    }
}
