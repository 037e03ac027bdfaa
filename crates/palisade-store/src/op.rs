//! What a request asks for, and what it gets back.

use bytes::Bytes;
use palisade_core::{Generation, LockName, Mode, OpResult};

use crate::{Marks, RequestId};

/// One write operation in a lock's keyspace.
///
/// Keys and values are bytes. A [`Store::apply`](crate::Store::apply) call
/// takes a slice of these and applies them in order, atomically: all of them
/// or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: Bytes,
        /// The new value.
        value: Bytes,
    },
    /// Removes `key` (absent is fine).
    Delete {
        /// The key.
        key: Bytes,
    },
    /// Sets `key` to `new` (or removes it when `new` is `None`) only if its
    /// current value is `expected` (`None`: only if absent), like a
    /// compare-and-swap. A mismatch refuses the whole request.
    Cas {
        /// The key.
        key: Bytes,
        /// The value the key must have now; `None` = must be absent.
        expected: Option<Bytes>,
        /// The value to set; `None` = remove.
        new: Option<Bytes>,
    },
}

impl Op {
    /// A [`Op::Put`].
    pub fn put(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
        }
    }

    /// A [`Op::Delete`].
    pub fn delete(key: impl Into<Bytes>) -> Op {
        Op::Delete { key: key.into() }
    }

    /// A [`Op::Cas`].
    pub fn cas(key: impl Into<Bytes>, expected: Option<Bytes>, new: Option<Bytes>) -> Op {
        Op::Cas {
            key: key.into(),
            expected,
            new,
        }
    }

    /// The key this op touches.
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Put { key, .. } | Op::Delete { key } | Op::Cas { key, .. } => key,
        }
    }

    /// A short name: `put`, `delete`, `cas`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Put { .. } => "put",
            Op::Delete { .. } => "delete",
            Op::Cas { .. } => "cas",
        }
    }
}

/// A write request that was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// One result per op, in order.
    pub results: Vec<OpResult>,
    /// The lock's marks right after the request.
    pub marks: Marks,
    /// The engine's commit sequence number of this write: unique across the
    /// engine (restarts, replicas), strictly increasing in commit order per
    /// lock, and a write acknowledged before another is sent has the smaller
    /// number (any lock). Not contiguous. A replay carries the original
    /// write's number. sled numbers every write in one global commit order.
    /// Fault tests order accepted writes by it.
    pub commit_seq: u64,
    /// `true` when this is the remembered outcome of an earlier request with
    /// the same idempotency key: nothing was applied this time.
    pub replayed: bool,
}

/// The result of a read that was not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The value, or `None` if the key is absent.
    pub value: Option<Bytes>,
    /// The lock's marks after the read (a read with a sequencer may raise
    /// them).
    pub marks: Marks,
}

/// A request the store considered and refused. Nothing changed: no data, no
/// mark, no idempotency record.
///
/// These are expected outcomes in a fenced system, not failures, which is
/// why they live in the inner `Result`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// The sequencer's generation is below what the marks require: a newer
    /// holder has been honoured. Carries the current marks so the lock side
    /// can raise its generation floor above them.
    #[error(
        "stale sequencer for lock `{lock}`: {mode} generation {presented} is below the required {required} ({marks})",
        required = marks.required(*mode)
    )]
    Stale {
        /// The lock.
        lock: LockName,
        /// The mode of the sequencer.
        mode: Mode,
        /// The generation offered.
        presented: Generation,
        /// The lock's current marks.
        marks: Marks,
    },
    /// A write under a shared (reader) sequencer.
    #[error("lock `{lock}`: writes need an exclusive sequencer; generation {presented} is shared")]
    SharedOnWrite {
        /// The lock.
        lock: LockName,
        /// The generation offered.
        presented: Generation,
    },
    /// A compare-and-swap whose comparison failed. The whole request was
    /// rolled back.
    #[error(
        "compare-and-swap failed at op {op_index}: the current value differs from the expected one"
    )]
    CasMismatch {
        /// Which op of the request (0-based).
        op_index: usize,
        /// The key's current value (`None`: absent).
        current: Option<Bytes>,
    },
    /// The idempotency key was already used for a *different* request on
    /// this lock (other ops, mode or generation).
    #[error("idempotency key `{request_id}` was already used for a different request")]
    IdempotencyKeyReused {
        /// The key.
        request_id: RequestId,
    },
    /// A read named one lock and presented a sequencer for another.
    #[error("the request is for lock `{requested}` but the sequencer is for lock `{presented}`")]
    LockMismatch {
        /// The lock the request names.
        requested: LockName,
        /// The lock the sequencer is for.
        presented: LockName,
    },
}

impl Refused {
    /// A short stable name: `stale`, `shared_on_write`, `cas_mismatch`,
    /// `idempotency_key_reused`, `lock_mismatch`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Stale { .. } => "stale",
            Refused::SharedOnWrite { .. } => "shared_on_write",
            Refused::CasMismatch { .. } => "cas_mismatch",
            Refused::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            Refused::LockMismatch { .. } => "lock_mismatch",
        }
    }
}
