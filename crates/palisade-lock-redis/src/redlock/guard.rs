//! A Redlock hold, its guards, and the lease that follows a majority of
//! per-master leases.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{join_all, select_all};
use palisade_core::{
    LeaseState, LeaseTracker, LeaseWatch, LockError, LockGuard, LockName, LostReason, Mode,
    Sequencer,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::session::RedlockSessionInner;
use crate::RedisGuard;
use crate::error::BACKEND;

/// One Redlock grant: the per-master holds it stands on, its generation and
/// its lease, shared by the guards of a re-entrant hold.
#[derive(Debug)]
pub(crate) struct RedlockHold {
    pub(crate) name: LockName,
    pub(crate) mode: Mode,
    pub(crate) sequencer: Sequencer,
    pub(crate) tracker: Arc<LeaseTracker>,
    /// The per-master holds (a majority or more); taken when given back.
    pub(crate) members: Mutex<Vec<RedisGuard>>,
    /// How many masters a grant needs.
    pub(crate) majority: usize,
    /// Guards alive (re-entry count); changed under the session's map lock.
    pub(crate) guards: Mutex<usize>,
    pub(crate) follower: JoinHandle<()>,
}

impl Drop for RedlockHold {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

impl RedlockHold {
    /// Gives the per-master holds back: `Ok` if a majority of them were
    /// still ours, `NotOwner` otherwise.
    pub(crate) async fn give_back(&self) -> Result<(), LockError> {
        self.follower.abort();
        self.tracker.release();
        let members = std::mem::take(&mut *self.members.lock().expect("members poisoned"));
        let total = members.len();
        let outcomes = join_all(members.into_iter().map(LockGuard::release)).await;
        let released = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        tracing::debug!(backend = BACKEND, lock = %self.name, generation = %self.sequencer.generation(), released, total, "redlock hold given back");
        if released >= self.majority {
            Ok(())
        } else {
            Err(LockError::NotOwner {
                name: self.name.clone(),
                generation: self.sequencer.generation(),
            })
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

/// Proof that a [`Redlock`](super::Redlock) session holds a lock on a
/// majority of masters, with a generation a majority accepted.
///
/// Dropping it releases in the background (best effort); call
/// [`LockGuard::release`] to know the release happened.
#[derive(Debug)]
pub struct RedlockGuard {
    pub(crate) hold: Arc<RedlockHold>,
    pub(crate) session: Arc<RedlockSessionInner>,
    pub(crate) released: bool,
}

impl RedlockGuard {
    /// How many masters this hold stands on.
    pub fn masters_held(&self) -> usize {
        self.hold.members.lock().expect("members poisoned").len()
    }
}

impl LockGuard for RedlockGuard {
    fn issued(&self) -> &Sequencer {
        &self.hold.sequencer
    }

    fn lease(&self) -> LeaseWatch {
        self.hold.tracker.watch()
    }

    async fn release(mut self) -> Result<(), LockError> {
        self.released = true;
        match self.session.forget_guard(&self.hold) {
            Some(last) => last.give_back().await,
            None => Ok(()),
        }
    }
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let Some(last) = self.session.forget_guard(&self.hold) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(error) = last.give_back().await {
                        tracing::debug!(backend = BACKEND, lock = %last.name, %error, "background release failed");
                    }
                });
            }
            Err(_) => {
                tracing::warn!(backend = BACKEND, lock = %last.name, "guard dropped outside a runtime; the hold expires with its TTL");
            }
        }
    }
}
