//! The guard of a hold, and releasing: decrement, or (the last guard) give
//! the hold back, finishing in the background if the caller goes away.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use super::{Gate, GiveBack, Hold, HoldBackend};
use crate::{LeaseWatch, LockError, LockGuard, LostReason, Sequencer};

/// Proof that a session holds a lock: one guard of a [`Hold`]. A backend
/// wraps it in its own guard type.
///
/// Releasing the last guard of a hold gives the hold back
/// ([`HoldBackend::give_back`]); releasing any other only counts down.
/// Dropping a guard releases it in the background, and so does dropping
/// the future of [`LockGuard::release`] before it is done: a hold is never
/// left half released.
pub struct HoldGuard<B: HoldBackend> {
    backend: Arc<B>,
    hold: Arc<Hold<B::Data>>,
    /// Set once this guard's release has started, so `Drop` does nothing.
    released: bool,
}

impl<B: HoldBackend> HoldGuard<B> {
    pub(super) fn new(backend: Arc<B>, hold: Arc<Hold<B::Data>>) -> Self {
        HoldGuard {
            backend,
            hold,
            released: false,
        }
    }

    /// The hold this guard is one of.
    pub fn hold(&self) -> &Arc<Hold<B::Data>> {
        &self.hold
    }

    /// The session the hold belongs to.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// The part of a release that needs no waiting, done at once: count
    /// down, or find that this is the last guard. Returns the rest, if any.
    fn start_release(
        &mut self,
    ) -> Option<impl Future<Output = Result<(), LockError>> + Send + 'static> {
        self.released = true;
        let table = self.backend.holds();
        let current = {
            let state = table.lock();
            let guards = self.hold.guards.load(Ordering::Relaxed);
            if guards > 1 {
                self.hold.guards.store(guards - 1, Ordering::Relaxed);
                tracing::debug!(backend = table.backend, lock = %self.hold.name(), generation = self.hold.generation().get(), count = guards - 1, "re-entry released");
                return None;
            }
            let current = state
                .holds
                .get(self.hold.name())
                .is_some_and(|hold| Arc::ptr_eq(hold, &self.hold));
            if !current {
                // Forgotten (its lease was lost): nobody can re-enter it.
                self.hold.guards.store(0, Ordering::Relaxed);
            }
            current
        };
        Some(give_back(self.backend.clone(), self.hold.clone(), current))
    }
}

/// The last guard's release: take the gate (so no acquisition of the name
/// by this session starts while the hold is removed and given back), make
/// sure nobody re-entered meanwhile, take the hold out of the table, give
/// it back, and settle its lease signal.
async fn give_back<B: HoldBackend>(
    backend: Arc<B>,
    hold: Arc<Hold<B::Data>>,
    current: bool,
) -> Result<(), LockError> {
    let table = backend.holds();
    let gate = if current {
        let gate = table.gate(hold.name());
        let gate = match gate.clone().try_lock_owned() {
            Ok(gate) => gate,
            Err(_) => gate.lock_owned().await,
        };
        let mut state = table.lock();
        let guards = hold.guards.load(Ordering::Relaxed);
        if guards > 1 {
            // Re-entered while this release waited for the gate.
            hold.guards.store(guards - 1, Ordering::Relaxed);
            return Ok(());
        }
        hold.guards.store(0, Ordering::Relaxed);
        if state
            .holds
            .get(hold.name())
            .is_some_and(|current| Arc::ptr_eq(current, &hold))
        {
            state.holds.remove(hold.name());
        }
        Some(Gate(gate))
    } else {
        None
    };
    let (name, generation) = (hold.name(), hold.generation());
    let back = GiveBack {
        hold: hold.clone(),
        gate,
    };
    match backend.give_back(back).await {
        Ok(true) => {
            hold.tracker.release();
            tracing::info!(backend = table.backend, lock = %name, generation = generation.get(), mode = %hold.mode(), "released");
            Ok(())
        }
        Ok(false) => {
            hold.tracker.lose(LostReason::KeyDeleted);
            tracing::warn!(backend = table.backend, lock = %name, generation = generation.get(), "release found the hold already gone: its lease had lapsed");
            Err(LockError::NotOwner {
                name: name.clone(),
                generation,
            })
        }
        Err(error) => {
            // Nobody renews the hold any more, and whether the lock
            // service still has it is unknown.
            hold.tracker.lose(LostReason::KeepAliveFailed);
            tracing::warn!(backend = table.backend, lock = %name, generation = generation.get(), %error, "release failed; the hold ends with its lease unless the backend's retry gets through");
            Err(error)
        }
    }
}

