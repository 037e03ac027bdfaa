//! The typed outcomes of the API (JSON DTOs decoded into these).

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
