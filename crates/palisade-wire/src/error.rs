//! Error answers: `{"code": ..., "message": ..., ...fields of the code}`.
//!
//! [`ErrorKind`] is the closed set of codes, each with its own fields and
//! its one HTTP status; [`ErrorBody`] adds the message. The server and the
//! guard write these, the client and the CLI read them with
//! [`ErrorBody::decode`], and the OpenAPI document's error schema is
//! generated from them.

use serde::{Deserialize, Serialize};

use crate::{JsonBytes, MarksBody, ModeName};

/// An error answer's body: a stable `code` with its fields, and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// The `code` and the fields that depend on it.
    #[serde(flatten)]
    pub kind: ErrorKind,
    /// For people: what happened and what to do. Never parse it.
    pub message: String,
}

/// Every error `code` of the HTTP API, with the fields each carries
/// (docs/http-api.md). Codes never change meaning; new ones may be added,
/// so a decoder meets codes it does not know ([`DecodeError::UnknownCode`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub enum ErrorKind {
    /// 400: a write without a `palisade-sequencer` header.
    MissingSequencer,
    /// 400: the header is not a valid `v1` sequencer, not visible ASCII,
    /// or appears twice.
    MalformedSequencer,
    /// 400: the path does not name a valid lock.
    BadLockName,
    /// 400: the key's percent-encoding is broken, or the key is empty.
    BadKey,
    /// 400: invalid JSON body, invalid idempotency key, other malformed
    /// input.
    BadRequest,
    /// 401: no valid bearer token.
    Unauthenticated,
    /// 401: signatures are required and the sequencer has none.
    Unsigned(SignatureFields),
    /// 401: signed with a key id the server does not know.
    UnknownKey(SignatureFields),
    /// 401: the MAC does not match the sequencer's fields.
    BadSignature(SignatureFields),
    /// 403: the bearer token may not use this lock.
    Forbidden {
        /// The lock.
        lock: String,
    },
    /// 403: a good signature from an issuer the server does not trust.
    WrongIssuer(SignatureFields),
    /// 403: a write under a shared sequencer.
    SharedOnWrite(HolderFields),
    /// 404: `GET` of a key that does not exist.
    NotFound {
        /// The lock.
        lock: String,
        /// Its marks after the read.
        marks: MarksBody,
    },
    /// 404: no such route.
    NoRoute,
    /// 405: the route exists, the method does not.
    MethodNotAllowed,
    /// 408: the body did not arrive in time; the connection is closed.
    BodyTimeout {
        /// The limit, in milliseconds.
        timeout_ms: u64,
    },
    /// 409: the generation is below what the marks require.
    Stale(StaleFields),
    /// 409: the live check says the sequencer's holder no longer holds
    /// the lock.
    NotHeld(HolderFields),
    /// 409: the generation is further above the marks than the raise cap
    /// allows.
    RaiseTooLarge(RaiseFields),
    /// 412: a compare-and-swap found another value; nothing was applied.
    CasMismatch(CasMismatchFields),
    /// 413: a body, key, value, batch or request over its limit.
    TooLarge(TooLargeFields),
    /// 422: the sequencer is for another lock than the path's.
    LockMismatch {
        /// The lock the path names.
        path_lock: String,
        /// The lock the sequencer is for.
        sequencer_lock: String,
    },
    /// 422: the idempotency key was used on this lock for another request.
    IdempotencyKeyReused {
        /// The key.
        idempotency_key: String,
    },
    /// 500: a bug.
    Internal,
    /// 501: a transfer coding other than plain `chunked` (RFC 9112 §6.1);
    /// nothing was read or stored.
    UnsupportedTransferCoding,
    /// 503: the storage failed, or the server is shutting down.
    StorageUnavailable,
    /// 503: the live check could not reach the lock service.
    LiveCheckUnavailable,
    /// 503: the connection was shed to admit another; nothing was done.
    ConnectionShed,
    /// 503: the server is handling its limit of requests.
    Overloaded {
        /// The limit.
        max_in_flight: u64,
    },
    /// 503: a dependency did not answer within the request deadline. A
    /// write may still be applied after this answer: retry it with the
    /// same idempotency key.
    DeadlineExceeded {
        /// What did not answer in time.
        waiting_for: Dependency,
        /// The deadline, in milliseconds.
        deadline_ms: u64,
    },
}

/// What a request was waiting for when its deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Dependency {
    /// The storage engine.
    Store,
    /// The lock service, asked by the live check.
    LiveCheck,
}

impl Dependency {
    /// Its name in a message.
    pub fn describe(self) -> &'static str {
        match self {
            Dependency::Store => "the store",
            Dependency::LiveCheck => "the lock service (live check)",
        }
    }
}

/// The fields of a refused signature (`unsigned`, `unknown_key`,
/// `bad_signature`, `wrong_issuer`): what the sequencer claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignatureFields {
    /// The lock the sequencer names.
    pub lock: String,
    /// The generation it claims.
    pub presented: u64,
    /// The id of the key it is signed with, if signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The issuer it names, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
}

/// A lock and a presented generation (`not_held`, `shared_on_write`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HolderFields {
    /// The lock.
    pub lock: String,
    /// The generation presented.
    pub presented: u64,
}

