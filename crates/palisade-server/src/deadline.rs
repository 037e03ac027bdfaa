//! The request deadline: how long the server waits on its own dependencies
//! (the store, the lock service) for one request before it answers 503
//! `deadline_exceeded`, naming what did not answer.
//!
//! It starts once the request is in hand, headers and body (the body's
//! arrival is the client's time, bounded by the body time limit), and
//! bounds every wait after that, so a stalled engine (a database row held
//! by a paused replica, a partitioned etcd) cannot hold a request, its
//! connection and its place among those in flight forever.

use std::future::Future;
use std::time::Duration;

use palisade_wire::Dependency;
use tokio::time::Instant;

use crate::error::ApiError;

/// One request's deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    at: Instant,
    limit: Duration,
}

impl Deadline {
    /// A deadline `limit` from now.
    pub(crate) fn start(limit: Duration) -> Self {
        Deadline {
            at: Instant::now() + limit,
            limit,
        }
    }

    /// `future`'s output, or 503 `deadline_exceeded` naming `dependency`
    /// once the deadline has passed.
    pub(crate) async fn wait<T>(
        self,
        dependency: Dependency,
        future: impl Future<Output = T>,
    ) -> Result<T, ApiError> {
        tokio::time::timeout_at(self.at, future).await.map_err(|_| {
            tracing::warn!(
                waiting_for = dependency.describe(),
                deadline = ?self.limit,
                "refused: the request deadline passed"
            );
            ApiError::deadline_exceeded(dependency, self.limit)
        })
    }

    /// The earlier of the deadline and `bound` from now: for a wait with
    /// a shorter bound of its own.
    pub(crate) fn at_most(&self, bound: Duration) -> Instant {
        self.at.min(Instant::now() + bound)
    }

    /// Whether the deadline has passed.
    pub(crate) fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// 503 `deadline_exceeded` for `dependency`.
    pub(crate) fn exceeded(&self, dependency: Dependency) -> ApiError {
        ApiError::deadline_exceeded(dependency, self.limit)
    }
}
