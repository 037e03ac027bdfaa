//! Fencing for data kept in Redis: the fencing rule and the write in one
//! atomic Redis call.
//!
//! The flash sale of the background articles keeps its stock in Redis and
//! decrements it under a Redis lock. A holder that pauses past its lease
//! (GC, SIGSTOP, a slow network) and then writes oversells: the lock has
//! moved on, Redis has not noticed. This crate closes that hole inside
//! Redis: a Redis Functions library (`palisade_fence`, loaded with
//! `FUNCTION LOAD`) keeps each lock's high-water marks in a record beside
//! the data (same hash slot), applies the resource server's rule
//! ([`palisade_core::marks::Marks::admit`], restated in Lua and checked
//! against it by the shared rule table) and does the write in the same
//! call. A late write from an older generation is refused with core's
//! [`Refused::Stale`] and changes nothing.
//!
//! ```no_run
//! use palisade_core::{Lock, LockGuard, LockName, Mode};
//! use palisade_fence_redis::RedisFence;
//!
//! # async fn run(locks: impl Lock) -> Result<(), Box<dyn std::error::Error>> {
//! let fence = RedisFence::connect("redis://127.0.0.1:6379").await?;
//! let lock = LockName::new("flash-sale/sku-42")?;
//! let stock = fence.data_key(&lock, "stock"); // `{flash-sale%2Fsku-42}:stock`
//! let guard = locks.acquire(&lock, Mode::Exclusive).await?;
//! fence.admit(&guard).await??; // fence on acquire
//! match fence.decr_by_keeping(&guard, stock, 1, 0).await? {
//!     Ok(sold) => println!("sold; {} left", sold.value),
//!     Err(refused) => println!("not sold: {refused}"), // stale, or sold out
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Where to start
//!
//! - [`RedisFence`]: the calls (`set`, `del`, `incr_by`, `decr_by`,
//!   `decr_by_keeping`, `hset`, `hdel`, `batch`, `admit`, fenced `get` and
//!   `hget`, `marks`, `raise_floor`), each taking a guard or a sequencer
//!   ([`palisade_core::SequencerSource`]) and answering in the store's
//!   shape, [`Outcome`]: `Result<Result<T, Refused>, RedisFenceError>`.
//! - [`FenceConnection`]: the application's own Redis connection (one
//!   server or a cluster), which the fence sends through.
//! - [`FenceOptions`]: signed sequencers, `WAIT` for replicas, the library
//!   upgrade.
//! - [`LockKeys`]: where a lock's marks live and which keys it may guard
//!   (its hash slot).
//! - [`LIBRARY_SOURCE`]: the exact function; `docs/redis-data.md` explains
//!   it, when to fence in Redis rather than at the resource server, and
//!   what each Redis persistence setting guarantees.

mod connection;
mod error;
mod fence;
mod install;
mod keys;
mod library;
mod ops;

pub use connection::FenceConnection;
pub use error::RedisFenceError;
pub use fence::{FenceOptions, FenceStats, Outcome, RedisFence, Written};
pub use keys::{LockKeys, slot};
#[doc(hidden)]
pub use library::MARK_CHECK_LINE;
pub use library::{Found, LIBRARY_NAME, LIBRARY_SOURCE, LIBRARY_VERSION};
pub use ops::{Batch, COUNTER_LIMIT, MAX_OPS, Op, Reply};
/// Core's one refusal type, the inner `Err` of every call.
pub use palisade_core::Refused;
/// The `redis` crate this one is built on, for building a
/// [`FenceConnection`] of the same version.
pub use redis;

/// The `tracing` target of every fencing decision.
pub const TRACE_TARGET: &str = "palisade_fence_redis::fence";