/// `stale`: both generations and the marks, so the lock side can raise
/// its generation floor above them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StaleFields {
    /// The lock.
    pub lock: String,
    /// The sequencer's mode.
    pub mode: ModeName,
    /// The generation presented.
    pub presented: u64,
    /// The smallest generation a request in this mode would be accepted
    /// with now.
    pub required: u64,
    /// The lock's marks.
    pub marks: MarksBody,
    /// `true`: the live check says the holder still holds the lock, so the
    /// lock service's generations went backwards.
    pub regression: bool,
    /// The command that raises the lock side's generation floor.
    pub recovery: String,
}

/// `raise_too_large`: the cap and the rule that decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RaiseFields {
    /// The lock.
    pub lock: String,
    /// The sequencer's mode.
    pub mode: ModeName,
    /// The generation presented.
    pub presented: u64,
    /// The cap's count, for a counter mark.
    pub max_raise: u64,
    /// The cap's lead over the clock, for a clock mark or no mark, in
    /// milliseconds.
    pub max_raise_time_ms: u64,
    /// Whether the clock rule decided.
    pub by_clock: bool,
    /// The highest generation the cap allowed.
    pub allowed_up_to: u64,
    /// The lock's marks at the check.
    pub marks: MarksBody,
}

/// `cas_mismatch`: which op, and the key's value now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CasMismatchFields {
    /// Which op of the request (0-based).
    pub op_index: u64,
    /// Whether the key exists.
    pub current_exists: bool,
    /// The key's value now; `null` when absent.
    #[serde(default)]
    pub current: Option<JsonBytes>,
}

/// `too_large`: which limit, and the sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TooLargeFields {
    /// `body`, `key`, `value`, `batch_ops`, `request_bytes`.
    pub limit: String,
    /// The limit (bytes, or ops for `batch_ops`).
    pub max: u64,
    /// The size offered, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<u64>,
}

impl ErrorKind {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            ErrorKind::MissingSequencer => "missing_sequencer",
            ErrorKind::MalformedSequencer => "malformed_sequencer",
            ErrorKind::BadLockName => "bad_lock_name",
            ErrorKind::BadKey => "bad_key",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::Unsigned(_) => "unsigned",
            ErrorKind::UnknownKey(_) => "unknown_key",
            ErrorKind::BadSignature(_) => "bad_signature",
            ErrorKind::Forbidden { .. } => "forbidden",
            ErrorKind::WrongIssuer(_) => "wrong_issuer",
            ErrorKind::SharedOnWrite(_) => "shared_on_write",
            ErrorKind::NotFound { .. } => "not_found",
            ErrorKind::NoRoute => "no_route",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::BodyTimeout { .. } => "body_timeout",
            ErrorKind::Stale(_) => "stale",
            ErrorKind::NotHeld(_) => "not_held",
            ErrorKind::RaiseTooLarge(_) => "raise_too_large",
            ErrorKind::CasMismatch(_) => "cas_mismatch",
            ErrorKind::TooLarge(_) => "too_large",
            ErrorKind::LockMismatch { .. } => "lock_mismatch",
            ErrorKind::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            ErrorKind::Internal => "internal",
            ErrorKind::UnsupportedTransferCoding => "unsupported_transfer_coding",
            ErrorKind::StorageUnavailable => "storage_unavailable",
            ErrorKind::LiveCheckUnavailable => "live_check_unavailable",
            ErrorKind::ConnectionShed => "connection_shed",
            ErrorKind::Overloaded { .. } => "overloaded",
            ErrorKind::DeadlineExceeded { .. } => "deadline_exceeded",
        }
    }

    /// The HTTP status every answer with this code has.
    pub fn status(&self) -> u16 {
        match self {
            ErrorKind::MissingSequencer
            | ErrorKind::MalformedSequencer
            | ErrorKind::BadLockName
            | ErrorKind::BadKey
            | ErrorKind::BadRequest => 400,
            ErrorKind::Unauthenticated
            | ErrorKind::Unsigned(_)
            | ErrorKind::UnknownKey(_)
            | ErrorKind::BadSignature(_) => 401,
            ErrorKind::Forbidden { .. }
            | ErrorKind::WrongIssuer(_)
            | ErrorKind::SharedOnWrite(_) => 403,
            ErrorKind::NotFound { .. } | ErrorKind::NoRoute => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::BodyTimeout { .. } => 408,
            ErrorKind::Stale(_) | ErrorKind::NotHeld(_) | ErrorKind::RaiseTooLarge(_) => 409,
            ErrorKind::CasMismatch(_) => 412,
            ErrorKind::TooLarge(_) => 413,
            ErrorKind::LockMismatch { .. } | ErrorKind::IdempotencyKeyReused { .. } => 422,
            ErrorKind::Internal => 500,
            ErrorKind::UnsupportedTransferCoding => 501,
            ErrorKind::StorageUnavailable
            | ErrorKind::LiveCheckUnavailable
            | ErrorKind::ConnectionShed
            | ErrorKind::Overloaded { .. }
            | ErrorKind::DeadlineExceeded { .. } => 503,
        }
    }

    /// 413 `too_large` of `limit` (`body`, `key`, `value`, `batch_ops`,
    /// ...).
    pub fn too_large(limit: &str, max: usize, actual: Option<usize>) -> Self {
        ErrorKind::TooLarge(TooLargeFields {
            limit: limit.to_owned(),
            max: max as u64,
            actual: actual.map(|actual| actual as u64),
        })
    }

    /// The lock the answer is about, when it names one.
    pub fn lock(&self) -> Option<&str> {
        match self {
            ErrorKind::Unsigned(fields)
            | ErrorKind::UnknownKey(fields)
            | ErrorKind::BadSignature(fields)
            | ErrorKind::WrongIssuer(fields) => Some(&fields.lock),
            ErrorKind::SharedOnWrite(fields) | ErrorKind::NotHeld(fields) => Some(&fields.lock),
            ErrorKind::Stale(fields) => Some(&fields.lock),
            ErrorKind::RaiseTooLarge(fields) => Some(&fields.lock),
            ErrorKind::Forbidden { lock } | ErrorKind::NotFound { lock, .. } => Some(lock),
            ErrorKind::LockMismatch { path_lock, .. } => Some(path_lock),
            _ => None,
        }
    }

    /// The generation the request presented, when the answer says it.
    pub fn presented(&self) -> Option<u64> {
        match self {
            ErrorKind::Unsigned(fields)
            | ErrorKind::UnknownKey(fields)
            | ErrorKind::BadSignature(fields)
            | ErrorKind::WrongIssuer(fields) => Some(fields.presented),
            ErrorKind::SharedOnWrite(fields) | ErrorKind::NotHeld(fields) => Some(fields.presented),
            ErrorKind::Stale(fields) => Some(fields.presented),
            ErrorKind::RaiseTooLarge(fields) => Some(fields.presented),
            _ => None,
        }
    }

    /// The lock's marks, when the answer carries them.
    pub fn marks(&self) -> Option<MarksBody> {
        match self {
            ErrorKind::Stale(fields) => Some(fields.marks),
            ErrorKind::RaiseTooLarge(fields) => Some(fields.marks),
            ErrorKind::NotFound { marks, .. } => Some(*marks),
            _ => None,
        }
    }

    /// Whether this is a stale refusal known to be a generation regression.
    pub fn is_regression(&self) -> bool {
        matches!(self, ErrorKind::Stale(fields) if fields.regression)
    }
}

