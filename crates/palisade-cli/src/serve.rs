//! `palisade serve`: the resource server, with an optional live check.

use std::io::Write as _;

use anyhow::Context;
use clap::{Args, ValueEnum};
use palisade_core::SharedLiveCheck;
use palisade_server::{ServerConfig, shutdown_signal};

use crate::backend::BackendKind;

/// Which lock service the live check asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LiveCheckKind {
    /// No live check: generations alone decide.
    None,
    /// Ask etcd whether the sequencer's holder key still exists.
    Etcd,
    /// Ask Redis whether the sequencer's hold is still there.
    Redis,
    /// Ask PostgreSQL whether the sequencer's holder row is there and its
    /// session unexpired.
    Postgres,
    /// Ask MariaDB (or MySQL), likewise.
    #[value(name = "mariadb", alias = "mysql")]
    MariaDb,
}

/// The resource server's flags, plus the live check.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    server: ServerConfig,

    /// Also ask the lock service, before applying a request, whether the
    /// sequencer's holder still holds the lock (refused with 409 `not_held`
    /// if not, 503 if the lock service cannot answer).
    #[arg(long, env = "PALISADE_LIVE_CHECK", value_enum, default_value_t = LiveCheckKind::None)]
    live_check: LiveCheckKind,

    /// etcd endpoints for `--live-check etcd`, comma-separated.
    #[arg(long, env = "PALISADE_ETCD_ENDPOINTS")]
    etcd_endpoints: Option<String>,

    /// Redis URL for `--live-check redis` (password and TLS in the URL).
    #[arg(long, env = "PALISADE_REDIS_URL", hide_env_values = true)]
    redis_url: Option<String>,

    /// CA certificate (PEM) to trust for a `rediss://` live check, instead
    /// of the system's trust store.
    #[arg(long, env = "PALISADE_REDIS_CA_CERT", value_name = "PEM")]
    redis_ca_cert: Option<std::path::PathBuf>,

    /// Database URL for `--live-check postgres|mariadb` (the lock side's
    /// `--database-url`).
    #[arg(
        long,
        env = "PALISADE_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    database_url: Option<String>,

    /// The key prefix the lock side uses (its `--prefix`), for the live
    /// check to find the holders' keys.
    #[arg(long, env = "PALISADE_LOCK_PREFIX", value_name = "PREFIX")]
    prefix: Option<String>,

    /// The issuer the lock side stamps on its sequencers (its `--issuer`);
    /// the live check answers `not_held` for any other issuer. Default: the
    /// only `--issuer` trusted by the server if exactly one is given,
    /// otherwise the id the lock service derives for itself.
    #[arg(long, env = "PALISADE_LIVE_CHECK_ISSUER", value_name = "ID")]
    live_check_issuer: Option<String>,
}

impl ServeArgs {
    /// The issuer the live check accepts, if not the lock service's own id.
    fn live_check_issuer(&self) -> Option<&str> {
        self.live_check_issuer
            .as_deref()
            .or(match self.server.issuers.as_slice() {
                [only] => Some(only.as_str()),
                _ => None,
            })
    }
}

pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let live_check = live_check(&args).await?;
    let state = args.server.open_state(live_check)?;
    let listener = args.server.bind().await?;
    let address = listener.local_addr()?;
    {
        // One line scripts and tests can wait for (the port may be :0).
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "palisade-server listening on {address}")?;
        stdout.flush()?;
    }
    palisade_server::run(listener, state, shutdown_signal()).await?;
    Ok(())
}

async fn live_check(args: &ServeArgs) -> anyhow::Result<Option<SharedLiveCheck>> {
    match args.live_check {
        LiveCheckKind::None => Ok(None),
        LiveCheckKind::Etcd => {
            let endpoints = args
                .etcd_endpoints
                .as_deref()
                .context("--live-check etcd needs --etcd-endpoints (or PALISADE_ETCD_ENDPOINTS)")?;
            etcd_live_check(endpoints, args.prefix.as_deref(), args.live_check_issuer())
                .await
                .map(Some)
        }
        LiveCheckKind::Redis => {
            let url = args
                .redis_url
                .as_deref()
                .context("--live-check redis needs --redis-url (or PALISADE_REDIS_URL)")?;
            let ca_pem = crate::backend::read_redis_ca(args.redis_ca_cert.as_deref())?;
            redis_live_check(
                url,
                args.prefix.as_deref(),
                ca_pem,
                args.live_check_issuer(),
            )
            .await
            .map(Some)
        }
        LiveCheckKind::Postgres | LiveCheckKind::MariaDb => {
            let (kind, flag) = match args.live_check {
                LiveCheckKind::Postgres => (BackendKind::Postgres, "postgres"),
                _ => (BackendKind::MariaDb, "mariadb"),
            };
            let url = args.database_url.as_deref().with_context(|| {
                format!("--live-check {flag} needs --database-url (or PALISADE_DATABASE_URL)")
            })?;
            let target = crate::backend::sql_target(kind, url, args.prefix.as_deref())?;
            let issuer = args
                .live_check_issuer()
                .map(str::to_owned)
                .unwrap_or_else(|| crate::backend::sql_default_issuer(kind, url));
            sql_live_check(target, &issuer).await.map(Some)
        }
    }
}

