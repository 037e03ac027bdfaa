//! How to reach the database, and the client-wide settings.

use std::fmt;
use std::time::Duration;

use derive_setters::Setters;
use palisade_core::Signer;
use palisade_core::redact::{Redacted, redact_url};

use crate::{Dialect, SqlLockError};

/// Settings of a [`crate::SqlLockClient`].
///
/// TLS is set in the URL, as the databases' own clients do:
/// `postgres://...?sslmode=verify-full&sslrootcert=/etc/palisade/ca.pem`
/// (or `require`: encrypted, not verified) and
/// `mysql://...?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/palisade/ca.pem` (or
/// `REQUIRED`). The driver runs rustls on `ring` and trusts the system's
/// roots besides the CA file.
///
/// ```
/// use std::time::Duration;
/// use palisade_lock_sql::SqlConfig;
///
/// let config = SqlConfig::new("postgres://locks@127.0.0.1:5432/app")
///     .with_max_connections(8)
///     .with_operation_timeout(Duration::from_secs(3));
/// assert!(config.validate().is_ok());
/// assert!(SqlConfig::new("sqlite://x").validate().is_err());
/// ```
///
/// The setters are derived from the fields below and carry their
/// documentation.
#[derive(Clone, Setters)]
#[setters(prefix = "with_")]
pub struct SqlConfig {
    #[setters(skip)]
    pub(crate) url: String,
    /// The most connections the client opens (default 16). A waiter holds
    /// one only while its grant transaction runs.
    pub(crate) max_connections: u32,
    /// How long one database round (a grant transaction, a renewal, a
    /// release) may take before it fails with `BackendTimeout` (default
    /// 5 s). A second more is the database's own bound on every pooled
    /// session: on a transaction left idle and on a wait for a row lock.
    pub(crate) operation_timeout: Duration,
    /// Signs every sequencer handed out with this signer (its issuer is set
    /// on the sequencer, and the live check answers `NotHeld` for other
    /// issuers).
    #[setters(strip_option)]
    pub(crate) signer: Option<Signer>,
}

impl fmt::Debug for SqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlConfig")
            .field("url", &Redacted(&self.url))
            .field("max_connections", &self.max_connections)
            .field("operation_timeout", &self.operation_timeout)
            .field("signer", &self.signer.as_ref().map(Signer::issuer))
            .finish()
    }
}

impl SqlConfig {
    /// A configuration for `url`: `postgres://user[:password]@host:port/db`
    /// or `mysql://user[:password]@host:port/db` (MariaDB or MySQL).
    pub fn new(url: impl Into<String>) -> Self {
        SqlConfig {
            url: url.into(),
            max_connections: 16,
            operation_timeout: Duration::from_secs(5),
            signer: None,
        }
    }

    /// The database the URL names, if it is one this backend supports.
    pub fn dialect(&self) -> Option<Dialect> {
        Dialect::from_url(&self.url)
    }

    /// Checks that the configuration can work.
    pub fn validate(&self) -> Result<Dialect, SqlLockError> {
        let dialect = self.dialect().ok_or_else(|| SqlLockError::UnsupportedUrl {
            url: redact_url(&self.url),
        })?;
        if self.max_connections < 2 {
            return Err(SqlLockError::InvalidConfig {
                reason: format!(
                    "max_connections is {}; at least 2 are needed (keep-alive and a grant at once)",
                    self.max_connections
                ),
            });
        }
        if self.operation_timeout.is_zero() {
            return Err(SqlLockError::InvalidConfig {
                reason: "operation_timeout must be positive".into(),
            });
        }
        Ok(dialect)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        for url in [
            "oracle://u:MARKER@h",
            "oracle://u@h/db?password=MARKER",
            "sqlite://h/db?sslpassword=MARKER",
        ] {
            let config = SqlConfig::new(url);
            let error = config.validate().unwrap_err();
            for shown in [
                error.to_string(),
                format!("{error:?}"),
                format!("{config:?}"),
            ] {
                assert!(!shown.contains("MARKER"), "{shown}");
            }
        }
        let config = SqlConfig::new("mysql://root@h/test?ssl-mode=REQUIRED&password=MARKER");
        assert!(!format!("{config:?}").contains("MARKER"));
    }

    #[test]
    fn too_few_connections_are_refused() {
        let config = SqlConfig::new("postgres://h/db").with_max_connections(1);
        assert!(matches!(
            config.validate(),
            Err(SqlLockError::InvalidConfig { .. })
        ));
    }
}
