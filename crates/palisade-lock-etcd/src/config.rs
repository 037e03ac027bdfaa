//! Where etcd is and how to talk to it: [`EtcdConfig`], and [`ConfigError`],
//! this crate's one error enum (everything else is a core `LockError`).

use std::fmt;
use std::time::Duration;

use palisade_core::{Generation, LockName, Mode, Sequencer, SequencerError, Signer};

/// The default key prefix: every Palisade key in etcd lives under it.
pub const DEFAULT_PREFIX: &str = "/palisade/locks";

/// A configuration that cannot work, caught before any connection is made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No endpoint was given.
    #[error("no etcd endpoint given")]
    NoEndpoints,
    /// An endpoint is not `host:port`, `http://host:port` or (with the `tls`
    /// feature) `https://host:port`.
    #[error("etcd endpoint `{endpoint}`: {reason}")]
    BadEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The key prefix is empty, too long, ends with `/` or contains a control
    /// character.
    #[error("etcd key prefix `{prefix}`: {reason}")]
    BadPrefix {
        /// The prefix as given.
        prefix: String,
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
    /// The session options cannot keep a lease alive (see
    /// `SessionOptions::validate`).
    #[error("session options: {reason}")]
    BadSessionOptions {
        /// Why.
        reason: String,
    },
    /// An issuer was configured with [`EtcdConfig::with_issuer`] and a
    /// signer with another issuer with [`EtcdConfig::with_signer`]: every
    /// sequencer would carry the signer's, so the configured one would be
    /// silently ignored (and a live check configured with it would refuse
    /// every signed sequencer).
    #[error("issuer `{configured}` is configured, but the signer signs as `{signer}`")]
    IssuerConflict {
        /// The issuer given to `with_issuer`.
        configured: String,
        /// The signer's issuer.
        signer: String,
    },
}

/// User name and password for etcd's authentication. The password is never
/// printed.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub(crate) user: String,
    pub(crate) password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Where etcd is and how to talk to it.
///
/// Session behaviour (TTL, keep-alive interval, safety margin, lock-delay,
/// waiter bound) is not here: it is the core `SessionOptions`, given per
/// session, so one connection can serve sessions with different TTLs.
///
/// ```
/// use std::time::Duration;
/// use palisade_lock_etcd::EtcdConfig;
///
/// let config = EtcdConfig::new(["http://127.0.0.1:2379", "http://127.0.0.1:22379"])?
///     .with_prefix("/orders/locks")?
///     .with_request_timeout(Duration::from_secs(2))
///     .with_user("orders", "secret");
/// assert_eq!(config.prefix(), "/orders/locks");
/// assert_eq!(config.endpoints().len(), 2);
/// # Ok::<(), palisade_lock_etcd::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Every member the client may talk to. Requests are balanced over the
    /// reachable ones, so losing one member of three costs nothing but the
    /// requests in flight to it.
    endpoints: Vec<String>,
    /// Keys live under `<prefix>/<escaped lock name>/`. Two deployments that
    /// must not see each other's locks use different prefixes.
    prefix: String,
    /// Applied to every unary request (txn, get, lease grant). A request that
    /// takes longer is reported as `BackendTimeout`; its effect is unknown,
    /// and the caller cleans up by owner key.
    request_timeout: Duration,
    /// Applied to opening a TCP connection to one member.
    connect_timeout: Duration,
    credentials: Option<Credentials>,
    #[cfg(feature = "tls")]
    tls: Option<etcd_client::TlsOptions>,
    /// Overrides the issuer written into sequencers; by default it is
    /// derived from the etcd cluster id, so a resource server can tell which
    /// cluster minted a generation.
    issuer: Option<String>,
    /// A human name for this process, put in front of the lease id in the
    /// sequencer's `holder` field and in the keys' values.
    holder_name: Option<String>,
    /// Signs every sequencer handed out, when set: the signer's issuer
    /// replaces the derived one, and an HMAC over every field lets a
    /// resource server holding the key refuse forged sequencers (say
    /// generation `u64::MAX`) before they can move a mark. The key id
    /// travels in the signature, so keys can be rotated.
    signer: Option<Signer>,
}

