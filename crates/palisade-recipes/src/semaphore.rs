//! A semaphore of N fenced permits.
//!
//! Permit `i` of a semaphore `NAME` with `N` permits is the lock
//! `NAME/.permits/<N>/<i>`: taking a permit is taking one of those locks,
//! so each permit has generations of its own and its holder's sequencer
//! fences what it writes under that permit. The count is in every permit's
//! name, so every client sees the count the holders use: a client created
//! with another N finds their permits through [`Inspect`] and is refused,
//! before it takes a permit and again after (two clients that start
//! together each see the other's permit, so neither goes on).
//!
//! A free permit is taken at once, starting from a random one of those the
//! count check's listing found free. When none is free, the client queues on every permit at once and keeps the first
//! granted, dropping the other requests (a dropped acquisition leaves no
//! queue entry behind: point 5 of [`Lock`]); waiting is the backends' own,
//! event-driven where theirs is.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use palisade_core::{Inspect, LeaseWatch, Lock, LockError, LockGuard, LockName, Mode, Sequencer};

use crate::error::RecipeError;

/// The infix between a semaphore's name and its permits.
const PERMITS: &str = "/.permits/";

/// A semaphore client: its name, its permit count, and its bound on
/// waiters.
///
/// A permit is held by a session: a session holds at most one permit of a
/// semaphore at a time (a second acquisition on the same session may
/// re-enter the permit it has).
#[derive(Debug, Clone)]
pub struct Semaphore {
    name: LockName,
    permits: Vec<LockName>,
    max_waiters: usize,
    waiting: Arc<AtomicUsize>,
}

/// One permit, held: its lock's guard.
#[derive(Debug)]
pub struct Permit<G: LockGuard> {
    index: u32,
    guard: G,
}

impl Semaphore {
    /// The most permits a semaphore can have.
    pub const MAX_PERMITS: u32 = 1024;

