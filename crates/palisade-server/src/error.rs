//! Errors: the one `IntoResponse` that maps every refusal and failure to
//! its wire body ([`palisade_wire::ErrorBody`]: a stable `code`, its
//! status, its fields), and the errors of running the server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use palisade_core::{KeyError, LockName};
use palisade_store::{Marks, Refused, StoreError};
use palisade_wire::{Dependency, ErrorBody, ErrorKind};

use crate::metrics::Metrics;

/// An error answer: its wire body, and the headers it needs.
///
/// Built from store refusals ([`Refused`]), store failures ([`StoreError`])
/// and the server's own checks; rendered as `{"code": ..., "message": ...,
/// ...fields}` with the code's one status (docs/http-api.md lists every
/// code).
#[derive(Debug)]
pub struct ApiError {
    /// Boxed: the fields of the largest codes would make every `Result`
    /// of the request path large.
    body: Box<ErrorBody>,
    /// Response headers the refusal needs: `www-authenticate` on a 401,
    /// `retry-after` on `overloaded`, `connection: close` on a body
    /// timeout.
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl ApiError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ErrorBody::new(kind, message).into()
    }

    pub(crate) fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// 503 `overloaded`: `max_in_flight` requests are being handled.
    pub(crate) fn overloaded(max_in_flight: usize) -> Self {
        ApiError::new(
            ErrorKind::Overloaded {
                max_in_flight: max_in_flight as u64,
            },
            format!("the server is handling its limit of {max_in_flight} requests; retry shortly"),
        )
        .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
    }

    /// 503 `connection_shed`: the connection was shed to admit another
    /// just as this request's headers arrived; nothing was done.
    pub(crate) fn connection_shed() -> Self {
        ApiError::new(
            ErrorKind::ConnectionShed,
            "the server closed this connection to admit another; nothing was done: retry on a new connection",
        )
        .with_header(header::RETRY_AFTER, HeaderValue::from_static("0"))
        .with_header(header::CONNECTION, HeaderValue::from_static("close"))
    }

    /// 408 `body_timeout`: the body did not arrive in time.
    pub(crate) fn body_timeout(limit: Duration) -> Self {
        ApiError::new(
            ErrorKind::BodyTimeout {
                timeout_ms: millis(limit),
            },
            format!("the request body did not arrive within {limit:?}"),
        )
        .with_header(header::CONNECTION, HeaderValue::from_static("close"))
    }

    /// 503 `deadline_exceeded`: `dependency` did not answer within the
    /// request deadline.
    pub(crate) fn deadline_exceeded(dependency: Dependency, limit: Duration) -> Self {
        ApiError::new(
            ErrorKind::DeadlineExceeded {
                waiting_for: dependency,
                deadline_ms: millis(limit),
            },
            format!(
                "{} did not answer within the request deadline of {}; a write may still be applied: retry with the same idempotency key",
                dependency.describe(),
                palisade_core::format_duration(limit)
            ),
        )
    }

    /// 501 `unsupported_transfer_coding`: the body is framed with a
    /// transfer coding the server does not implement.
    pub(crate) fn unsupported_transfer_coding(codings: &str) -> Self {
        ApiError::new(
            ErrorKind::UnsupportedTransferCoding,
            format!(
                "transfer coding `{codings}` is not implemented: send the body plain, with content-length or chunked alone"
            ),
        )
    }

    /// The answer, counted among the rejected requests by its code: how
    /// every route outside the lock routes' common frame refuses.
    pub(crate) fn counted(self, metrics: &Metrics) -> Response {
        metrics.rejected(self.code());
        self.into_response()
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.body.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.body.code()
    }

    /// The code and its fields.
    pub fn kind(&self) -> &ErrorKind {
        &self.body.kind
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(ErrorKind::BadRequest, message)
    }

    pub(crate) fn malformed_sequencer(message: impl Into<String>) -> Self {
        ApiError::new(ErrorKind::MalformedSequencer, message)
    }

    pub(crate) fn too_large(limit: &str, max: usize, actual: Option<usize>) -> Self {
        let (what, unit) = match limit {
            "batch_ops" => ("batch", "ops"),
            other => (other, "bytes"),
        };
        let message = match actual {
            Some(actual) => format!("the {what} is {actual} {unit}; the limit is {max} {unit}"),
            None => format!("the {what} is over the limit of {max} {unit}"),
        };
        ApiError::new(ErrorKind::too_large(limit, max, actual), message)
    }

    pub(crate) fn not_found(lock: &LockName, marks: Marks) -> Self {
        ApiError::new(
            ErrorKind::NotFound {
                lock: lock.as_str().to_owned(),
                marks: marks.into(),
            },
            "no such key",
        )
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl From<ErrorBody> for ApiError {
    fn from(body: ErrorBody) -> Self {
        ApiError {
            body: Box::new(body),
            headers: Vec::new(),
        }
    }
}

impl From<Refused> for ApiError {
    /// The one mapping of a refusal to the wire ([`ErrorBody::from_refused`]),
    /// with the way out spelled out for a stale refusal that may be a
    /// regression.
    fn from(refused: Refused) -> Self {
        let mut body = ErrorBody::from_refused(&refused);
        if let Refused::Stale {
            lock,
            regression: false,
            ..
        } = &refused
        {
            body.message = format!(
                "{refused}: either a newer holder has been honoured, or the lock service's generations are behind this mark (a regression: lost counter, wiped or restored data); if no newer holder exists, recover with `{}`",
                lock.raise_floor_command()
            );
        }
        body.into()
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match &error {
            StoreError::TooLarge { kind, actual, max } => {
                ApiError::too_large(kind.as_str(), *max, Some(*actual))
            }
            StoreError::EmptyKey => ApiError::new(ErrorKind::BadKey, error.to_string()),
            StoreError::InvalidRequestId { .. } => ApiError::bad_request(error.to_string()),
            _ if error.is_storage_failure() => {
                // The only errors logged at ERROR: the server's own failures.
                tracing::error!(%error, "storage failure");
                ApiError::new(ErrorKind::StorageUnavailable, error.to_string())
            }
            _ => {
                tracing::error!(%error, "unexpected store error");
                ApiError::new(ErrorKind::Internal, error.to_string())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), axum::Json(*self.body)).into_response();
        for (name, value) in self.headers {
            response.headers_mut().append(name, value);
        }
        response
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// Serving failed.
    #[error("server I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// The listen address could not be bound (in use, not on this
    /// machine, a privileged port): one line that names the address.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why, in words (`address already in use`).
        reason: String,
    },
    /// Opening or flushing the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The storage engine `--store` names could not be opened (its
    /// database unreachable, its schema newer than this binary, ...).
    #[error("cannot open --store {store}: {message}")]
    OpenEngine {
        /// The `--store` value, password redacted.
        store: String,
        /// Why.
        message: String,
    },
    /// `--store` names an engine this build of the server lacks.
    #[error(
        "--store {store} needs the `{feature}` feature, and this server was built without it (build palisade-server with `--features {feature}`)"
    )]
    EngineNotBuilt {
        /// The `--store` value, password redacted.
        store: String,
        /// The Cargo feature that builds the engine in.
        feature: &'static str,
    },
    /// A setting only one engine honours, given with another engine.
    #[error("{setting} applies to the {only} engine only, not to the {engine} engine: {why}")]
    EngineOnly {
        /// The setting, as a flag.
        setting: &'static str,
        /// The engine that honours it.
        only: &'static str,
        /// The engine `--store` names.
        engine: &'static str,
        /// Why it means nothing there.
        why: &'static str,
    },
    /// A file named by the configuration could not be read.
    #[error("cannot read {what} file {}: {source}", path.display())]
    ReadFile {
        /// Which setting names the file (`--tokens-file`, ...).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The key ring of `--verify-keys-file` is invalid (the secrets are
    /// never part of the message).
    #[error("invalid key ring {}: {source}", path.display())]
    KeyRing {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: KeyError,
    },
    /// A trusted issuer (`--issuer`) is not a valid issuer id.
    #[error("invalid --issuer `{issuer}`: {source}")]
    Issuer {
        /// The issuer given.
        issuer: String,
        /// What is wrong.
        #[source]
        source: KeyError,
    },
    /// A line of the tokens file is invalid (the token is never part of
    /// the message). `line` is 0 for a token added in code.
    #[error("tokens file line {line}: {reason}")]
    Tokens {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// The TLS certificate or key is unusable.
    #[error("TLS: {reason}")]
    Tls {
        /// What is wrong.
        reason: String,
    },
}

impl ServerError {
    /// Binding `addr` failed with `error`.
    pub(crate) fn bind(addr: SocketAddr, error: &std::io::Error) -> Self {
        use std::io::ErrorKind;
        let reason = match error.kind() {
            ErrorKind::AddrInUse => "address already in use".to_owned(),
            ErrorKind::AddrNotAvailable => "address not available on this machine".to_owned(),
            ErrorKind::PermissionDenied => "permission denied".to_owned(),
            _ => error.to_string(),
        };
        ServerError::Bind { addr, reason }
    }
}
