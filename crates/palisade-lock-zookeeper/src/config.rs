//! Where ZooKeeper is and how to talk to it: [`ZkConfig`], parsed from
//! `host:port[,host:port...][/chroot]`, and [`ConfigError`].

use std::time::Duration;

use derive_setters::Setters;
use palisade_core::{Sequencer, SequencerError, Signer};
use sha2::{Digest, Sha256};

use crate::names::NodeNames;

/// The default lock root: every lock directory lives under it.
pub const DEFAULT_PREFIX: &str = "/palisade/locks";

/// A configuration that cannot work, caught before any connection is made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The connect string is empty, or a server is not `host:port`.
    #[error("ZooKeeper connect string `{connect}`: {reason}")]
    BadConnectString {
        /// The connect string as given.
        connect: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The chroot or prefix is not an absolute ZooKeeper path without a
    /// trailing `/`, empty or relative segments, or forbidden characters.
    #[error("ZooKeeper path `{path}`: {reason}")]
    BadPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The issuer or holder name cannot travel in a sequencer.
    #[error("{field} `{value}` cannot go in a sequencer: {source}")]
    BadId {
        /// `issuer` or `holder name`.
        field: &'static str,
        /// The value as given.
        value: String,
        /// Why the sequencer refuses it.
        source: SequencerError,
    },
    /// A timeout of zero.
    #[error("{field} must be positive")]
    ZeroTimeout {
        /// Which timeout.
        field: &'static str,
    },
    /// The session options cannot keep a lease alive, or ask for a
    /// session timeout ZooKeeper cannot grant.
    #[error("session options: {reason}")]
    BadSessionOptions {
        /// Why.
        reason: String,
    },
    /// ZooKeeper granted another session timeout than the TTL asked for
    /// (the server clamps it to `[minSessionTimeout, maxSessionTimeout]`,
    /// by default 2 to 20 ticks). The lease would not be the TTL, so the
    /// session is refused rather than silently different.
    #[error(
        "ZooKeeper granted a session timeout of {granted:?} for the {what} of {asked:?}; the server allows other values (minSessionTimeout/maxSessionTimeout): choose a TTL{hint} within them"
    )]
    SessionTimeoutRefused {
        /// `ttl`, or `ttl + lock-delay` for the lock-delay session.
        what: &'static str,
        /// What was asked.
        asked: Duration,
        /// What the server granted.
        granted: Duration,
        /// Extra advice (for the lock-delay session).
        hint: &'static str,
    },
    /// An issuer was configured with [`ZkConfig::with_issuer`] and a signer
    /// with another issuer with [`ZkConfig::with_signer`].
    #[error("issuer `{configured}` is configured, but the signer signs as `{signer}`")]
    IssuerConflict {
        /// The issuer given to `with_issuer`.
        configured: String,
        /// The signer's issuer.
        signer: String,
    },
}

/// Where ZooKeeper is, where the locks live, and how nodes are named.
///
/// Session behaviour (TTL = the ZooKeeper session timeout, keep-alive
/// interval, safety margin, lock-delay, waiter bound) is the core
/// `SessionOptions`, given per session.
///
/// ```
/// use std::time::Duration;
/// use palisade_lock_zookeeper::{NodeNames, ZkConfig};
///
/// let config = ZkConfig::parse("zk1:2181,zk2:2181,zk3:2181/apps")?
///     .with_prefix("/orders/locks")?
///     .with_node_names(NodeNames::CuratorMutex)
///     .with_request_timeout(Duration::from_secs(2));
/// assert_eq!(config.hosts(), ["zk1:2181", "zk2:2181", "zk3:2181"]);
/// assert_eq!(config.root(), "/apps/orders/locks");
/// # Ok::<(), palisade_lock_zookeeper::ConfigError>(())
/// ```
///
/// The plain setters (`with_node_names`, `with_request_timeout`,
/// `with_connect_timeout`, `with_signer`) are derived from the fields
/// below and carry their documentation.
#[derive(Clone, Debug, Setters)]
#[setters(prefix = "with_", generate = false)]
pub struct ZkConfig {
    /// The servers, `host:port` each, in the order given.
    hosts: Vec<String>,
    /// The connect string's chroot (`/apps` in `zk1:2181/apps`), or empty.
    /// Palisade prefixes its paths with it itself instead of asking the
    /// client library to, so the chroot need not exist beforehand.
    chroot: String,
    /// Lock directories live under `<chroot><prefix>/`.
    prefix: String,
    /// How contender nodes are named: kazoo's form or Curator's (see
    /// [`NodeNames`]); every client of one lock path must use the same
    /// form.
    #[setters(generate)]
    node_names: NodeNames,
    /// The per-request timeout: a request that takes longer is reported as
    /// `BackendTimeout` (must be positive; checked on connect).
    #[setters(generate)]
    request_timeout: Duration,
    /// How long establishing a session may take (must be positive).
    #[setters(generate)]
    connect_timeout: Duration,
    /// Overrides the issuer written into sequencers; by default it is
    /// derived from the servers and the root.
    issuer: Option<String>,
    /// A human name for this process, in front of the node name in the
    /// sequencer's `holder` field and in the nodes' data.
    holder_name: Option<String>,
    /// Signs every sequencer handed out, when set; its issuer becomes this
    /// configuration's issuer.
    #[setters(generate, strip_option)]
    signer: Option<Signer>,
    /// The fault suite's mutations (test builds only).
    #[cfg(feature = "testing")]
    pub(crate) mutation: crate::Mutation,
}

