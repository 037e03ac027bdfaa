//! Waiting for outcomes in the sled engine: the slot a committed outcome is
//! delivered into, the durability epochs plain reads wait on, and
//! [`Acknowledged`], the future the engine hands to the store.
//!
//! The committer thread (see `committer.rs`) applies a whole group of
//! requests in one sled transaction, flushes once, and only then fills each
//! request's [`Slot`]: so an outcome is never delivered before it is
//! acknowledged. Reads that bypass the committer (plain `get`, `marks`)
//! compare the *committing* epoch (raised before every group transaction)
//! with the *durable* epoch (raised after its flush) and wait for the flush
//! of any group that may have committed before they read.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// The two epochs of the committer, for readers that bypass it.
#[derive(Debug, Default)]
pub(crate) struct Epochs {
    /// Raised (to the group's number) *before* a group's transaction starts.
    committing: AtomicU64,
    /// Raised to the group's number once the group is acknowledged (flushed,
    /// or found to have written nothing).
    durable: Mutex<DurableState>,
}

#[derive(Debug, Default)]
struct DurableState {
    durable: u64,
    wakers: Vec<(u64, Waker)>,
    failure: Option<String>,
    closed: bool,
}

/// Counters for metrics and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushStats {
    /// Flushes completed by the committer (group commits that wrote).
    pub flushes: u64,
    /// Requests acknowledged by those flushes. `tickets / flushes` is the
    /// average group size.
    pub tickets: u64,
    /// Interval syncs completed in [`Durability::Buffered`](crate::Durability)
    /// mode: each one wrote sled's log and fsynced sled's files, so every
    /// write acknowledged before it began is on disk.
    pub background_syncs: u64,
}

impl Epochs {
    pub(crate) fn begin_group(&self, group: u64) {
        self.committing.store(group, Ordering::SeqCst);
    }

    pub(crate) fn finish_group(&self, group: u64) {
        let wakers = {
            let mut state = lock(&self.durable);
            state.durable = state.durable.max(group);
            let durable = state.durable;
            let (ready, waiting): (Vec<_>, Vec<_>) = state
                .wakers
                .drain(..)
                .partition(|(epoch, _)| *epoch <= durable);
            state.wakers = waiting;
            ready
        };
        for (_, waker) in wakers {
            waker.wake();
        }
    }

    /// Records a failed flush (fail-stop) and wakes every waiter.
    pub(crate) fn fail(&self, message: String) {
        let wakers = {
            let mut state = lock(&self.durable);
            state.failure.get_or_insert(message);
            std::mem::take(&mut state.wakers)
        };
        for (_, waker) in wakers {
            waker.wake();
        }
    }

    /// The committer is gone; nobody will raise `durable` again.
    pub(crate) fn close(&self) {
        let wakers = {
            let mut state = lock(&self.durable);
            state.closed = true;
            std::mem::take(&mut state.wakers)
        };
        for (_, waker) in wakers {
            waker.wake();
        }
    }

    pub(crate) fn failure(&self) -> Option<String> {
        lock(&self.durable).failure.clone()
    }

    /// The epoch a reader that has just read must wait for, if any.
    pub(crate) fn needed_by_reader(&self) -> Option<u64> {
        let committing = self.committing.load(Ordering::SeqCst);
        (lock(&self.durable).durable < committing).then_some(committing)
    }

    fn check(state: &DurableState, epoch: u64) -> Option<Result<(), StoreError>> {
        if let Some(message) = &state.failure {
            return Some(Err(StoreError::FlushFailed {
                message: message.clone(),
            }));
        }
        if state.durable >= epoch {
            return Some(Ok(()));
        }
        if state.closed {
            return Some(Err(StoreError::ShutDown));
        }
        None
    }

    fn poll_epoch(&self, epoch: u64, waker: &Waker) -> Poll<Result<(), StoreError>> {
        let mut state = lock(&self.durable);
        if let Some(result) = Self::check(&state, epoch) {
            return Poll::Ready(result);
        }
        if !state
            .wakers
            .iter()
            .any(|(e, w)| *e == epoch && w.will_wake(waker))
        {
            state.wakers.push((epoch, waker.clone()));
        }
        Poll::Pending
    }
}

/// An outcome that is decided, or about to be, but not yet acknowledged:
/// resolves once the outcome is acknowledged in the engine's
/// [`Durability`](crate::Durability) mode. Never blocks a thread.
#[derive(Debug)]
pub(crate) struct Acknowledged<T> {
    inner: PendingInner<T>,
}

#[derive(Debug)]
enum PendingInner<T> {
    /// Resolved (or to be resolved) by the committer.
    Slot(Arc<Slot<T>>),
    /// Read outside the committer; waits for an epoch to be durable.
    AfterEpoch {
        outcome: Option<T>,
        epoch: Option<u64>,
        epochs: Arc<Epochs>,
    },
    /// Already taken.
    Done,
}

impl<T> Acknowledged<T> {
    pub(crate) fn from_slot(slot: Arc<Slot<T>>) -> Self {
        Acknowledged {
            inner: PendingInner::Slot(slot),
        }
    }

    pub(crate) fn after_epoch(outcome: T, epoch: Option<u64>, epochs: Arc<Epochs>) -> Self {
        Acknowledged {
            inner: PendingInner::AfterEpoch {
                outcome: Some(outcome),
                epoch,
                epochs,
            },
        }
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
        let this = &mut *self;
        match &mut this.inner {
            PendingInner::Slot(slot) => {
                let result = std::task::ready!(slot.poll_take(cx.waker()));
                this.inner = PendingInner::Done;
                Poll::Ready(result)
            }
            PendingInner::AfterEpoch {
                outcome,
                epoch,
                epochs,
            } => {
                if let Some(needed) = *epoch {
                    std::task::ready!(epochs.poll_epoch(needed, cx.waker()))?;
                    *epoch = None;
                }
                let outcome = outcome
                    .take()
                    .expect("an outcome is not polled after it resolved");
                this.inner = PendingInner::Done;
                Poll::Ready(Ok(outcome))
            }
            PendingInner::Done => panic!("an outcome is not polled after it resolved"),
        }
    }
}
