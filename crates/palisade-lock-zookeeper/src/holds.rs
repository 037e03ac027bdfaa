//! A session's bookkeeping, apart from ZooKeeper: which locks it holds
//! (re-entry counts, the lease tracker of each hold), a gate per lock name
//! serialising the session's own acquisitions and releases, and the
//! per-process bound on waiters per lock.
//!
//! Everything here is in-process state under `std::sync::Mutex`es never
//! held across an `.await`; the ZooKeeper side (nodes, watches) lives in
//! `acquire.rs` and `guard.rs`. Kept in one module so it can move onto a
//! shared hold table without touching the recipe.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use palisade_core::{LeaseTracker, LeaseWatch, LockError, LockName, LostReason, Mode, Sequencer};
use tokio::time::Instant;

use crate::task::AbortOnDrop;

/// Locks a std mutex, ignoring poisoning (every critical section leaves
/// the state consistent before anything can panic).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One lock held by a session, shared by all its re-entrant guards.
pub(crate) struct Hold {
    /// Tells this hold from a later one of the same name, so a stale
    /// guard's release never touches it.
    pub(crate) id: u64,
    pub(crate) mode: Mode,
    /// What every guard of the hold hands out.
    pub(crate) sequencer: Sequencer,
    /// The contender node's path: deleting it releases the lock.
    pub(crate) node: String,
    /// The lock-delay marker's path, when the session has a lock-delay:
    /// deleted just before the node on a release, left to expire with the
    /// lock-delay session otherwise.
    pub(crate) marker: Option<String>,
    /// Guards of this hold not yet released.
    pub(crate) count: usize,
    /// Validity of this hold, extended with the session's lease.
    pub(crate) tracker: LeaseTracker,
    /// Watches the node: its deletion by anyone else (a forced release)
    /// is reported as `KeyDeleted`. Stopped with the hold.
    pub(crate) _node_watch: Option<AbortOnDrop>,
}

/// What a re-entrant acquire found.
pub(crate) enum Reentry {
    /// Held in this mode: one more guard of the hold.
    Again {
        id: u64,
        sequencer: Box<Sequencer>,
        lease: LeaseWatch,
    },
    /// Held in the other mode.
    Conflict(Mode),
    /// Not held by this session.
    Vacant,
}

/// What releasing one guard does to its hold.
pub(crate) enum Step {
    /// Other guards of the hold remain.
    Decremented,
    /// This was the last guard: the hold, taken out when asked for.
    Last(Option<Box<Hold>>),
    /// The hold is no longer this session's (lost and forgotten).
    Gone,
}

/// The locks a session holds, by name.
#[derive(Default)]
pub(crate) struct Holds {
    holds: HashMap<LockName, Hold>,
    next_id: u64,
}

impl Holds {
    /// Re-enters `name` in `mode` if this session holds it.
    pub(crate) fn reenter(&mut self, name: &LockName, mode: Mode) -> Reentry {
        match self.holds.get_mut(name) {
            Some(hold) if hold.mode == mode => {
                hold.count += 1;
                tracing::debug!(lock = %name, generation = hold.sequencer.generation().get(), count = hold.count, "re-entered");
                Reentry::Again {
                    id: hold.id,
                    sequencer: Box::new(hold.sequencer.clone()),
                    lease: hold.tracker.watch(),
                }
            }
            Some(hold) => Reentry::Conflict(hold.mode),
            None => Reentry::Vacant,
        }
    }

    /// A fresh hold id.
    pub(crate) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(crate) fn insert(&mut self, name: LockName, hold: Hold) {
        self.holds.insert(name, hold);
    }

    /// Decrements the hold `id` of `name`, or (with `take_last`) removes it
    /// when this is its last guard.
    pub(crate) fn step(&mut self, name: &LockName, id: u64, take_last: bool) -> Step {
        match self.holds.get_mut(name) {
            Some(hold) if hold.id == id => {
                if hold.count > 1 {
                    hold.count -= 1;
                    Step::Decremented
                } else if take_last {
                    Step::Last(self.holds.remove(name).map(Box::new))
                } else {
                    Step::Last(None)
                }
            }
            _ => Step::Gone,
        }
    }

