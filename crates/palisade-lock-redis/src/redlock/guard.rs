//! A Redlock hold, its guards, and the lease that follows a majority of
//! per-master leases.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{join_all, select_all};
use palisade_core::holds::{GiveBack, HoldBackend, HoldTable, Task};
use palisade_core::{LeaseState, LeaseTracker, LeaseWatch, LockError, LockGuard, LostReason};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::session::RedlockSessionInner;
use crate::RedisGuard;
use crate::error::BACKEND;

/// What Redlock keeps per hold: the per-master holds the grant stands on.
/// Its generation and lease are the table's.
#[derive(Debug)]
pub struct RedlockHold {
    /// The per-master holds (a majority or more); taken when given back.
    pub(crate) members: Mutex<Vec<RedisGuard>>,
    /// How many masters a grant needs.
    pub(crate) majority: usize,
    /// Keeps the hold's lease at what a majority of members guarantee.
    pub(crate) follower: JoinHandle<()>,
}

impl Drop for RedlockHold {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

/// Redlock's protocol behind the session's hold table: a hold is given
/// back by releasing it on every master it stands on.
impl HoldBackend for RedlockSessionInner {
    type Data = RedlockHold;

    fn holds(&self) -> &HoldTable<RedlockHold> {
        RedlockSessionInner::holds(self)
    }

    /// `Ok(true)` if a majority of the per-master holds were still ours.
    async fn give_back(&self, hold: GiveBack<RedlockHold>) -> Result<bool, LockError> {
        let redlock = hold.data();
        // Released before the members go, so the follower, which would
        // see them go, cannot call it a loss.
        redlock.follower.abort();
        hold.tracker().release();
        let members = std::mem::take(&mut *redlock.members.lock().expect("members poisoned"));
        let total = members.len();
        let outcomes = join_all(members.into_iter().map(LockGuard::release)).await;
        let released = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        tracing::debug!(backend = BACKEND, lock = %hold.name(), generation = %hold.generation(), released, total, "redlock hold given back");
        Ok(released >= redlock.majority)
    }

    fn spawn(&self, task: Task) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(task);
            }
            Err(_) => tracing::warn!(
                backend = BACKEND,
                "guard dropped outside a runtime; the hold expires with its TTL"
            ),
        }
    }
}

/// Starts the task that keeps `tracker` at the `majority`-th latest
/// deadline of the members' leases, less `drift`, and declares it lost when
/// fewer than a majority are still held.
pub(crate) fn follow_members(
    tracker: Arc<LeaseTracker>,
    mut members: Vec<LeaseWatch>,
    majority: usize,
    drift: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if !matches!(tracker.state(), LeaseState::Held { .. }) {
                return;
            }
            let mut held: Vec<Instant> = Vec::new();
            let mut reason = LostReason::Expired;
            for member in &members {
                match member.state() {
                    LeaseState::Held { valid_until } => held.push(valid_until),
                    LeaseState::Lost(lost) => reason = lost,
                    LeaseState::Released => reason = LostReason::KeyDeleted,
                }
            }
            if held.len() < majority {
                tracker.lose(reason);
                return;
            }
            held.sort_unstable_by(|a, b| b.cmp(a));
            let deadline = held[majority - 1]
                .checked_sub(drift)
                .unwrap_or_else(Instant::now);
            if !tracker.extend(deadline) {
                return;
            }
            // Wait for a member to publish (a renewal or a loss), or for a
            // member's deadline to pass by itself.
            let waits = members
                .iter_mut()
                .filter(|member| member.is_valid())
                .map(|member| Box::pin(async move { member.changed().await }));
            let earliest = held.last().copied().unwrap_or_else(Instant::now);
            tokio::select! {
                _ = select_all(waits) => {}
                () = tokio::time::sleep_until(earliest) => {}
            }
        }
    })
}

palisade_core::hold_guard! {
    /// Proof that a [`Redlock`](super::Redlock) session holds a lock on a
    /// majority of masters, with a generation a majority accepted.
    ///
    /// Dropping it releases in the background (best effort); call
    /// [`LockGuard::release`] to know the release happened.
    pub struct RedlockGuard(pub(crate) HoldGuard<RedlockSessionInner>);
}

impl RedlockGuard {
    /// How many masters this hold stands on.
    pub fn masters_held(&self) -> usize {
        self.0
            .hold()
            .data()
            .members
            .lock()
            .expect("members poisoned")
            .len()
    }
}
