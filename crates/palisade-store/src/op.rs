//! What a request asks for, and what it gets back.

pub use palisade_core::op::{Applied, Op, Read};
/// Every refusal, defined once in core: the store makes `stale`,
/// `shared_on_write`, `cas_mismatch`, `idempotency_key_reused` and
/// `lock_mismatch`; the resource server adds the others.
pub use palisade_core::{Refused, RequestId};
