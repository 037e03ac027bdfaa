//! The storage engine trait: where a lock's marks and data live.
//!
//! [`Store`](crate::Store) is the one public face of the fenced store. It
//! validates a request (limits, empty keys, a shared sequencer on a write,
//! a read whose sequencer names another lock) and hands what is left to an
//! [`Engine`], which does the fenced step itself. sled (the embedded
//! default), PostgreSQL and etcd are engines; each lives behind this trait,
//! and none of their types appear in the API of the store, the server or
//! the guard.

pub(crate) mod sled;

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use palisade_core::{LockName, Sequencer};

use crate::{
    Applied, Durability, Limits, Marks, Op, RaiseLimit, Read, Refused, RequestId, StoreError,
};

/// What every [`Engine`] call returns: a boxed future, so the trait can be
/// used as `dyn Engine`. The outer `Result` is a failure of the engine (the
/// server's 5xx); the inner one, where there is one, an expected refusal.
pub type EngineFuture<T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'static>>;

/// A read request, already validated by [`Store`](crate::Store): the key
/// is non-empty, and a sequencer, when there is one, is for `lock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest<'a> {
    /// The keyspace read.
    pub lock: &'a LockName,
    /// The key read.
    pub key: &'a [u8],
    /// The reader's sequencer (shared or exclusive): the read is fenced
    /// with it, the mark raised in the same step (obligation 7). `None`: a
    /// plain read, which fences nothing.
    pub sequencer: Option<&'a Sequencer>,
}

impl<'a> ReadRequest<'a> {
    /// A read of `key` in `lock`'s keyspace, fenced with `sequencer` when
    /// there is one.
    pub fn new(lock: &'a LockName, key: &'a [u8], sequencer: Option<&'a Sequencer>) -> Self {
        ReadRequest {
            lock,
            key,
            sequencer,
        }
    }
}

/// A write request, already validated by [`Store`](crate::Store): the
/// sequencer is exclusive, every key is non-empty and every size is within
/// the store's [`Limits`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRequest {
    /// The holder's sequencer; its lock is the keyspace written.
    pub sequencer: Sequencer,
    /// The ops, applied in order, all or none. Empty: only raise the mark.
    pub ops: Vec<Op>,
    /// The idempotency key, if the client sent one.
    pub request_id: Option<RequestId>,
    /// What the engine records next to `request_id` and compares on a
    /// retry, to tell a true retry from a reused key: a SHA-256 digest (32
    /// bytes) of the sequencer's mode and generation and the ops, computed
    /// once by the store. Engines treat it
    /// as opaque bytes. Empty when there is no `request_id` (nothing to
    /// compare it with, and hashing large values costs time).
    pub fingerprint: Vec<u8>,
    /// The raise cap, when the resource server enforces one: the engine
    /// refuses a generation above [`RaiseLimit::allowed_up_to`] of the
    /// marks it reads in its atomic step (obligation 10). Not part of the
    /// fingerprint: a retry under another cap is the same request.
    pub raise_limit: Option<RaiseLimit>,
}

impl WriteRequest {
    /// A request with its fingerprint computed the store's way.
    pub fn new(sequencer: Sequencer, ops: Vec<Op>, request_id: Option<RequestId>) -> WriteRequest {
        let fingerprint = match request_id {
            Some(_) => crate::idempotency::fingerprint(&sequencer, &ops).to_vec(),
            None => Vec::new(),
        };
        WriteRequest {
            sequencer,
            ops,
            request_id,
            fingerprint,
            raise_limit: None,
        }
    }

    /// The request, capped by `limit`.
    pub fn with_raise_limit(mut self, limit: RaiseLimit) -> WriteRequest {
        self.raise_limit = Some(limit);
        self
    }
}

/// What an engine says about itself, for logs, `/v1/health` and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineInfo {
    /// A short stable name: `sled`, `postgres`, `etcd`.
    pub name: &'static str,
    /// When a 2xx is sent, in words (e.g. `flushed`, `committed with
    /// synchronous_commit on`, `committed by a Raft majority`).
    pub durability: String,
    /// Where the data lives, with no secret in it (a directory, a
    /// host:port/database, etcd endpoints and the key prefix).
    pub location: String,
}

/// One record an engine holds, as [`Engine::dump`] lists it: where it lives
/// (a tree, a table, a key prefix: the engine's own name for it), its key
/// and its value, as bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StoredRecord {
    /// The engine's name of the place: `palisade-meta`, a table, a prefix.
    pub place: String,
    /// The record's key in that place.
    pub key: Vec<u8>,
    /// The record's value (a row may be encoded however the engine likes,
    /// as long as equal rows give equal bytes).
    pub value: Vec<u8>,
}

