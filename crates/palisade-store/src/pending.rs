//! [`Pending`]: an outcome the engine has decided, or is about to, and
//! will acknowledge.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::{EngineFuture, StoreError};

/// An outcome that is decided, or about to be, but not yet acknowledged.
///
/// Await it in async code (it never blocks a thread), or call
/// [`Pending::wait`] in blocking code. It resolves once the engine has
/// made the outcome durable (for sled, see [`Durability`](crate::Durability)).
#[must_use = "an outcome is acknowledged only once its Pending resolves"]
pub struct Pending<T> {
    future: EngineFuture<T>,
}

impl<T> std::fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").finish_non_exhaustive()
    }
}

impl<T> Pending<T> {
    pub(crate) fn new(future: EngineFuture<T>) -> Self {
        Pending { future }
    }

    /// Blocks the thread until the outcome is acknowledged. Do not call it
    /// on an async runtime's worker thread; `.await` the `Pending` there.
    /// The sled engine's outcomes need no runtime; an engine that talks to
    /// a database over the network needs its runtime running elsewhere.
    pub fn wait(self) -> Result<T, StoreError> {
        futures::executor::block_on(self.future)
    }
}

impl<T> Future for Pending<T> {
    type Output = Result<T, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.future.as_mut().poll(cx)
    }
}
