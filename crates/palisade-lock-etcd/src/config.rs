//! Where etcd is and how to talk to it: [`EtcdConfig`], and [`ConfigError`],
//! this crate's one error enum (everything else is a core `LockError`).

use palisade_core::{Sequencer, SequencerError, Signer};
use palisade_etcd::{EndpointError, EtcdConnection};

/// The default key prefix: every Palisade key in etcd lives under it.
pub const DEFAULT_PREFIX: &str = "/palisade/locks";

/// A configuration that cannot work, caught before any connection is made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The endpoint list is empty, or an endpoint is not `host:port`,
    /// `http://host:port` or (with the `tls` feature) `https://host:port`.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
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

/// Where etcd is and how to talk to it.
///
/// Session behaviour (TTL, keep-alive interval, safety margin, lock-delay,
/// waiter bound) is not here: it is the core `SessionOptions`, given per
/// session, so one connection can serve sessions with different TTLs.
///
/// The endpoints, credentials, TLS and timeouts are an [`EtcdConnection`],
/// the same type the etcd storage engine takes: set them there.
///
/// ```
/// use std::time::Duration;
/// use palisade_lock_etcd::{EtcdConfig, EtcdConnection};
///
/// let connection = EtcdConnection::new(["http://127.0.0.1:2379", "http://127.0.0.1:22379"])?
///     .with_request_timeout(Duration::from_secs(2))
///     .with_user("orders", "secret");
/// let config = EtcdConfig::with_connection(connection).with_prefix("/orders/locks")?;
/// assert_eq!(config.prefix(), "/orders/locks");
/// assert_eq!(config.endpoints().len(), 2);
/// assert_eq!(config.connection().user(), Some("orders"));
/// # Ok::<(), palisade_lock_etcd::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// The endpoints, credentials, TLS and timeouts, shared with the etcd
    /// storage engine. Its request timeout applies to every unary request
    /// (txn, get, lease grant): a request that takes longer is reported as
    /// `BackendTimeout`; its effect is unknown, and the caller cleans up by
    /// owner key.
    connection: EtcdConnection,
    /// Keys live under `<prefix>/<escaped lock name>/`. Two deployments that
    /// must not see each other's locks use different prefixes.
    prefix: String,
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
        Ok(EtcdConfig {
            connection: EtcdConnection::new(endpoints)?,
            prefix: DEFAULT_PREFIX.to_owned(),
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
        Ok(EtcdConfig::with_connection(
            EtcdConnection::from_endpoint_list(list)?,
        ))
    }

    /// A configuration over a connection built elsewhere (the same one an
    /// etcd storage engine uses, say), with the default prefix.
    pub fn with_connection(connection: EtcdConnection) -> Self {
        EtcdConfig {
            connection,
            prefix: DEFAULT_PREFIX.to_owned(),
            issuer: None,
            holder_name: None,
            signer: None,
        }
    }

    /// Sets the key prefix (1 to 256 bytes, no control characters, not
    /// ending with `/`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Result<Self, ConfigError> {
        let prefix = prefix.into();
        if let Some(reason) = palisade_core::key_prefix_problem(&prefix) {
            return Err(ConfigError::BadPrefix { prefix, reason });
        }
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
        Sequencer::check_holder(&longest).map_err(bad_id("holder name", &name))?;
        self.holder_name = Some(name);
        Ok(self)
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[String] {
        self.connection.endpoints()
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The endpoints, credentials, TLS and timeouts.
    pub fn connection(&self) -> &EtcdConnection {
        &self.connection
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
        match self.connection.zero_timeout() {
            Some(field) => Err(ConfigError::ZeroTimeout { field }),
            None => Ok(()),
        }
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
    use std::time::Duration;

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
            Err(ConfigError::Endpoint(EndpointError::BadEndpoint {
                reason: "no port; expected host:port",
                ..
            }))
        ));
        assert!(matches!(
            endpoint("ftp://127.0.0.1:21"),
            Err(ConfigError::Endpoint(EndpointError::BadEndpoint { .. }))
        ));
        assert!(matches!(
            endpoint("http://127.0.0.1:port"),
            Err(ConfigError::Endpoint(EndpointError::BadEndpoint { .. }))
        ));
        assert!(matches!(
            endpoint("http://127.0.0.1:2379/v3"),
            Err(ConfigError::Endpoint(EndpointError::BadEndpoint { .. }))
        ));
        assert_eq!(
            EtcdConfig::new(Vec::<String>::new()).map(|_| ()),
            Err(ConfigError::Endpoint(EndpointError::NoEndpoints))
        );
        #[cfg(not(feature = "tls"))]
        assert!(matches!(
            endpoint("https://127.0.0.1:2379"),
            Err(ConfigError::Endpoint(EndpointError::BadEndpoint { .. }))
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
        let connection = config.connection().clone();
        assert_eq!(
            EtcdConfig::with_connection(connection.with_request_timeout(Duration::ZERO)).validate(),
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
        let connection = EtcdConnection::new(["127.0.0.1:2379"])
            .unwrap()
            .with_user("alice", "hunter2");
        let config = EtcdConfig::with_connection(connection);
        let printed = format!("{config:?}");
        assert!(printed.contains("alice"));
        assert!(!printed.contains("hunter2"));
    }
}
