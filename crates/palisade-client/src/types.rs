//! The typed outcomes of the API (JSON DTOs decoded into these).

use bytes::Bytes;
use palisade_core::marks::Marks;
use palisade_core::{Generation, LockName, Mode, OpResult};

/// A write the server applied (or replayed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// One result per op.
    pub results: Vec<OpResult>,
    /// The lock's marks right after the write.
    pub marks: Marks,
    /// The server's commit sequence number of the write: strictly
    /// increasing in commit order (see docs/http-api.md).
    pub commit_seq: u64,
    /// The server answered from its idempotency record: this request was
    /// applied earlier and nothing was applied this time.
    pub replayed: bool,
}

/// A read that was not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The value, or `None` for a missing key (404 `not_found`).
    pub value: Option<Bytes>,
    /// The lock's marks after the read.
    pub marks: Marks,
}

/// One op of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    /// Set `key` to `value`.
    Put {
        /// The key.
        key: Bytes,
        /// The value.
        value: Bytes,
    },
    /// Remove `key`.
    Delete {
        /// The key.
        key: Bytes,
    },
    /// Set `key` to `new` (remove when `None`) if its value is `expected`
    /// (absent when `None`).
    Cas {
        /// The key.
        key: Bytes,
        /// The value it must have now.
        expected: Option<Bytes>,
        /// The value to set.
        new: Option<Bytes>,
    },
}

impl BatchOp {
    /// A put.
    pub fn put(key: impl Into<Bytes>, value: impl Into<Bytes>) -> BatchOp {
        BatchOp::Put {
            key: key.into(),
            value: value.into(),
        }
    }

    /// A delete.
    pub fn delete(key: impl Into<Bytes>) -> BatchOp {
        BatchOp::Delete { key: key.into() }
    }

    /// A compare-and-swap.
    pub fn cas(key: impl Into<Bytes>, expected: Option<Bytes>, new: Option<Bytes>) -> BatchOp {
        BatchOp::Cas {
            key: key.into(),
            expected,
            new,
        }
    }
}

/// What `GET /healthz` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// The server's durability mode: `flushed` or `buffered`.
    pub durability: String,
}

/// A request the server considered and refused; nothing changed on the
/// server. The counterpart of `palisade_store::Refused`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// 409 `stale`: the generation is below the lock's marks. Either a
    /// newer holder has been honoured, or the lock service's generations
    /// went backwards (`regression`). `marks` lets a lock side raise its
    /// generation floor above them (`palisade raise-floor`).
    #[error("stale: {message}")]
    Stale {
        /// The lock.
        lock: LockName,
        /// The sequencer's mode.
        mode: Mode,
        /// The generation presented.
        presented: Generation,
        /// The smallest generation that would be accepted now.
        required: u64,
        /// The lock's current marks.
        marks: Marks,
        /// `true`: the server's live check says the presented sequencer's
        /// holder still holds the lock, so no newer holder exists and the
        /// lock service's generations went backwards; raise its floor above
        /// `marks`. `false`: not established (no live check, or the holder
        /// no longer holds): a newer holder, or a regression.
        regression: bool,
        /// The server's message.
        message: String,
    },
    /// 409 `not_held`: the server's live check says the holder no longer
    /// holds the lock.
    #[error("not held: {message}")]
    NotHeld {
        /// The generation presented.
        presented: u64,
        /// The server's message.
        message: String,
    },
    /// 403 `shared_on_write`: writes need an exclusive sequencer.
    #[error("shared sequencer on a write: {message}")]
    SharedOnWrite {
        /// The server's message.
        message: String,
    },
    /// 412 `cas_mismatch`: a compare-and-swap failed; nothing was applied.
    #[error("compare-and-swap mismatch at op {op_index}: {message}")]
    CasMismatch {
        /// Which op (0-based).
        op_index: usize,
        /// Whether the key exists now.
        current_exists: bool,
        /// The server's message.
        message: String,
    },
    /// 422 `idempotency_key_reused`: the key was used for another request.
    #[error("idempotency key reused: {message}")]
    IdempotencyKeyReused {
        /// The server's message.
        message: String,
    },
    /// 409 `raise_too_large`: the server caps how far one request may
    /// raise a lock's mark (`--max-mark-raise`), and this generation is
    /// further above the marks than that. A lock side minting such
    /// generations has a bug; fix it rather than retry.
    #[error("raise too large: {message}")]
    RaiseTooLarge {
        /// The generation presented.
        presented: u64,
        /// The server's cap.
        max_raise: u64,
        /// The lock's current marks.
        marks: Marks,
        /// The server's message.
        message: String,
    },
}

impl Refused {
    /// The server's `code`.
    pub fn code(&self) -> &'static str {
        match self {
            Refused::Stale { .. } => "stale",
            Refused::NotHeld { .. } => "not_held",
            Refused::SharedOnWrite { .. } => "shared_on_write",
            Refused::CasMismatch { .. } => "cas_mismatch",
            Refused::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            Refused::RaiseTooLarge { .. } => "raise_too_large",
        }
    }
}
