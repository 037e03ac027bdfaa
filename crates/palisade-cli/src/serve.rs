//! `palisade serve`: the resource server, with an optional live check.

use std::io::Write as _;

use anyhow::Context;
use clap::{Args, ValueEnum};
use palisade_core::SharedLiveCheck;
use palisade_server::{ServerConfig, shutdown_signal};

use palisade_lock_any::{BackendArgs, BackendChoice, BackendKind, Defaults};

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
    /// Ask ZooKeeper whether the sequencer's holder node still exists.
    #[value(name = "zookeeper")]
    ZooKeeper,
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

    /// Redis URL for `--live-check redis` (password and TLS in the URL;
    /// `redis+cluster://HOST:PORT,...` for a Redis Cluster).
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

    /// ZooKeeper servers for `--live-check zookeeper`,
    /// `host:port[,host:port...][/chroot]` (the lock side's `--zookeeper`).
    #[arg(long, env = "PALISADE_ZOOKEEPER", value_name = "HOSTS[/CHROOT]")]
    zookeeper: Option<String>,

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
    /// The server's async runtime ([`ServerConfig::runtime`]).
    pub(crate) fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        self.server.runtime()
    }

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
    let (kind, flag) = match args.live_check {
        LiveCheckKind::None => return Ok(None),
        LiveCheckKind::Etcd => (
            BackendKind::Etcd,
            "--etcd-endpoints (or PALISADE_ETCD_ENDPOINTS)",
        ),
        LiveCheckKind::Redis => (BackendKind::Redis, "--redis-url (or PALISADE_REDIS_URL)"),
        LiveCheckKind::Postgres => (
            BackendKind::Postgres,
            "--database-url (or PALISADE_DATABASE_URL)",
        ),
        LiveCheckKind::MariaDb => (
            BackendKind::MariaDb,
            "--database-url (or PALISADE_DATABASE_URL)",
        ),
        LiveCheckKind::ZooKeeper => (
            BackendKind::ZooKeeper,
            "--zookeeper (or PALISADE_ZOOKEEPER)",
        ),
    };
    let backend = BackendArgs {
        backend: Some(BackendChoice::Kind(kind)),
        etcd_endpoints: args.etcd_endpoints.clone(),
        redis_url: args.redis_url.iter().cloned().collect(),
        redis_ca_cert: args.redis_ca_cert.clone(),
        database_url: args.database_url.clone(),
        zookeeper: args.zookeeper.clone(),
        prefix: args.prefix.clone(),
        ..BackendArgs::default()
    };
    let spec = backend
        .spec(Defaults::None)
        .with_context(|| format!("--live-check {kind} needs {flag}"))?;
    Ok(Some(
        palisade_lock_any::live_check(&spec, args.live_check_issuer()).await?,
    ))
}
