//! Chubby's CheckSequencer: asking the lock side whether a sequencer's
//! holder still holds the lock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::{LockError, Sequencer};

/// What the lock side says about a sequencer right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The holder named by the sequencer still holds the lock with that
    /// generation.
    Held,
    /// It does not (released, lease lapsed, or a newer holder has it).
    NotHeld,
}

/// Asks the lock service whether a sequencer is still current.
///
/// The resource server may call this before applying a request, to refuse a
/// holder whose lease has lapsed even before any newer generation has
/// written. It complements the generation check and never replaces it: the
/// answer can be out of date by the time the write is applied.
///
/// ### To ensure correctness
///
/// - Answer `Held` only from a linearizable read of the lock service (never
///   from a cache or a possibly stale replica).
/// - Answer `NotHeld` for a sequencer this backend did not issue, or for an
///   older generation of a lock now held by someone else.
/// - Report a service that cannot be asked as an error, not as `NotHeld`;
///   the server then decides (it refuses: safety first).
pub trait LiveCheck: Send + Sync + 'static {
    /// Checks `sequencer` against the lock service.
    fn check(
        &self,
        sequencer: &Sequencer,
    ) -> impl Future<Output = Result<Liveness, LockError>> + Send;

    /// As a type-erased [`SharedLiveCheck`], for the resource server.
    fn into_shared(self) -> SharedLiveCheck
    where
        Self: Sized,
    {
        Arc::new(self)
    }
}

/// The boxed future returned by [`DynLiveCheck::check_dyn`].
pub type LiveCheckFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Liveness, LockError>> + Send + 'a>>;

/// An object-safe [`LiveCheck`], for choosing the backend at runtime (the
/// server binary does). Implemented for every `LiveCheck`.
pub trait DynLiveCheck: Send + Sync + 'static {
    /// Same as [`LiveCheck::check`], boxed.
    fn check_dyn<'a>(&'a self, sequencer: &'a Sequencer) -> LiveCheckFuture<'a>;
}

impl<T: LiveCheck> DynLiveCheck for T {
    fn check_dyn<'a>(&'a self, sequencer: &'a Sequencer) -> LiveCheckFuture<'a> {
        Box::pin(self.check(sequencer))
    }
}

/// A shared, type-erased live check.
pub type SharedLiveCheck = Arc<dyn DynLiveCheck>;
