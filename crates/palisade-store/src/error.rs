//! What can fail in the store (as opposed to what can be refused).

use crate::LimitKind;

/// A failure of the store itself, or a request it cannot even consider.
///
/// Fencing refusals are *not* here: they are the inner `Err` of the nested
/// `Result` that [`Store::apply`](crate::Store::apply) returns, so `?` on a
/// `StoreError` can never swallow a stale sequencer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The engine failed (an I/O error, a file or row the engine itself
    /// found damaged, an error the database returned). Whether the request
    /// was applied is unknown: a retry with the same request id settles it.
    #[error("the {engine} engine failed: {message}")]
    Storage {
        /// The engine's name ([`EngineInfo::name`](crate::EngineInfo::name)).
        engine: &'static str,
        /// What failed, as text (the original error is logged).
        message: String,
    },
    /// The engine's database cannot be reached (connection refused, no
    /// quorum, timed out). Nothing is known to have been applied by the
    /// request that got this; a retry with the same request id is safe.
    #[error("the {engine} engine is unavailable: {message}")]
    Unavailable {
        /// The engine's name.
        engine: &'static str,
        /// Why, as text.
        message: String,
    },
    /// A flush (fsync) failed earlier, or the sled engine failed with an
    /// I/O error in the middle of a transaction. Writes committed in memory since the
    /// last good flush may not be on disk, so the store stops acknowledging
    /// anything, reads included (fail-stop), until it is reopened.
    #[error("the store failed to flush and refuses further requests until restarted: {message}")]
    FlushFailed {
        /// The flush error, as text (the original is logged).
        message: String,
    },
    /// A key, value or batch exceeds the configured limit.
    #[error("{kind} is {actual} {unit}; the limit is {max} {unit}", unit = kind.unit())]
    TooLarge {
        /// Which limit.
        kind: LimitKind,
        /// The size offered (bytes, or ops for a batch).
        actual: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A key is empty. Every key has at least one byte.
    #[error("keys must not be empty")]
    EmptyKey,
    /// An idempotency key that is empty, too long, or not visible ASCII.
    #[error("invalid idempotency key: {reason}")]
    InvalidRequestId {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Stored bytes that this version cannot decode: a damaged file, or a
    /// data directory written by an incompatible version.
    #[error("corrupt store: {what}")]
    Corrupt {
        /// What could not be decoded.
        what: String,
    },
    /// The store is closing; the engine's committer is gone.
    #[error("the store is shut down")]
    ShutDown,
}

impl StoreError {
    /// Whether the failure is the store's (disk, corruption, fail-stop)
    /// rather than the request's (limits, malformed keys). A resource server
    /// answers the first kind with 503 and the second with 4xx.
    pub fn is_storage_failure(&self) -> bool {
        matches!(
            self,
            StoreError::Storage { .. }
                | StoreError::Unavailable { .. }
                | StoreError::FlushFailed { .. }
                | StoreError::Corrupt { .. }
                | StoreError::ShutDown
        )
    }
}

impl From<palisade_core::RequestIdError> for StoreError {
    fn from(error: palisade_core::RequestIdError) -> Self {
        StoreError::InvalidRequestId {
            reason: error.reason,
        }
    }
}
