//! The guard. Releasing is the hold table's (`palisade_core::holds`); the
//! etcd part, deleting the key, is `Session::give_back`.

use crate::session::Session;

palisade_core::hold_guard! {
    /// Proof that an [`EtcdLock`](crate::EtcdLock) session holds a lock.
    ///
    /// Its generation is the holder key's create-revision: raft-committed,
    /// global to the etcd cluster, and so strictly increasing per lock name
    /// across holders, restarts and leader changes. Its lease signal fires
    /// when the session lease can no longer be shown alive, when etcd
    /// reports the lease gone, or when the holder key is deleted.
    ///
    /// Releasing the last guard of a hold deletes the holder key
    /// (compare-and-delete on its create-revision) together with its
    /// lock-delay marker, which wakes the next waiter. Dropping a guard, or
    /// the future of [`LockGuard::release`](palisade_core::LockGuard::release)
    /// before it is done, releases in the background; `release` says whether
    /// the release happened.
    pub struct EtcdGuard(pub(crate) HoldGuard<Session>);
}

impl EtcdGuard {
    /// The etcd lease id of the session holding this lock.
    pub fn lease_id(&self) -> i64 {
        self.0.backend().lease_id
    }
}
