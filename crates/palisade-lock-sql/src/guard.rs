//! The guard of a hold. Releasing is the hold table's
//! (`palisade_core::holds`); deleting the holder row is the session's
//! `give_back`.

use crate::session::SessionInner;

palisade_core::hold_guard! {
    /// Proof that a [`crate::SqlLock`] session holds a lock.
    ///
    /// Dropping it releases it in the background;
    /// [`LockGuard::release`](palisade_core::LockGuard::release) reports
    /// whether the holder row was still there.
    pub struct SqlGuard(pub(crate) HoldGuard<SessionInner>);
}
