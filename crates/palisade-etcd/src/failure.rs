//! What an etcd-client error says about the request that failed, decided
//! once for both etcd crates: whether it was sent at all, whether it may
//! pass, whether etcd refused it outright. Each crate maps the answer to
//! its own error type (`LockError`, `StoreError`).

use std::io::ErrorKind;

use etcd_client::Error;
use tonic::Code;

/// How an etcd request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// Never sent: no connection to the member it was routed to could be
    /// opened (connection refused, unreachable). Sending it again is always
    /// safe, whatever it does. The gRPC channel balances over every
    /// endpoint, dead ones included, so with one member of three down about
    /// a third of first attempts meet this.
    Unsent,
    /// etcd could not serve it, for a reason that may pass: unavailable, no
    /// leader, leader changed, a member stopping, a connection broken
    /// before the answer. A read may be sent again; a write may have been
    /// applied.
    Transient,
    /// No answer before a deadline (the server's or the channel's). A write
    /// may have been applied.
    DeadlineExceeded,
    /// Authentication or authorization refused it. etcd answers a wrong
    /// password with `InvalidArgument` "authentication failed".
    PermissionDenied,
    /// Refused as invalid before anything was applied: a malformed request,
    /// one of the cluster's limits (see [`is_over_cluster_limit`]).
    Refused,
    /// Anything else.
    Other,
}

impl Failure {
    /// Classifies `error`.
    pub fn of(error: &Error) -> Failure {
        let Error::GRpcStatus(status) = error else {
            return match error {
                Error::TransportError(_) | Error::IoError(_) => Failure::Transient,
                _ => Failure::Other,
            };
        };
        let message = status.message();
        let io = io_kind(status);
        match status.code() {
            Code::Unavailable
                if message.contains("connect error")
                    || io.is_some_and(|kind| {
                        matches!(
                            kind,
                            ErrorKind::ConnectionRefused
                                | ErrorKind::HostUnreachable
                                | ErrorKind::NetworkUnreachable
                                | ErrorKind::AddrNotAvailable
                        )
                    }) =>
            {
                Failure::Unsent
            }
            Code::DeadlineExceeded => Failure::DeadlineExceeded,
            Code::PermissionDenied | Code::Unauthenticated => Failure::PermissionDenied,
            Code::InvalidArgument if message.contains("authentication failed") => {
                Failure::PermissionDenied
            }
            Code::InvalidArgument | Code::ResourceExhausted | Code::OutOfRange => Failure::Refused,
            Code::Unavailable | Code::Cancelled | Code::Aborted => Failure::Transient,
            // A member without a leader or shutting down, and a connection
            // that broke before the answer (tonic's `Unknown` "transport
            // error", the I/O error in the source chain).
            _ if message.contains("no leader")
                || message.contains("leader changed")
                || message.contains("stopped")
                || io.is_some() =>
            {
                Failure::Transient
            }
            _ => Failure::Other,
        }
    }
}

/// Whether etcd said the lease does not exist (expired or revoked).
pub fn is_lease_not_found(error: &Error) -> bool {
    match error {
        Error::GRpcStatus(status) => status.message().contains("lease not found"),
        Error::LeaseKeepAliveError(message) => message.contains("lease not found"),
        _ => false,
    }
}

/// Whether etcd answered that the request breaks one of its limits
/// (`--max-request-bytes`, `--max-txn-ops`).
pub fn is_over_cluster_limit(error: &Error) -> bool {
    let Error::GRpcStatus(status) = error else {
        return false;
    };
    let message = status.message();
    message.contains("too many operations in txn request")
        || message.contains("request is too large")
        || status.code() == Code::ResourceExhausted
}

/// The first I/O error in the status's source chain, if any: an
/// `io::Error` itself, or one inside h2's error (a connection that broke
/// under the request: h2 hands out only the I/O error's own source, so the
/// chain alone never shows it). Seen when an etcd member was killed while
/// an answer's body was being read: `Unknown` "h2 protocol error: error
/// reading a body from connection", broken pipe inside; h2 offers no way
/// to build that error outside itself, so the table below cannot hold it.
fn io_kind(status: &tonic::Status) -> Option<ErrorKind> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        if let Some(io) = error
            .downcast_ref::<h2::Error>()
            .and_then(h2::Error::get_io)
        {
            return Some(io.kind());
        }
        source = error.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, message: &str) -> Error {
        Error::GRpcStatus(tonic::Status::new(code, message))
    }

    fn broken(kind: ErrorKind) -> Error {
        Error::GRpcStatus(tonic::Status::from_error(Box::new(std::io::Error::new(
            kind,
            "stream closed because of a broken pipe",
        ))))
    }

    #[test]
    fn classification_table() {
        let table = [
            (
                status(Code::Unavailable, "tcp connect error"),
                Failure::Unsent,
            ),
            (
                status(Code::Unavailable, "etcdserver: no leader"),
                Failure::Transient,
            ),
            (
                status(Code::Unknown, "etcdserver: no leader"),
                Failure::Transient,
            ),
            (
                status(Code::Unavailable, "etcdserver: leader changed"),
                Failure::Transient,
            ),
            (status(Code::Unknown, "tcp connect error"), Failure::Other),
            (
                status(Code::DeadlineExceeded, "context deadline exceeded"),
                Failure::DeadlineExceeded,
            ),
            (
                status(Code::PermissionDenied, "etcdserver: permission denied"),
                Failure::PermissionDenied,
            ),
            (
                status(
                    Code::InvalidArgument,
                    "etcdserver: authentication failed, invalid user ID or password",
                ),
                Failure::PermissionDenied,
            ),
            (
                status(Code::InvalidArgument, "etcdserver: key is not provided"),
                Failure::Refused,
            ),
            (
                status(
                    Code::InvalidArgument,
                    "etcdserver: too many operations in txn request",
                ),
                Failure::Refused,
            ),
            (broken(ErrorKind::BrokenPipe), Failure::Transient),
            (broken(ErrorKind::ConnectionReset), Failure::Transient),
            (Error::InvalidArgs("x".into()), Failure::Other),
        ];
        for (error, expected) in table {
            assert_eq!(Failure::of(&error), expected, "{error:?}");
        }
    }

    #[test]
    fn lease_not_found_and_cluster_limits() {
        assert!(is_lease_not_found(&status(
            Code::NotFound,
            "etcdserver: requested lease not found"
        )));
        assert!(is_lease_not_found(&Error::LeaseKeepAliveError(
            "lease not found".into()
        )));
        assert!(!is_lease_not_found(&status(
            Code::NotFound,
            "something else"
        )));
        assert!(is_over_cluster_limit(&status(
            Code::InvalidArgument,
            "etcdserver: request is too large"
        )));
        assert!(!is_over_cluster_limit(&status(Code::InvalidArgument, "x")));
    }
}
