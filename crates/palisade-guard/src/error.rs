//! Refusals and failures, and the one place they become HTTP answers.
//!
//! Every answer is the Palisade resource server's error body
//! (`palisade_wire::ErrorBody`): a stable machine-readable `code`, a human
//! `message`, and the fields of that code (docs/http-api.md). A client
//! that understands the server's `409 stale` understands the guard's.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use palisade_core::{Generation, LockName, LockNameError, SequencerError, SignatureError};
use palisade_store::{Refused, StoreError};
use palisade_wire::{ErrorBody, ErrorKind, SignatureFields};

/// Why a mark store could not decide. A stale sequencer is *not* here: it
/// is an outcome ([`Admission::Stale`](crate::Admission::Stale)), so `?` on
/// this error can never swallow a fencing refusal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MarkStoreError {
    /// The fenced store failed (I/O, a failed flush, shutting down).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store refused the check for a reason a mark check cannot cause
    /// (a bug, never a fencing decision).
    #[error(
        "the mark store refused lock `{lock}` with `{reason}`, which a mark check never causes"
    )]
    Unexpected {
        /// The lock.
        lock: LockName,
        /// The store's reason code.
        reason: &'static str,
    },
}

/// Why the guard refused a request, or could not decide about it.
///
/// [`GuardError::status`] and [`GuardError::code`] give the HTTP status and
/// the stable code; the `IntoResponse` impl renders the JSON body. The mark
/// never moves for any of these.
///
/// | status | code | variant |
/// |---|---|---|
/// | 400 | `missing_sequencer` | [`GuardError::MissingSequencer`] |
/// | 400 | `malformed_sequencer` | [`GuardError::MalformedSequencer`], [`GuardError::BadHeader`] |
/// | 400 | `bad_lock_name` | [`GuardError::NoLockParam`], [`GuardError::BadLockName`], [`GuardError::LockNotResolved`] |
/// | 401 | `unsigned`, `unknown_key`, `bad_signature` | [`GuardError::Signature`] |
/// | 403 | `wrong_issuer` | [`GuardError::Signature`] |
/// | 403 | `shared_on_write` | [`GuardError::Refused`] ([`Refused::SharedOnWrite`]) |
/// | 409 | `stale` | [`GuardError::Refused`] ([`Refused::Stale`]) |
/// | 409 | `raise_too_large` | [`GuardError::Refused`] ([`Refused::RaiseTooLarge`]) |
/// | 412 | `cas_mismatch` | [`GuardError::Refused`] ([`Refused::CasMismatch`], a handler's own write) |
/// | 422 | `lock_mismatch` | [`GuardError::Refused`] ([`Refused::LockMismatch`]) |
/// | 422 | `idempotency_key_reused` | [`GuardError::Refused`] ([`Refused::IdempotencyKeyReused`], a handler's own write) |
/// | 503 | `storage_unavailable` | [`GuardError::MarkStore`], [`GuardError::Storage`] |
/// | 500 | `internal` | [`GuardError::NotConfigured`] |
///
/// A handler that writes through [`palisade_store::Store`] can return
/// this type too: `From<Refused>` and `From<StoreError>` give the server's
/// codes (`stale`, `cas_mismatch`, `too_large`, ...).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError {
    /// The request needs a sequencer and has none.
    #[error("this request needs a palisade-sequencer header with {needed} sequencer")]
    MissingSequencer {
        /// `"an exclusive"` for writes, `"a"` for reads that require one.
        needed: &'static str,
    },
    /// The header is not a valid `v1` sequencer.
    #[error("malformed sequencer: {0}")]
    MalformedSequencer(#[source] SequencerError),
    /// The header appears twice or is not visible ASCII.
    #[error("malformed sequencer: the palisade-sequencer header {reason}")]
    BadHeader {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The route has no path parameter of the configured name.
    #[error("the route has no `{{{param}}}` path parameter to name the lock")]
    NoLockParam {
        /// The parameter the guard was configured to read.
        param: String,
    },
    /// The route's lock name is not a valid lock name.
    #[error("the route does not name a valid lock: {0}")]
    BadLockName(#[source] LockNameError),
    /// A custom lock resolver could not name the lock.
    #[error("the route does not name a lock: {reason}")]
    LockNotResolved {
        /// The resolver's explanation.
        reason: String,
    },
    /// Signatures are required and this one does not verify. 401 when the
    /// presenter proved nothing (unsigned, unknown key, bad MAC), 403 when it
    /// proved an issuer this service does not trust.
    #[error("sequencer for lock `{lock}` refused: {source}")]
    Signature {
        /// The lock the sequencer claims.
        lock: LockName,
        /// The generation it claims.
        presented: Generation,
        /// The id of the key it is signed with, if signed.
        key_id: Option<String>,
        /// The issuer it names, if any.
        issuer: Option<String>,
        /// Why it does not verify.
        #[source]
        source: SignatureError,
    },
    /// The sequencer was judged and refused: for another lock than the
    /// route's (`lock_mismatch`), shared on a write (`shared_on_write`),
    /// below the marks (`stale`, with the marks so the lock side can raise
    /// its generation floor above them), too far above the marks
    /// (`raise_too_large`: a buggy issuer, or a forgery with a valid key;
    /// same status as `stale`, and a lock side must not answer it by
    /// raising its generation floor), or, for a handler's own write
    /// through the fenced store in transaction mode, a failed
    /// compare-and-swap or a reused idempotency key. Core's one refusal
    /// type, so the guard, the store and the server answer alike.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The mark store failed; nothing was decided (safety first: refused).
    #[error("the mark store failed: {0}")]
    MarkStore(#[from] MarkStoreError),
    /// A handler's own write through the fenced store failed.
    #[error(transparent)]
    Storage(#[from] StoreError),
    /// The [`Fenced`](crate::Fenced) extractor found neither a
    /// [`GuardLayer`](crate::GuardLayer) verdict nor a
    /// [`Guard`](crate::Guard) extension: a wiring mistake.
    #[error(
        "no guard is configured for this route: add `GuardLayer` or an `Extension(Guard)` before extracting `Fenced`"
    )]
    NotConfigured,
}

impl GuardError {
    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.kind().status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The stable machine-readable code (the JSON body's `code`, and the
    /// label of [`MetricsSnapshot::refused`](crate::MetricsSnapshot::refused)).
    pub fn code(&self) -> &'static str {
        self.kind().code()
    }

    /// The answer's body: the Palisade server's, code and fields
    /// (`palisade-wire`).
    pub fn body(&self) -> ErrorBody {
        ErrorBody::new(self.kind(), self.to_string())
    }

    /// The code and its fields.
    fn kind(&self) -> ErrorKind {
        match self {
            GuardError::MissingSequencer { .. } => ErrorKind::MissingSequencer,
            GuardError::MalformedSequencer(_) | GuardError::BadHeader { .. } => {
                ErrorKind::MalformedSequencer
            }
            GuardError::NoLockParam { .. }
            | GuardError::BadLockName(_)
            | GuardError::LockNotResolved { .. } => ErrorKind::BadLockName,
            GuardError::Signature {
                lock,
                presented,
                key_id,
                issuer,
                source,
            } => ErrorKind::signature(
                source,
                SignatureFields {
                    lock: lock.as_str().to_owned(),
                    presented: presented.get(),
                    key_id: key_id.clone(),
                    issuer: issuer.clone(),
                },
            ),
            GuardError::Refused(refused) => refused.into(),
            GuardError::MarkStore(MarkStoreError::Store(_)) => ErrorKind::StorageUnavailable,
            GuardError::Storage(error) => match error {
                StoreError::TooLarge { kind, actual, max } => {
                    ErrorKind::too_large(kind.as_str(), *max, Some(*actual))
                }
                StoreError::EmptyKey => ErrorKind::BadKey,
                StoreError::InvalidRequestId { .. } => ErrorKind::BadRequest,
                error if error.is_storage_failure() => ErrorKind::StorageUnavailable,
                _ => ErrorKind::Internal,
            },
            GuardError::MarkStore(_) | GuardError::NotConfigured => ErrorKind::Internal,
        }
    }
}

impl IntoResponse for GuardError {
    fn into_response(self) -> Response {
        let body = self.body();
        let status =
            StatusCode::from_u16(body.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            // The only answers logged at ERROR: the service's own failures.
            tracing::error!(target: "palisade_guard::fence", code = body.code(), error = %self, "guard failure");
        }
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            // As the Palisade server does: say which credential is missing.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Palisade-Sequencer realm=\"palisade\""),
            );
        }
        response
    }
}
