//! Why a transaction was not fenced.

use palisade_core::{Generation, LockName, Refused, SignatureError};

/// Why [`fence`](crate::fence) refused a transaction. On every variant the
/// transaction has been rolled back: nothing the application wrote in it
/// before the refusal is kept, and the marks are unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The fencing rule refused the sequencer: core's one refusal type,
    /// as the resource server and the guard make it. Here it is
    /// [`Refused::Stale`] (the generation is below what the lock's marks
    /// require: a newer holder has been honoured; it carries the marks, as
    /// committed and unchanged, so the lock side can raise its generation
    /// floor above them) or [`Refused::SharedOnWrite`] (a write fenced
    /// with a shared, reader, sequencer).
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The sequencer's signature (or issuer) did not verify; nothing was
    /// sent to the database.
    #[error("lock `{lock}`: {source}")]
    Signature {
        /// The lock.
        lock: LockName,
        /// Why the signature was refused.
        #[source]
        source: SignatureError,
    },
    /// The generation does not fit the signed 64-bit column the marks are
    /// kept in (above `i64::MAX`).
    #[error("lock `{lock}`: generation {presented} does not fit a BIGINT mark")]
    GenerationOutOfRange {
        /// The lock.
        lock: LockName,
        /// The generation offered.
        presented: Generation,
    },
    /// The marks row holds values no fence writes (negative marks): refuse
    /// rather than guess.
    #[error(
        "lock `{lock}`: the palisade_marks row is corrupt (h_excl={exclusive}, h_shared={shared})"
    )]
    CorruptMarks {
        /// The lock.
        lock: LockName,
        /// The `h_excl` column as stored.
        exclusive: i64,
        /// The `h_shared` column as stored.
        shared: i64,
    },
    /// A per-row fenced update found no row with that key.
    #[error("table `{table}`: no row with that key")]
    NoSuchRow {
        /// The table.
        table: String,
    },
    /// A per-row fenced update found the row carrying a newer generation.
    #[error("table `{table}`: the row carries fence generation {stored}, newer than {presented}")]
    StaleRow {
        /// The table.
        table: String,
        /// The row's `fence_generation`.
        stored: i64,
        /// The generation offered.
        presented: Generation,
    },
    /// A table or column name that is not a plain SQL identifier.
    #[error(
        "`{name}` is not a plain SQL identifier (ASCII letters, digits, `_`, not starting with a digit, at most 63 bytes)"
    )]
    BadIdentifier {
        /// The name (clipped to 64 bytes).
        name: String,
    },
    /// The database refused or failed. Under REPEATABLE READ or
    /// SERIALIZABLE this includes serialization failures, which are safe
    /// to retry in a new transaction.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl FenceError {
    /// Whether this is a fencing refusal (stale, shared-on-write, signature),
    /// as opposed to a database failure.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            FenceError::Refused(_) | FenceError::Signature { .. } | FenceError::StaleRow { .. }
        )
    }
}

/// Why [`migrate`](crate::migrate) could not bring the schema up to date.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The database holds a newer schema than this library knows; an older
    /// binary must not write marks it may misread.
    #[error("palisade_fence_sql schema version {found} is newer than this library's {known}")]
    TooNew {
        /// The version in the database.
        found: i64,
        /// The newest version this library knows.
        known: i64,
    },
    /// The database refused or failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}