/// A fenced storage engine.
///
/// # To ensure correctness
///
/// An implementation must meet every obligation below; the engine
/// conformance suite in `palisade-testkit` checks each one against a real
/// instance of the engine.
///
/// 1. **One atomic, isolated step per request.** For a write: the
///    idempotency lookup, the fencing check ([`Marks::admit`]), every op,
///    the raise of the mark and the idempotency record are applied together
///    or not at all, and two requests on the same lock never interleave,
///    whichever process (replica) of the engine's database they come
///    through. A crash at any point leaves all of them or none.
/// 2. **Marks never go down.** A lock never seen has marks 0, which is not
///    an error. Nothing but an admitted request raises a mark.
/// 3. **A refusal changes nothing**: not the data, not the marks, not the
///    idempotency records. The refusal carries the marks the decision was
///    made against ([`Refused::Stale`]).
/// 4. **Acknowledge only what is durable.** A future resolves with an
///    outcome only once the engine has made that outcome durable in its
///    own terms (sled: fsynced; PostgreSQL: committed with
///    `synchronous_commit` on; etcd: committed by a Raft majority). Reads
///    and refusals report only state a crash cannot take back. An engine
///    that cannot tell whether a write committed (a connection lost during
///    the commit) returns a [`StoreError`], never a guess: the client
///    retries with the same request id and idempotency settles it.
/// 5. **Idempotent retries.** A write whose `request_id` is recorded on its
///    lock returns the original [`Applied`] with `replayed: true` and the
///    original `commit_seq`, and applies nothing; the same id with another
///    fingerprint is [`Refused::IdempotencyKeyReused`]. Each lock remembers
///    at least its last [`StoreConfig::idempotency_window`](crate::StoreConfig)
///    ids; the window may be cut from the oldest end.
/// 6. **Compare-and-swap** ([`Op::Cas`]) compares against the value as left
///    by the earlier ops of the same request; a mismatch anywhere refuses
///    the whole request with [`Refused::CasMismatch`] (the op's index and
///    the key's current value).
/// 7. **Fenced reads.** A read with a sequencer (shared or exclusive) is
///    checked by the same rule and raises the mark of its mode in the same
///    step as the read; a read without one changes nothing.
/// 8. **Commit order is visible.** [`Applied::commit_seq`] is unique across
///    the engine, its restarts and its replicas (not contiguous), and
///    - among the writes of one lock, strictly increasing in commit order;
///    - a write acknowledged before another write is sent (on any lock,
///      through any replica) has the smaller number.
///
///    Concurrent writes on *different* locks may carry numbers out of
///    their commit order (a PostgreSQL sequence value is taken before the
///    commit): nothing orders writes of different locks by it, since the
///    fence itself is per lock. A replay carries the original number.
/// 9. **Never split a request.** A request the engine cannot apply in one
///    step (etcd's request size or `--max-txn-ops`) is refused whole with
///    [`StoreError::TooLarge`] before anything is written.
/// 10. **The raise cap in the same step.** A write carrying a
///     [`WriteRequest::raise_limit`] whose generation is above
///     [`RaiseLimit::allowed_up_to`] of the marks the step reads is refused
///     with [`Refused::RaiseTooLarge`] carrying those marks
///     ([`RaiseLimit::check`]), after the idempotency lookup (a retry of a
///     recorded request gets its original outcome) and before the fencing
///     rule. So a capped write costs the engine no read of its own.
///
/// Engines written in Rust decide a write with the shared planner
/// ([`plan::plan_write`](crate::plan::plan_write)), which applies 1's
/// order, 3, 5, 6 and 10 as pure functions of what the engine read; the
/// engine keeps its layout, its atomicity and its commit numbers.
pub trait Engine: Send + Sync + fmt::Debug + 'static {
    /// Name, durability and location, for logs and health.
    fn info(&self) -> EngineInfo;

    /// Limits the engine itself imposes, tighter than or equal to the
    /// store's (etcd's request size and transaction ops). The store
    /// checks both before calling [`Engine::write`].
    fn limits(&self) -> Limits {
        Limits {
            max_key_bytes: usize::MAX,
            max_value_bytes: usize::MAX,
            max_batch_ops: usize::MAX,
        }
    }

    /// What an acknowledgement means, as [`Durability`]: `Flushed` (the
    /// default) for an engine that acknowledges only what it has made
    /// durable (obligation 4); the sled engine in `Buffered` mode says so.
    /// [`EngineInfo::durability`] says the same in the engine's words.
    fn durability(&self) -> Durability {
        Durability::Flushed
    }

    /// Applies a write: obligations 1–6, 8–10.
    fn write(&self, request: WriteRequest) -> EngineFuture<Result<Applied, Refused>>;

    /// Reads `key` in `lock`'s keyspace, fenced when a sequencer (for that
    /// same lock, checked by the store) is given: obligation 7.
    fn read(&self, request: ReadRequest<'_>) -> EngineFuture<Result<Read, Refused>>;

    /// The fencing step alone, touching no data: an exclusive sequencer is
    /// an empty write, a shared one a fenced read of nothing. Returns the
    /// marks after the step.
    fn admit(&self, sequencer: &Sequencer) -> EngineFuture<Result<Marks, Refused>>;

    /// The current marks of `lock` (0 for a lock never seen).
    fn marks(&self, lock: &LockName) -> EngineFuture<Marks>;

    /// `Ok` while the engine can serve requests; the server's readiness.
    fn health(&self) -> EngineFuture<()>;

    /// Makes everything acknowledged so far durable and releases what can
    /// be released, at shutdown. Requests after it may fail.
    fn close(&self) -> EngineFuture<()>;

    /// Every record the engine holds for Palisade (data, marks, idempotency
    /// records, format markers), sorted, for tests that check that a
    /// refusal changed nothing at all. Not for production paths: it reads
    /// everything. An engine that cannot list its records returns a
    /// [`StoreError`] (the default).
    fn dump(&self) -> EngineFuture<Vec<StoredRecord>> {
        let engine = self.info().name;
        Box::pin(async move {
            Err(StoreError::Storage {
                engine,
                message: "this engine cannot list its records".into(),
            })
        })
    }
}
