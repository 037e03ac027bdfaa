//! From etcd-client's errors to the core's typed `LockError`.

use std::time::Duration;

use etcd_client::Error as EtcdError;
use palisade_core::LockError;
use tonic::Code;

use crate::ConfigError;

/// The backend name in every `LockError` of this crate.
pub(crate) const BACKEND: &str = "etcd";

/// Maps an etcd-client error on `operation` to a `LockError`.
///
/// - connection refused, reset, no leader, member unreachable →
///   `Unavailable`;
/// - a deadline the server or the channel enforced → `BackendTimeout`;
/// - authentication and authorization failures → `PermissionDenied`;
/// - everything else → `Backend`, with the original error as the source.
///
/// "Lease not found" is not special here: whether it means `LeaseLost` or
/// `SessionClosed` depends on the operation, so callers test
/// [`is_lease_not_found`] first.
pub(crate) fn from_etcd(operation: &'static str, after: Duration, error: EtcdError) -> LockError {
    match &error {
        EtcdError::GRpcStatus(status) => match status.code() {
            Code::Unavailable | Code::Cancelled | Code::Aborted => unavailable(error),
            Code::DeadlineExceeded => LockError::BackendTimeout {
                backend: BACKEND,
                operation,
                after,
            },
            Code::PermissionDenied | Code::Unauthenticated => LockError::PermissionDenied {
                backend: BACKEND,
                message: status.message().to_owned(),
            },
            // etcd answers a wrong password with InvalidArgument.
            Code::InvalidArgument if status.message().contains("authentication failed") => {
                LockError::PermissionDenied {
                    backend: BACKEND,
                    message: status.message().to_owned(),
                }
            }
            // A member without a leader, or one that is shutting down.
            Code::Unknown
                if status.message().contains("no leader")
                    || status.message().contains("leader changed")
                    || status.message().contains("stopped") =>
            {
                unavailable(error)
            }
            // The connection to the member broke before the answer came
            // (the member died, or the connection was reset).
            _ if is_broken_connection(&error) => unavailable(error),
            _ => backend(error),
        },
        EtcdError::TransportError(_) | EtcdError::IoError(_) => unavailable(error),
        _ => backend(error),
    }
}

/// Whether etcd said the lease does not exist (expired or revoked).
pub(crate) fn is_lease_not_found(error: &EtcdError) -> bool {
    match error {
        EtcdError::GRpcStatus(status) => status.message().contains("lease not found"),
        EtcdError::LeaseKeepAliveError(message) => message.contains("lease not found"),
        _ => false,
    }
}

/// Whether a request failed because no connection to the member it was
/// routed to could be opened (connection refused, unreachable): the request
/// was never sent, so sending it again is always safe, whatever it does.
///
/// The gRPC channel balances over all endpoints, including dead ones: with
/// one member of three down, about a third of first attempts meet it.
pub(crate) fn is_connect_failure(error: &EtcdError) -> bool {
    let EtcdError::GRpcStatus(status) = error else {
        return false;
    };
    if status.code() != Code::Unavailable {
        return false;
    }
    if status.message().contains("connect error") {
        return true;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::HostUnreachable
                    | std::io::ErrorKind::NetworkUnreachable
                    | std::io::ErrorKind::AddrNotAvailable
            );
        }
        source = error.source();
    }
    false
}

/// Whether a request failed because the connection it was sent on broke
/// before the answer came: the member died (`stream closed because of a
/// broken pipe`), or the connection was reset. tonic reports these as
/// `Unknown` "transport error", with the I/O error in the source chain. The
/// request may or may not have been applied.
pub(crate) fn is_broken_connection(error: &EtcdError) -> bool {
    let EtcdError::GRpcStatus(status) = error else {
        return false;
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::NotConnected
                    | std::io::ErrorKind::UnexpectedEof
            );
        }
        source = error.source();
    }
    false
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

fn unavailable(error: EtcdError) -> LockError {
    LockError::Unavailable {
        backend: BACKEND,
        source: Box::new(error),
    }
}

fn backend(error: EtcdError) -> LockError {
    LockError::Backend {
        backend: BACKEND,
        source: Box::new(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, message: &str) -> EtcdError {
        EtcdError::GRpcStatus(tonic::Status::new(code, message))
    }

    fn kind(error: EtcdError) -> &'static str {
        from_etcd("txn", Duration::from_secs(1), error).kind()
    }

    #[test]
    fn mapping_table() {
        assert_eq!(
            kind(status(Code::Unavailable, "tcp connect error")),
            "unavailable"
        );
        assert_eq!(
            kind(status(Code::DeadlineExceeded, "context deadline exceeded")),
            "backend_timeout"
        );
        assert_eq!(
            kind(status(
                Code::PermissionDenied,
                "etcdserver: permission denied"
            )),
            "permission_denied"
        );
        assert_eq!(
            kind(status(
                Code::InvalidArgument,
                "etcdserver: authentication failed, invalid user ID or password"
            )),
            "permission_denied"
        );
        assert_eq!(
            kind(status(Code::Unknown, "etcdserver: no leader")),
            "unavailable"
        );
        assert_eq!(
            kind(status(
                Code::InvalidArgument,
                "etcdserver: key is not provided"
            )),
            "backend"
        );
        assert_eq!(kind(EtcdError::InvalidArgs("x".into())), "backend");
        assert!(is_lease_not_found(&status(
            Code::NotFound,
            "etcdserver: requested lease not found"
        )));
        assert!(is_lease_not_found(&EtcdError::LeaseKeepAliveError(
            "lease not found".into()
        )));
        assert!(!is_lease_not_found(&status(
            Code::NotFound,
            "something else"
        )));
        assert!(is_connect_failure(&status(
            Code::Unavailable,
            "tcp connect error"
        )));
        assert!(!is_connect_failure(&status(
            Code::Unavailable,
            "etcdserver: no leader"
        )));
        assert!(!is_connect_failure(&status(
            Code::Unknown,
            "tcp connect error"
        )));
    }

    #[test]
    fn a_broken_connection_is_unavailable() {
        let broken = |kind: std::io::ErrorKind| {
            EtcdError::GRpcStatus(tonic::Status::from_error(Box::new(std::io::Error::new(
                kind,
                "stream closed because of a broken pipe",
            ))))
        };
        for io_kind in [
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::ConnectionReset,
        ] {
            let error = broken(io_kind);
            assert!(is_broken_connection(&error), "{error:?}");
            assert!(!is_connect_failure(&error), "{error:?}");
            assert_eq!(kind(error), "unavailable");
        }
        assert!(!is_broken_connection(&broken(
            std::io::ErrorKind::InvalidData
        )));
        assert!(!is_broken_connection(&status(
            Code::Unknown,
            "transport error"
        )));
    }
}
