//! Palisade's in-process lock backend: an implementation of
//! [`palisade_core::Lock`] with real semantics and no server.
//!
//! Leases expire when they are not renewed, generations strictly increase per
//! lock name, waiters are served first come, first served, and a lease that
//! ends without a release starts Chubby's lock-delay. It is what the GC-pause
//! demo and the unit tests of the other crates run on when no etcd or Redis
//! is configured; the etcd and Redis backends are the product.
//!
//! The split mirrors a real deployment:
//!
//! - an [`EmbeddedLockClient`] plays the lock server: it owns the per-name
//!   state (holders, FIFO queue, generation counter, lock-delay) and the
//!   session leases, and expires a lease whose TTL passes without a renewal;
//! - an [`EmbeddedLock`] is a client session on it: one lease, per-session
//!   re-entry, and a keep-alive task that renews the lease while the session
//!   holds anything;
//! - an [`EmbeddedGuard`] is the proof of a hold: it exposes the
//!   [`Sequencer`](palisade_core::Sequencer) and the lease-lost signal.
//!
//! ```
//! use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
//! use palisade_lock_embedded::EmbeddedLockClient;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let service = EmbeddedLockClient::new();
//! let alice = service.session(SessionOptions::default())?;
//! let bob = service.session(SessionOptions::default())?;
//! let name = LockName::new("orders/42")?;
//!
//! let guard = alice.acquire(&name, Mode::Exclusive).await?;
//! assert!(bob.try_acquire(&name, Mode::Exclusive).await?.is_none());
//! let first = guard.sequencer()?.generation();
//! guard.release().await?;
//!
//! let guard = bob.acquire(&name, Mode::Exclusive).await?;
//! assert!(guard.generation() > first);
//! # Ok(())
//! # }
//! ```
//!
//! # Where to start
//!
//! - [`EmbeddedLockClient`]: the in-process lock server, and its
//!   [`LiveCheck`](palisade_core::LiveCheck) for resource servers;
//!   [`EmbeddedLockClient::with_signer`] signs every sequencer it mints.
//! - [`EmbeddedLock`]: a session; its test hooks
//!   [`EmbeddedLock::kill_lease`] and [`EmbeddedLock::stop_keepalive`] play a
//!   crashed or paused client.
//! - [`EmbeddedGuard`]: a hold.
//! - `state.rs` (private): every grant, queue, wake, release and expiry
//!   decision, made under one mutex that is never held across an `.await`.
//! - `tasks.rs` (private): the timers (lease expiry, lock-delay) and the
//!   keep-alive, each owned by a drop guard.
//!
//! **Architecture Invariant:** this crate depends on `palisade-core` and on
//! nothing else in the workspace, and it never blocks on IO. Waiting is
//! event-driven: a waiter sleeps on a one-shot channel until a release, an
//! expiry or the end of a lock-delay grants it; there are no polling loops.

mod client;
mod error;
mod guard;
mod session;
mod state;
mod tasks;

pub use client::EmbeddedLockClient;
pub use error::EmbeddedError;
pub use guard::EmbeddedGuard;
pub use session::EmbeddedLock;

#[cfg(test)]
mod tests;
