//! [`LockSpec`]: which lock service, where, and how sessions on it sign and
//! mint; built from flags ([`crate::BackendArgs`]) or parsed from one URL.

use std::fmt;
use std::str::FromStr;

use palisade_core::SigningKey;
use palisade_core::redact::redact_url;

use crate::error::SelectError;

/// A kind of lock service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum BackendKind {
    /// The in-process backend: no server, and no exclusion between
    /// processes (demos and tests).
    Embedded,
    /// etcd v3: generations are raft-committed revisions.
    Etcd,
    /// Redis (single server): generations minted in the lock script.
    Redis,
    /// Redlock over several independent Redis masters: a grant on a
    /// majority, generations minted by a quorum.
    Redlock,
    /// PostgreSQL: a lock table whose generation column never goes back.
    Postgres,
    /// MariaDB (or MySQL): the same lock table.
    #[cfg_attr(feature = "clap", value(name = "mariadb", alias = "mysql"))]
    MariaDb,
    /// ZooKeeper: ephemeral sequential nodes, generations from the holder
    /// node's creation zxid, the ZooKeeper session as the lease.
    #[cfg_attr(feature = "clap", value(name = "zookeeper"))]
    ZooKeeper,
}

impl BackendKind {
    /// `embedded`, `etcd`, `redis`, `redlock`, `postgres`, `mariadb` or
    /// `zookeeper`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Embedded => "embedded",
            BackendKind::Etcd => "etcd",
            BackendKind::Redis => "redis",
            BackendKind::Redlock => "redlock",
            BackendKind::Postgres => "postgres",
            BackendKind::MariaDb => "mariadb",
            BackendKind::ZooKeeper => "zookeeper",
        }
    }

    /// The cargo feature that compiles this backend in. The `palisade`
    /// command and the example crates name their features the same, so
    /// the refusal of a missing backend is right for each of them.
    pub fn feature(self) -> &'static str {
        match self {
            BackendKind::Embedded => "embedded",
            BackendKind::Etcd => "etcd",
            BackendKind::Redis | BackendKind::Redlock => "redis",
            BackendKind::Postgres | BackendKind::MariaDb => "sql",
            BackendKind::ZooKeeper => "zookeeper",
        }
    }

    /// Whether this build has the backend.
    pub fn is_compiled(self) -> bool {
        match self {
            BackendKind::Embedded => cfg!(feature = "embedded"),
            BackendKind::Etcd => cfg!(feature = "etcd"),
            BackendKind::Redis | BackendKind::Redlock => cfg!(feature = "redis"),
            BackendKind::Postgres | BackendKind::MariaDb => cfg!(feature = "sql"),
            BackendKind::ZooKeeper => cfg!(feature = "zookeeper"),
        }
    }

    /// Whether other processes can share the service (all but embedded).
    pub fn is_shared(self) -> bool {
        self != BackendKind::Embedded
    }

    /// The SQL backend a database URL names by its scheme.
    pub fn of_database_url(url: &str) -> Result<BackendKind, SelectError> {
        match scheme(url) {
            Some("postgres" | "postgresql") => Ok(BackendKind::Postgres),
            Some("mysql" | "mariadb") => Ok(BackendKind::MariaDb),
            _ => Err(SelectError::invalid(format!(
                "--database-url {}: expected postgres://USER@HOST:PORT/DB or mysql://USER@HOST:PORT/DB",
                redact_url(url)
            ))),
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the Redis backend mints generations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum RedisGenerations {
    /// max(counter + 1, Redis's time in µs): survives a restart without
    /// persistence. The default.
    #[default]
    Clock,
    /// A plain counter: small numbers, lost with Redis's data (`palisade
    /// raise-floor` recovers).
    Counter,
}

/// How ZooKeeper contender nodes are named, so that a kazoo or Curator
/// client on the same lock path shares the lock (every client of one path
/// must use one form).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ZooKeeperNodeNames {
    /// kazoo's `Lock`, `WriteLock` and `ReadLock` (Python): both modes.
    /// The default.
    #[default]
    Kazoo,
    /// Curator's `InterProcessMutex` (Java): exclusive only.
    CuratorMutex,
    /// Curator's `InterProcessReadWriteLock`: both modes.
    #[cfg_attr(feature = "clap", value(name = "curator-rw"))]
    CuratorRw,
}

impl ZooKeeperNodeNames {
    /// `kazoo`, `curator-mutex` or `curator-rw`, as the flag and the URL
    /// parameter write it.
    pub fn name(self) -> &'static str {
        match self {
            ZooKeeperNodeNames::Kazoo => "kazoo",
            ZooKeeperNodeNames::CuratorMutex => "curator-mutex",
            ZooKeeperNodeNames::CuratorRw => "curator-rw",
        }
    }

    /// The form named `text`.
    pub fn parse(text: &str) -> Option<ZooKeeperNodeNames> {
        [
            ZooKeeperNodeNames::Kazoo,
            ZooKeeperNodeNames::CuratorMutex,
            ZooKeeperNodeNames::CuratorRw,
        ]
        .into_iter()
        .find(|form| form.name() == text)
    }
}