impl EtcdConfig {
    /// A configuration for these endpoints, with the default prefix
    /// ([`DEFAULT_PREFIX`]), a 5 s request timeout and a 3 s connect timeout.
    pub fn new<I, S>(endpoints: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let endpoints: Vec<String> = endpoints
            .into_iter()
            .map(|endpoint| endpoint.into().trim().to_owned())
            .collect();
        if endpoints.is_empty() {
            return Err(ConfigError::NoEndpoints);
        }
        for endpoint in &endpoints {
            validate_endpoint(endpoint)?;
        }
        Ok(EtcdConfig {
            endpoints,
            prefix: DEFAULT_PREFIX.to_owned(),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            credentials: None,
            #[cfg(feature = "tls")]
            tls: None,
            issuer: None,
            holder_name: None,
            signer: None,
        })
    }

    /// A configuration from a comma-separated endpoint list, as found in
    /// `PALISADE_ETCD_ENDPOINTS` or a `--etcd-endpoints` flag.
    ///
    /// ```
    /// use palisade_lock_etcd::EtcdConfig;
    ///
    /// let config = EtcdConfig::from_endpoint_list("127.0.0.1:2379, http://127.0.0.1:22379")?;
    /// assert_eq!(config.endpoints(), ["127.0.0.1:2379", "http://127.0.0.1:22379"]);
    /// assert!(EtcdConfig::from_endpoint_list(" , ").is_err());
    /// # Ok::<(), palisade_lock_etcd::ConfigError>(())
    /// ```
    pub fn from_endpoint_list(list: &str) -> Result<Self, ConfigError> {
        EtcdConfig::new(
            list.split(',')
                .map(str::trim)
                .filter(|endpoint| !endpoint.is_empty()),
        )
    }

