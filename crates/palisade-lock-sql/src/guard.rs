//! The guard of a hold.

use std::fmt;
use std::sync::Arc;

use palisade_core::{LeaseWatch, LockError, LockGuard, Sequencer};

use crate::session::SessionInner;

/// Proof that a [`crate::SqlLock`] session holds a lock.
///
/// Dropping it releases it in the background; [`LockGuard::release`]
/// reports whether the holder row was still there.
pub struct SqlGuard {
    session: Arc<SessionInner>,
    session_id: Arc<str>,
    token: i64,
    sequencer: Sequencer,
    lease: LeaseWatch,
    released: bool,
}

impl fmt::Debug for SqlGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlGuard")
            .field("sequencer", &self.sequencer.to_string())
            .field("session", &self.session_id)
            .field("lease", &self.lease.state())
            .finish()
    }
}

impl SqlGuard {
    pub(crate) fn new(
        session: Arc<SessionInner>,
        session_id: Arc<str>,
        token: i64,
        sequencer: Sequencer,
        lease: LeaseWatch,
    ) -> SqlGuard {
        SqlGuard {
            session,
            session_id,
            token,
            sequencer,
            lease,
            released: false,
        }
    }
}

impl LockGuard for SqlGuard {
    fn issued(&self) -> &Sequencer {
        &self.sequencer
    }

    fn lease(&self) -> LeaseWatch {
        self.lease.clone()
    }

    async fn release(mut self) -> Result<(), LockError> {
        self.released = true;
        self.session
            .release_one(
                self.sequencer.lock(),
                &self.session_id,
                self.token,
                self.sequencer.generation(),
            )
            .await
    }
}

impl Drop for SqlGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (session, session_id, token, sequencer) = (
            self.session.clone(),
            self.session_id.clone(),
            self.token,
            self.sequencer.clone(),
        );
        runtime.spawn(async move {
            if let Err(error) = session
                .release_one(sequencer.lock(), &session_id, token, sequencer.generation())
                .await
            {
                tracing::debug!(%error, lock = %sequencer.lock(), "background release of a dropped guard failed");
            }
        });
    }
}