impl fmt::Display for ZooKeeperNodeNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a lock service is.
#[derive(Clone, PartialEq, Eq)]
pub enum Service {
    /// A fresh in-process service.
    Embedded,
    /// etcd at these endpoints (`host:port` or `http://host:port`,
    /// comma-separated).
    Etcd {
        /// The endpoint list as given.
        endpoints: String,
    },
    /// One Redis server (`redis://` or `rediss://`).
    Redis {
        /// Its URL, password and all.
        url: String,
    },
    /// A Redis Cluster, seeded from these nodes (`redis://` or `rediss://`
    /// URLs, credentials and all); the client finds the rest.
    RedisCluster {
        /// One URL per seed node.
        nodes: Vec<String>,
    },
    /// Redlock over independent Redis masters.
    Redlock {
        /// One URL per master.
        masters: Vec<String>,
    },
    /// PostgreSQL's or MariaDB's lock table.
    Sql {
        /// `Postgres` or `MariaDb`.
        kind: BackendKind,
        /// The database URL, password and all.
        url: String,
    },
    /// A ZooKeeper ensemble.
    ZooKeeper {
        /// Its connect string, `host:port[,host:port...][/chroot]`.
        connect: String,
    },
}

impl Service {
    /// The kind of service.
    pub fn kind(&self) -> BackendKind {
        match self {
            Service::Embedded => BackendKind::Embedded,
            Service::Etcd { .. } => BackendKind::Etcd,
            Service::Redis { .. } | Service::RedisCluster { .. } => BackendKind::Redis,
            Service::Redlock { .. } => BackendKind::Redlock,
            Service::Sql { kind, .. } => *kind,
            Service::ZooKeeper { .. } => BackendKind::ZooKeeper,
        }
    }
}

/// Shown with every secret masked ([`redact_url`]): `etcd at h:2379`,
/// `Redis at redis://user:***@h:6379`.
impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Service::Embedded => f.write_str("the embedded lock service (in this process)"),
            Service::Etcd { endpoints } => write!(f, "etcd at {}", redact_url(endpoints)),
            Service::Redis { url } => write!(f, "Redis at {}", redact_url(url)),
            Service::RedisCluster { nodes } => {
                let nodes: Vec<String> = nodes.iter().map(|url| redact_url(url)).collect();
                write!(f, "the Redis Cluster at {}", nodes.join(", "))
            }
            Service::Redlock { masters } => {
                let masters: Vec<String> = masters.iter().map(|url| redact_url(url)).collect();
                write!(f, "the Redlock masters {}", masters.join(", "))
            }
            Service::Sql { url, .. } => write!(f, "the database at {}", redact_url(url)),
            Service::ZooKeeper { connect } => write!(f, "ZooKeeper at {}", redact_url(connect)),
        }
    }
}

