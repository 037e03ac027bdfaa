//! Errors: this crate's own, and how Redis failures become [`LockError`]s.

use std::time::Duration;

use palisade_core::LockError;

/// What can go wrong setting up a Redis lock client. Lock operations
/// themselves fail with [`LockError`], the error every backend shares.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisLockError {
    /// The configuration or the session options cannot work.
    #[error("invalid Redis lock configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// A URL could not be parsed.
    #[error("invalid Redis URL `{url}`: {source}")]
    InvalidUrl {
        /// The URL, with any password removed.
        url: String,
        /// The parser's error.
        #[source]
        source: redis::RedisError,
    },
    /// Connecting, loading the scripts or subscribing failed.
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// The backend name in [`LockError`]s.
pub(crate) const BACKEND: &str = "redis";

/// Maps a failed request to the lock error a caller can act on.
///
/// Connection-level failures are `Unavailable`, timeouts `BackendTimeout`
/// (their effect on the server is unknown), refused credentials
/// `PermissionDenied`, everything else `Backend`.
pub(crate) fn from_redis(
    operation: &'static str,
    timeout: Duration,
    error: redis::RedisError,
) -> LockError {
    use redis::{ErrorKind, ServerErrorKind};
    if error.is_timeout() {
        return LockError::BackendTimeout {
            backend: BACKEND,
            operation,
            after: timeout,
        };
    }
    match error.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => {
            LockError::PermissionDenied {
                backend: BACKEND,
                message: error.to_string(),
            }
        }
        _ if error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_cluster_error()
            || error.kind() == ErrorKind::ClusterConnectionNotFound
            || error.kind() == ErrorKind::Server(ServerErrorKind::BusyLoading)
            || error.kind() == ErrorKind::Server(ServerErrorKind::MasterDown) =>
        {
            LockError::Unavailable {
                backend: BACKEND,
                source: Box::new(error),
            }
        }
        _ if error.code() == Some("NOAUTH") || error.code() == Some("WRONGPASS") => {
            LockError::PermissionDenied {
                backend: BACKEND,
                message: error.to_string(),
            }
        }
        _ => LockError::Backend {
            backend: BACKEND,
            source: Box::new(error),
        },
    }
}

/// A reply that does not have the shape the script returns.
pub(crate) fn bad_reply(script: &'static str, reply: &redis::Value) -> LockError {
    LockError::Backend {
        backend: BACKEND,
        source: format!("unexpected reply to the `{script}` script: {reply:?}").into(),
    }
}

/// Whether a failed request may nevertheless have been applied by the
/// server: a timeout or a connection lost after sending. A refused
/// connection or an error reply from the server means it was not.
pub(crate) fn maybe_applied(error: &LockError) -> bool {
    matches!(
        error,
        LockError::BackendTimeout { .. } | LockError::Unavailable { .. }
    )
}
