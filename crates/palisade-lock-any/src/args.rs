//! The backend flags as a `clap::Args` ([`BackendArgs`]), flattened by the
//! `palisade` command and the demos alike, and turned into a [`LockSpec`].
//!
//! Every flag has an environment variable, so a shell profile or a unit
//! file can set the backend once.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use palisade_core::redact::redact_url;

use crate::error::SelectError;
use crate::spec::{BackendKind, LockSpec, RedisGenerations, Service, ZooKeeperNodeNames};

/// The etcd of [`Defaults::Local`].
pub const LOCAL_ETCD_ENDPOINTS: &str = "127.0.0.1:2379";
/// The Redis of [`Defaults::Local`].
pub const LOCAL_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// The PostgreSQL of [`Defaults::Local`].
pub const LOCAL_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// The MariaDB of [`Defaults::Local`].
pub const LOCAL_MARIADB_URL: &str = "mysql://root@127.0.0.1:3306/test";
/// The ZooKeeper of [`Defaults::Local`].
pub const LOCAL_ZOOKEEPER: &str = "127.0.0.1:2181";

/// `--backend`: a kind, with the endpoint flags, or one URL.
#[derive(Debug, Clone)]
pub enum BackendChoice {
    /// A kind of service; the endpoint flags say where.
    Kind(BackendKind),
    /// A whole service as a URL.
    Url(LockSpec),
}

fn parse_choice(text: &str) -> Result<BackendChoice, String> {
    if text.contains(':') {
        return text
            .parse()
            .map(BackendChoice::Url)
            .map_err(|error: SelectError| error.to_string());
    }
    BackendKind::from_str(text, true)
        .map(BackendChoice::Kind)
        .map_err(|_| {
            format!(
                "`{text}` is no lock service: use etcd, redis, redlock, postgres, mariadb, zookeeper or embedded, or a URL (etcd://HOST:PORT, redis://HOST:PORT, zookeeper://HOST:PORT, ...)"
            )
        })
}

/// What fills in what the flags leave out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defaults {
    /// Nothing: a service must be named, with its endpoint (the `palisade`
    /// command, whose locks must exclude real processes).
    None,
    /// The embedded backend when no service is named, and a service's usual
    /// port on 127.0.0.1 when its endpoint is not given (the demos).
    Local,
}

/// Where the lock service is.
#[derive(Debug, Clone, Default, Args)]
pub struct BackendArgs {
    /// The lock service: `etcd`, `redis`, `redlock`, `postgres`, `mariadb`,
    /// `zookeeper` or `embedded` with the flags below, or one URL
    /// (`etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`, `redis://HOST:PORT`,
    /// `rediss://...`, `redlock://HOST:PORT,HOST:PORT,HOST:PORT`,
    /// `postgres://USER@HOST:PORT/DB`, `mysql://USER@HOST:PORT/DB`,
    /// `zookeeper://HOST:PORT[,HOST:PORT...][/CHROOT][?node-names=FORM]`).
    /// Without it: the one whose endpoint is set.
    #[arg(long, env = "PALISADE_BACKEND", hide_env_values = true, value_name = "KIND|URL", value_parser = parse_choice)]
    pub backend: Option<BackendChoice>,

    /// etcd endpoints, comma-separated (`host:port` or `http://host:port`).
    #[arg(long, env = "PALISADE_ETCD_ENDPOINTS", value_name = "ENDPOINTS")]
    pub etcd_endpoints: Option<String>,