impl fmt::Debug for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Service({self})")
    }
}

/// One lock service chosen: where it is, the key prefix, and what its
/// sessions stamp on their sequencers.
///
/// Built from the backend flags ([`crate::BackendArgs`], feature `clap`),
/// from the constructors, or parsed from one URL:
///
/// | URL | service |
/// |---|---|
/// | `embedded:` | the in-process backend |
/// | `etcd://h:2379,h2:2379[/prefix]` | etcd; a path is the key prefix |
/// | `redis://[user:pass@]h:6379[/db]`, `rediss://...` | one Redis |
/// | `redis+cluster://[user:pass@]h1:7000,h2:7000`, `rediss+cluster://...` | a Redis Cluster seeded from these nodes |
/// | `redlock://h1:6379,h2:6379,h3:6379` | Redlock, one master per host |
/// | `postgres://user@h:5432/db`, `postgresql://...` | PostgreSQL's lock table |
/// | `mysql://user@h:3306/db`, `mariadb://...` | MariaDB's lock table |
/// | `zookeeper://h:2181,h2:2181[/chroot][?node-names=curator-rw]` | ZooKeeper; a path is the chroot |
///
/// ```
/// use palisade_lock_any::{BackendKind, LockSpec};
///
/// let spec: LockSpec = "etcd://10.0.0.1:2379,10.0.0.2:2379/apps/locks".parse()?;
/// assert_eq!(spec.kind(), BackendKind::Etcd);
/// assert_eq!(spec.prefix(), Some("/apps/locks"));
/// let spec: LockSpec = "postgres://app:hunter2@db/app".parse()?;
/// assert_eq!(spec.to_string(), "the database at postgres://app:***@db/app");
/// # Ok::<(), palisade_lock_any::SelectError>(())
/// ```
#[derive(Clone)]
pub struct LockSpec {
    service: Service,
    prefix: Option<String>,
    redis_generations: RedisGenerations,
    redis_ca_pem: Option<Vec<u8>>,
    zookeeper_node_names: ZooKeeperNodeNames,
    issuer: Option<String>,
    signing_key: Option<SigningKey>,
}

impl LockSpec {
    /// `service`, with the backend's defaults: its own key prefix, its own
    /// issuer id, unsigned sequencers.
    pub fn new(service: Service) -> Self {
        LockSpec {
            service,
            prefix: None,
            redis_generations: RedisGenerations::default(),
            redis_ca_pem: None,
            zookeeper_node_names: ZooKeeperNodeNames::default(),
            issuer: None,
            signing_key: None,
        }
    }

    /// The in-process backend.
    pub fn embedded() -> Self {
        LockSpec::new(Service::Embedded)
    }

    /// etcd at `endpoints` (comma-separated).
    pub fn etcd(endpoints: impl Into<String>) -> Self {
        LockSpec::new(Service::Etcd {
            endpoints: endpoints.into(),
        })
    }

    /// One Redis server at `url`.
    pub fn redis(url: impl Into<String>) -> Self {
        LockSpec::new(Service::Redis { url: url.into() })
    }

