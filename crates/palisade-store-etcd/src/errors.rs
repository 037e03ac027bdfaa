//! From etcd-client's errors to the store's [`StoreError`].
//!
//! Two questions decide everything here: was the request sent at all (a
//! connect failure: never sent, so any request may go again), and, for a
//! commit, may it have been applied (then the answer is
//! [`StoreError::Storage`], "in doubt", never a guess).

use std::time::Duration;

use etcd_client::Error as EtcdError;
use palisade_etcd::Failure;
pub(crate) use palisade_etcd::is_over_cluster_limit;
use palisade_store::StoreError;

/// The engine name in every error of this crate.
pub(crate) const ENGINE: &str = "etcd";

/// A failure that says nothing applied: the cluster cannot be reached,
/// has no leader, or refused the credentials. 503; a retry is safe.
pub(crate) fn unavailable(operation: &str, error: &EtcdError) -> StoreError {
    StoreError::Unavailable {
        engine: ENGINE,
        message: format!("{operation}: {}", describe(error)),
    }
}

/// A commit whose outcome is unknown: it may have been applied. 503; the
/// client retries with the same request id and idempotency settles it.
pub(crate) fn in_doubt(operation: &str, why: &str) -> StoreError {
    StoreError::Storage {
        engine: ENGINE,
        message: format!("{operation}: {why}; the write may or may not have been applied"),
    }
}

/// No answer within the request timeout.
pub(crate) fn timed_out(operation: &str, after: Duration) -> StoreError {
    StoreError::Unavailable {
        engine: ENGINE,
        message: format!("{operation}: no answer from etcd within {after:?}"),
    }
}

/// Stored bytes this version cannot decode.
pub(crate) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        what: format!("etcd engine: {what} does not decode"),
    }
}

/// Any other failure etcd reported for a request it refused outright.
pub(crate) fn failed(operation: &str, error: &EtcdError) -> StoreError {
    StoreError::Storage {
        engine: ENGINE,
        message: format!("{operation}: {}", describe(error)),
    }
}

/// Another writer committed on the lock between every read and commit.
pub(crate) fn contended(attempts: u32) -> StoreError {
    StoreError::Unavailable {
        engine: ENGINE,
        message: format!(
            "the lock changed between read and commit on each of {attempts} attempts (heavy contention); nothing was applied"
        ),
    }
}

fn describe(error: &EtcdError) -> String {
    match error {
        EtcdError::GRpcStatus(status) => format!("{:?}: {}", status.code(), status.message()),
        other => other.to_string(),
    }
}

/// Whether the request failed before it could reach etcd (no connection
/// to the member it was routed to): sending it again is always safe.
pub(crate) fn is_unsent(error: &EtcdError) -> bool {
    Failure::of(error) == Failure::Unsent
}

/// Whether etcd refused the request without applying it, for a reason that
/// may pass (no leader, leader changed, member stopping), so a read may be
/// sent again. A commit is not: "leader changed" can come after the entry
/// was proposed.
pub(crate) fn is_transient(error: &EtcdError) -> bool {
    matches!(Failure::of(error), Failure::Unsent | Failure::Transient)
}

/// Whether etcd refused the request as invalid before applying anything
/// (a malformed Txn, a permission, a limit): a definite "not applied".
pub(crate) fn is_refused_outright(error: &EtcdError) -> bool {
    matches!(
        Failure::of(error),
        Failure::Refused | Failure::PermissionDenied
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn status(code: Code, message: &str) -> EtcdError {
        EtcdError::GRpcStatus(tonic::Status::new(code, message))
    }

    /// What the engine makes of each class (the classification itself is
    /// `palisade_etcd::Failure`'s, tested there).
    #[test]
    fn what_may_be_sent_again() {
        let unsent = status(Code::Unavailable, "tcp connect error");
        let no_leader = status(Code::Unknown, "etcdserver: no leader");
        let refused = status(
            Code::InvalidArgument,
            "etcdserver: duplicate key given in txn request",
        );
        assert!(is_unsent(&unsent) && is_transient(&unsent) && !is_refused_outright(&unsent));
        assert!(!is_unsent(&no_leader) && is_transient(&no_leader));
        assert!(!is_transient(&refused) && is_refused_outright(&refused));
    }

    #[test]
    fn in_doubt_and_unavailable_are_storage_failures() {
        assert!(in_doubt("commit", "connection lost").is_storage_failure());
        assert!(unavailable("read", &status(Code::Unavailable, "x")).is_storage_failure());
        assert!(contended(3).is_storage_failure());
    }
}
