//! The guard, and releasing.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use palisade_core::{
    Generation, LeaseWatch, LockError, LockGuard, LockName, LostReason, Sequencer,
};
use tokio::sync::OwnedMutexGuard;

use crate::client::Resend;
use crate::keys::LockKeys;
use crate::session::{Hold, Session, lock};
use crate::txns;

/// Proof that an [`EtcdLock`](crate::EtcdLock) session holds a lock.
///
/// Its generation is the holder key's create-revision: raft-committed,
/// global to the etcd cluster, and so strictly increasing per lock name
/// across holders, restarts and leader changes. Its lease signal fires when
/// the session lease can no longer be shown alive, when etcd reports the
/// lease gone, or when the holder key is deleted.
///
/// Dropping a guard releases it in the background; [`LockGuard::release`]
/// says whether the release happened.
pub struct EtcdGuard {
    /// Keeps the session (and so the lease's keep-alive) alive while the
    /// guard lives.
    session: Arc<Session>,
    sequencer: Sequencer,
    /// The owner token: release deletes the key only if it still has this
    /// create-revision.
    create_revision: i64,
    lease: LeaseWatch,
    released: bool,
}

impl EtcdGuard {
    pub(crate) fn new(
        session: Arc<Session>,
        sequencer: Sequencer,
        create_revision: i64,
        lease: LeaseWatch,
    ) -> Self {
        EtcdGuard {
            session,
            sequencer,
            create_revision,
            lease,
            released: false,
        }
    }

    /// The etcd lease id of the session holding this lock.
    pub fn lease_id(&self) -> i64 {
        self.session.lease_id
    }
}

impl LockGuard for EtcdGuard {
    fn issued(&self) -> &Sequencer {
        &self.sequencer
    }

    fn lease(&self) -> LeaseWatch {
        self.lease.clone()
    }

    /// Releases this guard; the last guard of a hold deletes the holder key
    /// (compare-and-delete on its create-revision) together with its
    /// lock-delay marker, which wakes the next waiter. Dropping this future
    /// before it is done finishes the release in the background.
    fn release(mut self) -> impl Future<Output = Result<(), LockError>> + Send {
        self.released = true;
        let session = self.session.clone();
        let name = self.sequencer.lock().clone();
        let create_revision = self.create_revision;
        session.release(name, create_revision, false)
    }
}

impl Drop for EtcdGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let session = self.session.clone();
        let name = self.sequencer.lock().clone();
        let create_revision = self.create_revision;
        let release = session.release(name.clone(), create_revision, true);
        self.session.runtime.spawn(async move {
            if let Err(error) = release.await {
                tracing::debug!(lock = %name, generation = create_revision, %error, "releasing a dropped guard failed");
            }
        });
    }
}

impl fmt::Debug for EtcdGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdGuard")
            .field("sequencer", &self.sequencer.to_string())
            .field("lease", &self.lease.state())
            .finish_non_exhaustive()
    }
}

/// What releasing one guard does to its hold.
enum Step {
    /// Other guards of the hold remain.
    Decremented,
    /// This was the last guard: the hold, removed from the session when
    /// asked for, to delete on etcd.
    Last(Option<Box<Hold>>),
    /// The hold is no longer this session's (lost and forgotten).
    Gone,
}

/// A release in progress. If its future is dropped before it is done, the
/// rest happens in the background: the hold is never left half released.
struct Releasing {
    session: Arc<Session>,
    name: LockName,
    create_revision: i64,
    stage: Stage,
    /// Already the background continuation: if even this is dropped (the
    /// runtime is shutting down), give up rather than spawn again; the
    /// session's lease ends with the process.
    in_background: bool,
}

enum Stage {
    /// The hold is still in the session.
    Started,
    /// The hold is out of the session; its key is being deleted under the
    /// gate.
    Deleting {
        keys: LockKeys,
        gate: OwnedMutexGuard<()>,
    },
    Done,
}