    /// A Redis Cluster seeded from `nodes`, one `redis://` (or `rediss://`)
    /// URL each.
    pub fn redis_cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        LockSpec::new(Service::RedisCluster {
            nodes: nodes.into_iter().map(Into::into).collect(),
        })
    }

    /// Redlock over `masters`, one URL each (at least three, checked when
    /// connecting).
    pub fn redlock(masters: impl IntoIterator<Item = impl Into<String>>) -> Self {
        LockSpec::new(Service::Redlock {
            masters: masters.into_iter().map(Into::into).collect(),
        })
    }

    /// PostgreSQL or MariaDB at `url`; the scheme says which.
    pub fn sql(url: impl Into<String>) -> Result<Self, SelectError> {
        let url = url.into();
        let kind = BackendKind::of_database_url(&url)?;
        Ok(LockSpec::new(Service::Sql { kind, url }))
    }

    /// A ZooKeeper ensemble at `connect`, `host:port[,host:port...][/chroot]`
    /// (checked when connecting).
    pub fn zookeeper(connect: impl Into<String>) -> Self {
        LockSpec::new(Service::ZooKeeper {
            connect: connect.into(),
        })
    }

    /// Keys under `prefix` in etcd, Redis or ZooKeeper (under its chroot). The SQL backend keeps every
    /// lock in fixed tables and refuses a prefix when connecting, rather
    /// than ignore it: two deployments meant to be apart would share locks.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// How Redis mints generations (Redis only).
    pub fn with_redis_generations(mut self, scheme: RedisGenerations) -> Self {
        self.redis_generations = scheme;
        self
    }

    /// A CA certificate (PEM) to trust for `rediss://`, instead of the
    /// system's trust store.
    pub fn with_redis_ca_pem(mut self, pem: Vec<u8>) -> Self {
        self.redis_ca_pem = Some(pem);
        self
    }

    /// How ZooKeeper contender nodes are named (ZooKeeper only).
    pub fn with_zookeeper_node_names(mut self, node_names: ZooKeeperNodeNames) -> Self {
        self.zookeeper_node_names = node_names;
        self
    }

    /// The issuer id stamped on every sequencer (default: the service's
    /// own id).
    pub fn with_issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// Sign every sequencer with `key`.
    pub fn with_signing_key(mut self, key: SigningKey) -> Self {
        self.signing_key = Some(key);
        self
    }

    /// The same service and settings, without issuer or signing key: for
    /// what mints no sequencer (inspection, floor raising).
    pub fn unsigned(&self) -> LockSpec {
        LockSpec {
            issuer: None,
            signing_key: None,
            ..self.clone()
        }
    }

    /// Where the service is.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// The kind of service.
    pub fn kind(&self) -> BackendKind {
        self.service.kind()
    }

    /// The key prefix, if not the backend's default.
    pub fn prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }

    /// How Redis mints generations.
    pub fn redis_generations(&self) -> RedisGenerations {
        self.redis_generations
    }

    /// The CA certificate to trust for `rediss://`, if any.
    pub fn redis_ca_pem(&self) -> Option<&[u8]> {
        self.redis_ca_pem.as_deref()
    }

    /// How ZooKeeper contender nodes are named.
    pub fn zookeeper_node_names(&self) -> ZooKeeperNodeNames {
        self.zookeeper_node_names
    }

    /// The issuer id, if not the service's own.
    pub fn issuer(&self) -> Option<&str> {
        self.issuer.as_deref()
    }

    /// The signing key, if sequencers are signed.
    pub fn signing_key(&self) -> Option<&SigningKey> {
        self.signing_key.as_ref()
    }

    /// The URL form of the service, secrets included (for a child process
    /// to parse again; never show it, show the spec's `Display`). The key
    /// prefix of etcd is its path, ZooKeeper's chroot its path and its node
    /// names a parameter; other settings are not in the URL.
    pub fn to_url(&self) -> String {
        match &self.service {
            Service::Embedded => "embedded:".to_owned(),
            Service::Etcd { endpoints } => {
                let hosts: Vec<&str> = endpoints
                    .split(',')
                    .map(|endpoint| endpoint.trim().trim_start_matches("http://"))
                    .collect();
                format!("etcd://{}", hosts.join(","))
            }
            Service::Redis { url } | Service::Sql { url, .. } => url.clone(),
            Service::RedisCluster { nodes } => cluster_url(nodes),
            Service::Redlock { masters } => {
                let hosts: Vec<&str> = masters
                    .iter()
                    .map(|url| url.trim_start_matches("redis://").trim_end_matches('/'))
                    .collect();
                format!("redlock://{}", hosts.join(","))
            }
            Service::ZooKeeper { connect } => {
                let connect: String = connect.split_whitespace().collect();
                match self.zookeeper_node_names {
                    ZooKeeperNodeNames::Kazoo => format!("zookeeper://{connect}"),
                    other => format!("zookeeper://{connect}?node-names={other}"),
                }
            }
        }
    }
}

