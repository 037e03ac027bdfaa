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
//! | (always) | crate root | [`palisade_core`]: names, sequencers, the [`Lock`] / [`LockGuard`] traits, [`marks`], [`Signer`] / [`Verifier`] |
//! | `embedded` (default) | `embedded` | the in-process lock backend |
//! | `etcd` | `etcd` | the etcd lock backend |
//! | `redis` | `redis` | the Redis lock backend, single instance and Redlock |
//! | `sql` | `sql` | the PostgreSQL and MariaDB lock backend |
//! | `client` (default) | `client` | the typed HTTP client of the resource server |
//! | `store` | `store` | the fenced store (sled built in), without the HTTP server |
//! | `store-engines` | `store_postgres`, `store_etcd` | the store's PostgreSQL and etcd engines |
//! | `server` | `server` (and `store`) | the HTTP resource server, for embedding |
//! | `guard` | `guard` (and `store`) | fencing for any axum/tower service |
//! | `fence-sql` | `fence_sql` | fencing inside the application's own SQL transaction |
//! | `metrics` | `metrics` | lock-side Prometheus metrics around any backend |
//! | `recipes` | `recipes` | leader election, semaphore and lock striping, with fencing, on any backend |
//! | `testing` | (the backends' modules) | the backends' test hooks: pause or crash a session on purpose |
//!
//! Every lock backend has the same shape: a `<Backend>LockClient` connects
//! (and holds the configuration), its `session(options)` opens a
//! `<Backend>Lock`, which implements [`Lock`], and a grant is a
//! `<Backend>Guard`, which implements [`LockGuard`] (see [`Lock`]).
//!
//! # Where to start
//!
//! - [`Lock`] / [`LockGuard`]: acquire, get a sequencer, watch for lease loss.
//! - `client::Client`: send writes with the sequencer; a stale one comes back
//!   as `Refused::Stale` with the server's marks.
//! - `docs/ARCHITECTURE.md` and `docs/SAFETY.md` in the repository.
//! - These docs with every part in them: `cargo doc -p palisade --all-features --open`.
//!
//! ```
//! # #[cfg(feature = "embedded")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use palisade::{Lock, LockGuard, LockName, Mode, SessionOptions};
//!
//! let locks = palisade::embedded::EmbeddedLockClient::new();
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

/// The Redis lock backend, single instance and Redlock.
#[cfg(feature = "redis")]
pub mod redis {
    pub use palisade_lock_redis::*;
}

/// The PostgreSQL and MariaDB lock backend.
#[cfg(feature = "sql")]
pub mod sql {
    pub use palisade_lock_sql::*;
}

/// The typed HTTP client for the resource server.
#[cfg(feature = "client")]
pub mod client {
    pub use palisade_client::*;
}

/// The fenced store: per-lock high-water marks and data in one atomic step of a storage engine.
#[cfg(feature = "store")]
pub mod store {
    pub use palisade_store::*;
}

/// The fenced store's PostgreSQL storage engine.
#[cfg(feature = "store-engines")]
pub mod store_postgres {
    pub use palisade_store_postgres::*;
}

/// The fenced store's etcd storage engine.
#[cfg(feature = "store-engines")]
pub mod store_etcd {
    pub use palisade_store_etcd::*;
}

/// The HTTP resource server.
#[cfg(feature = "server")]
pub mod server {
    pub use palisade_server::*;
}

/// Fencing for services that are not the Palisade server.
#[cfg(feature = "guard")]
pub mod guard {
    pub use palisade_guard::*;
}

/// Fencing for the application's own PostgreSQL or MariaDB transaction.
#[cfg(feature = "fence-sql")]
pub mod fence_sql {
    pub use palisade_fence_sql::*;
}

/// Lock-side metrics around any backend.
#[cfg(feature = "metrics")]
pub mod metrics {
    pub use palisade_metrics::*;
}

/// Recipes with fencing: leader election whose term is the generation,
/// fenced semaphores, lock striping.
#[cfg(feature = "recipes")]
pub mod recipes {
    pub use palisade_recipes::*;
}

/// The README's Rust examples, compiled as doctests so they stay true.
#[cfg(all(doctest, feature = "embedded", feature = "client"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
