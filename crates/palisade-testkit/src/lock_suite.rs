//! The lock backend conformance suite.
//!
//! Every backend runs the same cases through one call:
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
//! async fn conformance() {
//!     let backend = MyBackend::start().await; // e.g. spawns a real server
//!     palisade_testkit::lock_suite::test_all(backend).await;
//! }
//! ```
//!
//! A backend is done when the suite passes. The cases check the obligations
//! listed on `palisade_core::Lock`.

use std::future::Future;
use std::time::Duration;

use palisade_core::{Lock, SessionOptions};

/// How the suite drives a backend.
pub trait SuiteBackend: Send + Sync + 'static {
    /// The backend's session type.
    type Lock: Lock;

    /// A short name for messages (`embedded`, `etcd`, `redis`).
    fn name(&self) -> &'static str;

    /// Opens a new, independent session (its own lease and identity) with
    /// `options`.
    fn session(&self, options: SessionOptions) -> impl Future<Output = Self::Lock> + Send;

    /// Ends `session`'s lease on the lock service without releasing
    /// anything, the way a crash or a long pause would: its keep-alive stops
    /// and the service forgets the lease (a revoke, or a forced expiry).
    /// Returns once the service no longer treats the lease as valid.
    fn kill_lease(&self, session: &Self::Lock) -> impl Future<Output = ()> + Send;

    /// The shortest lease TTL the backend supports (etcd: 2 s). Cases that
    /// wait for an expiry use it, with generous margins.
    fn min_ttl(&self) -> Duration;
}
