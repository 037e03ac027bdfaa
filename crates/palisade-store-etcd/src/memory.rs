//! What the engine remembers of each lock between requests: the state it
//! last saw or wrote, at which revision, and the oldest remembered id.
//!
//! Only a hint: a write built on it commits only if the lock's state key
//! still has that revision, so a memory made stale by another engine costs
//! one failed compare, never a wrong decision.

use std::collections::HashMap;
use std::sync::Mutex;

use palisade_core::LockName;

use crate::plan::Cached;

/// Locks remembered at most; past it the memory starts over (each lock
/// then pays one read on its next write).
const MAX_LOCKS: usize = 100_000;

#[derive(Debug, Default)]
pub(crate) struct LockMemory {
    locks: Mutex<HashMap<LockName, Cached>>,
}

impl LockMemory {
    pub(crate) fn recall(&self, lock: &LockName) -> Option<Cached> {
        self.locked().get(lock).cloned()
    }

    pub(crate) fn remember(&self, lock: &LockName, cached: Cached) {
        let mut locks = self.locked();
        if locks.len() >= MAX_LOCKS && !locks.contains_key(lock) {
            locks.clear();
        }
        locks.insert(lock.clone(), cached);
    }

    pub(crate) fn forget(&self, lock: &LockName) {
        self.locked().remove(lock);
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<LockName, Cached>> {
        // A panic while holding it cannot leave a half-written entry.
        self.locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