/// `scheme` of `scheme://...` or `scheme:`.
fn scheme(url: &str) -> Option<&str> {
    url.split_once(':').map(|(scheme, _)| scheme)
}

impl FromStr for LockSpec {
    type Err = SelectError;

    /// Parses the URL forms in [`LockSpec`]'s table.
    fn from_str(text: &str) -> Result<Self, SelectError> {
        let text = text.trim();
        let after = |scheme: &str| text[scheme.len()..].trim_start_matches("//");
        match scheme(text) {
            Some("embedded") if after("embedded:").is_empty() => Ok(LockSpec::embedded()),
            Some("etcd") => {
                let rest = after("etcd:");
                let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
                if hosts.is_empty() || hosts.split(',').any(str::is_empty) {
                    return Err(SelectError::invalid(format!(
                        "{}: expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX]",
                        redact_url(text)
                    )));
                }
                let spec = LockSpec::etcd(hosts);
                Ok(if path.is_empty() {
                    spec
                } else {
                    spec.with_prefix(format!("/{path}"))
                })
            }
            Some("redis" | "rediss") => Ok(LockSpec::redis(text)),
            Some(cluster @ ("redis+cluster" | "rediss+cluster")) => {
                parse_redis_cluster(text, cluster, after(&format!("{cluster}:")))
            }
            Some("redlock") => {
                let hosts = after("redlock:").trim_end_matches('/');
                let masters: Vec<String> = hosts
                    .split(',')
                    .filter(|host| !host.is_empty())
                    .map(|host| format!("redis://{host}"))
                    .collect();
                if masters.is_empty() || hosts.contains('/') {
                    return Err(SelectError::invalid(format!(
                        "{}: expected redlock://HOST:PORT,HOST:PORT,HOST:PORT (for passwords, TLS or databases give each master as a redis:// URL)",
                        redact_url(text)
                    )));
                }
                Ok(LockSpec::redlock(masters))
            }
            Some("postgres" | "postgresql" | "mysql" | "mariadb") => LockSpec::sql(text),
            Some("zookeeper") => parse_zookeeper(text, after("zookeeper:")),
            _ => Err(SelectError::invalid(format!(
                "`{}` names no lock service: expected embedded:, etcd://HOST:PORT[,...][/PREFIX], redis://..., rediss://..., redis+cluster://HOST:PORT,..., redlock://HOST:PORT,..., postgres://..., mysql://... or zookeeper://HOST:PORT[,...][/CHROOT]",
                redact_url(text)
            ))),
        }
    }
}

/// `redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]` (or
/// `rediss+cluster://`): one `redis://` URL per node, each with the
/// credentials. `rest` is what follows the scheme.
fn parse_redis_cluster(text: &str, scheme: &str, rest: &str) -> Result<LockSpec, SelectError> {
    let (credentials, hosts) = match rest.rsplit_once('@') {
        Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
        None => (String::new(), rest),
    };
    if hosts.is_empty() || hosts.contains(['/', '?', '#']) || hosts.split(',').any(str::is_empty) {
        return Err(SelectError::invalid(format!(
            "{}: expected {scheme}://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...] (a cluster has no databases)",
            redact_url(text)
        )));
    }
    let node_scheme = scheme.trim_end_matches("+cluster");
    Ok(LockSpec::redis_cluster(hosts.split(',').map(|host| {
        format!("{node_scheme}://{credentials}{host}")
    })))
}

