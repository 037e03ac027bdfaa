//! Redlock with a fencing token: a lock over N independent Redis masters
//! whose every grant carries a generation minted by a quorum.
//!
//! - **Lock**: the single-master lock (its scripts, FIFO queue, shared
//!   mode, lock-delay and watchdog) on every master; a grant needs a
//!   majority within its validity. The lease is valid while a majority of
//!   per-master leases are, less a clock drift allowance (`ttl × drift
//!   factor + 2 ms`).
//! - **Generation** (`floor.rs`): read every master's floor, choose above
//!   the highest of a majority, and keep it only if a majority accepted it
//!   with a compare-and-set. Two grants never share a generation, and a
//!   grant that starts after another finished gets a higher one. The
//!   protocol is model-checked exhaustively in `crates/palisade-redlock-model`.
//! - **Release** on every master it holds.
//!
//! `docs/backends/redis.md`, "Redlock", has the argument and what is
//! guaranteed when masters lose their data.

mod config;
pub(crate) mod floor;
mod guard;
mod session;

pub use config::RedlockConfig;
pub use guard::RedlockGuard;
pub use session::{Redlock, RedlockClient};
