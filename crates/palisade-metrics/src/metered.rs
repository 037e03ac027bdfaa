//! [`Metered`]: any [`Lock`] that reports into a [`LockMetrics`].

use std::fmt;
use std::time::Instant;

use palisade_core::{
    LeaseState, LeaseWatch, Lock, LockError, LockGuard, LockName, Mode, Sequencer,
};

use crate::metrics::LockMetrics;

/// A lock backend's session that publishes [`LockMetrics`]. Behaves as the
/// session it wraps: same grants, same errors, same order.
#[derive(Debug, Clone)]
pub struct Metered<L> {
    inner: L,
    metrics: LockMetrics,
}

impl<L: Lock> Metered<L> {
    /// Meters `inner` into `metrics`.
    pub fn new(inner: L, metrics: LockMetrics) -> Self {
        Metered { inner, metrics }
    }

    /// The wrapped session.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The wrapped session, unwrapped. Holds taken through `self` keep
    /// reporting their lease losses.
    pub fn into_inner(self) -> L {
        self.inner
    }

    /// The metrics this session reports into.
    pub fn metrics(&self) -> &LockMetrics {
        &self.metrics
    }

    fn guard(&self, guard: L::Guard) -> MeteredGuard<L::Guard> {
        watch_lease(guard.lease(), self.metrics.clone());
        MeteredGuard { inner: guard }
    }
}

/// Counts the hold's lease loss, if it ends lost rather than released.
fn watch_lease(mut lease: LeaseWatch, metrics: LockMetrics) {
    // Backends run on tokio; without a runtime there is nothing to watch
    // with, and the hold itself still works.
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        if let LeaseState::Lost(reason) = lease.lost().await {
            metrics.lease_lost(reason);
        }
    });
}

impl<L: Lock> Lock for Metered<L> {
    type Guard = MeteredGuard<L::Guard>;

    async fn acquire(&self, name: &LockName, mode: Mode) -> Result<Self::Guard, LockError> {
        let started = Instant::now();
        let _waiting = self.metrics.waiting();
        // Without queueing first: granted now means no wait. `try_acquire`
        // never jumps the queue, so this keeps the backend's order.
        let result = match self.inner.try_acquire(name, mode).await {
            Ok(Some(guard)) => Ok(guard),
            Ok(None) => {
                self.metrics.waited(mode);
                let queued = self.inner.acquire(name, mode).await;
                if queued.is_ok() {
                    self.metrics.handed_off(mode);
                }
                queued
            }
            Err(error) => Err(error),
        };
        self.metrics
            .finished(mode, started.elapsed(), result.as_ref().err());
        result.map(|guard| self.guard(guard))
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        mode: Mode,
    ) -> Result<Option<Self::Guard>, LockError> {
        let started = Instant::now();
        let result = self.inner.try_acquire(name, mode).await;
        // A `None` is an answer, not an acquire: only grants and errors count.
        match &result {
            Ok(Some(_)) => self.metrics.finished(mode, started.elapsed(), None),
            Ok(None) => {}
            Err(error) => self.metrics.finished(mode, started.elapsed(), Some(error)),
        }
        result.map(|guard| guard.map(|guard| self.guard(guard)))
    }
}

/// A hold taken through [`Metered`]; behaves as the backend's guard.
pub struct MeteredGuard<G> {
    inner: G,
}

impl<G: LockGuard> MeteredGuard<G> {
    /// The backend's guard.
    pub fn inner(&self) -> &G {
        &self.inner
    }

    /// The backend's guard, unwrapped; its lease loss is still counted.
    pub fn into_inner(self) -> G {
        self.inner
    }
}

impl<G: LockGuard> fmt::Debug for MeteredGuard<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<G: LockGuard> LockGuard for MeteredGuard<G> {
    fn issued(&self) -> &Sequencer {
        self.inner.issued()
    }

    fn lease(&self) -> LeaseWatch {
        self.inner.lease()
    }

    async fn release(self) -> Result<(), LockError> {
        self.inner.release().await
    }

    fn sequencer(&self) -> Result<Sequencer, LockError> {
        self.inner.sequencer()
    }
}