impl Drop for Releasing {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Started if self.in_background => {}
            Stage::Started => {
                let release =
                    self.session
                        .clone()
                        .release(self.name.clone(), self.create_revision, true);
                self.session.runtime.spawn(async move {
                    let _ = release.await;
                });
            }
            Stage::Deleting { keys, gate } => {
                self.session
                    .spawn_withdraw(keys, Some(self.create_revision), Some(gate));
            }
            Stage::Done => {}
        }
    }
}

impl Session {
    /// Releases one guard of the hold with `create_revision` on `name`.
    pub(crate) fn release(
        self: Arc<Self>,
        name: LockName,
        create_revision: i64,
        in_background: bool,
    ) -> impl Future<Output = Result<(), LockError>> + Send + 'static {
        let mut releasing = Releasing {
            session: self,
            name,
            create_revision,
            stage: Stage::Started,
            in_background,
        };
        async move { releasing.run().await }
    }
}

impl Releasing {
    async fn run(&mut self) -> Result<(), LockError> {
        let session = self.session.clone();
        let (name, create_revision) = (self.name.clone(), self.create_revision);
        let not_owner = || LockError::NotOwner {
            name: name.clone(),
            generation: Generation::new(u64::try_from(create_revision).unwrap_or(1))
                .unwrap_or(Generation::MIN),
        };
        // Most releases of a re-entered hold need no gate and no request.
        match session.step(&name, create_revision, false) {
            Step::Decremented => {
                self.stage = Stage::Done;
                return Ok(());
            }
            Step::Gone => {
                self.stage = Stage::Done;
                return Err(not_owner());
            }
            Step::Last(_) => {}
        }
        // The last guard: take the gate so no acquisition of this session
        // can reuse the key while it is being deleted.
        let gate = session.gate(&name).lock_owned().await;
        let hold = match session.step(&name, create_revision, true) {
            Step::Last(Some(hold)) => hold,
            Step::Decremented => {
                self.stage = Stage::Done;
                return Ok(());
            }
            Step::Gone | Step::Last(None) => {
                self.stage = Stage::Done;
                return Err(not_owner());
            }
        };
        let keys = LockKeys::new(session.connection.inner.config.prefix(), &name);
        let txn = txns::remove(
            &keys,
            session.lease_id,
            Some(create_revision),
            session.delay_lease_id.is_some(),
        );
        self.stage = Stage::Deleting { keys, gate };
        let result = session
            .connection
            .inner
            .txn_resending("release", Resend::OnlyUnsent, txn)
            .await;
        match result {
            Ok(response) if response.succeeded() => {
                self.stage = Stage::Done;
                hold.tracker.release();
                tracing::info!(lock = %name, generation = create_revision, mode = %hold.mode, "released");
                Ok(())
            }
            Ok(_) => {
                self.stage = Stage::Done;
                hold.tracker.lose(LostReason::KeyDeleted);
                tracing::warn!(lock = %name, generation = create_revision, "release found the key gone: the hold was already lost");
                Err(not_owner())
            }
            Err(error) => {
                // The key may still be there: the drop of `self` keeps
                // trying in the background (with the gate); tell the caller.
                hold.tracker.lose(LostReason::SessionClosed);
                tracing::warn!(lock = %name, generation = create_revision, %error, "release failed; retrying in the background");
                Err(error)
            }
        }
    }
}

impl Session {
    /// Under the state lock: decrements the hold, or (with `take_last`)
    /// removes it when this is its last guard.
    fn step(&self, name: &LockName, create_revision: i64, take_last: bool) -> Step {
        let mut state = lock(&self.state);
        match state.holds.get_mut(name) {
            Some(hold) if hold.create_revision == create_revision => {
                if hold.count > 1 {
                    hold.count -= 1;
                    tracing::debug!(lock = %name, generation = create_revision, count = hold.count, "re-entry released");
                    Step::Decremented
                } else if take_last {
                    Step::Last(state.holds.remove(name).map(Box::new))
                } else {
                    Step::Last(None)
                }
            }
            _ => Step::Gone,
        }
    }
}
