//! The core of Palisade: the words every other crate speaks.
//!
//! Palisade closes the hole that leases leave open: a lock holder can pause
//! past its lease while another client takes the lock, then wake up and
//! write. Lock backends hand out [`Sequencer`]s (lock name, [`Mode`],
//! [`Generation`]); a resource server refuses any request whose generation is
//! older than the newest it has honoured for that lock.
//!
//! **Architecture Invariant:** core does no IO and knows no backend. It
//! depends on `tokio` only for `sync` (the lease-lost signal) and `time`
//! (deadlines), and on pure computation: `hmac`/`sha2` for signatures,
//! `backon` for [`retry_pauses`], `tracing` for the hold table's decisions,
//! and on text handling: `url` for the one
//! redaction of connection strings ([`redact`]), `humantime` for the one
//! duration grammar ([`parse_duration`]). A backend author needs this crate
//! and nothing else.
//!
//! # Where to start
//!
//! - [`Lock`] and [`LockGuard`]: the one trait every lock backend implements,
//!   with its correctness obligations.
//! - [`Sequencer`]: the token, and its canonical `v1` text form (the wire
//!   format, one HTTP header).
//! - [`LeaseTracker`] / [`LeaseWatch`]: the lease-lost signal backends drive
//!   and users await.
//! - [`LiveCheck`]: Chubby's CheckSequencer, for resource servers.
//! - [`Inspect`] / [`LockInfo`]: who holds a lock, who waits, what
//!   lock-delay is in force, as every backend reports it; [`ForceRelease`]
//!   and [`RaiseFloor`] beside it, for operators.
//! - [`holds`]: the session side every backend shares (held locks,
//!   re-entry, gates, the waiter bound, releasing), so a backend writes
//!   only its protocol.
//! - [`Signer`] / [`Verifier`]: HMAC-SHA256 signed sequencers, so only the
//!   lock side can mint a generation a resource server will honour.
//! - [`Refused`]: every refusal the system makes, one type for the store,
//!   the resource server, the guard and the client; [`RequestId`] for
//!   idempotent retries.
//! - [`LockError`], [`SequencerError`]: what can go wrong, typed.

mod changes;
mod columns;
mod duration;
mod encoding;
mod error;
mod floor;
mod generation;
pub mod holds;
mod inspect;
mod lease;
mod live_check;
mod lock;
pub mod marks;
mod mode;
mod name;
pub mod op;
mod op_result;
mod raise_cap;
pub mod redact;
mod refusal;
mod retry;
mod sequencer;
mod signing;
mod suspend_clock;

pub use changes::{ChangeSender, Changes};
pub use columns::two_columns;
pub use duration::{format_duration, parse_duration};
pub use encoding::percent_decode;
pub use error::{BoxError, LockError};
pub use floor::{FloorRaised, RaiseFloor, RaiseFloorError};
pub use generation::Generation;
pub use inspect::{ForceRelease, Holder, Inspect, LockInfo, Waiter, name_has_prefix};
pub use lease::{LeaseState, LeaseTracker, LeaseWatch, LostReason};
pub use live_check::{DynLiveCheck, LiveCheck, LiveCheckFuture, Liveness, SharedLiveCheck};
pub use lock::{Lock, LockGuard, Obtain, SequencerSource, SessionOptions};
pub use mode::{Mode, ModeParseError};
pub use name::{LockName, LockNameError, key_prefix_problem};
pub use op_result::{OpResult, OpResultParseError};
pub use raise_cap::RaiseCap;
pub use refusal::{Refused, RegressionCause, RequestId, RequestIdError};
pub use retry::retry_pauses;
pub use sequencer::{Sequencer, SequencerError, Signature};
pub use signing::{KeyError, KeyRing, SignatureError, Signer, SigningKey, Verifier};

/// Clips text echoed back in an error to 64 bytes (on a char boundary), so a
/// hostile 10 KB header does not come back in every log line.
pub(crate) fn clip(text: &str) -> String {
    const MAX: usize = 64;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}
