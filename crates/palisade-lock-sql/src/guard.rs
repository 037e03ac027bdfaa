//! The guard of a hold. Releasing is the hold table's
//! (`palisade_core::holds`); deleting the holder row is the session's
//! `give_back`.

use std::fmt;
use std::future::Future;

use palisade_core::holds::HoldGuard;
use palisade_core::{LeaseWatch, LockError, LockGuard, Sequencer};

use crate::session::SessionInner;

/// Proof that a [`crate::SqlLock`] session holds a lock.
///
/// Dropping it releases it in the background; [`LockGuard::release`]
/// reports whether the holder row was still there.
pub struct SqlGuard(pub(crate) HoldGuard<SessionInner>);

impl fmt::Debug for SqlGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlGuard")
            .field("sequencer", &self.issued().to_string())
            .field("session", &self.0.hold().data().session_id())
            .field("lease", &self.lease().state())
            .finish()
    }
}

impl LockGuard for SqlGuard {
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
