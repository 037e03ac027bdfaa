//! A typed async client for the Palisade resource server.
//!
//! The HTTP API is specified in `docs/http-api.md`; this crate speaks it so
//! callers deal in [`Sequencer`](palisade_core::Sequencer)s, bytes and typed
//! outcomes. Like `palisade-store`, every call returns a nested `Result`:
//! the outer [`ClientError`] for failures (unreachable server, malformed
//! request, server errors), the inner [`Refused`] for what a fenced system
//! expects to happen (a stale generation, a failed compare-and-swap).
//!
//! `http://` goes through reqwest; `https://` through a small rustls
//! transport of its own (the `ring` provider, no process-wide state), which
//! trusts the system's CA bundle or a private CA given to
//! [`ClientBuilder::root_ca_pem`]. A server started with `--tokens-file`
//! needs [`ClientBuilder::bearer_token`]; its refusals are
//! [`ClientError::Unauthenticated`] and [`ClientError::Forbidden`], as are
//! a server's refusals of unsigned or badly signed sequencers.
//!
//! A request whose connection breaks before its answer (the server closed
//! an idle keep-alive connection just as the request went out) is sent
//! once more, on a new connection, only where a second copy changes
//! nothing: a read, or a write with an idempotency key (the server answers
//! the copy from its record). A write without a key is never sent twice:
//! it may have been applied, and only the caller can tell.
//!
//! # Where to start
//!
//! - [`Client`]: `new(base_url)`, then `get`, `put`, `delete`, `cas`,
//!   `batch`, `marks`, `health`.
//! - [`ClientBuilder`] (`Client::builder(base_url)`): a bearer token for a
//!   server that requires one, a private CA for `https://`, a timeout.
//! - [`Client::fence`]: right after acquiring, raise the lock's marks
//!   to the new generation, so older holders are refused at once.
//! - [`Client::put`] and the other writes: take a sequencer or any
//!   [`LockGuard`](palisade_core::LockGuard) and use its sequencer, refusing
//!   locally once the lease may have lapsed.
//! - [`Refused`], [`ClientError`]: the outcomes, typed, decoded with serde
//!   from the API's bodies (`palisade-wire`, the types the server writes).

mod client;
mod error;
mod fence;
// Without the `tls` feature, `https://` is refused when the client is built.
#[cfg_attr(not(feature = "tls"), path = "tls_off.rs")]
mod tls;
mod types;

pub use client::{Client, ClientBuilder};
pub use error::ClientError;
/// The marks and op results are core's, the same types the store and the
/// guard use.
pub use palisade_core::OpResult;
pub use palisade_core::marks::Marks;
/// Every refusal, core's one type: what the server's `409`, `403`, `412`
/// and `422` refusals decode into, the same the store and the guard make.
pub use palisade_core::{Refused, RequestId};
pub use types::{BatchOp, Health, Read, Written};
