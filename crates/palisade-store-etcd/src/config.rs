//! Where etcd is, how to talk to it, and the cluster's limits:
//! [`EtcdEngineConfig`], and [`ConfigError`] for a configuration that
//! cannot work.

use palisade_etcd::{EndpointError, EtcdConnection};

/// The default key prefix of the engine's keys.
pub const DEFAULT_PREFIX: &str = "/palisade/store";

/// etcd's default `--max-request-bytes`: 1.5 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// etcd's default `--max-txn-ops`.
pub const DEFAULT_MAX_TXN_OPS: usize = 128;

/// A configuration that cannot work, caught before any connection is made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The endpoint list is empty, or an endpoint is not `host:port`,
    /// `http://host:port` or (with the `tls` feature) `https://host:port`.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The key prefix is empty, too long, does not start with `/`, ends
    /// with `/` or contains a control character.
    #[error("etcd key prefix `{prefix}`: {reason}")]
    BadPrefix {
        /// The prefix as given.
        prefix: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A limit or bound that leaves no room for a request.
    #[error("{field}: {reason}")]
    BadLimit {
        /// Which setting.
        field: &'static str,
        /// Why it cannot work.
        reason: &'static str,
    },
}

/// Where the engine's etcd is, and what that cluster accepts.
///
/// The two limits must match (or be below) the cluster's
/// `--max-request-bytes` and `--max-txn-ops`: the engine refuses a request
/// that would exceed them whole, before sending anything, rather than
/// have etcd refuse it or split it into two transactions.
///
/// ```
/// use palisade_store_etcd::EtcdEngineConfig;
///
/// let config = EtcdEngineConfig::from_endpoint_list("127.0.0.1:2379, 127.0.0.1:22379")?
///     .with_prefix("/orders/store")?
///     .with_max_txn_ops(256)?;
/// assert_eq!(config.endpoints().len(), 2);
/// assert_eq!(config.prefix(), "/orders/store");
/// # Ok::<(), palisade_store_etcd::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct EtcdEngineConfig {
    /// The endpoints, credentials, TLS and timeouts, shared with the etcd
    /// lock backend.
    connection: EtcdConnection,
    prefix: String,
    max_request_bytes: usize,
    max_txn_ops: usize,
    max_attempts: u32,
    idempotency_window: u32,
}

impl EtcdEngineConfig {
    /// A configuration for these endpoints with the defaults: prefix
    /// [`DEFAULT_PREFIX`], 5 s request and 3 s connect timeouts, etcd's
    /// default limits, 32 attempts per request under contention, and an
    /// idempotency window of 1024 ids per lock.
    pub fn new<I, S>(endpoints: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdEngineConfig::with_connection(EtcdConnection::new(endpoints)?)
    }

    /// A configuration from a comma-separated endpoint list.
    pub fn from_endpoint_list(list: &str) -> Result<Self, ConfigError> {
        EtcdEngineConfig::with_connection(EtcdConnection::from_endpoint_list(list)?)
    }

    /// A configuration over a connection built elsewhere (the same one the
    /// etcd lock backend uses, say), with the other defaults of
    /// [`EtcdEngineConfig::new`]. The connection holds the endpoints,
    /// credentials, TLS and timeouts; its timeouts must be positive.
    ///
    /// ```
    /// use std::time::Duration;
    /// use palisade_store_etcd::{EtcdConnection, EtcdEngineConfig};
    ///
    /// let connection = EtcdConnection::from_endpoint_list("127.0.0.1:2379")?
    ///     .with_request_timeout(Duration::from_secs(2));
    /// let config = EtcdEngineConfig::with_connection(connection.clone())?;
    /// assert_eq!(config.connection().request_timeout(), Duration::from_secs(2));
    /// assert!(EtcdEngineConfig::with_connection(connection.with_connect_timeout(Duration::ZERO)).is_err());
    /// # Ok::<(), palisade_store_etcd::ConfigError>(())
    /// ```
    pub fn with_connection(connection: EtcdConnection) -> Result<Self, ConfigError> {
        if let Some(field) = connection.zero_timeout() {
            return Err(ConfigError::BadLimit {
                field,
                reason: "must be positive",
            });
        }
        Ok(EtcdEngineConfig {
            connection,
            prefix: DEFAULT_PREFIX.to_owned(),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_txn_ops: DEFAULT_MAX_TXN_OPS,
            max_attempts: 32,
            idempotency_window: 1024,
        })
    }

