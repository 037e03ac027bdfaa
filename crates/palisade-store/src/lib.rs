//! The fenced store of Palisade: a storage engine (sled by default),
//! guarded by per-lock high-water marks.
//!
//! Every request names a lock (through its [`palisade_core::Sequencer`]) and
//! touches only that lock's keyspace. For each lock the store keeps two
//! high-water marks ([`Marks`]): `H_excl`, the highest exclusive generation
//! honoured, and `H_shared`, the highest shared one. A request whose
//! generation is below what the marks require is refused
//! ([`Refused::Stale`]), which is how a lock holder that paused past its
//! lease is kept from writing after a newer holder has.
//!
//! # Engines
//!
//! [`Store`] is the one public face; the fenced step itself is done by an
//! [`Engine`], whose obligations are written on the trait and checked by
//! the conformance suite in `palisade-testkit`. [`Store::open`] opens the
//! built-in sled engine in a directory; [`Store::with_engine`] takes any
//! engine. No engine's type appears in this crate's API: keys and values
//! are [`bytes::Bytes`], engine failures [`StoreError::Storage`] and
//! [`StoreError::Unavailable`]. The guarantees below hold for every engine;
//! what "acknowledged" means is the engine's ([`EngineInfo::durability`]),
//! and for sled it is set by [`Durability`].
//!
//! # The important guarantees
//!
//! - **Check, mark update, idempotency record and data write are one
//!   atomic step of the engine** (on sled: one record of its group log, or
//!   one sled transaction in `Buffered` mode). A crash at any point leaves
//!   all of them or none. A
//!   refused request changes nothing: not the data, not the marks, not the
//!   idempotency records. A batch ([`Store::apply`] with several ops) is all
//!   or nothing: a failed compare-and-swap anywhere rolls back every op and
//!   the mark.
//! - **Marks never go down**, and a lock never seen has marks 0
//!   ([`Store::marks`] is not an error for it).
//! - **What "acknowledged" means** on sled depends on [`Durability`]:
//!   - [`Durability::Flushed`] (the default): the request's group is in
//!     the store's group log and the log is `fdatasync`ed before the call
//!     returns or the [`Pending`] resolves. Syncs are shared by group
//!     commit: one committer thread decides every queued request as one
//!     group, logs its effects as one record and syncs once, and only then
//!     applies them to sled. sled's own files are made durable by
//!     checkpoints on a thread of their own (sled 0.34's flush only calls
//!     `sync_file_range` on Linux, so a checkpoint `fsync`s sled's files
//!     and directory itself), after which the log's full segments are
//!     removed; the log is replayed on open. Everything a read finds is
//!     therefore already durable: no response ever reports something a
//!     crash could take back.
//!   - [`Durability::Buffered`]: the request's group is one sled
//!     transaction, committed in sled's in-memory log buffers. Every
//!     `flush_every` the store's interval sync writes sled's log and
//!     fsyncs sled's files, so a write is on disk once an interval sync
//!     that began after its acknowledgement has completed: within
//!     `flush_every` plus the length of one sync.
//! - **What `kill -9` can lose** (sled): under `Flushed`, nothing acknowledged
//!   (un-acknowledged in-flight writes may or may not be there, each one
//!   whole or not at all). Under `Buffered`, every write and every mark
//!   update acknowledged since the last interval sync began (up to
//!   `flush_every`, 500 ms by default, plus one sync): sled keeps its log
//!   buffers in process memory, so the OS page cache does not save them.
//!   Power loss or a kernel crash loses the same under `Buffered`, and
//!   nothing acknowledged under `Flushed`, on a disk that honours fsync.
//! - **Fail-stop on flush failure** (sled): once a flush or a sync fails (the
//!   group log's, a checkpoint's, the interval sync's, or [`Store::flush`];
//!   or sled reports an I/O error deciding or applying a group), every
//!   later call returns
//!   [`StoreError::FlushFailed`] until the store is reopened, since writes
//!   committed in memory may not be on disk.
//! - **Retries are safe within the idempotency window**: a write with a
//!   [`RequestId`] already recorded on its lock returns the original
//!   outcome ([`Applied::replayed`]) and applies nothing. Each lock
//!   remembers its last [`StoreConfig::idempotency_window`] ids (1024 by
//!   default), persisted in the write's own atomic step. A retry after its
//!   id was evicted is treated as a new request: it is fenced like any
//!   other (refused if a newer holder has written) and otherwise applied
//!   again. Reusing an id for a different request is refused
//!   ([`Refused::IdempotencyKeyReused`]).
//!
//! # How a write flows
//!
//! [`Store::submit`] checks limits and the sequencer's mode, then hands the
//! request to the engine ([`Engine::write`]) and returns a [`Pending`]
//! ([`Store::submit_capped`] adds a raise cap, which the engine checks in
//! the same step as the fencing rule).
//! sled's engine queues it to its committer thread. The committer takes every
//! queued request and decides them in order as one group (each request all
//! or nothing on its own: see `committer.rs`); in `Flushed` mode it logs
//! and syncs the group's effects once (`group_log.rs`) and applies them to
//! sled, and fills each request's outcome. Why one thread: groups must be
//! decided in order on the state the previous one left, and async worker
//! threads must never block for the length of an fsync.
//!
//! # Where to start
//!
//! - [`Store`]: open, [`Store::apply`] / [`Store::submit`] for writes,
//!   [`Store::get`] for reads, [`Store::marks`].
//! - [`Engine`]: the trait an engine implements, and its obligations;
//!   [`open_sled_engine`] for the sled engine alone.
//! - [`plan`]: the write planner every engine written in Rust decides
//!   with (idempotent replay, the raise cap, the rule, the ops over an
//!   overlay); [`stored`]: the bytes engines store alike (a lock's state,
//!   op results).
//! - [`Marks::admit`]: the fencing rule, as a pure function; [`RaiseLimit`]:
//!   the raise cap a write carries into its engine's atomic step.
//! - [`Op`], [`Applied`], [`Read`], [`Refused`]: requests and outcomes.
//! - [`Durability`], [`StoreConfig`], [`Limits`]: configuration (durability
//!   and cache size are sled's).
//! - [`DurableSled`]: a sled database of your own, flushed and fsynced the
//!   way the store does it.
//!
//! # Observability
//!
//! Every fencing decision is a `tracing` event (emitted by [`Store`], the
//! same for every engine, when the outcome resolves) with target
//! `palisade_store::fence` and fields `lock`, `mode`, `generation`,
//! `h_excl`, `h_shared`: accepted requests at `DEBUG`, refusals at `INFO`
//! with a `reason` (`stale`, `shared_on_write`, `cas_mismatch`,
//! `idempotency_key_reused`, `lock_mismatch`, `raise_too_large`). Flush failures are logged at
//! `ERROR`.

