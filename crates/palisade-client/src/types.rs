//! The typed outcomes of the API: core's types, decoded from the wire
//! types of `palisade-wire`.

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

/// What `GET /healthz` said: the wire type, decoded with serde.
pub use palisade_wire::HealthAnswer as Health;
