//! What a write asks for and what it gets back: the fenced store's request
//! and outcome types, which the HTTP API carries and the client decodes
//! into, defined once here so neither copies them.

use bytes::Bytes;

use crate::OpResult;
use crate::marks::Marks;

/// One write operation in a lock's keyspace.
///
/// Keys and values are bytes. A write request (the fenced store's
/// `Store::apply`, a `PUT`/`DELETE`/batch of the HTTP API, the client's
/// batch) carries a list of these, applied in order, atomically: all of
/// them or none.
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
