//! Palisade: fencing-aware guarded storage.
//!
//! A lock with a lease cannot protect data on its own: a holder can pause
//! past its lease, another client takes the lock, and the first one wakes up
//! and writes anyway. Palisade's lock backends hand out Chubby-style
//! [`Sequencer`]s (lock name, mode, generation), and its resource server
//! refuses any request whose generation is older than the newest it has
//! honoured for that lock.
//!
//! This crate re-exports the parts; pick them with features:
//!
//! | feature | module | what |
//! |---|---|---|
//! | (always) | crate root | [`palisade_core`]: names, sequencers, the [`Lock`] trait |
//! | `embedded` (default) | [`embedded`] | the in-process lock backend |
//! | `client` (default) | [`client`] | the typed HTTP client |
//! | `etcd` | `etcd` | the etcd lock backend |
//! | `redis` | `redis` | the Redis lock backend |
//! | `server` | `store`, `server` | the fenced store and the HTTP resource server |
//!
//! # Where to start
//!
//! - [`Lock`] / [`LockGuard`]: acquire, get a sequencer, watch for lease loss.
//! - `client::Client`: send writes with the sequencer; a stale one comes back
//!   as `Refused::Stale` with the server's marks.
//! - `docs/ARCHITECTURE.md` and `docs/SAFETY.md` in the repository.
//!
//! ```
//! # #[cfg(feature = "embedded")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use palisade::{Lock, LockGuard, LockName, Mode, SessionOptions};
//!
//! let locks = palisade::embedded::EmbeddedLockService::new();
//! let session = locks.session(SessionOptions::default())?;
//! let guard = session.acquire(&LockName::new("orders/42")?, Mode::Exclusive).await?;
//! println!("send this with every write: {}", guard.sequencer()?);
//! guard.release().await?;
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "embedded"))]
//! # fn main() {}
//! ```

pub use palisade_core::*;

/// The in-process lock backend.
#[cfg(feature = "embedded")]
pub mod embedded {
    pub use palisade_lock_embedded::*;
}

/// The etcd lock backend.
#[cfg(feature = "etcd")]
pub mod etcd {
    pub use palisade_lock_etcd::*;
}

/// The Redis lock backend.
#[cfg(feature = "redis")]
pub mod redis {
    pub use palisade_lock_redis::*;
}

/// The typed HTTP client for the resource server.
#[cfg(feature = "client")]
pub mod client {
    pub use palisade_client::*;
}

/// The fenced store (sled with per-lock high-water marks).
#[cfg(feature = "server")]
pub mod store {
    pub use palisade_store::*;
}

/// The HTTP resource server.
#[cfg(feature = "server")]
pub mod server {
    pub use palisade_server::*;
}

/// The README's Rust examples, compiled as doctests so they stay true.
#[cfg(all(doctest, feature = "embedded", feature = "client"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
