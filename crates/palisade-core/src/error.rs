//! Errors of the lock side.

use std::time::Duration;

use crate::{Generation, LockName, LostReason, Mode};

/// A boxed error from a backend's client library, kept as the source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything a lock operation can fail with.
///
/// Outcomes a caller expects in normal operation are not errors:
/// [`Lock::try_acquire`](crate::Lock::try_acquire) returns `Ok(None)` when
/// the lock is taken. What is here is either a refusal the caller must act on
/// (`Timeout`, `Busy`, `LeaseLost`, `NotOwner`, `ModeConflict`) or a failure
/// of the lock service (`Unavailable`, `BackendTimeout`, `PermissionDenied`,
/// `Backend`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// `acquire_timeout` gave up. The caller's place in the queue is gone.
    #[error("timed out after {waited:?} waiting for lock `{name}`")]
    Timeout {
        /// The lock waited for.
        name: LockName,
        /// How long it waited.
        waited: Duration,
    },
    /// Too many waiters for this lock in this process; failing fast instead
    /// of queueing without bound.
    #[error("lock `{name}` is busy: {waiters} waiters already queued in this process")]
    Busy {
        /// The lock.
        name: LockName,
        /// The waiter bound that was reached.
        waiters: usize,
    },
    /// The hold's validity can no longer be guaranteed; its sequencer must
    /// not be used.
    #[error("lease lost on lock `{name}` (generation {generation}): {reason}")]
    LeaseLost {
        /// The lock.
        name: LockName,
        /// The generation that was held.
        generation: Generation,
        /// Why.
        reason: LostReason,
    },
    /// A release or renewal found that this holder no longer owns the lock
    /// (compare-and-delete saw another owner, or nothing).
    #[error("lock `{name}` is not held by this holder (generation {generation})")]
    NotOwner {
        /// The lock.
        name: LockName,
        /// The generation this holder had.
        generation: Generation,
    },
    /// The session already holds the lock in the other mode. Re-entry keeps
    /// the mode; upgrading or downgrading in place is not supported because
    /// it deadlocks two upgraders.
    #[error(
        "lock `{name}` is already held in {held} mode by this session; cannot re-enter in {requested} mode"
    )]
    ModeConflict {
        /// The lock.
        name: LockName,
        /// The mode the session holds it in.
        held: Mode,
        /// The mode that was asked for.
        requested: Mode,
    },
    /// The session was closed (explicitly, or because its lease ended).
    #[error("the lock session is closed")]
    SessionClosed,
    /// The lock service cannot be reached (connection refused, reset, DNS).
    #[error("lock service {backend} is unavailable: {source}")]
    Unavailable {
        /// Which backend (`etcd`, `redis`, ...).
        backend: &'static str,
        /// The client library's error.
        #[source]
        source: BoxError,
    },
    /// A request to the lock service got no answer in time. Its effect is
    /// unknown; the backend has cleaned up what it could.
    #[error("lock service {backend} did not answer `{operation}` within {after:?}")]
    BackendTimeout {
        /// Which backend.
        backend: &'static str,
        /// What was asked.
        operation: &'static str,
        /// The time limit.
        after: Duration,
    },
    /// The lock service refused on authentication or authorization grounds.
    #[error("lock service {backend} denied permission: {message}")]
    PermissionDenied {
        /// Which backend.
        backend: &'static str,
        /// The service's message.
        message: String,
    },
    /// A generation below one already known to be honoured was about to be
    /// issued (the backend's counter went backwards, e.g. Redis restarted
    /// without persistence). Refused rather than handed out.
    #[error(
        "lock `{name}`: the lock service would issue generation {offered}, below the floor {floor}; its counter went backwards"
    )]
    GenerationRegression {
        /// The lock.
        name: LockName,
        /// What the service offered.
        offered: u64,
        /// The known floor.
        floor: u64,
    },
    /// Any other failure of the lock service or its client.
    #[error("lock service {backend} failed: {source}")]
    Backend {
        /// Which backend.
        backend: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
}

impl LockError {
    /// What a waiting `acquire` answers if its wait ended with no guard:
    /// a backend's waiting path returns only a grant or an error, so this
    /// is a bug, reported as a [`LockError::Backend`] rather than panicked
    /// on.
    pub fn ended_without_grant(backend: &'static str) -> LockError {
        LockError::Backend {
            backend,
            source: "a waiting acquire ended without a grant".into(),
        }
    }

    /// A short stable name for metrics and logs: `timeout`, `busy`,
    /// `lease_lost`, `not_owner`, `mode_conflict`, `session_closed`,
    /// `unavailable`, `backend_timeout`, `permission_denied`,
    /// `generation_regression`, `backend`.
    pub fn kind(&self) -> &'static str {
        match self {
            LockError::Timeout { .. } => "timeout",
            LockError::Busy { .. } => "busy",
            LockError::LeaseLost { .. } => "lease_lost",
            LockError::NotOwner { .. } => "not_owner",
            LockError::ModeConflict { .. } => "mode_conflict",
            LockError::SessionClosed => "session_closed",
            LockError::Unavailable { .. } => "unavailable",
            LockError::BackendTimeout { .. } => "backend_timeout",
            LockError::PermissionDenied { .. } => "permission_denied",
            LockError::GenerationRegression { .. } => "generation_regression",
            LockError::Backend { .. } => "backend",
        }
    }

    /// Whether retrying the same call later may succeed without anything
    /// else changing (the service was unreachable or slow, or the lock busy).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            LockError::Timeout { .. }
                | LockError::Busy { .. }
                | LockError::Unavailable { .. }
                | LockError::BackendTimeout { .. }
        )
    }
}