    /// Moves every hold's deadline after a renewal sent at `valid_until`'s
    /// base; holds whose deadline already passed stay lost.
    pub(crate) fn extend(&self, valid_until: Instant) {
        for hold in self.holds.values() {
            hold.tracker.extend(valid_until);
        }
    }

    /// Declares every hold lost and forgets them.
    pub(crate) fn lose_all(&mut self, reason: LostReason) {
        for (name, hold) in self.holds.drain() {
            if hold.tracker.lose(reason) {
                tracing::warn!(lock = %name, generation = hold.sequencer.generation().get(), reason = reason.as_str(), "lease lost");
            }
        }
    }

    /// Declares the hold `id` of `name` lost (its node was deleted by
    /// someone else) and forgets it.
    pub(crate) fn lose(&mut self, name: &LockName, id: u64, reason: LostReason) {
        if self.holds.get(name).is_some_and(|hold| hold.id == id)
            && let Some(hold) = self.holds.remove(name)
            && hold.tracker.lose(reason)
        {
            tracing::warn!(lock = %name, generation = hold.sequencer.generation().get(), reason = reason.as_str(), "lease lost");
        }
    }
}

/// One async mutex per lock name, serialising a session's own
/// acquisitions and releases of that name (a session has one contender
/// node per name). Held while waiting in ZooKeeper's queue, so a second
/// task of the same session waits behind the first and then re-enters.
#[derive(Default)]
pub(crate) struct Gates {
    gates: Mutex<HashMap<LockName, Weak<tokio::sync::Mutex<()>>>>,
}

impl Gates {
    pub(crate) fn gate(&self, name: &LockName) -> Arc<tokio::sync::Mutex<()>> {
        let mut gates = lock(&self.gates);
        if let Some(gate) = gates.get(name).and_then(Weak::upgrade) {
            return gate;
        }
        gates.retain(|_, gate| gate.strong_count() > 0);
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        gates.insert(name.clone(), Arc::downgrade(&gate));
        gate
    }
}

/// The per-process count of blocked acquires per lock, for the waiter
/// bound (`SessionOptions::max_waiters`).
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    counts: Mutex<HashMap<LockName, usize>>,
}

/// One counted waiter; uncounted when dropped.
pub(crate) struct WaiterTicket {
    waiters: Arc<Waiters>,
    name: LockName,
}

impl Waiters {
    /// Counts a waiter on `name`, or refuses with `Busy` at `max`.
    pub(crate) fn enter(
        self: &Arc<Self>,
        name: &LockName,
        max: usize,
    ) -> Result<WaiterTicket, LockError> {
        let mut counts = lock(&self.counts);
        let count = counts.entry(name.clone()).or_default();
        if *count >= max {
            tracing::warn!(lock = %name, waiters = max, "busy: waiter bound reached");
            return Err(LockError::Busy {
                name: name.clone(),
                waiters: max,
            });
        }
        *count += 1;
        Ok(WaiterTicket {
            waiters: Arc::clone(self),
            name: name.clone(),
        })
    }
}

impl Drop for WaiterTicket {
    fn drop(&mut self) {
        let mut counts = lock(&self.waiters.counts);
        if let Some(count) = counts.get_mut(&self.name) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waiter_bound_counts_live_tickets_only() {
        let waiters = Arc::new(Waiters::default());
        let name = LockName::new("x").unwrap();
        let first = waiters.enter(&name, 2).unwrap();
        let second = waiters.enter(&name, 2).unwrap();
        assert!(matches!(
            waiters.enter(&name, 2),
            Err(LockError::Busy { waiters: 2, .. })
        ));
        drop(first);
        let third = waiters.enter(&name, 2).unwrap();
        drop((second, third));
        assert!(lock(&waiters.counts).is_empty());
    }

    #[test]
    fn gates_are_shared_per_name_while_in_use() {
        let gates = Gates::default();
        let name = LockName::new("x").unwrap();
        let one = gates.gate(&name);
        let two = gates.gate(&name);
        assert!(Arc::ptr_eq(&one, &two));
        let other = gates.gate(&LockName::new("y").unwrap());
        assert!(!Arc::ptr_eq(&one, &other));
    }
}