impl ZkConfig {
    /// A configuration from a connect string
    /// `host:port[,host:port...][/chroot]`, with the default prefix
    /// ([`DEFAULT_PREFIX`]), kazoo's node names, a 5 s request timeout and a
    /// 10 s connect timeout.
    ///
    /// ```
    /// use palisade_lock_zookeeper::ZkConfig;
    ///
    /// let config = ZkConfig::parse("127.0.0.1:2181, 127.0.0.1:2182")?;
    /// assert_eq!(config.root(), "/palisade/locks");
    /// assert!(ZkConfig::parse("").is_err());
    /// assert!(ZkConfig::parse("127.0.0.1").is_err());
    /// assert!(ZkConfig::parse("127.0.0.1:2181/a//b").is_err());
    /// # Ok::<(), palisade_lock_zookeeper::ConfigError>(())
    /// ```
    pub fn parse(connect: &str) -> Result<Self, ConfigError> {
        let bad = |reason: String| ConfigError::BadConnectString {
            connect: connect.to_owned(),
            reason,
        };
        let trimmed = connect.trim();
        let (servers, chroot) = match trimmed.find('/') {
            Some(slash) => (&trimmed[..slash], &trimmed[slash..]),
            None => (trimmed, ""),
        };
        let hosts: Vec<String> = servers
            .split(',')
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .map(str::to_owned)
            .collect();
        if hosts.is_empty() {
            return Err(bad("no server given".into()));
        }
        for host in &hosts {
            let Some((name, port)) = host.rsplit_once(':') else {
                return Err(bad(format!("`{host}` is not host:port")));
            };
            if name.is_empty() || port.parse::<u16>().map_or(true, |port| port == 0) {
                return Err(bad(format!("`{host}` is not host:port")));
            }
        }
        let chroot = if chroot == "/" { "" } else { chroot };
        if !chroot.is_empty() {
            check_path(chroot)?;
        }
        Ok(ZkConfig {
            hosts,
            chroot: chroot.to_owned(),
            prefix: DEFAULT_PREFIX.to_owned(),
            node_names: NodeNames::default(),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            issuer: None,
            holder_name: None,
            signer: None,
            #[cfg(feature = "testing")]
            mutation: crate::Mutation::None,
        })
    }

    /// Sets the prefix under the chroot (an absolute ZooKeeper path, not
    /// `/` itself, no trailing `/`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Result<Self, ConfigError> {
        let prefix = prefix.into();
        check_path(&prefix)?;
        self.prefix = prefix;
        Ok(self)
    }

    /// Sets the issuer id written into every sequencer.
    pub fn with_issuer(mut self, issuer: impl Into<String>) -> Result<Self, ConfigError> {
        let issuer = issuer.into();
        Sequencer::check_issuer(&issuer).map_err(bad_id("issuer", &issuer))?;
        self.issuer = Some(issuer);
        Ok(self)
    }

    /// Sets the human name of this process, shown in the sequencer's
    /// `holder` field as `<name>/<node name>` and in the nodes' data.
    pub fn with_holder_name(mut self, name: impl Into<String>) -> Result<Self, ConfigError> {
        let name = name.into();
        let longest = format!("{name}/{}", "x".repeat(crate::names::LONGEST_NODE_NAME));
        Sequencer::check_holder(&longest).map_err(bad_id("holder name", &name))?;
        self.holder_name = Some(name);
        Ok(self)
    }

    /// Plays one of the fault suite's mutations (test builds only).
    #[cfg(feature = "testing")]
    pub fn with_mutation(mut self, mutation: crate::Mutation) -> Self {
        self.mutation = mutation;
        self
    }

    /// The servers.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The servers as a connect string without the chroot.
    pub(crate) fn host_list(&self) -> String {
        self.hosts.join(",")
    }

    /// The chroot, or the empty string.
    pub fn chroot(&self) -> &str {
        &self.chroot
    }

    /// The prefix under the chroot.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Where lock directories live: `<chroot><prefix>`. A kazoo or Curator
    /// client shares Palisade's lock `name` by locking the path
    /// `<root>/<segment>` (see [`crate::lock_path`]).
    pub fn root(&self) -> String {
        format!("{}{}", self.chroot, self.prefix)
    }

    /// The node-name form.
    pub fn node_names(&self) -> NodeNames {
        self.node_names
    }

    /// The per-request timeout.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The session establishment timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The signer of this configuration's sequencers, if any.
    pub fn signer(&self) -> Option<&Signer> {
        self.signer.as_ref()
    }

    /// The issuer written into sequencers: the one configured, else the
    /// signer's, else `zookeeper-<12 hex digits>` derived from the sorted
    /// servers and the root, so every process configured alike (lock side
    /// and live check) derives the same.
    pub fn issuer(&self) -> String {
        if let Some(issuer) = self
            .issuer
            .as_deref()
            .or(self.signer.as_ref().map(Signer::issuer))
        {
            return issuer.to_owned();
        }
        let mut hosts = self.hosts.clone();
        hosts.sort();
        let digest = Sha256::digest(format!("{}{}", hosts.join(","), self.root()).as_bytes());
        let hex: String = digest[..6]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        format!("zookeeper-{hex}")
    }

    /// The holder name: as configured, or `pid<process id>`.
    pub fn holder_name(&self) -> String {
        self.holder_name
            .clone()
            .unwrap_or_else(|| format!("pid{}", std::process::id()))
    }

    /// Checks what the setters could not: the timeouts, and an issuer that
    /// disagrees with the signer's.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if let (Some(configured), Some(signer)) = (&self.issuer, &self.signer)
            && configured != signer.issuer()
        {
            return Err(ConfigError::IssuerConflict {
                configured: configured.clone(),
                signer: signer.issuer().to_owned(),
            });
        }
        if self.request_timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout {
                field: "request timeout",
            });
        }
        if self.connect_timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout {
                field: "connect timeout",
            });
        }
        Ok(())
    }
}