    /// Redis URL (`redis://[user:password@]host:port[/db]`), or the seed
    /// nodes of a Redis Cluster
    /// (`redis+cluster://[user:password@]host:port,host:port`).
    /// Repeat it for `--backend redlock`, once per independent master.
    #[arg(
        long,
        env = "PALISADE_REDIS_URL",
        hide_env_values = true,
        value_name = "URL",
        action = clap::ArgAction::Append
    )]
    pub redis_url: Vec<String>,

    /// CA certificate (PEM) to trust for a `rediss://` server, instead of
    /// the system's trust store.
    #[arg(long, env = "PALISADE_REDIS_CA_CERT", value_name = "PEM")]
    pub redis_ca_cert: Option<PathBuf>,

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
    pub database_url: Option<String>,

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
    pub redis_generations: RedisGenerations,

    /// ZooKeeper servers, `host:port[,host:port...][/chroot]`, for
    /// `--backend zookeeper`.
    #[arg(long, env = "PALISADE_ZOOKEEPER", value_name = "HOSTS[/CHROOT]")]
    pub zookeeper: Option<String>,

    /// How ZooKeeper contender nodes are named, to share a lock path with
    /// kazoo (`kazoo`, the default: kazoo's `Lock`, `ReadLock`,
    /// `WriteLock`) or Curator (`curator-mutex`: `InterProcessMutex`,
    /// exclusive only; `curator-rw`: `InterProcessReadWriteLock`). Every
    /// client of one lock path must use the same form.
    #[arg(
        long,
        env = "PALISADE_ZOOKEEPER_NODE_NAMES",
        value_enum,
        value_name = "FORM"
    )]
    pub zookeeper_node_names: Option<ZooKeeperNodeNames>,

    /// Key prefix in the lock service (default `/palisade/locks` for etcd
    /// and ZooKeeper, under ZooKeeper's chroot; `palisade:` for Redis). A
    /// live-checking server must use the same.
    #[arg(long, env = "PALISADE_LOCK_PREFIX", value_name = "PREFIX")]
    pub prefix: Option<String>,
}

impl From<LockSpec> for BackendArgs {
    /// Flags naming `spec`'s service by URL. Only the service and prefix
    /// carry over: signing is not a flag of this struct.
    fn from(spec: LockSpec) -> Self {
        BackendArgs {
            prefix: spec.prefix().map(str::to_owned),
            redis_generations: spec.redis_generations(),
            zookeeper_node_names: Some(spec.zookeeper_node_names())
                .filter(|_| spec.kind() == BackendKind::ZooKeeper),
            backend: Some(BackendChoice::Url(LockSpec::new(spec.service().clone()))),
            ..BackendArgs::default()
        }
    }
}