mod config;
mod durable_sled;
mod engine;
mod error;
mod idempotency;
mod op;
mod pending;
pub mod plan;
mod raise_limit;
mod store;
pub mod stored;

pub use config::{Durability, DurabilityParseError, LimitKind, Limits, StoreConfig};
pub use durable_sled::DurableSled;
pub use engine::sled::{FlushStats, open_sled_engine};
pub use engine::{Engine, EngineFuture, EngineInfo, ReadRequest, StoredRecord, WriteRequest};
pub use error::StoreError;
pub use op::{Applied, Op, Read, Refused, RequestId};
/// What one op did: defined in core, shared with the client.
pub use palisade_core::OpResult;
/// The marks and the fencing rule live in core, shared with every fence.
pub use palisade_core::marks::Marks;
pub use pending::Pending;
pub use raise_limit::RaiseLimit;
pub use store::Store;

/// A sequencer of `lock` in `mode` at `generation`, for the unit tests.
#[cfg(test)]
fn test_sequencer(
    lock: &str,
    mode: palisade_core::Mode,
    generation: u64,
) -> palisade_core::Sequencer {
    palisade_core::Sequencer::new(
        palisade_core::LockName::new(lock).unwrap(),
        mode,
        palisade_core::Generation::new(generation).unwrap(),
    )
}