    /// A client of `name` with `permits` permits (1 to
    /// [`Semaphore::MAX_PERMITS`]), allowing 1024 waiters.
    pub fn new(name: LockName, permits: u32) -> Result<Self, RecipeError> {
        if !(1..=Self::MAX_PERMITS).contains(&permits) {
            return Err(RecipeError::Invalid(format!(
                "semaphore {name}: {permits} permits; it takes 1 to {}",
                Self::MAX_PERMITS
            )));
        }
        let permit_names = (0..permits)
            .map(|index| LockName::new(format!("{name}{PERMITS}{permits}/{index}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Semaphore {
            name,
            permits: permit_names,
            max_waiters: 1024,
            waiting: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Sets the most callers of [`Semaphore::acquire`] that wait at once
    /// through this client and its clones (at least 1); one more is refused
    /// with [`RecipeError::Busy`].
    pub fn with_max_waiters(mut self, max_waiters: usize) -> Result<Self, RecipeError> {
        if max_waiters == 0 {
            return Err(RecipeError::Invalid(format!(
                "semaphore {}: max waiters must be at least 1",
                self.name
            )));
        }
        self.max_waiters = max_waiters;
        Ok(self)
    }

    /// The semaphore's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The permit count.
    pub fn permits(&self) -> u32 {
        self.permits.len() as u32
    }

    /// The lock of permit `index`.
    pub fn permit_lock(&self, index: u32) -> Option<&LockName> {
        self.permits.get(index as usize)
    }

    /// Takes a free permit if there is one now.
    pub async fn try_acquire<L: Lock, I: Inspect>(
        &self,
        session: &L,
        inspector: &I,
    ) -> Result<Option<Permit<L::Guard>>, RecipeError> {
        // The count check's listing also says which permits are held: only
        // the others are tried (one may have been taken since: the next is).
        let held = self.check_count(inspector).await?;
        let n = self.permits.len();
        let start = rand::random_range(0..n);
        for index in (start..n).chain(0..start) {
            if held[index] {
                continue;
            }
            if let Some(guard) = session
                .try_acquire(&self.permits[index], Mode::Exclusive)
                .await?
            {
                return self.confirm(inspector, index, guard).await.map(Some);
            }
        }
        Ok(None)
    }

    /// Waits for a permit: a free one at once, or the first one released.
    pub async fn acquire<L: Lock, I: Inspect>(
        &self,
        session: &L,
        inspector: &I,
    ) -> Result<Permit<L::Guard>, RecipeError> {
        let _waiting = WaitSlot::take(self)?;
        if let Some(permit) = self.try_acquire(session, inspector).await? {
            return Ok(permit);
        }
        let mut queued: FuturesUnordered<_> = self
            .permits
            .iter()
            .enumerate()
            .map(|(index, name)| async move {
                session
                    .acquire(name, Mode::Exclusive)
                    .await
                    .map(|guard| (index, guard))
            })
            .collect();
        let granted = match queued.next().await {
            Some(granted) => granted?,
            None => unreachable!("a semaphore has at least one permit"),
        };
        // The other requests go: those not granted leave their queues, a
        // grant that raced in is released by its guard's drop.
        drop(queued);
        self.confirm(inspector, granted.0, granted.1).await
    }

    /// How many permits are held now, read through `inspector`.
    pub async fn held<I: Inspect>(&self, inspector: &I) -> Result<usize, RecipeError> {
        let prefix = format!("{}{PERMITS}{}/", self.name, self.permits());
        Ok(inspector
            .list(&prefix)
            .await?
            .iter()
            .filter(|info| !info.holders.is_empty())
            .count())
    }

    /// Refuses when permits of this name are in use with another count;
    /// else which of ours are held, by index.
    async fn check_count<I: Inspect>(&self, inspector: &I) -> Result<Vec<bool>, RecipeError> {
        let prefix = format!("{}{PERMITS}", self.name);
        let mut held = vec![false; self.permits.len()];
        for info in inspector.list(&prefix).await? {
            let Some((theirs, index)) = info
                .name
                .as_str()
                .strip_prefix(&prefix)
                .and_then(|rest| rest.split_once('/'))
            else {
                continue;
            };
            let Ok(theirs) = theirs.parse::<u32>() else {
                continue;
            };
            if theirs == self.permits() {
                if let Some(slot) = index.parse::<usize>().ok().and_then(|i| held.get_mut(i)) {
                    *slot |= !info.holders.is_empty();
                }
            } else {
                tracing::warn!(semaphore = %self.name, ours = self.permits(), theirs, "permit count mismatch");
                return Err(RecipeError::PermitCountMismatch {
                    name: self.name.clone(),
                    ours: self.permits(),
                    theirs,
                });
            }
        }
        Ok(held)
    }

    /// Checks the count again with the permit held, so that of two clients
    /// of different counts that started together, neither goes on.
    async fn confirm<I: Inspect, G: LockGuard>(
        &self,
        inspector: &I,
        index: usize,
        guard: G,
    ) -> Result<Permit<G>, RecipeError> {
        if let Err(error) = self.check_count(inspector).await {
            let _ = guard.release().await;
            return Err(error);
        }
        tracing::debug!(semaphore = %self.name, permit = index, generation = guard.generation().get(), "permit granted");
        Ok(Permit {
            index: index as u32,
            guard,
        })
    }
}

/// One place under a semaphore client's waiter bound, given back on drop.
struct WaitSlot(Arc<AtomicUsize>);

impl WaitSlot {
    fn take(semaphore: &Semaphore) -> Result<WaitSlot, RecipeError> {
        let waiting = semaphore.waiting.fetch_add(1, Ordering::AcqRel);
        let slot = WaitSlot(semaphore.waiting.clone());
        if waiting >= semaphore.max_waiters {
            return Err(RecipeError::Busy {
                name: semaphore.name.clone(),
                waiting,
            });
        }
        Ok(slot)
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<G: LockGuard> Permit<G> {
    /// Which permit (0 to N - 1).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The permit's sequencer, to send with every write made under it;
    /// refused once the permit's lease may have lapsed.
    pub fn sequencer(&self) -> Result<Sequencer, LockError> {
        self.guard.sequencer()
    }

    /// The sequencer as issued, valid or not (for logs, and for tests that
    /// play a stale holder).
    pub fn issued(&self) -> &Sequencer {
        self.guard.issued()
    }

    /// The permit's lease-lost signal.
    pub fn lease(&self) -> LeaseWatch {
        self.guard.lease()
    }

    /// Gives the permit back.
    pub async fn release(self) -> Result<(), LockError> {
        self.guard.release().await
    }
}
