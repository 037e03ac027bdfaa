//! Palisade's Redis lock backend: fencing on top of the Redis you already
//! run.
//!
//! The classic Redis lock (`SET lock owner NX PX ttl`, compare-and-delete
//! in Lua) keeps honest holders apart, but cannot stop a holder that paused
//! past its TTL from writing after someone else took over. This backend
//! keeps the classic lock and adds what it lacks: every grant gets a
//! **generation**, minted in the same script as the `SET NX PX`, which the
//! resource server uses to refuse the late writer.
//!
//! What it does, and where:
//!
//! - **One script per state change** ([`scripts`]):
//!   acquire (`SET NX PX` and, only then, the generation), release
//!   (compare-and-delete on the owner token, then hand-off), extend
//!   (compare-and-PEXPIRE), expire, check, raise-floor. Keys share the hash
//!   tag `{<lock name>}` ([`LockKeys`]), so it all works on Redis Cluster.
//!   Scripts are called by SHA, with `EVAL` when the cache is empty.
//! - **FIFO hand-off instead of polling**: a waiter queues in Redis and
//!   sleeps; the release script grants the lock to the head of the queue
//!   and publishes to that waiter's client inbox (one pub/sub subscription
//!   per client). Waiters re-check only after a bounded time, so a lost
//!   message costs latency, never a deadlock. Queue entries expire if their
//!   process stops refreshing them.
//! - **Watchdog**: one task per client extends every hold each keep-alive
//!   interval; a refused extension signals lease lost at once, and the
//!   lease watch fires by itself at the validity deadline.
//! - **Generations that survive data loss**: by default a generation is
//!   `max(counter + 1, Redis time in µs)`, so a counter lost with Redis's
//!   data restarts above the old one; [`RedisLockClient::raise_floor`] is the
//!   explicit recovery from a resource server's mark. See `docs/SAFETY.md`.
//! - Re-entry, shared mode, lock-delay, try-acquire, timeouts and
//!   cancellation with the meaning of [`palisade_core::Lock`].
//!
//! # Where to start
//!
//! - [`RedisLockClient::connect`] with a [`RedisConfig`], then
//!   [`RedisLockClient::session`]: a [`RedisLock`] implements
//!   [`palisade_core::Lock`]. [`RedisLock::connect`] does both.
//! - [`RedisGuard`]: the hold, its sequencer and its lease watch;
//!   [`RedisConfig::with_signer`] signs every sequencer handed out.
//! - [`RedisLiveCheck`]: the live check for resource servers.
//! - `inspect.rs`: [`palisade_core::Inspect`] and
//!   [`palisade_core::ForceRelease`] on [`RedisLockClient`], for operators.
//! - [`Redlock`] ([`RedlockClient::connect`] with a [`RedlockConfig`]): the
//!   lock over N independent masters, a grant on a majority, with a
//!   generation minted by a quorum of masters ([`redlock`]).
//! - [`RedisLockClient::raise_floor`]: recovery after Redis lost a counter.
//! - Passwords and ACL users go in the URL (`redis://user:pass@host`);
//!   `rediss://` turns on TLS, with [`RedisConfig::with_tls_root_cert_pem`]
//!   for a private CA and [`RedisConfig::with_tls_client_cert_pem`] for
//!   mutual TLS.
//! - `docs/backends/redis.md`: key layout, scripts, the wake-up protocol,
//!   failure behaviour and trade-offs.
//!
//! ```no_run
//! use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
//! use palisade_lock_redis::RedisLock;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let locks = RedisLock::connect("redis://127.0.0.1:6379", SessionOptions::default()).await?;
//! let guard = locks.acquire(&LockName::new("orders/42")?, Mode::Exclusive).await?;
//! let header = guard.sequencer()?.to_string(); // send with every write
//! # let _ = header;
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod cleanups;
mod client;
mod config;
mod connection;
mod error;
mod guard;
mod inbox;
mod inspect;
mod keeper;
mod keys;
mod live_check;
pub mod redlock;
pub mod scripts;
mod session;
mod shard_inbox;

pub use client::{ClientStats, RedisLockClient};
pub use config::{GenerationScheme, RedisConfig, WakeUps};
pub use error::RedisLockError;
pub use guard::RedisGuard;
pub use keys::LockKeys;
pub use live_check::RedisLiveCheck;
pub use redlock::{Redlock, RedlockClient, RedlockConfig, RedlockGuard};
pub use session::RedisLock;
