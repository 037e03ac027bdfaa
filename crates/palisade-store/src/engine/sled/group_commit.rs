//! Waiting for outcomes in the sled engine: the slot a committed outcome is
//! delivered into, [`Acknowledged`], the future the engine hands to the
//! store, and the engine's [`Health`].
//!
//! The committer thread (see `committer.rs`) makes a whole group of
//! requests durable at once and only then fills each request's [`Slot`]:
//! so an outcome is never delivered before it is acknowledged. Reads that
//! bypass the committer (plain `get`, `marks`) need no waiting: in flushed
//! mode sled holds only groups already in the synced group log.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::{EngineFuture, StoreError};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a few assignments that cannot leave
    // the state half-updated, so a poisoned mutex is still consistent.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the committer delivers one request's outcome.
#[derive(Debug)]
pub(crate) struct Slot<T> {
    state: Mutex<SlotState<T>>,
}

#[derive(Debug)]
struct SlotState<T> {
    value: Option<Result<T, StoreError>>,
    waker: Option<Waker>,
    /// Set by the first `fill`; later fills are ignored.
    filled: bool,
}

impl<T> Slot<T> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Slot {
            state: Mutex::new(SlotState {
                value: None,
                waker: None,
                filled: false,
            }),
        })
    }

    /// Delivers the outcome. Only the first call counts, so a clean-up path
    /// can fill every slot of a group without overwriting real outcomes.
    pub(crate) fn fill(&self, value: Result<T, StoreError>) {
        let waker = {
            let mut state = lock(&self.state);
            if state.filled {
                return;
            }
            state.filled = true;
            state.value = Some(value);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn poll_take(&self, waker: &Waker) -> Poll<Result<T, StoreError>> {
        let mut state = lock(&self.state);
        match state.value.take() {
            Some(value) => Poll::Ready(value),
            None => {
                if !state.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                    state.waker = Some(waker.clone());
                }
                Poll::Pending
            }
        }
    }
}

/// Whether the engine is fail-stopped, and why.
#[derive(Debug, Default)]
pub(crate) struct Health {
    failure: Mutex<Option<String>>,
}

/// Counters for metrics and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushStats {
    /// Groups the committer made durable in
    /// [`Durability::Flushed`](crate::Durability) mode (groups that wrote:
    /// one append and `fdatasync` of the group log each).
    pub flushes: u64,
    /// Requests acknowledged by those flushes. `tickets / flushes` is the
    /// average group size.
    pub tickets: u64,
    /// Checkpoints completed in [`Durability::Flushed`](crate::Durability)
    /// mode: sled flushed and its files synced, and the group log emptied.
    pub checkpoints: u64,
    /// Interval syncs completed in [`Durability::Buffered`](crate::Durability)
    /// mode: each one wrote sled's log and fsynced sled's files, so every
    /// write acknowledged before it began is on disk.
    pub background_syncs: u64,
}

impl Health {
    /// Records a failed flush or sync (fail-stop); the first reason stays.
    pub(crate) fn fail(&self, message: String) {
        lock(&self.failure).get_or_insert(message);
    }

    pub(crate) fn failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }
}

/// An outcome that is decided, or about to be, but not yet acknowledged:
/// resolves once the committer delivers it into its slot, acknowledged in
/// the engine's [`Durability`](crate::Durability) mode. Never blocks a
/// thread.
#[derive(Debug)]
pub(crate) struct Acknowledged<T> {
    /// `None` once taken.
    slot: Option<Arc<Slot<T>>>,
}

impl<T> Acknowledged<T> {
    pub(crate) fn from_slot(slot: Arc<Slot<T>>) -> Self {
        Acknowledged { slot: Some(slot) }
    }

    /// Boxed, as every [`Engine`](crate::Engine) call returns it.
    pub(crate) fn boxed(self) -> EngineFuture<T>
    where
        T: Send + Unpin + 'static,
    {
        Box::pin(self)
    }
}

impl<T: Unpin> Future for Acknowledged<T> {
    type Output = Result<T, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let slot = self
            .slot
            .as_ref()
            .expect("an outcome is not polled after it resolved");
        let result = std::task::ready!(slot.poll_take(cx.waker()));
        self.slot = None;
        Poll::Ready(result)
    }
}
