//! How the engine connects.

use std::fmt;
use std::time::Duration;

/// Everything [`PostgresEngine::open`](crate::PostgresEngine::open) needs.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    /// `postgres://user[:password]@host[:port]/database[?...]`. Never
    /// logged or shown: [`EngineInfo`](palisade_store::EngineInfo) names
    /// only host, port and database.
    pub url: String,
    /// The most connections the engine opens. Each in-flight request holds
    /// one for the length of its transaction. Default 16.
    pub max_connections: u32,
    /// How long a request waits for a connection (or for a new connection
    /// to be made) before it fails with `StoreError::Unavailable`.
    /// Default 10 s.
    pub acquire_timeout: Duration,
    /// How many idempotency ids each lock remembers. Default 1024 (the
    /// store's default).
    pub idempotency_window: u32,
    /// PostgreSQL's `idle_in_transaction_session_timeout` for the engine's
    /// sessions: a transaction whose process stops between two statements
    /// (paused, partitioned) is rolled back after this long, releasing the
    /// lock's mark row for the other replicas. Its COMMIT, if it ever comes,
    /// then fails, and the caller is told the outcome is unknown.
    /// Default 30 s.
    pub idle_in_transaction_timeout: Duration,
    /// Refuse to open on a server running with `fsync = off`, where a
    /// commit is not durable whatever the session says. Default `true`.
    pub require_fsync: bool,
}

impl PostgresConfig {
    /// The defaults, for `url`.
    pub fn new(url: impl Into<String>) -> PostgresConfig {
        PostgresConfig {
            url: url.into(),
            max_connections: 16,
            acquire_timeout: Duration::from_secs(10),
            idempotency_window: 1024,
            idle_in_transaction_timeout: Duration::from_secs(30),
            require_fsync: true,
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
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &"<redacted>")
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("idempotency_window", &self.idempotency_window)
            .field(
                "idle_in_transaction_timeout",
                &self.idle_in_transaction_timeout,
            )
            .field("require_fsync", &self.require_fsync)
            .finish()
    }
}
