//! The guard: one guard of a hold in the session's hold table.

use crate::session::Session;

palisade_core::hold_guard! {
    /// Proof that a [`ZkLock`](crate::ZkLock) session holds a lock.
    ///
    /// Its generation is its node's creation zxid plus the floor in force
    /// then (see `floor.rs`): strictly increasing per lock name across
    /// holders, session expiries, leader changes, restarts and re-created
    /// lock directories. Its lease signal fires at the deadline counted from
    /// the last keep-alive the server answered, when ZooKeeper reports the
    /// session expired or closed, or when its node is deleted by someone
    /// else.
    ///
    /// Releasing the last guard of a hold deletes its lock-delay marker and
    /// then its node, which wakes the contender behind it. Dropping a guard
    /// releases it in the background; [`LockGuard::release`](palisade_core::LockGuard::release)
    /// says whether the release happened.
    pub struct ZkGuard(pub(crate) HoldGuard<Session>);
}

impl ZkGuard {
    /// ZooKeeper's id of the session holding this lock (16 hex digits).
    pub fn session_id(&self) -> &str {
        &self.0.backend().lease_id
    }
}
