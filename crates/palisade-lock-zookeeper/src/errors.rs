//! ZooKeeper's errors as core `LockError`s, and this crate's own.

use std::time::Duration;

use palisade_core::{LockError, LockName, Mode};
use zookeeper_client as zk;

/// The backend's name in errors, logs and metrics.
pub(crate) const BACKEND: &str = "zookeeper";

/// What this backend refuses that the core errors have no word for; it
/// travels as the source of a `LockError::Backend`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ZkLockError {
    /// The node-name form has no name for this mode (Curator's
    /// `InterProcessMutex` is exclusive only), so a holder in this mode
    /// would be invisible to, or misread by, the other library.
    #[error(
        "lock `{name}`: {mode} mode has no node name in the `{node_names}` form; use NodeNames::CuratorReadWrite or NodeNames::Kazoo for shared locks"
    )]
    UnsupportedMode {
        /// The lock.
        name: LockName,
        /// The mode asked for.
        mode: Mode,
        /// The configured form.
        node_names: &'static str,
    },
}

/// A client library error as a `LockError`, for the operation `operation`.
pub(crate) fn from_zk(operation: &'static str, error: zk::Error) -> LockError {
    match error {
        zk::Error::ConnectionLoss | zk::Error::NoHosts => LockError::Unavailable {
            backend: BACKEND,
            source: Box::new(OperationFailed { operation, error }),
        },
        zk::Error::SessionExpired | zk::Error::ClientClosed => LockError::SessionClosed,
        zk::Error::NoAuth | zk::Error::AuthFailed | zk::Error::InvalidAcl => {
            LockError::PermissionDenied {
                backend: BACKEND,
                message: format!("{operation}: {error}"),
            }
        }
        error => LockError::Backend {
            backend: BACKEND,
            source: Box::new(OperationFailed { operation, error }),
        },
    }
}

/// A request that did not answer within the request timeout.
pub(crate) fn timed_out(operation: &'static str, after: Duration) -> LockError {
    LockError::BackendTimeout {
        backend: BACKEND,
        operation,
        after,
    }
}

/// A configuration error as a `LockError` (what `connect` returns).
pub(crate) fn config(error: crate::ConfigError) -> LockError {
    LockError::Backend {
        backend: BACKEND,
        source: Box::new(error),
    }
}

/// A client library error and what was being done.
#[derive(Debug, thiserror::Error)]
#[error("{operation}: {error}")]
struct OperationFailed {
    operation: &'static str,
    #[source]
    error: zk::Error,
}