    /// Sets the key prefix: 2 to 256 bytes, starting with `/`, not ending
    /// with `/`, no control characters. Two stores that must not see each
    /// other's data use prefixes neither of which is a prefix of the other
    /// followed by `/`.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Result<Self, ConfigError> {
        let prefix = prefix.into();
        let reason = if !prefix.starts_with('/') || prefix.len() < 2 {
            Some("must start with `/` and name something")
        } else {
            palisade_core::key_prefix_problem(&prefix)
        };
        if let Some(reason) = reason {
            return Err(ConfigError::BadPrefix { prefix, reason });
        }
        self.prefix = prefix;
        Ok(self)
    }

    /// The cluster's `--max-request-bytes` (default 1.5 MiB, etcd's).
    pub fn with_max_request_bytes(mut self, bytes: usize) -> Result<Self, ConfigError> {
        if bytes < 4096 {
            return Err(ConfigError::BadLimit {
                field: "max request bytes",
                reason: "must be at least 4096",
            });
        }
        self.max_request_bytes = bytes;
        Ok(self)
    }

    /// The cluster's `--max-txn-ops` (default 128, etcd's). A request may
    /// carry this many ops less [`crate::RESERVED_TXN_OPS`], which the
    /// engine's own keys take.
    pub fn with_max_txn_ops(mut self, ops: usize) -> Result<Self, ConfigError> {
        if ops <= crate::RESERVED_TXN_OPS {
            return Err(ConfigError::BadLimit {
                field: "max txn ops",
                reason: "must leave room for at least one op beside the engine's own keys",
            });
        }
        self.max_txn_ops = ops;
        Ok(self)
    }

    /// How many times one request is tried when other writers on its lock
    /// keep committing between its read and its commit (default 32; at
    /// least 1).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// How many idempotency ids each lock remembers (default 1024; at
    /// least 1).
    pub fn with_idempotency_window(mut self, window: u32) -> Self {
        self.idempotency_window = window.max(1);
        self
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[String] {
        self.connection.endpoints()
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The endpoints, credentials, TLS and timeouts. A write whose commit
    /// got no answer within the request timeout is reported as in doubt.
    pub fn connection(&self) -> &EtcdConnection {
        &self.connection
    }

    /// The cluster's request size limit, as configured here.
    pub fn max_request_bytes(&self) -> usize {
        self.max_request_bytes
    }

    /// The cluster's transaction op limit, as configured here.
    pub fn max_txn_ops(&self) -> usize {
        self.max_txn_ops
    }

    /// Attempts per request under contention.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Idempotency ids remembered per lock.
    pub fn idempotency_window(&self) -> u32 {
        self.idempotency_window
    }

    /// The etcd-client options this configuration stands for.
    pub(crate) fn connect_options(&self) -> etcd_client::ConnectOptions {
        self.connection.connect_options()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn endpoints_and_prefixes_are_checked() {
        assert!(EtcdEngineConfig::new(["127.0.0.1:2379"]).is_ok());
        assert!(EtcdEngineConfig::new(["http://127.0.0.1:2379/"]).is_ok());
        assert_eq!(
            EtcdEngineConfig::new(Vec::<String>::new()).unwrap_err(),
            ConfigError::Endpoint(EndpointError::NoEndpoints)
        );
        for bad in ["127.0.0.1", ":2379", "ftp://h:1", "h:port", "h:1/x"] {
            assert!(
                matches!(
                    EtcdEngineConfig::new([bad]),
                    Err(ConfigError::Endpoint(EndpointError::BadEndpoint { .. }))
                ),
                "{bad}"
            );
        }
        let config = EtcdEngineConfig::new(["h:1"]).unwrap();
        for bad in ["", "/", "x", "/x/", "/a\nb"] {
            assert!(
                matches!(
                    config.clone().with_prefix(bad),
                    Err(ConfigError::BadPrefix { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(config.clone().with_max_txn_ops(5).is_err());
        assert!(config.clone().with_max_request_bytes(100).is_err());
        let connection = config.connection().clone();
        assert_eq!(
            EtcdEngineConfig::with_connection(connection.with_request_timeout(Duration::ZERO))
                .map(|_| ()),
            Err(ConfigError::BadLimit {
                field: "request timeout",
                reason: "must be positive"
            })
        );
    }

    #[test]
    fn the_password_is_never_printed() {
        let connection = EtcdConnection::new(["h:1"])
            .unwrap()
            .with_user("orders", "hunter2");
        let config = EtcdEngineConfig::with_connection(connection).unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
        assert_eq!(config.connection().user(), Some("orders"));
    }
}
