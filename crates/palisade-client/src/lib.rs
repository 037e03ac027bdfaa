//! A typed async client for the Palisade resource server.
//!
//! The HTTP API is specified in `docs/http-api.md`; this crate speaks it so
//! callers deal in [`Sequencer`](palisade_core::Sequencer)s, bytes and typed
//! outcomes. Like `palisade-store`, every call returns a nested `Result`:
//! the outer [`ClientError`] for failures (unreachable server, malformed
//! request, server errors), the inner [`Refused`] for what a fenced system
//! expects to happen (a stale generation, a failed compare-and-swap).
//!
//! # Where to start
//!
//! - [`Client`]: `new(base_url)`, then `get`, `put`, `delete`, `cas`,
//!   `batch`, `marks`, `health`.
//! - [`Client::put_with`] and friends: take any
//!   [`LockGuard`](palisade_core::LockGuard) and use its sequencer, refusing
//!   locally once the lease may have lapsed.
//! - [`Refused`], [`ClientError`]: the outcomes, typed.

mod client;
mod error;
mod types;

pub use client::Client;
pub use error::ClientError;
pub use types::{BatchOp, Health, Marks, OpResult, Read, Refused, Written};
