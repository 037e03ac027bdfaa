//! The etcd storage engine of Palisade: fenced data in an etcd v3 cluster.
//!
//! [`EtcdEngine`] implements [`palisade_store::Engine`]. Marks, data and
//! idempotency records are keys under one prefix (layout in `keys.rs`:
//! `P/l/<escaped lock>/{m,d/…,r/…,s/…}`), so several resource servers over
//! one cluster share every lock's marks: any of them can take any request.
//!
//! # How a request is applied
//!
//! 1. **Read**: one read-only, linearizable Txn fetches the lock's marks,
//!    the idempotency record of the request id and the oldest remembered
//!    id, and every data key the ops touch (with its value only where a
//!    compare-and-swap needs it).
//! 2. **Decide** in Rust, with no I/O: replay, refusal
//!    ([`palisade_store::Marks::admit`], compare-and-swap against the
//!    values as left by the earlier ops), or the writes.
//! 3. **Commit**: one Txn whose compares require the `mod_revision` of
//!    every key read to be unchanged, and whose success branch writes the
//!    data (one put or delete per key, its final value), the new marks and
//!    the idempotency record (evicting the oldest id beyond the window)
//!    together. A compare that fails means another request on the lock
//!    committed in between: nothing was applied, and the request is decided
//!    again on what the Txn's failure branch read, up to
//!    [`EtcdEngineConfig::with_max_attempts`] times. A refusal or a replay
//!    commits nothing.
//!
//! **One round trip when nothing changed.** The engine remembers each
//! lock's marks as of the state key's last `mod_revision` it saw. A write
//! it can decide from that memory alone skips step 1: its commit compares
//! the state key against the remembered revision, a compare-and-swap's
//! expectation against the key's value, and a request id's record against
//! absence; the results of plain puts and deletes come back from the
//! commit itself (the previous key of each write; for a request id, a
//! nested Txn picks the record matching the one key whose prior existence
//! decides the results). If another engine wrote since, the compare fails,
//! nothing is applied, and the request continues from step 1: such a
//! commit carries no failure branch, since reads sent with every commit
//! cost etcd more than one more round trip in the rare case they serve.
//! Refusals are always decided on a fresh read.
//!
//! Every write rewrites its lock's marks key, so that key's
//! `mod_revision` moves with anything in the lock's keyspace: two requests
//! on one lock never both commit on the same reading, whichever process
//! they come through.
//!
//! # What an acknowledgement means
//!
//! etcd answers a Txn once a majority of its members have it in their
//! fsynced write-ahead log: an acknowledged write survives `kill -9` of
//! any minority of members, and of all of them. The commit sequence
//! number is the Txn's revision, which etcd raises by one per write
//! across the whole cluster, and never reuses; a replay carries the
//! revision of the original (the idempotency record's `mod_revision`).
//!
//! A commit whose answer is lost (connection broken, no answer within the
//! request timeout) is reported as [`StoreError::Storage`] "may or may not
//! have been applied", never guessed: the client retries with the same
//! request id. Only a commit that never left (no connection to the member)
//! is sent again by the engine.
//!
//! # etcd's limits
//!
//! etcd refuses a request over `--max-request-bytes` (1.5 MiB by default)
//! or with more than `--max-txn-ops` (128) operations in a branch. The
//! engine is configured with the cluster's values and refuses a request
//! that could exceed them whole, before sending anything, with
//! [`StoreError::TooLarge`] (413): a request is never split into two
//! Txns. [`RESERVED_TXN_OPS`] of the ops are the engine's own keys.
//!
//! [`StoreError::Storage`]: palisade_store::StoreError::Storage
//! [`StoreError::TooLarge`]: palisade_store::StoreError::TooLarge

mod config;
mod engine;
mod errors;
mod keys;
mod memory;
mod plan;
mod txn;

pub use config::{
    ConfigError, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_TXN_OPS, DEFAULT_PREFIX, EtcdEngineConfig,
};
pub use engine::EtcdEngine;
/// The endpoints, credentials, TLS and timeouts, shared with the etcd lock
/// backend (`palisade-lock-etcd`).
pub use palisade_etcd::{EndpointError, EtcdConnection};

/// Txn operations the engine takes for its own keys in a write: the marks,
/// the idempotency record and its slot, the evicted slot and record, and
/// after an eviction the read of the next oldest id. A request may carry
/// `--max-txn-ops` minus these.
pub const RESERVED_TXN_OPS: usize = 6;
