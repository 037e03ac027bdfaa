//! The proof of a hold. Releasing is the session's hold table's
//! (`palisade_core::holds`); giving the hold back to the service is the
//! session's.

use std::fmt;
use std::future::Future;

use palisade_core::holds::HoldGuard;
use palisade_core::{LeaseWatch, LockError, LockGuard, Sequencer};

use crate::session::SessionHandle;

/// A hold of a lock by an [`EmbeddedLock`](crate::EmbeddedLock) session.
///
/// The sequencer carries the lock, mode and generation, plus the service's
/// issuer id, the session's holder id (`holder`), its lease id (`lease`) and
/// a wall-clock expiry hint. [`LockGuard::sequencer`] hands it out only
/// while [`LockGuard::lease`] says the lease is valid.
///
/// Dropping the guard releases it at once (the service is in-process, so
/// "in the background" costs nothing extra); [`LockGuard::release`] does the
/// same and reports [`LockError::NotOwner`] if the hold was already gone
/// (its lease ended).
pub struct EmbeddedGuard(pub(crate) HoldGuard<SessionHandle>);

impl LockGuard for EmbeddedGuard {
    fn issued(&self) -> &Sequencer {
        self.0.issued()
    }

    fn lease(&self) -> LeaseWatch {
        self.0.lease()
    }

    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send {
        self.0.release()
    }
}

impl fmt::Debug for EmbeddedGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedGuard")
            .field("sequencer", &self.issued().to_string())
            .field("lease", &self.lease().state())
            .finish()
    }
}