impl ErrorBody {
    /// A body of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ErrorBody {
            kind,
            message: message.into(),
        }
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        self.kind.status()
    }

    /// Decodes an error answer's body: the one decoder every reader of the
    /// API uses. A code this version does not know is
    /// [`DecodeError::UnknownCode`], with the code and message intact.
    ///
    /// ```
    /// use palisade_wire::{ErrorBody, ErrorKind};
    ///
    /// let body = ErrorBody::new(ErrorKind::NoRoute, "no route for /v2");
    /// let json = serde_json::to_string(&body).unwrap();
    /// assert_eq!(json, r#"{"code":"no_route","message":"no route for /v2"}"#);
    /// assert_eq!(ErrorBody::decode(json.as_bytes()).unwrap(), body);
    /// assert_eq!(body.status(), 404);
    /// ```
    pub fn decode(bytes: &[u8]) -> Result<ErrorBody, DecodeError> {
        /// What every error body has, whatever its code.
        #[derive(Deserialize)]
        struct Common {
            code: String,
            message: String,
        }
        let common: Common = serde_json::from_slice(bytes).map_err(|error| DecodeError::Shape {
            detail: error.to_string(),
            body: excerpt(bytes),
        })?;
        if !known_code(&common.code) {
            return Err(DecodeError::UnknownCode {
                code: common.code,
                message: common.message,
            });
        }
        serde_json::from_slice(bytes).map_err(|error| DecodeError::Fields {
            code: common.code,
            detail: error.to_string(),
        })
    }

    /// One example body of every code, with a realistic message: the
    /// OpenAPI document's examples, and the list of codes the API knows.
    pub fn examples() -> &'static [ErrorBody] {
        crate::examples::all()
    }
}

/// Whether `code` is one of [`ErrorKind`]'s.
fn known_code(code: &str) -> bool {
    crate::examples::all()
        .iter()
        .any(|body| body.code() == code)
}

/// The start of a body that did not decode, for the error message.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
    text.into_owned()
}

/// Why an error answer's body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not a JSON object with a string `code` and `message` (not a
    /// Palisade server?).
    #[error("the error body is not a Palisade error ({detail}): {body:?}")]
    Shape {
        /// What serde said.
        detail: String,
        /// The body's first 200 bytes.
        body: String,
    },
    /// A code this version does not know (a newer server).
    #[error("unknown error code `{code}`: {message}")]
    UnknownCode {
        /// The code.
        code: String,
        /// The message.
        message: String,
    },
    /// A known code without the fields it must carry.
    #[error("`{code}` answer with invalid fields: {detail}")]
    Fields {
        /// The code.
        code: String,
        /// What is wrong.
        detail: String,
    },
}