    /// Sets the key prefix (1 to 256 bytes, no control characters, not
    /// ending with `/`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Result<Self, ConfigError> {
        let prefix = prefix.into();
        let reason = if prefix.is_empty() {
            Some("must not be empty")
        } else if prefix.len() > 256 {
            Some("must be at most 256 bytes")
        } else if prefix.ends_with('/') {
            Some("must not end with `/`")
        } else if prefix.chars().any(char::is_control) {
            Some("must not contain control characters")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(ConfigError::BadPrefix { prefix, reason });
        }
        self.prefix = prefix;
        Ok(self)
    }

    /// Sets the per-request timeout (must be positive; checked on connect).
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets the connect timeout (must be positive; checked on connect).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Authenticates as `user` (etcd's auth must be enabled on the server).
    pub fn with_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(Credentials {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Uses TLS for `https://` endpoints (and for endpoints without a
    /// scheme), with these settings passed through to the gRPC channel.
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, tls: etcd_client::TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets the issuer id written into every sequencer.
    pub fn with_issuer(mut self, issuer: impl Into<String>) -> Result<Self, ConfigError> {
        let issuer = issuer.into();
        check_id("issuer", &issuer, |s, v| s.with_issuer(v))?;
        self.issuer = Some(issuer);
        Ok(self)
    }

    /// Signs every sequencer with `signer`. Its issuer becomes this
    /// configuration's issuer (in place of the one derived from the cluster
    /// id), so a live check built from the same configuration recognizes
    /// the sequencers. Configuring another issuer with
    /// [`EtcdConfig::with_issuer`] as well is refused on connect
    /// ([`ConfigError::IssuerConflict`]).
    ///
    /// ```
    /// use palisade_core::{Signer, SigningKey};
    /// use palisade_lock_etcd::EtcdConfig;
    ///
    /// let key = SigningKey::from_hex("k1", "000102030405060708090a0b0c0d0e0f")?;
    /// let config = EtcdConfig::from_endpoint_list("127.0.0.1:2379")?
    ///     .with_signer(Signer::new("etcd-orders", key)?);
    /// assert_eq!(config.issuer(), Some("etcd-orders"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_signer(mut self, signer: Signer) -> Self {
        self.signer = Some(signer);
        self
    }

    /// Sets the human name of this process, shown in the sequencer's
    /// `holder` field as `<name>/<lease id>` and in the keys' values.
    pub fn with_holder_name(mut self, name: impl Into<String>) -> Result<Self, ConfigError> {
        let name = name.into();
        // The holder field also carries `/` and a 16-digit lease id.
        let longest = format!("{name}/{:016x}", i64::MAX);
        check_id("holder name", &longest, |s, v| s.with_holder(v)).map_err(|e| match e {
            ConfigError::BadId { field, source, .. } => ConfigError::BadId {
                field,
                value: name.clone(),
                source,
            },
            other => other,
        })?;
        self.holder_name = Some(name);
        Ok(self)
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The per-request timeout.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The user name, if authentication is configured.
    pub fn user(&self) -> Option<&str> {
        self.credentials.as_ref().map(|c| c.user.as_str())
    }

    /// The configured issuer override, if any: the one given to
    /// [`EtcdConfig::with_issuer`], else the signer's.
    pub fn issuer(&self) -> Option<&str> {
        self.issuer
            .as_deref()
            .or_else(|| self.signer.as_ref().map(Signer::issuer))
    }

    /// The signer of this configuration's sequencers, if any.
    pub fn signer(&self) -> Option<&Signer> {
        self.signer.as_ref()
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

    /// The etcd-client options this configuration stands for.
    pub(crate) fn connect_options(&self) -> etcd_client::ConnectOptions {
        let mut options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(self.connect_timeout)
            // HTTP/2 pings find a dead connection between requests. etcd
            // refuses pings more often than every 5 s (`too_many_pings`).
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            // A member that has lost its leader fails requests and watch
            // streams at once instead of leaving them hanging, so the
            // client moves on to a member that can serve them.
            .with_require_leader(true);
        if let Some(credentials) = &self.credentials {
            options = options
                .with_user(credentials.user.clone(), credentials.password.clone())
                .with_auto_token_refresh(true);
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.clone());
        }
        options
    }
}

fn validate_endpoint(endpoint: &str) -> Result<(), ConfigError> {
    let bad = |reason| {
        Err(ConfigError::BadEndpoint {
            endpoint: endpoint.to_owned(),
            reason,
        })
    };
    let authority = if let Some(rest) = endpoint.strip_prefix("http://") {
        rest
    } else if let Some(rest) = endpoint.strip_prefix("https://") {
        if cfg!(not(feature = "tls")) {
            return bad("https needs the `tls` feature of palisade-lock-etcd");
        }
        rest
    } else if endpoint.contains("://") {
        return bad("the scheme must be http or https");
    } else {
        endpoint
    };
    let authority = authority.trim_end_matches('/');
    match authority.rsplit_once(':') {
        None => bad("no port; expected host:port"),
        Some(("", _)) => bad("no host; expected host:port"),
        Some((_, port)) if port.parse::<u16>().is_err() => bad("the port is not a number"),
        Some(_) if authority.contains('/') => bad("a path is not allowed"),
        Some(_) => Ok(()),
    }
}

/// Checks an id with the sequencer's own rules, so a configuration that
/// passes here can never make `acquire` fail later.
fn check_id(
    field: &'static str,
    value: &str,
    set: impl FnOnce(Sequencer, &str) -> Result<Sequencer, SequencerError>,
) -> Result<(), ConfigError> {
    let probe = Sequencer::new(
        LockName::new("probe").expect("a valid name"),
        Mode::Exclusive,
        Generation::MIN,
    );
    set(probe, value)
        .map(|_| ())
        .map_err(|source| ConfigError::BadId {
            field,
            value: value.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(input: &str) -> Result<(), ConfigError> {
        EtcdConfig::new([input]).map(|_| ())
    }

    #[test]
    fn endpoints_table() {
        assert_eq!(endpoint("127.0.0.1:2379"), Ok(()));
        assert_eq!(endpoint("http://127.0.0.1:2379"), Ok(()));
        assert_eq!(endpoint("http://etcd-0.etcd:2379/"), Ok(()));
        assert!(matches!(
            endpoint("127.0.0.1"),
            Err(ConfigError::BadEndpoint {
                reason: "no port; expected host:port",
                ..
            })
        ));
        assert!(matches!(
            endpoint("ftp://127.0.0.1:21"),
            Err(ConfigError::BadEndpoint { .. })
        ));
        assert!(matches!(
            endpoint("http://127.0.0.1:port"),
            Err(ConfigError::BadEndpoint { .. })
        ));
        assert!(matches!(
            endpoint("http://127.0.0.1:2379/v3"),
            Err(ConfigError::BadEndpoint { .. })
        ));
        assert_eq!(
            EtcdConfig::new(Vec::<String>::new()).map(|_| ()),
            Err(ConfigError::NoEndpoints)
        );
        #[cfg(not(feature = "tls"))]
        assert!(matches!(
            endpoint("https://127.0.0.1:2379"),
            Err(ConfigError::BadEndpoint { .. })
        ));
    }

    #[test]
    fn prefixes_and_ids() {
        let config = EtcdConfig::new(["127.0.0.1:2379"]).unwrap();
        assert!(config.clone().with_prefix("/a/b").is_ok());
        for bad in ["", "/a/", "a\nb"] {
            assert!(
                matches!(
                    config.clone().with_prefix(bad),
                    Err(ConfigError::BadPrefix { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(config.clone().with_issuer("etcd-prod").is_ok());
        assert!(matches!(
            config.clone().with_issuer(""),
            Err(ConfigError::BadId {
                field: "issuer",
                ..
            })
        ));
        assert!(config.clone().with_holder_name("web-1").is_ok());
        assert!(matches!(
            config.clone().with_holder_name("x".repeat(120)),
            Err(ConfigError::BadId {
                field: "holder name",
                ..
            })
        ));
        assert_eq!(
            config
                .clone()
                .with_request_timeout(Duration::ZERO)
                .validate(),
            Err(ConfigError::ZeroTimeout {
                field: "request timeout"
            })
        );
    }

    #[test]
    fn the_signer_names_the_issuer_and_a_different_one_is_refused() {
        let key = palisade_core::SigningKey::new("k1", [1u8; 32]).unwrap();
        let signer = Signer::new("etcd-a", key).unwrap();
        let config = EtcdConfig::new(["127.0.0.1:2379"]).unwrap();
        assert_eq!(config.issuer(), None);
        let signed = config.clone().with_signer(signer.clone());
        assert_eq!(signed.issuer(), Some("etcd-a"));
        assert_eq!(signed.signer().map(Signer::key_id), Some("k1"));
        assert_eq!(signed.validate(), Ok(()));
        let same = signed.clone().with_issuer("etcd-a").unwrap();
        assert_eq!(same.validate(), Ok(()));
        let conflicting = signed.with_issuer("etcd-b").unwrap();
        assert_eq!(
            conflicting.validate(),
            Err(ConfigError::IssuerConflict {
                configured: "etcd-b".into(),
                signer: "etcd-a".into(),
            })
        );
        let printed = format!("{conflicting:?}");
        assert!(!printed.contains("0101010101"), "{printed}");
    }

    #[test]
    fn debug_hides_the_password() {
        let config = EtcdConfig::new(["127.0.0.1:2379"])
            .unwrap()
            .with_user("alice", "hunter2");
        let printed = format!("{config:?}");
        assert!(printed.contains("alice"));
        assert!(!printed.contains("hunter2"));
    }
}
