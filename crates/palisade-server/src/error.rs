//! Errors: the one `IntoResponse` that maps every refusal and failure to a
//! status and a JSON body with a stable `code`, and the errors of running
//! the server.

use std::path::PathBuf;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use palisade_core::{Field, KeyError, LockName, Sequencer};
use palisade_store::{Marks, Refused, StoreError};
use serde_json::{Map, Value, json};

use crate::dto::json_bytes;
use crate::metrics::Metrics;

/// An error answer: status, stable `code`, message, and extra fields.
///
/// Built from store refusals ([`Refused`]), store failures ([`StoreError`])
/// and the server's own checks; rendered as `{"code": ..., "message": ...,
/// ...extra}` (docs/http-api.md lists every code).
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    extra: Map<String, Value>,
    /// Response headers the refusal needs: `www-authenticate` on a 401,
    /// `retry-after` on `overloaded`, `connection: close` on a body
    /// timeout.
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            extra: Map::new(),
            headers: Vec::new(),
        }
    }

    pub(crate) fn with(mut self, field: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(field.to_owned(), value.into());
        self
    }

    pub(crate) fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// 503 `overloaded`: `max_in_flight` requests are being handled.
    pub(crate) fn overloaded(max_in_flight: usize) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            format!("the server is handling its limit of {max_in_flight} requests; retry shortly"),
        )
        .with("max_in_flight", max_in_flight)
        .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
    }

    /// 503 `connection_shed`: the connection was shed to admit another
    /// just as this request's headers arrived; nothing was done.
    pub(crate) fn connection_shed() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "connection_shed",
            "the server closed this connection to admit another; nothing was done: retry on a new connection",
        )
        .with_header(header::RETRY_AFTER, HeaderValue::from_static("0"))
        .with_header(header::CONNECTION, HeaderValue::from_static("close"))
    }

    /// 408 `body_timeout`: the body did not arrive in time.
    pub(crate) fn body_timeout(limit: Duration) -> Self {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!("the request body did not arrive within {limit:?}"),
        )
        .with(
            "timeout_ms",
            u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        )
        .with_header(header::CONNECTION, HeaderValue::from_static("close"))
    }

    /// The answer, counted among the rejected requests by its code: how
    /// every route outside the lock routes' common frame refuses.
    pub(crate) fn counted(self, metrics: &Metrics) -> Response {
        metrics.rejected(self.code);
        self.into_response()
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// One of the body's extra fields (`lock`, `presented`, `marks`, ...).
    pub(crate) fn field(&self, name: &str) -> Option<&Value> {
        self.extra.get(name)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(crate) fn malformed_sequencer(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "malformed_sequencer", message)
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
        let error = ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
            .with("limit", limit)
            .with("max", max);
        match actual {
            Some(actual) => error.with("actual", actual),
            None => error,
        }
    }

    pub(crate) fn lock_mismatch(path_lock: &LockName, sequencer: &Sequencer) -> Self {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "lock_mismatch",
            format!(
                "the path names lock `{path_lock}` but the sequencer is for lock `{}`",
                sequencer.lock()
            ),
        )
        .with("path_lock", path_lock.as_str())
        .with("sequencer_lock", sequencer.lock().as_str())
    }

    pub(crate) fn not_found(lock: &LockName, marks: Marks) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such key")
            .with("lock", lock.as_str())
            .with("marks", marks_json(marks))
    }
}

pub(crate) fn marks_json(marks: Marks) -> Value {
    json!({"exclusive": marks.exclusive, "shared": marks.shared})
}

impl From<Refused> for ApiError {
    /// The one mapping of a refusal to the wire: status, `code` and fields
    /// from [`Refused::http_status`], [`Refused::reason`] and
    /// [`Refused::fields`] (docs/http-api.md).
    fn from(refused: Refused) -> Self {
        let status = StatusCode::from_u16(refused.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let message = match &refused {
            Refused::Stale {
                lock,
                regression: false,
                ..
            } => format!(
                "{refused}: either a newer holder has been honoured, or the lock service's generations are behind this mark (a regression: lost counter, wiped or restored data); if no newer holder exists, recover with `{}`",
                lock.raise_floor_command()
            ),
            _ => refused.to_string(),
        };
        refused.fields().into_iter().fold(
            ApiError::new(status, refused.reason(), message),
            |error, (name, field)| error.with(name, field_json(field)),
        )
    }
}

/// A refusal's field as JSON.
fn field_json(field: Field<'_>) -> Value {
    match field {
        Field::Text(text) => Value::String(text.into_owned()),
        Field::Number(number) => number.into(),
        Field::Flag(flag) => flag.into(),
        Field::Marks(marks) => marks_json(marks),
        Field::Bytes(bytes) => bytes.map_or(Value::Null, json_bytes),
        _ => Value::Null,
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match &error {
            StoreError::TooLarge { kind, actual, max } => {
                ApiError::too_large(kind.as_str(), *max, Some(*actual))
            }
            StoreError::EmptyKey => {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_key", error.to_string())
            }
            StoreError::InvalidRequestId { .. } => ApiError::bad_request(error.to_string()),
            _ if error.is_storage_failure() => {
                // The only errors logged at ERROR: the server's own failures.
                tracing::error!(%error, "storage failure");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_unavailable",
                    error.to_string(),
                )
            }
            _ => {
                tracing::error!(%error, "unexpected store error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    error.to_string(),
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = Map::with_capacity(self.extra.len() + 2);
        body.insert("code".into(), self.code.into());
        body.insert("message".into(), self.message.into());
        body.extend(self.extra);
        let mut response = (self.status, axum::Json(Value::Object(body))).into_response();
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
    /// Binding the listener or serving failed.
    #[error("server I/O failed: {0}")]
    Io(#[from] std::io::Error),
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
    /// A setting only the sled engine honours, given with another engine.
    #[error("{setting} applies to the sled engine only, not to the {engine} engine: {why}")]
    SledOnly {
        /// The setting, as a flag.
        setting: &'static str,
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
