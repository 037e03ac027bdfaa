//! The JSON bodies of the Palisade resource server's HTTP API, once: every
//! request and answer body (writes, marks, batch, compare-and-swap, health,
//! the event feed) and every error body with its code-dependent fields.
//!
//! The server writes these types, the guard answers its refusals with
//! them, the client and the CLI decode with them, and the server's
//! OpenAPI document (`GET /openapi.json`, crates/palisade-server/openapi.json) is generated
//! from them. `docs/http-api.md` is the prose contract.
//!
//! Core's domain types keep no serde: [`ErrorBody::from_refused`] and
//! [`ErrorKind::to_refused`] turn core's [`Refused`](palisade_core::Refused)
//! into its body and back, and each body converts to and from its core
//! type ([`WriteAnswer::into_applied`], [`BatchRequest::into_ops`], ...).
//!
//! **Architecture Invariant:** the OpenAPI document is generated from the
//! types the handlers return: a handler cannot answer a body the document
//! does not describe, and an error code is one variant of [`ErrorKind`]
//! with one status.
//!
//! **Architecture Invariant:** this crate does no IO and knows no HTTP
//! library. With the `openapi` feature it derives `utoipa` schemas; without
//! it (the client) it compiles serde alone.
//!
//! # Where to start
//!
//! - [`ErrorBody`], [`ErrorKind`]: every error answer, its status, and
//!   [`ErrorBody::decode`], the one decoder.
//! - [`JsonBytes`]: bytes as a string, or `{"base64": ...}`.
//! - [`WriteAnswer`], [`MarksAnswer`], [`HealthAnswer`]: the answers.
//! - [`CasRequest`], [`BatchRequest`], [`BatchOp`]: the request bodies.
//! - [`Decision`], [`Snapshot`]: the event feed.

mod answers;
mod bytes;
mod error;
mod events;
mod examples;
mod marks;
mod names;
mod refusal;
mod requests;

pub use answers::{EngineBody, HealthAnswer, HealthStatus, MarksAnswer, WriteAnswer};
pub use bytes::JsonBytes;
pub use error::{
    CasMismatchFields, DecodeError, Dependency, ErrorBody, ErrorKind, HolderFields, RaiseFields,
    SignatureFields, StaleFields, TooLargeFields,
};
pub use events::{Decision, Outcome, Snapshot};
pub use marks::MarksBody;
pub use names::{ModeName, OpResultName, Operation};
pub use requests::{BatchOp, BatchRequest, CasRequest};