impl BackendArgs {
    /// The kind of service these flags name, `defaults` filling the gaps.
    pub fn kind(&self, defaults: Defaults) -> Result<BackendKind, SelectError> {
        match &self.backend {
            Some(BackendChoice::Kind(kind)) => Ok(*kind),
            Some(BackendChoice::Url(spec)) => Ok(spec.kind()),
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
                if self.zookeeper.is_some() {
                    configured.push(BackendKind::ZooKeeper);
                }
                match (configured.as_slice(), defaults) {
                    ([only], _) => Ok(*only),
                    ([], Defaults::Local) => Ok(BackendKind::Embedded),
                    ([], Defaults::None) => Err(SelectError::invalid(
                        "no lock service configured: pass --backend etcd --etcd-endpoints HOST:PORT, --backend redis --redis-url redis://HOST:PORT, --backend postgres|mariadb --database-url URL, --backend zookeeper --zookeeper HOST:PORT, or one URL as --backend (or set PALISADE_BACKEND and PALISADE_ETCD_ENDPOINTS / PALISADE_REDIS_URL / PALISADE_DATABASE_URL / PALISADE_ZOOKEEPER)",
                    )),
                    _ => Err(SelectError::invalid(
                        "more than one lock service is set (etcd endpoints, a Redis URL, a database URL, ZooKeeper servers); choose one with --backend etcd|redis|postgres|mariadb|zookeeper (or PALISADE_BACKEND)",
                    )),
                }
            }
        }
    }

    /// The [`LockSpec`] these flags name. A flag that does not apply to the
    /// service chosen is refused, not ignored.
    pub fn spec(&self, defaults: Defaults) -> Result<LockSpec, SelectError> {
        let kind = self.kind(defaults)?;
        let spec = match &self.backend {
            Some(BackendChoice::Url(spec)) => {
                self.refuse_endpoints_beside_a_url()?;
                spec.clone()
            }
            _ => self.spec_of_kind(kind, defaults)?,
        };
        let spec = match (&self.prefix, spec.prefix()) {
            (Some(_), Some(_)) => {
                return Err(SelectError::invalid(
                    "the key prefix is given twice (--prefix and the URL's path); give it once",
                ));
            }
            (Some(prefix), None) => spec.with_prefix(prefix.clone()),
            _ => spec,
        };
        let spec = spec.with_redis_generations(self.redis_generations);
        let spec = match self.zookeeper_node_names {
            None => spec,
            Some(_) if kind != BackendKind::ZooKeeper => {
                return Err(SelectError::invalid(format!(
                    "--zookeeper-node-names does not apply to --backend {kind}"
                )));
            }
            Some(form) => {
                if let Some(BackendChoice::Url(url)) = &self.backend
                    && url.zookeeper_node_names() != ZooKeeperNodeNames::default()
                    && url.zookeeper_node_names() != form
                {
                    return Err(SelectError::invalid(format!(
                        "the ZooKeeper node names are given twice (--zookeeper-node-names {form} and the URL's node-names={}); give them once",
                        url.zookeeper_node_names()
                    )));
                }
                spec.with_zookeeper_node_names(form)
            }
        };
        match &self.redis_ca_cert {
            Some(path) => {
                if !matches!(kind, BackendKind::Redis | BackendKind::Redlock) {
                    return Err(SelectError::invalid(format!(
                        "--redis-ca-cert does not apply to --backend {kind}"
                    )));
                }
                let pem = std::fs::read(path).map_err(|error| {
                    SelectError::invalid(format!(
                        "cannot read --redis-ca-cert {}: {error}",
                        path.display()
                    ))
                })?;
                Ok(spec.with_redis_ca_pem(pem))
            }
            None => Ok(spec),
        }
    }

    fn refuse_endpoints_beside_a_url(&self) -> Result<(), SelectError> {
        if self.etcd_endpoints.is_some()
            || !self.redis_url.is_empty()
            || self.database_url.is_some()
            || self.zookeeper.is_some()
        {
            return Err(SelectError::invalid(
                "--backend gives the lock service as a URL, and an endpoint flag (or its environment variable) gives another; give it once",
            ));
        }
        Ok(())
    }

    fn spec_of_kind(&self, kind: BackendKind, defaults: Defaults) -> Result<LockSpec, SelectError> {
        let local = defaults == Defaults::Local;
        let missing = |flag: &str, env: &str| {
            SelectError::invalid(format!("--backend {kind} needs {flag} (or {env})"))
        };
        Ok(match kind {
            BackendKind::Embedded => LockSpec::embedded(),
            BackendKind::Etcd => match (&self.etcd_endpoints, local) {
                (Some(endpoints), _) => LockSpec::etcd(endpoints.clone()),
                (None, true) => LockSpec::etcd(LOCAL_ETCD_ENDPOINTS),
                (None, false) => {
                    return Err(missing("--etcd-endpoints", "PALISADE_ETCD_ENDPOINTS"));
                }
            },
            BackendKind::Redis => match (self.redis_url.as_slice(), local) {
                // `--redis-url redis+cluster://...` names a cluster.
                ([url], _) if url.contains("+cluster://") => url.parse()?,
                ([url], _) => LockSpec::redis(url.clone()),
                ([], true) => LockSpec::redis(LOCAL_REDIS_URL),
                ([], false) => return Err(missing("--redis-url", "PALISADE_REDIS_URL")),
                _ => {
                    return Err(SelectError::invalid(
                        "--backend redis takes one --redis-url; for several independent masters use --backend redlock",
                    ));
                }
            },
            BackendKind::Redlock => LockSpec::redlock(self.redis_url.iter().cloned()),
            BackendKind::Postgres | BackendKind::MariaDb => {
                let url = match (&self.database_url, local, kind) {
                    (Some(url), _, _) => url.clone(),
                    (None, true, BackendKind::Postgres) => LOCAL_POSTGRES_URL.to_owned(),
                    (None, true, _) => LOCAL_MARIADB_URL.to_owned(),
                    (None, false, _) => {
                        return Err(missing("--database-url", "PALISADE_DATABASE_URL"));
                    }
                };
                let named = BackendKind::of_database_url(&url)?;
                if named != kind {
                    return Err(SelectError::invalid(format!(
                        "--backend {kind} with a {named} database URL ({}); give a URL of that database or --backend {named}",
                        redact_url(&url)
                    )));
                }
                LockSpec::new(Service::Sql { kind, url })
            }
            BackendKind::ZooKeeper => match (&self.zookeeper, local) {
                (Some(connect), _) => LockSpec::zookeeper(connect.clone()),
                (None, true) => LockSpec::zookeeper(LOCAL_ZOOKEEPER),
                (None, false) => return Err(missing("--zookeeper", "PALISADE_ZOOKEEPER")),
            },
        })
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

    /// Flags as given, with the environment's `PALISADE_*` left out: a
    /// shell that sets them must not change what these cases mean.
    fn flags(args: &[&str]) -> BackendArgs {
        let flags = Flags::try_parse_from(std::iter::once("palisade").chain(args.iter().copied()))
            .expect("flags parse")
            .backend;
        let given = |flag: &str| args.contains(&flag);
        BackendArgs {
            backend: flags.backend.filter(|_| given("--backend")),
            etcd_endpoints: flags.etcd_endpoints.filter(|_| given("--etcd-endpoints")),
            redis_url: if given("--redis-url") {
                flags.redis_url
            } else {
                Vec::new()
            },
            database_url: flags.database_url.filter(|_| given("--database-url")),
            prefix: flags.prefix.filter(|_| given("--prefix")),
            redis_ca_cert: flags.redis_ca_cert.filter(|_| given("--redis-ca-cert")),
            redis_generations: flags.redis_generations,
            zookeeper: flags.zookeeper.filter(|_| given("--zookeeper")),
            zookeeper_node_names: flags
                .zookeeper_node_names
                .filter(|_| given("--zookeeper-node-names")),
        }
    }

    fn kind(args: &[&str], defaults: Defaults) -> Result<BackendKind, String> {
        flags(args)
            .kind(defaults)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn the_backend_follows_the_endpoint_given() {
        assert_eq!(
            kind(&["--etcd-endpoints", "h:2379"], Defaults::None),
            Ok(BackendKind::Etcd)
        );
        assert_eq!(
            kind(&["--redis-url", "redis://x"], Defaults::None),
            Ok(BackendKind::Redis)
        );
        let masters = [
            "--redis-url",
            "redis://a",
            "--redis-url",
            "redis://b",
            "--redis-url",
            "redis://c",
        ];
        assert_eq!(kind(&masters, Defaults::None), Ok(BackendKind::Redlock));
        assert_eq!(
            kind(&["--database-url", "mysql://r@h/t"], Defaults::None),
            Ok(BackendKind::MariaDb)
        );
        assert_eq!(
            kind(&["--backend", "etcd://h:1"], Defaults::None),
            Ok(BackendKind::Etcd)
        );
    }

    #[test]
    fn zookeeper_comes_from_its_flags_or_its_url() {
        assert_eq!(
            kind(&["--zookeeper", "h:2181"], Defaults::None),
            Ok(BackendKind::ZooKeeper)
        );
        let spec = flags(&[
            "--backend",
            "zookeeper",
            "--zookeeper",
            "a:2181,b:2181/apps",
            "--zookeeper-node-names",
            "curator-mutex",
        ])
        .spec(Defaults::None)
        .expect("zookeeper spec");
        assert_eq!(
            spec.service(),
            &Service::ZooKeeper {
                connect: "a:2181,b:2181/apps".into()
            }
        );
        assert_eq!(
            spec.zookeeper_node_names(),
            ZooKeeperNodeNames::CuratorMutex
        );
        let error = flags(&["--etcd-endpoints", "h:1", "--zookeeper-node-names", "kazoo"])
            .spec(Defaults::None)
            .unwrap_err();
        assert!(error.to_string().contains("does not apply"), "{error}");
        let error = flags(&[
            "--backend",
            "zookeeper://h:2181?node-names=curator-rw",
            "--zookeeper-node-names",
            "kazoo",
        ])
        .spec(Defaults::None)
        .unwrap_err();
        assert!(error.to_string().contains("twice"), "{error}");
        let back = BackendArgs::from(spec.clone())
            .spec(Defaults::None)
            .expect("round trip");
        assert_eq!(back.service(), spec.service());
        assert_eq!(back.zookeeper_node_names(), spec.zookeeper_node_names());
    }

    #[test]
    fn nothing_named_is_an_error_for_the_command_and_embedded_for_the_demos() {
        let error = kind(&[], Defaults::None).unwrap_err();
        assert!(error.contains("no lock service configured"), "{error}");
        assert_eq!(kind(&[], Defaults::Local), Ok(BackendKind::Embedded));
    }

    /// A backend named without its address is on this machine for the
    /// demos, and refused, naming the missing flag, for the command.
    #[test]
    fn a_backend_without_its_address_is_local_for_the_demos_only() {
        let cases = [
            ("redis", LockSpec::redis(LOCAL_REDIS_URL), "--redis-url"),
            (
                "etcd",
                LockSpec::etcd(LOCAL_ETCD_ENDPOINTS),
                "--etcd-endpoints",
            ),
            (
                "zookeeper",
                LockSpec::zookeeper(LOCAL_ZOOKEEPER),
                "--zookeeper",
            ),
            (
                "postgres",
                LockSpec::sql(LOCAL_POSTGRES_URL).unwrap(),
                "--database-url",
            ),
            (
                "mariadb",
                LockSpec::sql(LOCAL_MARIADB_URL).unwrap(),
                "--database-url",
            ),
        ];
        for (backend, local, flag) in cases {
            let named = flags(&["--backend", backend]);
            let spec = named.spec(Defaults::Local).expect(backend);
            assert_eq!(spec.service(), local.service(), "{backend}");
            let error = named.spec(Defaults::None).unwrap_err().to_string();
            assert!(error.contains(flag), "{backend}: {error}");
        }
    }

    #[test]
    fn two_services_at_once_are_refused() {
        let error = kind(
            &["--etcd-endpoints", "h:1", "--redis-url", "redis://h"],
            Defaults::None,
        )
        .unwrap_err();
        assert!(error.contains("more than one"), "{error}");
        let error = flags(&["--backend", "etcd://h:1", "--etcd-endpoints", "h:2"])
            .spec(Defaults::None)
            .unwrap_err();
        assert!(error.to_string().contains("give it once"), "{error}");
    }

    #[test]
    fn redis_takes_one_url_and_a_database_url_must_match_its_backend() {
        let two = flags(&[
            "--backend",
            "redis",
            "--redis-url",
            "redis://a",
            "--redis-url",
            "redis://b",
        ]);
        let error = two.spec(Defaults::None).unwrap_err().to_string();
        assert!(error.contains("--backend redlock"), "{error}");
        let mismatch = flags(&[
            "--backend",
            "postgres",
            "--database-url",
            "mysql://root:hunter2@h/t",
        ]);
        let error = mismatch.spec(Defaults::None).unwrap_err().to_string();
        assert!(error.contains("--backend mariadb"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }

    #[test]
    fn a_redis_cluster_is_one_url_as_backend_or_redis_url() {
        let expected = Service::RedisCluster {
            nodes: vec!["redis://a:7000".into(), "redis://b:7001".into()],
        };
        for args in [
            &["--backend", "redis+cluster://a:7000,b:7001"][..],
            &["--redis-url", "redis+cluster://a:7000,b:7001"][..],
            &[
                "--backend",
                "redis",
                "--redis-url",
                "redis+cluster://a:7000,b:7001",
            ][..],
        ] {
            let spec = flags(args).spec(Defaults::None).unwrap();
            assert_eq!(spec.service(), &expected, "{args:?}");
        }
        let error = flags(&["--redis-url", "redis+cluster://a:7000/2"])
            .spec(Defaults::None)
            .unwrap_err();
        assert!(error.to_string().contains("no databases"), "{error}");
    }

    #[test]
    fn flags_that_do_not_apply_are_refused() {
        let error = flags(&["--backend", "etcd://h:1/p", "--prefix", "/q"])
            .spec(Defaults::None)
            .unwrap_err();
        assert!(error.to_string().contains("twice"), "{error}");
        let error = flags(&["--etcd-endpoints", "h:1", "--redis-ca-cert", "/nonexistent"])
            .spec(Defaults::None)
            .unwrap_err();
        assert!(error.to_string().contains("does not apply"), "{error}");
        let error = flags(&[
            "--redis-url",
            "rediss://h",
            "--redis-ca-cert",
            "/nonexistent/ca.pem",
        ])
        .spec(Defaults::None)
        .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("cannot read --redis-ca-cert /nonexistent/ca.pem"),
            "{error}"
        );
    }

    #[test]
    fn an_unknown_kind_is_refused_by_clap_with_the_choices() {
        let error = Flags::try_parse_from(["palisade", "--backend", "consul"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("etcd, redis, redlock"), "{error}");
    }

    #[test]
    fn a_spec_round_trips_through_the_flags() {
        let spec = LockSpec::etcd("h:1,h:2").with_prefix("/demo/7");
        let back = BackendArgs::from(spec.clone())
            .spec(Defaults::None)
            .expect("spec");
        assert_eq!(back.service(), spec.service());
        assert_eq!(back.prefix(), Some("/demo/7"));
    }
}