#[cfg(feature = "sql")]
async fn sql_live_check(
    target: crate::backend::SqlTarget,
    issuer: &str,
) -> anyhow::Result<SharedLiveCheck> {
    use palisade_core::{Signer, SigningKey};
    use palisade_lock_sql::{SqlConfig, SqlLiveCheck};
    // The SQL live check compares a sequencer's issuer with its client's
    // signer. It never signs, so the signer carries the issuer with a key
    // of throwaway random bytes.
    let carrier = SigningKey::new("live-check", rand::random::<[u8; 32]>().to_vec())
        .and_then(|key| Signer::new(issuer, key))
        .map_err(|error| anyhow::anyhow!("--live-check-issuer {issuer:?}: {error}"))?;
    let config = SqlConfig::new(target.url.clone()).with_signer(carrier);
    let live_check = SqlLiveCheck::connect(config).await.map_err(|error| {
        anyhow::anyhow!(
            "cannot reach the database for the live check: {}",
            crate::backend::cause_chain(&error)
        )
    })?;
    tracing::info!(%issuer, "live check: SQL");
    Ok(std::sync::Arc::new(live_check))
}

#[cfg(not(feature = "sql"))]
async fn sql_live_check(
    _target: crate::backend::SqlTarget,
    _issuer: &str,
) -> anyhow::Result<SharedLiveCheck> {
    anyhow::bail!("this build of palisade has no SQL support (feature `sql`)")
}

#[cfg(feature = "etcd")]
async fn etcd_live_check(
    endpoints: &str,
    prefix: Option<&str>,
    issuer: Option<&str>,
) -> anyhow::Result<SharedLiveCheck> {
    use palisade_lock_etcd::{EtcdConfig, EtcdLiveCheck};
    let mut config = EtcdConfig::from_endpoint_list(endpoints)?;
    if let Some(prefix) = prefix {
        config = config.with_prefix(prefix)?;
    }
    if let Some(issuer) = issuer {
        config = config.with_issuer(issuer)?;
    }
    let live_check = EtcdLiveCheck::connect(config)
        .await
        .with_context(|| format!("cannot reach etcd at {endpoints} for the live check"))?;
    tracing::info!(%endpoints, "live check: etcd");
    Ok(live_check.into_shared())
}

#[cfg(not(feature = "etcd"))]
async fn etcd_live_check(
    _endpoints: &str,
    _prefix: Option<&str>,
    _issuer: Option<&str>,
) -> anyhow::Result<SharedLiveCheck> {
    anyhow::bail!("this build of palisade has no etcd support (feature `etcd`)")
}

#[cfg(feature = "redis")]
async fn redis_live_check(
    url: &str,
    prefix: Option<&str>,
    ca_pem: Option<Vec<u8>>,
    issuer: Option<&str>,
) -> anyhow::Result<SharedLiveCheck> {
    use palisade_lock_redis::{RedisConfig, RedisLiveCheck};
    let mut config = RedisConfig::new(url);
    if let Some(prefix) = prefix {
        config = config.with_key_prefix(prefix);
    }
    if let Some(pem) = ca_pem {
        config = config.with_tls_root_cert_pem(pem);
    }
    if let Some(issuer) = issuer {
        config = config.with_issuer(issuer);
    }
    let live_check = RedisLiveCheck::connect(config)
        .await
        .with_context(|| format!("cannot reach Redis at {url} for the live check"))?;
    tracing::info!(%url, "live check: redis");
    Ok(std::sync::Arc::new(live_check))
}

#[cfg(not(feature = "redis"))]
async fn redis_live_check(
    _url: &str,
    _prefix: Option<&str>,
    _ca_pem: Option<Vec<u8>>,
    _issuer: Option<&str>,
) -> anyhow::Result<SharedLiveCheck> {
    anyhow::bail!("this build of palisade has no Redis support (feature `redis`)")
}
