//! The proof of a hold. Releasing is the session's hold table's
//! (`palisade_core::holds`); giving the hold back to the service is the
//! session's.

use crate::session::SessionHandle;

palisade_core::hold_guard! {
    /// A hold of a lock by an [`EmbeddedLock`](crate::EmbeddedLock) session.
    ///
    /// The sequencer carries the lock, mode and generation, plus the
    /// service's issuer id, the session's holder id (`holder`), its lease id
    /// (`lease`) and a wall-clock expiry hint.
    /// [`LockGuard::sequencer`](palisade_core::LockGuard::sequencer) hands it
    /// out only while the lease is valid.
    ///
    /// Dropping the guard releases it at once (the service is in-process, so
    /// "in the background" costs nothing extra);
    /// [`LockGuard::release`](palisade_core::LockGuard::release) does the
    /// same and reports [`LockError::NotOwner`](palisade_core::LockError::NotOwner)
    /// if the hold was already gone (its lease ended).
    pub struct EmbeddedGuard(pub(crate) HoldGuard<SessionHandle>);
}
