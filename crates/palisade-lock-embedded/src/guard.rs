//! The proof of a hold.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use palisade_core::{LeaseWatch, LockError, LockGuard, Sequencer};
use tokio::time::Instant;

use crate::session::SessionHandle;
use crate::state::Grant;

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
pub struct EmbeddedGuard {
    /// Keeps the session (and so its lease record) alive while held.
    session: Arc<SessionHandle>,
    sequencer: Sequencer,
    /// The hold's lease-lost signal, shared by the hold's re-entrant guards.
    lease: LeaseWatch,
    /// Set by `release`, so that `Drop` does not release twice.
    released: bool,
}

impl EmbeddedGuard {
    pub(crate) fn new(session: Arc<SessionHandle>, grant: Grant) -> Self {
        EmbeddedGuard {
            session,
            sequencer: grant.sequencer,
            lease: grant.lease,
            released: false,
        }
    }

    fn release_now(&mut self) -> Result<(), LockError> {
        self.released = true;
        self.session.service.inner().lock_state().release(
            self.session.id,
            self.sequencer.lock(),
            self.sequencer.generation(),
            Instant::now(),
        )
    }
}

impl LockGuard for EmbeddedGuard {
    fn issued(&self) -> &Sequencer {
        &self.sequencer
    }

    fn lease(&self) -> LeaseWatch {
        self.lease.clone()
    }

    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send {
        let mut guard = self;
        async move { guard.release_now() }
    }
}

impl Drop for EmbeddedGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Err(error) = self.release_now() {
            tracing::debug!(lock = %self.sequencer.lock(), generation = self.sequencer.generation().get(), %error, "guard dropped after its hold was gone");
        }
    }
}

impl fmt::Debug for EmbeddedGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedGuard")
            .field("sequencer", &self.sequencer.to_string())
            .field("lease", &self.lease.state())
            .finish()
    }
}
