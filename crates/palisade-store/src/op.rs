//! What a request asks for, and what it gets back.

use bytes::Bytes;
pub use palisade_core::op::{Applied, Op, Read};
use palisade_core::{Generation, LockName, Mode};

use crate::{Marks, RequestId};

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
