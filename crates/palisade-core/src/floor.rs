//! Raising a lock's generation floor: the recovery after a lock service
//! lost its counter (Redis restarted without persistence, etcd's data
//! wiped, a database restored from an old backup). Its new holders get
//! generations the resource servers refuse as stale; their 409 carries the
//! current mark, and raising the floor above that mark makes the next grant
//! pass it.

use std::future::Future;

use crate::{LockError, LockName};

/// What a floor raise did: the floor before and after. The next grant of
/// the lock has a generation above `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FloorRaised {
    /// The floor before: the generation the next grant would have been
    /// above (0 where the lock service had none).
    pub before: u64,
    /// The floor after: at least the mark asked for, never below `before`.
    pub after: u64,
}

impl FloorRaised {
    /// A raise from `before` to `after`.
    pub fn new(before: u64, after: u64) -> Self {
        FloorRaised { before, after }
    }
}

/// Why a floor could not be raised. Nothing was lowered in any case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RaiseFloorError {
    /// No generation this backend issues can be above `mark`: the mark is
    /// forged, or from another issuer.
    #[error(
        "a floor above {mark} is beyond the largest generation this lock service issues ({limit})"
    )]
    OutOfRange {
        /// The mark asked for.
        mark: u64,
        /// The largest generation the backend issues.
        limit: u64,
    },
    /// The backend raises its floor a step at a time (etcd: one put per
    /// revision), and the gap is over the configured limit.
    #[error(
        "the floor is {from} and must reach {to}: a gap of {gap} is over the limit of {max_gap} (one write each); raise the limit if you can wait for it"
    )]
    GapTooLarge {
        /// The floor now.
        from: u64,
        /// The floor to reach.
        to: u64,
        /// `to - from`.
        gap: u64,
        /// The limit.
        max_gap: u64,
    },
    /// The lock service failed; the floor may have moved part of the way
    /// (harmless: raise it again).
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// Raising the generation floor of a lock: implemented by every backend's
/// client whose lock service can do it (etcd, Redis, Redlock, SQL, the
/// embedded service), beside [`Inspect`](crate::Inspect) and
/// [`ForceRelease`](crate::ForceRelease).
///
/// ### To ensure correctness
///
/// - After `raise_floor(name, mark)` returns `Ok`, every grant of `name`
///   that starts afterwards has a generation above `mark`.
/// - Never lower anything: a mark at or below the floor changes nothing
///   (`before == after`), and holders keep their generations.
/// - Idempotent: raising again to the same mark is harmless, so a raise
///   that failed part of the way is simply run again.
/// - Refuse a mark no issued generation can pass
///   ([`RaiseFloorError::OutOfRange`]) before writing anything.
///
/// ```
/// use palisade_core::{LockName, RaiseFloor, RaiseFloorError};
///
/// // The resource server refused generation 3: "current mark 1042".
/// async fn recover<F: RaiseFloor>(service: &F) -> Result<(), RaiseFloorError> {
///     let raised = service.raise_floor(&LockName::new("orders/42").unwrap(), 1042).await?;
///     assert!(raised.after >= 1042);
///     Ok(())
/// }
/// ```
pub trait RaiseFloor: Send + Sync + 'static {
    /// Raises the floor of `name` so that its next grant is above `mark`.
    /// Backends whose generations are global (etcd's revision) raise it for
    /// every lock at once.
    fn raise_floor(
        &self,
        name: &LockName,
        mark: u64,
    ) -> impl Future<Output = Result<FloorRaised, RaiseFloorError>> + Send;
}
