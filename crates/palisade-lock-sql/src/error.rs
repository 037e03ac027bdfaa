//! Errors: this crate's own, and how database failures become
//! [`LockError`]s.

use std::time::Duration;

use palisade_core::LockError;

/// What can go wrong setting up a SQL lock client. Lock operations
/// themselves fail with [`LockError`], the error every backend shares.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlLockError {
    /// The URL names neither PostgreSQL nor MariaDB/MySQL.
    #[error("unsupported database URL scheme in `{url}`: expected postgres:// or mysql://")]
    UnsupportedUrl {
        /// The URL, with any password removed.
        url: String,
    },
    /// The configuration or the session options cannot work.
    #[error("invalid SQL lock configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// The lock tables were created by a newer Palisade than this one.
    #[error(
        "the lock tables have schema version {found}; this Palisade knows versions up to {known}: upgrade Palisade before using these tables"
    )]
    SchemaTooNew {
        /// The version recorded in `palisade_schema`.
        found: i64,
        /// The newest version this code knows.
        known: i64,
    },
    /// The PostgreSQL server runs with `fsync = off`: a commit is not
    /// durable, so after a crash the lock table could hand out a generation
    /// again. The storage engine refuses the same server.
    #[error(
        "the PostgreSQL server runs with fsync = off, so a commit is not durable and after a crash the lock table could issue a generation again; turn fsync on"
    )]
    FsyncOff,
    /// Connecting, creating the tables or listening failed.
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// Maps a failed database call to the lock error a caller can act on:
/// connection-level failures are `Unavailable` (retry later), everything
/// else `Backend`.
pub(crate) fn from_sqlx(backend: &'static str, error: sqlx::Error) -> LockError {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => LockError::Unavailable {
            backend,
            source: Box::new(error),
        },
        other => LockError::Backend {
            backend,
            source: Box::new(other),
        },
    }
}

/// A call that did not finish within the operation timeout: its effect on
/// the database is unknown.
pub(crate) fn timed_out(
    backend: &'static str,
    operation: &'static str,
    after: Duration,
) -> LockError {
    LockError::BackendTimeout {
        backend,
        operation,
        after,
    }
}

/// Whether the database aborted the transaction to break a deadlock or a
/// serialization conflict; such a transaction changed nothing and is
/// retried.
pub(crate) fn is_retryable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => {
            matches!(
                db.code().as_deref(),
                // PostgreSQL: deadlock_detected, serialization_failure.
                Some("40P01") | Some("40001") // MariaDB: ER_LOCK_DEADLOCK's SQLSTATE.
            ) || db.message().contains("Deadlock found")
        }
        _ => false,
    }
}
