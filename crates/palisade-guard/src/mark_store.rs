//! Where the high-water marks live: the [`MarkStore`] trait.

use std::future::Future;
use std::pin::Pin;

use palisade_core::{LockName, Sequencer};
use palisade_store::Marks;

use crate::MarkStoreError;

/// The outcome of checking a sequencer against its lock's marks.
///
/// A stale sequencer is an outcome, not a failure: it lives here rather than
/// in [`MarkStoreError`], so `?` on a failure can never swallow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The generation passed the fencing rule and the marks now include it.
    Admitted {
        /// The lock's marks right after the admission.
        marks: Marks,
    },
    /// The generation is below what the marks require. Nothing changed.
    Stale {
        /// The lock's current marks.
        marks: Marks,
    },
}

/// Keeps the per-lock high-water marks and applies the fencing rule.
///
/// Two implementations ship with the crate: [`MemoryMarks`](crate::MemoryMarks)
/// (in memory, for tests) and [`SledMarks`](crate::SledMarks) (durable, the
/// fenced store's own marks).
///
/// The methods are `async` because a durable store must wait for its flush
/// before it may report a mark as raised; they return `Send` futures, so a
/// guard can run on any tokio worker. An implementation that must block (a
/// synchronous database) should move that work to
/// `tokio::task::spawn_blocking` rather than block a worker thread.
///
/// ### To ensure correctness
///
/// 1. **The rule is [`Marks::admit`]**, and nothing else decides: exclusive
///    `g` passes iff `g >= max(H_excl, H_shared)` and sets `H_excl = g`;
///    shared `g` passes iff `g >= H_excl` and sets
///    `H_shared = max(H_shared, g)`.
/// 2. **Check and raise are one atomic step per lock**: two concurrent
///    `admit` calls on the same lock behave as if run one after the other.
/// 3. **An admission is durable when it is reported**: once `admit` returns
///    [`Admission::Admitted`], a crash must not bring the mark back below
///    the admitted generation (for a store that claims durability at all).
///    The guard runs the handler only after that.
/// 4. **A stale sequencer changes nothing**, and marks never go down.
/// 5. **A lock never seen has marks 0** ([`MarkStore::marks`] is not an
///    error for it).
pub trait MarkStore: Send + Sync + 'static {
    /// Checks `sequencer` against the marks of `sequencer.lock()` and, if it
    /// passes, raises them.
    fn admit(
        &self,
        sequencer: &Sequencer,
    ) -> impl Future<Output = Result<Admission, MarkStoreError>> + Send;

    /// The current marks of `lock` (0 and 0 for a lock never seen).
    fn marks(&self, lock: &LockName) -> impl Future<Output = Result<Marks, MarkStoreError>> + Send;
}

/// A boxed future of the object-safe mark store.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`MarkStore`] made object-safe, so a [`Guard`](crate::Guard) is one type
/// whatever store it uses. Implemented for every `MarkStore`.
pub(crate) trait DynMarkStore: Send + Sync + 'static {
    fn admit_dyn<'a>(
        &'a self,
        sequencer: &'a Sequencer,
    ) -> BoxFuture<'a, Result<Admission, MarkStoreError>>;

    fn marks_dyn<'a>(&'a self, lock: &'a LockName) -> BoxFuture<'a, Result<Marks, MarkStoreError>>;
}

impl<T: MarkStore> DynMarkStore for T {
    fn admit_dyn<'a>(
        &'a self,
        sequencer: &'a Sequencer,
    ) -> BoxFuture<'a, Result<Admission, MarkStoreError>> {
        Box::pin(self.admit(sequencer))
    }

    fn marks_dyn<'a>(&'a self, lock: &'a LockName) -> BoxFuture<'a, Result<Marks, MarkStoreError>> {
        Box::pin(self.marks(lock))
    }
}
