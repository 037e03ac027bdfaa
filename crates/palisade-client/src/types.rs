//! The typed outcomes of the API (JSON DTOs decoded into these).

use palisade_core::marks::Marks;
use palisade_core::{Generation, LockName, Mode};

/// A write the server applied (or replayed): core's
/// [`Applied`](palisade_core::op::Applied), the fenced store's own outcome.
/// `commit_seq` is the server's commit sequence number of the write,
/// strictly increasing in commit order (see docs/http-api.md); `replayed`
/// says the server answered from its idempotency record.
pub use palisade_core::op::Applied as Written;
/// One op of a batch: core's [`Op`](palisade_core::op::Op), the one the
/// fenced store applies.
pub use palisade_core::op::Op as BatchOp;
/// A read that was not refused (`value` `None`: 404 `not_found`).
pub use palisade_core::op::Read;

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