/// The `redis+cluster://` URL of `nodes`, which [`parse_redis_cluster`]
/// made (one scheme, one set of credentials).
fn cluster_url(nodes: &[String]) -> String {
    let split = |url: &str| -> (String, String, String) {
        let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
        let (credentials, host) = match rest.rsplit_once('@') {
            Some((credentials, host)) => (format!("{credentials}@"), host),
            None => (String::new(), rest),
        };
        (scheme.to_owned(), credentials, host.to_owned())
    };
    let (scheme, credentials, _) = split(nodes.first().map_or("", String::as_str));
    let hosts: Vec<String> = nodes.iter().map(|url| split(url).2).collect();
    format!("{scheme}+cluster://{credentials}{}", hosts.join(","))
}

/// `zookeeper://HOST:PORT[,HOST:PORT...][/CHROOT][?node-names=FORM]`,
/// `rest` being what follows the scheme.
fn parse_zookeeper(text: &str, rest: &str) -> Result<LockSpec, SelectError> {
    let malformed = |why: &str| {
        SelectError::invalid(format!(
            "{}: {why}; expected zookeeper://HOST:PORT[,HOST:PORT...][/CHROOT][?node-names=kazoo|curator-mutex|curator-rw]",
            redact_url(text)
        ))
    };
    let (connect, query) = rest.split_once('?').unwrap_or((rest, ""));
    let hosts = connect.split('/').next().unwrap_or_default();
    if hosts.is_empty() || hosts.split(',').any(|host| host.trim().is_empty()) {
        return Err(malformed("no server list"));
    }
    let mut spec = LockSpec::zookeeper(connect);
    for parameter in query.split('&').filter(|parameter| !parameter.is_empty()) {
        match parameter.split_once('=') {
            Some(("node-names", form)) => {
                let form = ZooKeeperNodeNames::parse(form)
                    .ok_or_else(|| malformed(&format!("unknown node-names `{form}`")))?;
                spec = spec.with_zookeeper_node_names(form);
            }
            _ => return Err(malformed(&format!("unknown parameter `{parameter}`"))),
        }
    }
    Ok(spec)
}

/// The service, with secrets masked.
impl fmt::Display for LockSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.service, f)
    }
}

