//! What can go wrong talking to a resource server.

use palisade_core::LockError;

/// A failure: the request could not be made, or the server said the request
/// or the server itself is broken.
///
/// Fencing refusals (409 `stale`, 409 `not_held`, 403, 412, 422
/// `idempotency_key_reused`) are not here: they are the inner `Err`
/// ([`Refused`](crate::Refused)) of the nested `Result` every call returns,
/// exactly as in `palisade-store`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The base URL is not an `http://` or `https://` URL.
    #[error("invalid base URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The server could not be reached (connection refused, reset, DNS).
    #[error("cannot connect to the resource server at {url}: {source}")]
    Connect {
        /// The URL requested.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// No answer in time. The request may or may not have been applied:
    /// retry it with the same idempotency key.
    #[error("the resource server did not answer {url} in time")]
    Timeout {
        /// The URL requested.
        url: String,
    },
    /// Any other transport failure. When the connection broke before
    /// the answer, a read or a write with an idempotency key has already
    /// been sent once more, on a new connection; a write without a key is
    /// never sent twice (it may have been applied).
    #[error("HTTP request to {url} failed: {source}")]
    Transport {
        /// The URL requested.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// An `https://` request failed below HTTP: the server could not be
    /// reached, or the connection broke.
    #[error("HTTPS request to {url} failed: {source}")]
    Https {
        /// The URL requested.
        url: String,
        /// The transport error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The TLS handshake failed: the server's certificate is not signed
    /// by a trusted CA or not for this host name, or the server does not
    /// speak TLS. Retrying will not help.
    #[error("TLS with {url} failed: {source}")]
    Tls {
        /// The URL requested.
        url: String,
        /// What rustls said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A client option is invalid (a token, a CA certificate...).
    #[error("invalid {option}: {reason}")]
    InvalidOption {
        /// Which option.
        option: &'static str,
        /// What is wrong (never the secret itself).
        reason: String,
    },
    /// 401: the server requires a bearer token and got none or an unknown
    /// one (`unauthenticated`), or it verifies sequencer signatures and
    /// this sequencer is unsigned (`unsigned`), signed with a key it does
    /// not know (`unknown_key`) or badly signed (`bad_signature`). Nothing
    /// changed on the server.
    #[error("not authenticated ({code}): {message}")]
    Unauthenticated {
        /// The server's `code`.
        code: String,
        /// The server's message.
        message: String,
    },
    /// 403: the token may not use this lock (`forbidden`), or the
    /// sequencer comes from an issuer the server does not trust
    /// (`wrong_issuer`). Nothing changed on the server.
    #[error("forbidden ({code}): {message}")]
    Forbidden {
        /// The server's `code`.
        code: String,
        /// The server's message.
        message: String,
    },
    /// 400 (or 422 `lock_mismatch`): the request is malformed.
    #[error("bad request ({status} {code}): {message}")]
    BadRequest {
        /// 400 or 422.
        status: u16,
        /// The server's `code` (`malformed_sequencer`, `bad_key`, ...).
        code: String,
        /// The server's message.
        message: String,
    },
    /// 404 other than a missing key (`no_route`: wrong base URL?).
    #[error("not found ({code}): {message}")]
    NotFound {
        /// The server's `code`.
        code: String,
        /// The server's message.
        message: String,
    },
    /// 413: a body, key, value or batch over the server's limit.
    #[error("too large ({limit}, max {max}): {message}")]
    TooLarge {
        /// Which limit: `body`, `key`, `value`, `batch_ops`.
        limit: String,
        /// The server's limit.
        max: u64,
        /// The server's message.
        message: String,
    },
    /// 503: the server's storage failed (`storage_unavailable`) or it could
    /// not reach the lock service for a live check
    /// (`live_check_unavailable`).
    #[error("resource server unavailable ({code}): {message}")]
    Unavailable {
        /// The server's `code`.
        code: String,
        /// The server's message.
        message: String,
    },
    /// Any other error status (500 `internal`, 405, ...).
    #[error("resource server error ({status} {code}): {message}")]
    Server {
        /// The status.
        status: u16,
        /// The server's `code`.
        code: String,
        /// The server's message.
        message: String,
    },
    /// The answer does not follow docs/http-api.md (not a Palisade server?).
    #[error("unexpected answer from the resource server ({status}): {detail}")]
    UnexpectedResponse {
        /// The status.
        status: u16,
        /// What was wrong.
        detail: String,
    },
    /// The guard refused to hand out its sequencer (the lease may have
    /// lapsed): nothing was sent.
    #[error(transparent)]
    Lock(#[from] LockError),
}

impl ClientError {
    /// The server's error `code`, when the server answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::BadRequest { code, .. }
            | ClientError::NotFound { code, .. }
            | ClientError::Unauthenticated { code, .. }
            | ClientError::Forbidden { code, .. }
            | ClientError::Unavailable { code, .. }
            | ClientError::Server { code, .. } => Some(code),
            ClientError::TooLarge { .. } => Some("too_large"),
            _ => None,
        }
    }

    /// Whether retrying the same request later (with the same idempotency
    /// key) may succeed: transport failures, timeouts and 503s (including
    /// `overloaded`).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClientError::Connect { .. }
                | ClientError::Timeout { .. }
                | ClientError::Transport { .. }
                | ClientError::Https { .. }
                | ClientError::Unavailable { .. }
        )
    }

    /// Whether the connection broke under a request sent on it: the
    /// server closed or reset it before its answer arrived (an idle
    /// keep-alive connection it shed or timed out just as the request
    /// went out, or one it was closing after an earlier answer). The
    /// request may or may not have been applied.
    pub(crate) fn is_connection_lost(&self) -> bool {
        let source: &(dyn std::error::Error + 'static) = match self {
            ClientError::Transport { source, .. } => source,
            ClientError::Https { source, .. } => source.as_ref(),
            _ => return false,
        };
        let mut cause = Some(source);
        while let Some(error) = cause {
            if error
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_incomplete_message)
            {
                return true;
            }
            if let Some(io) = error.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind;
                if matches!(
                    io.kind(),
                    ErrorKind::BrokenPipe
                        | ErrorKind::ConnectionReset
                        | ErrorKind::ConnectionAborted
                        | ErrorKind::UnexpectedEof
                ) {
                    return true;
                }
            }
            cause = error.source();
        }
        false
    }
}
