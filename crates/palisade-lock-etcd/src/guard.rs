//! The guard. Releasing is the hold table's (`palisade_core::holds`); the
//! etcd part, deleting the key, is `Session::give_back`.

use std::fmt;
use std::future::Future;

use palisade_core::holds::HoldGuard;
use palisade_core::{LeaseWatch, LockError, LockGuard, Sequencer};

use crate::session::Session;

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
pub struct EtcdGuard(pub(crate) HoldGuard<Session>);

impl EtcdGuard {
    /// The etcd lease id of the session holding this lock.
    pub fn lease_id(&self) -> i64 {
        self.0.backend().lease_id
    }
}

impl LockGuard for EtcdGuard {
    fn issued(&self) -> &Sequencer {
        self.0.issued()
    }

    fn lease(&self) -> LeaseWatch {
        self.0.lease()
    }

    /// Releases this guard; the last guard of a hold deletes the holder key
    /// (compare-and-delete on its create-revision) together with its
    /// lock-delay marker, which wakes the next waiter. Dropping this future
    /// before it is done finishes the release in the background.
    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send {
        self.0.release()
    }
}

impl fmt::Debug for EtcdGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdGuard")
            .field("sequencer", &self.issued().to_string())
            .field("lease", &self.lease().state())
            .finish_non_exhaustive()
    }
}
