//! How the engine connects, and the bounds every request runs within.

use std::fmt;
use std::time::Duration;

use palisade_core::redact::redact_url;

/// Everything [`PostgresEngine::open`](crate::PostgresEngine::open) needs.
///
/// The pool size and the timeouts may also be given in the URL, where they
/// override these fields: `postgres://.../db?max_connections=32&statement_timeout=10s`
/// (durations in [`palisade_core::parse_duration`]'s grammar). That is how
/// `palisade serve --store postgres://...` sets them. Every other query
/// parameter must be one the driver honours (`sslmode`, `sslrootcert`,
/// `application_name`, ...): an unknown one is refused, not ignored.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresConfig {
    /// `postgres://user[:password]@host[:port]/database[?...]`. Never
    /// logged or shown: [`EngineInfo`](palisade_store::EngineInfo) names
    /// only host, port and database, and errors show it through
    /// [`palisade_core::redact`]. TLS is set here, as libpq does:
    /// `sslmode=require|verify-ca|verify-full` and `sslrootcert=<CA file>`.
    pub url: String,
    /// The most connections the engine opens. Each in-flight request holds
    /// one for the length of its one statement. Default 16; URL parameter
    /// `max_connections`.
    pub max_connections: u32,
    /// How long a request waits for a connection: a free one of the pool,
    /// or a new one. Past it the request fails with
    /// `StoreError::Unavailable` saying why: PostgreSQL refused the
    /// connection, gave no answer (found by one more attempt, of at most
    /// [`PROBE_TIMEOUT`](crate::PROBE_TIMEOUT)), or every connection was
    /// busy. Default 1 s, so a request finds out within 1.5 s that the
    /// database is gone; URL parameter `connect_timeout`.
    pub acquire_timeout: Duration,
    /// How many idempotency ids each lock remembers. Default 1024 (the
    /// store's default).
    pub idempotency_window: u32,
    /// PostgreSQL's `lock_timeout` for the engine's sessions: the longest
    /// one wait for a lock, such as the lock's mark row that another
    /// request on the same lock holds. Past it the request fails with
    /// `StoreError::Unavailable`, nothing applied. PostgreSQL applies it to
    /// each lock a statement waits for (a row behind a queue of waiters
    /// can take two), so a request's waits in all are bounded by
    /// `statement_timeout`. Every request holds the row for one statement
    /// only, so honest waits are a queue of short statements. Default
    /// 2 s; URL parameter `lock_timeout`.
    pub lock_timeout: Duration,
    /// PostgreSQL's `statement_timeout`: the longest one request's
    /// statement runs, lock wait included. A write cut off by it is
    /// reported as in doubt (`StoreError::Storage`). Default 5 s; URL
    /// parameter `statement_timeout`.
    pub statement_timeout: Duration,
    /// PostgreSQL's `idle_in_transaction_session_timeout`. No request of
    /// the engine leaves a transaction open between two statements; this
    /// ends one that a stopped process would (the schema migration on
    /// open). Default 5 s; URL parameter
    /// `idle_in_transaction_session_timeout`.
    pub idle_in_transaction_timeout: Duration,
    /// Refuse to open on a server running with `fsync = off`, where a
    /// commit is not durable whatever the session says. Default `true`.
    pub require_fsync: bool,
    /// Test only: fenced reads and admits hold their lock's row across
    /// round trips again (see
    /// [`PostgresConfig::hold_transactions_unsafe_for_mutation_tests`]).
    pub(crate) held_transactions: bool,
}

/// The URL parameters sqlx's PostgreSQL driver honours. Anything else
/// would be dropped by the driver with a log line naming its value, which
/// may be a secret: refused instead.
const DRIVER_PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// Why a setting (a field, or a URL parameter) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadSetting {
    /// The setting's name.
    pub(crate) name: String,
    /// What is wrong with it (never its value, which may be a secret).
    pub(crate) reason: String,
}

impl PostgresConfig {
    /// The defaults, for `url`. Set a field directly to change it
    /// (`config.lock_timeout = Duration::from_secs(1)`); the two setters
    /// below exist for the bounds they keep.
    pub fn new(url: impl Into<String>) -> PostgresConfig {
        PostgresConfig {
            url: url.into(),
            max_connections: 16,
            acquire_timeout: Duration::from_secs(1),
            idempotency_window: 1024,
            lock_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: Duration::from_secs(5),
            require_fsync: true,
            held_transactions: false,
        }
    }

    /// Sets the idempotency window (at least 1).
    pub fn with_idempotency_window(mut self, window: u32) -> PostgresConfig {
        self.idempotency_window = window.max(1);
        self
    }

    /// Sets the connection limit (at least 1).
    pub fn with_max_connections(mut self, max: u32) -> PostgresConfig {
        self.max_connections = max.max(1);
        self
    }

    /// Test only, for the fault suite's mutation check: each fenced read
    /// and admit becomes a transaction driven from Rust again (BEGIN, the
    /// row locked, the fence, COMMIT: four round trips), so a process
    /// stopped in the middle holds the lock's row and stalls every other
    /// replica's writes to it. Never use it to serve.
    #[doc(hidden)]
    pub fn hold_transactions_unsafe_for_mutation_tests(mut self) -> PostgresConfig {
        self.held_transactions = true;
        self
    }

