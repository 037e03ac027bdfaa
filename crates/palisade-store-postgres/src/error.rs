//! Why the engine could not open, and how database failures become
//! `StoreError`s.

use palisade_store::StoreError;

use crate::ENGINE;

/// Why [`PostgresEngine::open`](crate::PostgresEngine::open) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL does not parse as a PostgreSQL connection URL.
    #[error("invalid PostgreSQL URL: {reason}")]
    InvalidUrl {
        /// What is wrong with it (the URL itself is not repeated: it may
        /// hold a password).
        reason: String,
    },
    /// The database holds a newer engine schema than this binary knows. An
    /// older binary must not write marks it may misread: upgrade it.
    #[error(
        "the palisade_store schema in this database is version {found}, newer than this binary's {known}; upgrade palisade"
    )]
    SchemaTooNew {
        /// The version in the database.
        found: i64,
        /// The newest version this binary knows.
        known: i64,
    },
    /// The server runs with `fsync = off`: a commit would not be durable.
    #[error(
        "the PostgreSQL server runs with fsync = off, so a commit is not durable; turn fsync on (or set require_fsync = false to accept losing acknowledged writes in a crash)"
    )]
    FsyncOff,
    /// A session setting the engine forces did not hold (a pooler in
    /// between that drops startup options, for instance).
    #[error("PostgreSQL session setting {name} is `{found}`, expected `{expected}`")]
    SessionSetting {
        /// The setting.
        name: &'static str,
        /// What the session reports.
        found: String,
        /// What the engine needs.
        expected: &'static str,
    },
    /// The database refused or could not be reached.
    #[error("PostgreSQL: {0}")]
    Database(#[from] sqlx::Error),
}

/// Where in a request a database error happened, which decides what the
/// caller may conclude.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Before COMMIT was sent: the transaction cannot have committed.
    Before,
    /// While COMMIT was under way: it may or may not have committed.
    Commit,
}

/// What went wrong in one attempt of a request.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The database failed or refused.
    Database {
        /// Where in the request.
        stage: Stage,
        /// The error.
        error: sqlx::Error,
    },
    /// A row holds what no version of the engine writes.
    Corrupt(String),
}

impl Failure {
    pub(crate) fn before(error: sqlx::Error) -> Failure {
        Failure::Database {
            stage: Stage::Before,
            error,
        }
    }

    pub(crate) fn during_commit(error: sqlx::Error) -> Failure {
        Failure::Database {
            stage: Stage::Commit,
            error,
        }
    }

    /// A serialization failure or deadlock before COMMIT: rolled back, so a
    /// new attempt is safe. (The engine's transactions take one mark row
    /// each and should never see one; retrying costs nothing if they do.)
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            Failure::Database {
                stage: Stage::Before,
                error: sqlx::Error::Database(db),
            } => matches!(db.code().as_deref(), Some("40001" | "40P01")),
            _ => false,
        }
    }

    pub(crate) fn into_store_error(self) -> StoreError {
        match self {
            Failure::Corrupt(what) => StoreError::Corrupt { what },
            Failure::Database {
                stage: Stage::Commit,
                error,
            } => StoreError::Storage {
                engine: ENGINE,
                message: format!(
                    "COMMIT did not complete, so whether the request was applied is unknown (retry with the same request id): {error}"
                ),
            },
            Failure::Database { error, .. } if is_unreachable(&error) => StoreError::Unavailable {
                engine: ENGINE,
                message: error.to_string(),
            },
            Failure::Database { error, .. } => StoreError::Storage {
                engine: ENGINE,
                message: error.to_string(),
            },
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Database { error, .. } => error.fmt(f),
            Failure::Corrupt(what) => write!(f, "corrupt: {what}"),
        }
    }
}

impl From<sqlx::Error> for Failure {
    fn from(error: sqlx::Error) -> Failure {
        Failure::before(error)
    }
}

/// Errors that say the database cannot be reached, rather than that it
/// refused something.
fn is_unreachable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed => true,
        // 08: connection exception; 57P01-57P03: admin shutdown, crash
        // shutdown, cannot connect now (starting up, recovering).
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P0")),
        _ => false,
    }
}
