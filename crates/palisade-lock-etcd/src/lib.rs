//! Palisade's etcd lock backend: a lease-backed, revision-ordered mutex
//! whose fencing tokens are etcd's raft-committed revisions.
//!
//! A session ([`EtcdLock`]) owns one etcd lease and keeps it alive in the
//! background. To take a lock it puts `<prefix>/<escaped name>/<lease id>`
//! with that lease; contenders are ordered by their keys' create-revisions,
//! the first holds the lock, and each waiter watches only the deletion of
//! the key immediately ahead of it (FIFO, no thundering herd, no polling).
//! The generation in the holder's [`Sequencer`](palisade_core::Sequencer)
//! is its key's create-revision: global to the cluster, committed through
//! raft, strictly increasing across holders, restarts and leader changes.
//!
//! It implements the core traits: [`palisade_core::Lock`] and
//! [`palisade_core::LockGuard`] on [`EtcdLock`] and [`EtcdGuard`], and
//! [`palisade_core::LiveCheck`] on [`EtcdLiveCheck`]. Shared mode (readers
//! wait only for earlier writers), re-entry per session, try-acquire,
//! timeouts, cancellation that never leaves a stale queue entry, and
//! Chubby's lock-delay are all supported. The design, key layout and
//! failure behaviour are written up in `docs/backends/etcd.md`.
//!
//! # Where to start
//!
//! - [`EtcdConfig`]: endpoints, key prefix, timeouts, auth, TLS, and the
//!   optional [`Signer`](palisade_core::Signer) of every sequencer.
//! - [`EtcdLockClient`]: one gRPC connection; open sessions on it.
//! - [`EtcdLock`]: a session, the `Lock` implementation.
//! - `acquire.rs`: the algorithm (queue, wait for the one key ahead,
//!   confirm, grant), with `queue.rs` deciding whose turn it is from one
//!   consistent read, and `txns.rs` holding every transaction sent.
//! - `keepalive.rs`: how a lease's validity is tracked and lost.
//! - [`EtcdLiveCheck`]: Chubby's CheckSequencer for resource servers.
//! - `inspect.rs`: [`palisade_core::Inspect`] and
//!   [`palisade_core::ForceRelease`] on [`EtcdLockClient`], for operators.
//! - [`EtcdLockClient::raise_floor`]: recovery after etcd lost its history
//!   (wiped data, old snapshot): moves the revision past a server's mark.
//!
//! ```no_run
//! use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
//! use palisade_lock_etcd::{EtcdConfig, EtcdLock};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let locks = EtcdLock::connect(
//!     EtcdConfig::from_endpoint_list("127.0.0.1:2379")?,
//!     SessionOptions::default(),
//! )
//! .await?;
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
mod guard;
mod inspect;
mod keepalive;
mod key_watch;
mod keys;
mod live_check;
mod metrics;
mod queue;
mod session;
mod task;
mod txns;
mod watch_hub;

pub use client::EtcdLockClient;
pub use config::{ConfigError, DEFAULT_PREFIX, EtcdConfig};
pub use floor::{FloorProgress, RaiseFloorOptions, RevisionRaised};
pub use guard::EtcdGuard;
pub use live_check::EtcdLiveCheck;
pub use metrics::RpcCounts;
/// Why a floor could not be raised (core's, re-exported).
pub use palisade_core::RaiseFloorError;
/// The endpoints, credentials, TLS and timeouts, shared with the etcd
/// storage engine (`palisade-store-etcd`).
pub use palisade_etcd::{EndpointError, EtcdConnection};
pub use session::EtcdLock;