    /// This configuration with the engine's own URL parameters applied to
    /// its fields and removed from the URL, after checking that every other
    /// parameter is one the driver honours.
    pub(crate) fn resolved(&self) -> Result<PostgresConfig, BadSetting> {
        let mut config = self.clone();
        let mut url = url::Url::parse(&self.url).map_err(|error| BadSetting {
            name: "url".into(),
            reason: format!("not a URL ({error})"),
        })?;
        let mut kept: Vec<(String, String)> = Vec::new();
        for (name, value) in url.query_pairs() {
            let name = name.into_owned();
            let duration = || {
                palisade_core::parse_duration(&value).map_err(|reason| BadSetting {
                    name: name.clone(),
                    reason,
                })
            };
            match name.as_str() {
                "max_connections" => {
                    config.max_connections = value.parse().map_err(|_| BadSetting {
                        name: name.clone(),
                        reason: format!("`{value}` is not a whole number"),
                    })?;
                }
                "connect_timeout" => config.acquire_timeout = duration()?,
                "lock_timeout" => config.lock_timeout = duration()?,
                "statement_timeout" => config.statement_timeout = duration()?,
                "idle_in_transaction_session_timeout" => {
                    config.idle_in_transaction_timeout = duration()?;
                }
                known if DRIVER_PARAMETERS.contains(&known) || known.starts_with("options[") => {
                    kept.push((name, value.into_owned()));
                }
                _ => {
                    return Err(BadSetting {
                        name,
                        reason: "not a parameter the PostgreSQL engine or its driver knows".into(),
                    });
                }
            }
        }
        if kept.is_empty() {
            url.set_query(None);
        } else {
            url.query_pairs_mut().clear().extend_pairs(&kept);
        }
        config.url = url.into();
        config.check()?;
        Ok(config)
    }

    /// Refuses what PostgreSQL would take to mean something else: a zero
    /// timeout disables the timeout there, and one below a millisecond is
    /// zero to it.
    fn check(&self) -> Result<(), BadSetting> {
        if self.max_connections == 0 {
            return Err(BadSetting {
                name: "max_connections".into(),
                reason: "must be at least 1".into(),
            });
        }
        for (name, value) in [
            ("connect_timeout", self.acquire_timeout),
            ("lock_timeout", self.lock_timeout),
            ("statement_timeout", self.statement_timeout),
            (
                "idle_in_transaction_session_timeout",
                self.idle_in_transaction_timeout,
            ),
        ] {
            if value < Duration::from_millis(1) {
                return Err(BadSetting {
                    name: name.into(),
                    reason: "must be at least 1ms (PostgreSQL reads 0 as no limit)".into(),
                });
            }
        }
        if self.lock_timeout > self.statement_timeout {
            return Err(BadSetting {
                name: "lock_timeout".into(),
                reason: format!(
                    "{} is longer than statement_timeout ({}), which would end the wait first",
                    palisade_core::format_duration(self.lock_timeout),
                    palisade_core::format_duration(self.statement_timeout)
                ),
            });
        }
        Ok(())
    }
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &redact_url(&self.url))
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("idempotency_window", &self.idempotency_window)
            .field("lock_timeout", &self.lock_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field(
                "idle_in_transaction_timeout",
                &self.idle_in_transaction_timeout,
            )
            .field("require_fsync", &self.require_fsync)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parameters_set_the_engine_and_leave_the_drivers_alone() {
        let config = PostgresConfig::new(
            "postgres://app@db:5432/p?max_connections=32&sslmode=verify-full\
             &statement_timeout=10s&lock_timeout=500ms&connect_timeout=2s\
             &idle_in_transaction_session_timeout=1m&sslrootcert=/etc/ca.pem",
        )
        .resolved()
        .unwrap();
        assert_eq!(config.max_connections, 32);
        assert_eq!(config.statement_timeout, Duration::from_secs(10));
        assert_eq!(config.lock_timeout, Duration::from_millis(500));
        assert_eq!(config.acquire_timeout, Duration::from_secs(2));
        assert_eq!(config.idle_in_transaction_timeout, Duration::from_secs(60));
        assert_eq!(
            config.url,
            "postgres://app@db:5432/p?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem"
        );
        let plain = PostgresConfig::new("postgres://app@db/p?max_connections=4")
            .resolved()
            .unwrap();
        assert_eq!(plain.url, "postgres://app@db/p");
    }

    #[test]
    fn settings_that_cannot_be_honoured_are_refused_by_name_without_their_value() {
        let refused = |url: &str| PostgresConfig::new(url).resolved().expect_err("refused");
        // A parameter the driver would drop, logging its value.
        let unknown = refused("postgres://u@h/db?passfile=MARKER");
        assert_eq!(unknown.name, "passfile");
        assert!(!unknown.reason.contains("MARKER"), "{unknown:?}");
        // One grammar for durations: a bare number is refused.
        assert_eq!(
            refused("postgres://u@h/db?connect_timeout=2").name,
            "connect_timeout"
        );
        // PostgreSQL reads 0 as "no limit".
        assert_eq!(
            refused("postgres://u@h/db?lock_timeout=0s").name,
            "lock_timeout"
        );
        assert_eq!(
            refused("postgres://u@h/db?lock_timeout=10s&statement_timeout=5s").name,
            "lock_timeout"
        );
        assert_eq!(
            refused("postgres://u@h/db?max_connections=0").name,
            "max_connections"
        );
    }

    #[test]
    fn debug_shows_no_password_in_any_form() {
        let config = PostgresConfig::new("postgres://u:MARKER1@h/db?password=MARKER2");
        let shown = format!("{config:?}");
        assert!(!shown.contains("MARKER"), "{shown}");
    }
}