/// The part of a release that waits (gate, lock service).
type Rest = Pin<Box<dyn Future<Output = Result<(), LockError>> + Send>>;

/// A release in progress. Dropped before it is done, it hands the rest to
/// [`HoldBackend::spawn`].
struct Releasing<B: HoldBackend> {
    backend: Arc<B>,
    rest: Option<Rest>,
}

impl<B: HoldBackend> Future for Releasing<B> {
    type Output = Result<(), LockError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(rest) = self.rest.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let outcome = rest.as_mut().poll(cx);
        if outcome.is_ready() {
            self.rest = None;
        }
        outcome
    }
}

impl<B: HoldBackend> Drop for Releasing<B> {
    fn drop(&mut self) {
        if let Some(rest) = self.rest.take() {
            self.backend.spawn(Box::pin(async move {
                if let Err(error) = rest.await {
                    tracing::debug!(%error, "a release finished in the background failed");
                }
            }));
        }
    }
}

impl<B: HoldBackend> LockGuard for HoldGuard<B> {
    fn issued(&self) -> &Sequencer {
        &self.hold.sequencer
    }

    fn lease(&self) -> LeaseWatch {
        self.hold.tracker.watch()
    }

    fn release(mut self) -> impl Future<Output = Result<(), LockError>> + Send {
        let rest = self.start_release();
        Releasing {
            backend: self.backend.clone(),
            rest: rest.map(|rest| Box::pin(rest) as Rest),
        }
    }
}

impl<B: HoldBackend> Drop for HoldGuard<B> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Some(rest) = self.start_release() {
            let name = self.hold.name().clone();
            self.backend.spawn(Box::pin(async move {
                if let Err(error) = rest.await {
                    tracing::debug!(lock = %name, %error, "releasing a dropped guard failed");
                }
            }));
        }
    }
}

impl<B: HoldBackend> fmt::Debug for HoldGuard<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HoldGuard")
            .field("sequencer", &self.hold.sequencer.to_string())
            .field("lease", &self.hold.tracker.state())
            .finish_non_exhaustive()
    }
}

/// Declares a backend's guard: a newtype over [`HoldGuard`] (the field's
/// visibility as written) with [`LockGuard`] delegated to it and a `Debug`
/// that shows the sequencer and the lease. The backend adds its own
/// methods in an `impl` block of its own.
///
/// ```
/// # use std::sync::Arc;
/// # use palisade_core::holds::{GiveBack, HoldBackend, HoldTable, Task};
/// # use palisade_core::LockError;
/// # struct ToySession { holds: HoldTable<()> }
/// # impl HoldBackend for ToySession {
/// #     type Data = ();
/// #     fn holds(&self) -> &HoldTable<()> { &self.holds }
/// #     async fn give_back(&self, _: GiveBack<()>) -> Result<bool, LockError> { Ok(true) }
/// #     fn spawn(&self, task: Task) { drop(task) }
/// # }
/// palisade_core::hold_guard! {
///     /// Proof that a toy session holds a lock.
///     pub struct ToyGuard(pub(crate) HoldGuard<ToySession>);
/// }
/// ```
#[macro_export]
macro_rules! hold_guard {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident($field_vis:vis HoldGuard<$backend:ty>);
    ) => {
        $(#[$meta])*
        $vis struct $name($field_vis $crate::holds::HoldGuard<$backend>);

        impl ::std::convert::From<$crate::holds::HoldGuard<$backend>> for $name {
            fn from(guard: $crate::holds::HoldGuard<$backend>) -> Self {
                $name(guard)
            }
        }

        impl $crate::LockGuard for $name {
            fn issued(&self) -> &$crate::Sequencer {
                $crate::LockGuard::issued(&self.0)
            }

            fn lease(&self) -> $crate::LeaseWatch {
                $crate::LockGuard::lease(&self.0)
            }

            fn release(
                self,
            ) -> impl ::std::future::Future<Output = ::std::result::Result<(), $crate::LockError>> + Send
            {
                $crate::LockGuard::release(self.0)
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(::std::stringify!($name))
                    .field("sequencer", &$crate::LockGuard::issued(&self.0).to_string())
                    .field("lease", &$crate::LockGuard::lease(&self.0).state())
                    .finish_non_exhaustive()
            }
        }
    };
}
