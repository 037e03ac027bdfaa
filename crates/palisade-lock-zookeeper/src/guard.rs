//! The guard, and releasing.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use palisade_core::{
    Generation, LeaseWatch, LockError, LockGuard, LockName, LostReason, Sequencer,
};

use crate::acquire::withdraw_paths;
use crate::errors::BACKEND;
use crate::holds::{Step, lock};
use crate::session::Session;

/// Proof that a [`ZkLock`](crate::ZkLock) session holds a lock.
///
/// Its generation is its node's creation zxid plus the floor in force
/// then (see `floor.rs`): strictly increasing per lock name across
/// holders, session expiries, leader changes, restarts and re-created lock
/// directories. Its lease signal fires at the deadline counted from the
/// last keep-alive the server answered, when ZooKeeper reports the session
/// expired or closed, or when its node is deleted by someone else.
///
/// Dropping a guard releases it in the background; [`LockGuard::release`]
/// says whether the release happened.
pub struct ZkGuard {
    /// Keeps the session (and so its ZooKeeper session) alive while the
    /// guard lives.
    session: Arc<Session>,
    sequencer: Sequencer,
    /// The hold this guard counts in.
    hold_id: u64,
    lease: LeaseWatch,
    released: bool,
}

impl ZkGuard {
    pub(crate) fn new(
        session: Arc<Session>,
        sequencer: Sequencer,
        hold_id: u64,
        lease: LeaseWatch,
    ) -> Self {
        ZkGuard {
            session,
            sequencer,
            hold_id,
            lease,
            released: false,
        }
    }

    /// ZooKeeper's id of the session holding this lock (16 hex digits).
    pub fn session_id(&self) -> &str {
        &self.session.lease_id
    }
}

impl LockGuard for ZkGuard {
    fn issued(&self) -> &Sequencer {
        &self.sequencer
    }

    fn lease(&self) -> LeaseWatch {
        self.lease.clone()
    }

    /// Releases this guard; the last guard of a hold deletes its lock-delay
    /// marker and then its node, which wakes the contender behind it.
    /// Dropping this future before it is done finishes the release in the
    /// background.
    fn release(mut self) -> impl Future<Output = Result<(), LockError>> + Send {
        self.released = true;
        let task = self.session.client.inner.runtime.spawn(release(
            self.session.clone(),
            self.sequencer.lock().clone(),
            self.hold_id,
            self.sequencer.generation(),
        ));
        async move {
            task.await.unwrap_or_else(|error| {
                Err(LockError::Backend {
                    backend: BACKEND,
                    source: error.into(),
                })
            })
        }
    }
}

impl Drop for ZkGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (session, name) = (self.session.clone(), self.sequencer.lock().clone());
        let (hold_id, generation) = (self.hold_id, self.sequencer.generation());
        self.session.client.inner.runtime.spawn(async move {
            if let Err(error) = release(session, name.clone(), hold_id, generation).await {
                tracing::debug!(lock = %name, %error, "releasing a dropped guard failed");
            }
        });
    }
}

impl fmt::Debug for ZkGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkGuard")
            .field("sequencer", &self.sequencer.to_string())
            .field("lease", &self.lease.state())
            .finish_non_exhaustive()
    }
}

/// Releases one guard of the hold `hold_id` on `name`.
async fn release(
    session: Arc<Session>,
    name: LockName,
    hold_id: u64,
    generation: Generation,
) -> Result<(), LockError> {
    let not_owner = || LockError::NotOwner {
        name: name.clone(),
        generation,
    };
    // A release of a re-entered hold needs no gate and no request.
    match lock(&session.state).holds.step(&name, hold_id, false) {
        Step::Decremented => return Ok(()),
        Step::Gone => return Err(not_owner()),
        Step::Last(_) => {}
    }
    let gate = session.gates.gate(&name);
    let _gate = gate.lock().await;
    let hold = match lock(&session.state).holds.step(&name, hold_id, true) {
        Step::Last(Some(hold)) => hold,
        Step::Decremented => return Ok(()),
        Step::Gone | Step::Last(None) => return Err(not_owner()),
    };
    let inner = &session.client.inner;
    if let Some(marker) = &hold.marker {
        // The marker first: a contender woken by the node's deletion must
        // not find it orphaned. A failure leaves it to expire with the
        // lock-delay session (a delay the next holder waits out).
        if let Some(delay_zk) = session.delay_zk() {
            let _ = inner
                .bounded("delete marker", delay_zk.delete(marker, None))
                .await;
        }
    }
    // Did the node still exist? The delete says; "gone" means the hold was
    // already lost (the session expired, or a forced release).
    let node_delete = session.zk()?.delete(&hold.node, None);
    match inner.bounded("release", node_delete).await {
        Ok(()) => {
            hold.tracker.release();
            tracing::info!(backend = BACKEND, lock = %name, generation = generation.get(), mode = %hold.mode, "released");
            Ok(())
        }
        Err(zookeeper_client::Error::NoNode) => {
            hold.tracker.lose(LostReason::KeyDeleted);
            tracing::warn!(backend = BACKEND, lock = %name, generation = generation.get(), "release found the node gone: the hold was already lost");
            Err(not_owner())
        }
        Err(error) => {
            hold.tracker.lose(LostReason::SessionClosed);
            tracing::warn!(backend = BACKEND, lock = %name, generation = generation.get(), %error, "release failed; retrying in the background");
            let error = inner.error("release", error);
            let (session, node) = (session.clone(), hold.node.clone());
            session.client.inner.runtime.clone().spawn(async move {
                for pause in palisade_core::retry_pauses(
                    std::time::Duration::from_millis(50),
                    std::time::Duration::from_secs(2),
                ) {
                    if lock(&session.state).closed
                        || withdraw_paths(&session, Some(node.clone()), None)
                            .await
                            .is_ok()
                    {
                        return;
                    }
                    tokio::time::sleep(pause).await;
                }
            });
            Err(error)
        }
    }
}