/// Secrets masked: the URLs redacted, the signing key by its id only.
impl fmt::Debug for LockSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockSpec")
            .field("service", &self.service)
            .field("prefix", &self.prefix)
            .field("redis_generations", &self.redis_generations)
            .field("redis_ca_pem", &self.redis_ca_pem.as_ref().map(Vec::len))
            .field("zookeeper_node_names", &self.zookeeper_node_names)
            .field("issuer", &self.issuer)
            .field(
                "signing_key",
                &self.signing_key.as_ref().map(SigningKey::key_id),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> LockSpec {
        text.parse()
            .unwrap_or_else(|error| panic!("{text}: {error}"))
    }

    #[test]
    fn every_url_form_names_its_service() {
        assert_eq!(parse("embedded:").service(), &Service::Embedded);
        assert_eq!(
            parse("etcd://a:2379,b:2379").service(),
            &Service::Etcd {
                endpoints: "a:2379,b:2379".into()
            }
        );
        assert_eq!(parse("etcd://a:2379/x/y").prefix(), Some("/x/y"));
        assert_eq!(parse("etcd://a:2379").prefix(), None);
        assert_eq!(
            parse("rediss://u:p@h:6380/2").service(),
            &Service::Redis {
                url: "rediss://u:p@h:6380/2".into()
            }
        );
        assert_eq!(
            parse("redlock://a:1,b:2,c:3").service(),
            &Service::Redlock {
                masters: vec![
                    "redis://a:1".into(),
                    "redis://b:2".into(),
                    "redis://c:3".into()
                ]
            }
        );
        let cluster = parse("redis+cluster://:pw@a:7000,b:7001");
        assert_eq!(cluster.kind(), BackendKind::Redis);
        assert_eq!(
            cluster.service(),
            &Service::RedisCluster {
                nodes: vec!["redis://:pw@a:7000".into(), "redis://:pw@b:7001".into()]
            }
        );
        assert_eq!(
            parse("rediss+cluster://a:7000").service(),
            &Service::RedisCluster {
                nodes: vec!["rediss://a:7000".into()]
            }
        );
        assert_eq!(parse("postgresql://u@h/db").kind(), BackendKind::Postgres);
        assert_eq!(parse("mysql://u@h/db").kind(), BackendKind::MariaDb);
        assert_eq!(parse("mariadb://u@h/db").kind(), BackendKind::MariaDb);
        let zookeeper = parse("zookeeper://a:2181,b:2181/apps?node-names=curator-rw");
        assert_eq!(
            zookeeper.service(),
            &Service::ZooKeeper {
                connect: "a:2181,b:2181/apps".into()
            }
        );
        assert_eq!(
            zookeeper.zookeeper_node_names(),
            ZooKeeperNodeNames::CuratorRw
        );
        assert_eq!(
            parse("zookeeper://a:2181").zookeeper_node_names(),
            ZooKeeperNodeNames::Kazoo
        );
    }

    #[test]
    fn the_url_form_parses_back_to_the_same_service() {
        for text in [
            "embedded:",
            "etcd://a:2379,b:2379",
            "redis://u:secret@h:6379/1",
            "redlock://a:1,b:2,c:3",
            "redis+cluster://u:secret@a:7000,b:7001",
            "rediss+cluster://a:7000",
            "postgres://u:secret@h:5432/db",
            "mysql://root@h:3306/test",
            "zookeeper://a:2181,b:2181/chroot",
            "zookeeper://a:2181?node-names=curator-mutex",
        ] {
            let spec = parse(text);
            let back = parse(&spec.to_url());
            assert_eq!(back.service(), spec.service(), "{text}");
            assert_eq!(
                back.zookeeper_node_names(),
                spec.zookeeper_node_names(),
                "{text}"
            );
        }
        let listed = LockSpec::etcd("http://a:2379, b:2379");
        assert_eq!(listed.to_url(), "etcd://a:2379,b:2379");
    }

    #[test]
    fn unknown_or_malformed_urls_are_refused_without_their_secrets() {
        for text in [
            "zookeeper://",
            "zookeeper:///chroot",
            "zookeeper://a:2181,,b:2181",
            "zookeeper://a:2181?node-names=zk",
            "zookeeper://a:2181?chroot=/x",
            "redis+cluster://",
            "redis+cluster://h:7000,,h:7001",
            "redis+cluster://h:7000/1",
            "http://h",
            "etcd://",
            "etcd://a,,b",
            "redlock://",
            "redlock://a:1/0",
            "embedded:x",
            "nonsense",
        ] {
            assert!(text.parse::<LockSpec>().is_err(), "{text}");
        }
        let error = "ftp://user:hunter2@h".parse::<LockSpec>().unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[test]
    fn display_and_debug_keep_secrets_out() {
        let key = SigningKey::new("k1", vec![7u8; 32]).expect("key");
        let spec = parse("redis://app:hunter2@h:6379?token=s3cret")
            .with_signing_key(key)
            .with_issuer("me");
        for shown in [spec.to_string(), format!("{spec:?}")] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(!shown.contains("07070707"), "{shown}");
        }
        let cluster = parse("redis+cluster://app:hunter2@a:7000,b:7001");
        for shown in [cluster.to_string(), format!("{cluster:?}")] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(
                shown.contains("a:7000") && shown.contains("b:7001"),
                "{shown}"
            );
        }
        let masters = LockSpec::redlock(["redis://:pw1@a", "redis://:pw2@b"]).to_string();
        assert!(
            !masters.contains("pw1") && !masters.contains("pw2"),
            "{masters}"
        );
    }

    #[test]
    fn each_backend_names_the_feature_that_compiles_it() {
        assert_eq!(BackendKind::Redlock.feature(), "redis");
        assert_eq!(BackendKind::MariaDb.feature(), "sql");
        assert_eq!(BackendKind::Etcd.is_compiled(), cfg!(feature = "etcd"));
    }
}
