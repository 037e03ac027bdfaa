//! Palisade's SQL lock backend: fencing locks in the PostgreSQL or MariaDB
//! you already run.
//!
//! The classic database lock is a table with a unique key on the lock name:
//! insert to lock, delete to unlock. It has no expiry, no waiting, no
//! re-entry, and nothing that stops a holder that paused past its turn from
//! writing after someone else took over. This backend keeps the table and
//! adds what it lacks:
//!
//! - **A generation per grant**: one row per lock name in `palisade_locks`,
//!   never deleted, whose `generation` is bumped in the transaction that
//!   grants the lock. It only grows, across crashes and restarts of the
//!   database, so a resource server can refuse a late writer.
//! - **Leases the database's clock expires**: a session is a row in
//!   `palisade_sessions` with an expiry computed from the database's own
//!   clock; a background task renews it. A holder whose session expired is
//!   gone, and if it did not release cleanly its lock-delay applies.
//! - **Grants in one transaction** with the lock row locked
//!   (`SELECT ... FOR UPDATE`), at READ COMMITTED: two sessions can never both
//!   be granted. Release is compare-and-delete by session and acquire token.
//! - **FIFO waiting without busy loops where the database allows it**:
//!   waiters queue in `palisade_waiters` (a sequence orders them; a waiter
//!   whose session died is skipped). On PostgreSQL a release sends
//!   `NOTIFY palisade_lock, '<name>'` and waiters sleep until it (or until
//!   the holder's expiry); MariaDB has no notifications, so waiters in other
//!   processes re-check with a bounded, jittered back-off. A woken waiter
//!   with a live waiter still ahead sleeps on after one unlocked read, so
//!   only the head of the queue runs a grant transaction
//!   ([`SqlLockClient::stats`] counts both).
//! - Re-entry, shared mode, lock-delay, try-acquire, timeouts, cancellation
//!   and the per-process waiter bound with the meaning of
//!   [`palisade_core::Lock`]; a live check for resource servers
//!   ([`SqlLiveCheck`]); signed sequencers ([`SqlConfig::with_signer`]).
//!
//! [`palisade_core::Inspect`] and [`palisade_core::ForceRelease`] on
//! [`SqlLockClient`] show and break holds for operators (`inspect.rs`).
//!
//! `docs/backends/sql.md` has the tables, the algorithm and the limits.
//!
//! ```no_run
//! use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
//! use palisade_lock_sql::{SqlConfig, SqlLockClient};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = SqlLockClient::connect(SqlConfig::new("postgres://app@127.0.0.1/app")).await?;
//! let locks = client.session(SessionOptions::default()).await?;
//! let guard = locks.acquire(&LockName::new("orders/42")?, Mode::Exclusive).await?;
//! let header = guard.sequencer()?.to_string(); // send with every write
//! # let _ = header;
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod client;
mod config;
mod decide;
mod dialect;
mod error;
mod floor;
mod guard;
mod inspect;
mod live_check;
mod session;
mod store;
mod wake;

pub use client::SqlLockClient;
pub use config::SqlConfig;
pub use dialect::Dialect;
pub use error::SqlLockError;
pub use guard::SqlGuard;
pub use live_check::SqlLiveCheck;
/// What a floor raise did (core's, re-exported).
pub use palisade_core::FloorRaised;
pub use session::SqlLock;
pub use store::ClientStats;
