//! Palisade's ZooKeeper lock backend: the ephemeral-sequential lock recipe
//! of ZooKeeper's documentation, kazoo and Curator, with a fencing token.
//!
//! A session ([`ZkLock`]) is one ZooKeeper session, whose timeout is the
//! lease TTL. To take a lock it creates an ephemeral sequential node in the
//! lock's directory, `<root>/<escaped name>/`; contenders are ordered by
//! sequence number, and each waiter watches only the one node that blocks
//! it (the contender just ahead of a writer, the last writer ahead of a
//! reader): FIFO, shared and exclusive modes, no herd, no polling. Nodes
//! are named the way kazoo or Curator name theirs ([`NodeNames`]), so a
//! Python or Java service using those libraries shares the lock.
//!
//! The generation in the holder's [`Sequencer`](palisade_core::Sequencer)
//! is its node's creation zxid (plus a floor that only an ensemble that
//! lost its data ever needs): ZooKeeper's global write order, strictly
//! increasing across holders, session expiries, leader changes, restarts
//! and re-created lock directories, which the sequence suffix is not.
//!
//! It implements the core traits: [`palisade_core::Lock`] and
//! [`palisade_core::LockGuard`] on [`ZkLock`] and [`ZkGuard`],
//! [`palisade_core::LiveCheck`] on [`ZkLiveCheck`], and
//! [`palisade_core::Inspect`] and [`palisade_core::ForceRelease`] on
//! [`ZkLockClient`]. The design, layout and failure behaviour are written up
//! in `docs/backends/zookeeper.md`.
//!
//! # Where to start
//!
//! - [`ZkConfig`]: servers and chroot (`host:port[,host:port...][/chroot]`),
//!   prefix, node names, timeouts, the optional signer.
//! - [`ZkLockClient`]: one connection; open sessions on it.
//! - [`ZkLock`]: a session, the `Lock` implementation; `session.rs` says
//!   how the lease is counted.
//! - `acquire.rs`: the recipe, with `queue.rs` deciding whose turn it is
//!   from one listing and `names.rs` the layout and node names.
//! - `floor_cache.rs`: why a session may keep the floor under a watch
//!   instead of reading it with every grant.
//! - `floor.rs`: why the generation never goes back, and
//!   [`RaiseFloor::raise_floor`](palisade_core::RaiseFloor::raise_floor), the recovery after a wiped ensemble.
//! - the session's in-process bookkeeping (re-entry, one acquisition per
//!   name at a time, the waiter bound, releasing) is core's shared hold
//!   table, `palisade_core::holds`; `session.rs` gives it the ZooKeeper
//!   side (deleting a hold's marker and node).
//!
//! ```no_run
//! use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
//! use palisade_lock_zookeeper::{ZkConfig, ZkLock};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let locks = ZkLock::connect(ZkConfig::parse("127.0.0.1:2181")?, SessionOptions::default()).await?;
//! let guard = locks.acquire(&LockName::new("orders/42")?, Mode::Exclusive).await?;
//! let sequencer = guard.sequencer()?; // send it with every write
//! # let _ = sequencer;
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod acquire;
mod changes;
mod client;
mod config;
mod errors;
mod floor;
mod floor_cache;
mod guard;
mod inspect;
mod live_check;
mod names;
mod node_watch;
mod queue;
mod session;
mod task;

use std::future::Future;
use std::sync::Arc;

use palisade_core::holds::Turn;
use palisade_core::{LockError, Obtain};

pub use client::ZkLockClient;
pub use config::{ConfigError, DEFAULT_PREFIX, ZkConfig};
pub use errors::ZkLockError;
pub use floor::MAX_FLOOR;
pub use guard::ZkGuard;
pub use live_check::ZkLiveCheck;
pub use names::{NodeNames, lock_path};
pub use session::ZkLock;

/// A deliberate flaw the fault suite plays to show that its checks can
/// fail (test builds only).
#[cfg(feature = "testing")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mutation {
    /// Correct behaviour.
    #[default]
    None,
    /// The generation is the node's sequence suffix (plus one) instead of
    /// its creation zxid: it starts over when the lock directory does.
    GenerationFromSequence,
    /// On a disconnect, the lease is counted from the moment the client
    /// noticed it rather than from the last answered request (a session
    /// timeout after the notice, as Curator's LOST): lease lost then fires
    /// after the server may have expired the session.
    LeaseFromDisconnectNotice,
}

impl Obtain for ZkLock {
    type Session = session::Session;
    type Guard = ZkGuard;

    fn session(&self) -> &Arc<session::Session> {
        &self.session
    }

    fn take(
        &self,
        turn: Turn<session::Session>,
    ) -> impl Future<Output = Result<Option<ZkGuard>, LockError>> + Send {
        self.session.acquire(turn)
    }
}