/// An absolute ZooKeeper path: starts with `/`, no trailing `/`, no empty,
/// `.` or `..` segment, no control characters, at most 256 bytes.
fn check_path(path: &str) -> Result<(), ConfigError> {
    let reason = if !path.starts_with('/') {
        Some("must start with `/`")
    } else if path.len() < 2 {
        Some("must name a node below `/`")
    } else if let Some(problem) = palisade_core::key_prefix_problem(path) {
        Some(problem)
    } else if path[1..]
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        Some("must not contain empty, `.` or `..` segments")
    } else if path == "/zookeeper" || path.starts_with("/zookeeper/") {
        Some("`/zookeeper` is ZooKeeper's own")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(ConfigError::BadPath {
            path: path.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// `value`, given as the `field`, refused by the sequencer's rules.
fn bad_id(field: &'static str, value: &str) -> impl FnOnce(SequencerError) -> ConfigError {
    let value = value.to_owned();
    move |source| ConfigError::BadId {
        field,
        value,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(connect: &str) -> String {
        ZkConfig::parse(connect).unwrap_err().to_string()
    }

    #[test]
    fn connect_strings_parse_into_hosts_and_a_chroot() {
        let config = ZkConfig::parse(" a:1 ,b:2,c:3/x/y").unwrap();
        assert_eq!(config.hosts(), ["a:1", "b:2", "c:3"]);
        assert_eq!(config.chroot(), "/x/y");
        assert_eq!(config.root(), "/x/y/palisade/locks");
        assert_eq!(ZkConfig::parse("a:1/").unwrap().root(), DEFAULT_PREFIX);
        assert!(bad("").contains("no server"));
        assert!(bad("a").contains("`a` is not host:port"));
        assert!(bad("a:0").contains("not host:port"));
        assert!(bad("a:x").contains("not host:port"));
        assert!(bad("a:1/x/").contains("must not end with `/`"));
        assert!(bad("a:1/x/../y").contains("`..`"));
    }

    #[test]
    fn prefixes_are_checked() {
        let config = ZkConfig::parse("a:1").unwrap();
        assert!(config.clone().with_prefix("locks").is_err());
        assert!(config.clone().with_prefix("/").is_err());
        assert!(config.clone().with_prefix("/zookeeper/x").is_err());
        assert!(config.clone().with_prefix("/a\nb").is_err());
        assert_eq!(config.with_prefix("/l").unwrap().root(), "/l");
    }

    #[test]
    fn the_default_issuer_ignores_the_order_of_the_servers() {
        let one = ZkConfig::parse("b:2,a:1").unwrap();
        let other = ZkConfig::parse("a:1,b:2").unwrap();
        assert_eq!(one.issuer(), other.issuer());
        assert!(one.issuer().starts_with("zookeeper-"));
        let elsewhere = ZkConfig::parse("a:1,b:2/other").unwrap();
        assert_ne!(one.issuer(), elsewhere.issuer());
    }

    #[test]
    fn an_issuer_the_signer_contradicts_is_refused() {
        let key =
            palisade_core::SigningKey::from_hex("k1", "000102030405060708090a0b0c0d0e0f").unwrap();
        let signer = Signer::new("zk-a", key).unwrap();
        let config = ZkConfig::parse("a:1").unwrap().with_signer(signer);
        assert_eq!(config.issuer(), "zk-a");
        assert!(config.validate().is_ok());
        let conflicting = config.with_issuer("zk-b").unwrap();
        assert!(matches!(
            conflicting.validate(),
            Err(ConfigError::IssuerConflict { .. })
        ));
    }
}
