//! From etcd-client's errors to the core's typed `LockError`.

use std::time::Duration;

use etcd_client::Error as EtcdError;
use palisade_core::LockError;
use palisade_etcd::Failure;
pub(crate) use palisade_etcd::is_lease_not_found;

use crate::ConfigError;

/// The backend name in every `LockError` of this crate.
pub(crate) const BACKEND: &str = "etcd";

/// Maps an etcd-client error on `operation` to a `LockError`, by
/// `palisade_etcd`'s classification (shared with the etcd storage engine):
///
/// - never sent, or a failure that may pass (refused, reset, no leader,
///   member stopping) → `Unavailable`;
/// - a deadline the server or the channel enforced → `BackendTimeout`;
/// - authentication and authorization failures → `PermissionDenied`;
/// - everything else → `Backend`, with the original error as the source.
///
/// "Lease not found" is not special here: whether it means `LeaseLost` or
/// `SessionClosed` depends on the operation, so callers test
/// [`is_lease_not_found`] first.
pub(crate) fn from_etcd(operation: &'static str, after: Duration, error: EtcdError) -> LockError {
    match Failure::of(&error) {
        Failure::Unsent | Failure::Transient => LockError::Unavailable {
            backend: BACKEND,
            source: Box::new(error),
        },
        Failure::DeadlineExceeded => timed_out(operation, after),
        Failure::PermissionDenied => LockError::PermissionDenied {
            backend: BACKEND,
            message: match &error {
                EtcdError::GRpcStatus(status) => status.message().to_owned(),
                other => other.to_string(),
            },
        },
        _ => LockError::Backend {
            backend: BACKEND,
            source: Box::new(error),
        },
    }
}

/// Whether a request failed before it was sent (see [`Failure::Unsent`]):
/// sending it again is always safe.
pub(crate) fn is_unsent(error: &EtcdError) -> bool {
    Failure::of(error) == Failure::Unsent
}

/// A request that got no answer within `after`.
pub(crate) fn timed_out(operation: &'static str, after: Duration) -> LockError {
    LockError::BackendTimeout {
        backend: BACKEND,
        operation,
        after,
    }
}

/// A configuration error, reported through the lock error type.
pub(crate) fn config(error: ConfigError) -> LockError {
    LockError::Backend {
        backend: BACKEND,
        source: Box::new(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn status(code: Code, message: &str) -> EtcdError {
        EtcdError::GRpcStatus(tonic::Status::new(code, message))
    }

    fn kind(error: EtcdError) -> &'static str {
        from_etcd("txn", Duration::from_secs(1), error).kind()
    }

    #[test]
    fn mapping_table() {
        let table = [
            (
                status(Code::Unavailable, "tcp connect error"),
                "unavailable",
            ),
            (
                status(Code::Unknown, "etcdserver: no leader"),
                "unavailable",
            ),
            (
                status(Code::DeadlineExceeded, "context deadline exceeded"),
                "backend_timeout",
            ),
            (
                status(Code::PermissionDenied, "etcdserver: permission denied"),
                "permission_denied",
            ),
            (
                status(
                    Code::InvalidArgument,
                    "etcdserver: authentication failed, invalid user ID or password",
                ),
                "permission_denied",
            ),
            (
                status(Code::InvalidArgument, "etcdserver: key is not provided"),
                "backend",
            ),
            (EtcdError::InvalidArgs("x".into()), "backend"),
            (
                EtcdError::GRpcStatus(tonic::Status::from_error(Box::new(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "stream closed because of a broken pipe",
                )))),
                "unavailable",
            ),
        ];
        for (error, expected) in table {
            let shown = format!("{error:?}");
            assert_eq!(kind(error), expected, "{shown}");
        }
        assert!(is_unsent(&status(Code::Unavailable, "tcp connect error")));
        assert!(!is_unsent(&status(
            Code::Unavailable,
            "etcdserver: no leader"
        )));
    }
}
