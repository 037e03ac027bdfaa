//! One conditional write, and what its answer means: landed, the condition
//! was false (S3's `412 Precondition Failed`), another conditional write to
//! the same key was in flight (S3's `409 ConditionalRequestConflict`), or
//! sent without an answer (in doubt). Also the retry budget every loop of
//! the fence spends its pauses from.

use std::time::Duration;

use object_store::path::Path;
use object_store::{Attributes, ObjectStore, PutMode, PutOptions, PutPayload, PutResult};
use tokio::time::Instant;

use crate::FenceError;

/// What one conditional write did.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// It landed: the store answered 2xx.
    Landed(PutResult),
    /// `412`: the condition was false. The object changed since it was read
    /// (`If-Match`), or exists (`If-None-Match: *`). Nothing was written;
    /// read again and decide again.
    ConditionFailed,
    /// `409 ConditionalRequestConflict`: S3 was applying another conditional
    /// write to the same key. Nothing was written, and nothing is known
    /// about the object yet: pause, then read and decide again.
    Conflict,
    /// Sent, and no answer (a timeout, a connection lost, a 5xx): it may
    /// have landed. Resolved by reading the object back, never by sending
    /// it again blindly.
    InDoubt(String),
    /// Refused outright (no permission, a bad request): it did not land, and
    /// trying again would not help.
    Fatal(object_store::Error),
}

/// Sends one conditional write. `object_store`'s own retries are off (the
/// store is built with `max_retries = 0`), so every answer reaches here.
pub(crate) async fn conditional_put(
    store: &dyn ObjectStore,
    path: &Path,
    payload: PutPayload,
    mode: PutMode,
    attributes: Attributes,
) -> Outcome {
    let options = PutOptions {
        mode,
        attributes,
        ..PutOptions::default()
    };
    match store.put_opts(path, payload, options).await {
        Ok(result) => Outcome::Landed(result),
        Err(error) => classify(error),
    }
}

/// Tells the answers apart. `object_store` reports `If-Match`'s 412 as
/// `Precondition` (a missing object too), and `If-None-Match: *`'s 412 as
/// `AlreadyExists` wrapping that `Precondition`. S3's 409 it reports as
/// `AlreadyExists` wrapping the HTTP error itself, whose text names the
/// status; other stores' `AlreadyExists` (the in-memory and local ones)
/// means the object exists: the condition was false.
pub(crate) fn classify(error: object_store::Error) -> Outcome {
    use object_store::Error;
    match error {
        Error::Precondition { .. } | Error::NotModified { .. } => Outcome::ConditionFailed,
        Error::AlreadyExists { source, .. } => {
            let http_409 = source.downcast_ref::<object_store::Error>().is_none()
                && source.to_string().contains("409 Conflict");
            if http_409 {
                Outcome::Conflict
            } else {
                Outcome::ConditionFailed
            }
        }
        Error::PermissionDenied { .. }
        | Error::Unauthenticated { .. }
        | Error::NotImplemented { .. }
        | Error::NotSupported { .. }
        | Error::InvalidPath { .. } => Outcome::Fatal(error),
        // A transport failure (a timeout, a connection lost: sent, or
        // partly) or an HTTP status object_store has no variant for (a 5xx:
        // may have landed). Reading back decides; a failure that persists
        // runs the budget out.
        other => Outcome::InDoubt(other.to_string()),
    }
}

/// How long the fence keeps trying one call, and its pauses between
/// tries (`palisade_core::retry_pauses`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBudget {
    /// The first pause (the first of `retry_pauses`).
    pub first_pause: Duration,
    /// The longest pause.
    pub max_pause: Duration,
    /// The whole call gives up after this long, with
    /// [`FenceError::Store`] or [`FenceError::InDoubt`].
    pub total: Duration,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget {
            first_pause: Duration::from_millis(50),
            max_pause: Duration::from_secs(1),
            total: Duration::from_secs(30),
        }
    }
}

/// One call's budget, started.
pub(crate) struct Budget {
    deadline: Instant,
    pauses: Box<dyn Iterator<Item = Duration> + Send>,
}

impl Budget {
    pub(crate) fn start(budget: &RetryBudget) -> Self {
        Budget {
            deadline: Instant::now() + budget.total,
            pauses: Box::new(palisade_core::retry_pauses(
                budget.first_pause,
                budget.max_pause,
            )),
        }
    }

    /// Whether the budget's time is up (for tries that go again at once).
    pub(crate) fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Pauses before the next try; `false` (without pausing) when the
    /// budget is spent.
    pub(crate) async fn pause(&mut self) -> bool {
        let pause = self.pauses.next().unwrap_or_default();
        if Instant::now() + pause >= self.deadline {
            return false;
        }
        tokio::time::sleep(pause).await;
        true
    }
}

/// A store failure, as [`FenceError::Store`].
pub(crate) fn store_error(store: &str, error: impl std::fmt::Display) -> FenceError {
    FenceError::Store {
        store: store.to_owned(),
        message: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(error: object_store::Error) -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(error)
    }

    #[test]
    fn a_412_and_a_409_are_told_apart() {
        use object_store::Error;
        let precondition = || Error::Precondition {
            path: "k".into(),
            source: "412".into(),
        };
        assert!(matches!(classify(precondition()), Outcome::ConditionFailed));
        // `If-None-Match: *` refused: object_store wraps the 412.
        let exists_412 = Error::AlreadyExists {
            path: "k".into(),
            source: boxed(precondition()),
        };
        assert!(matches!(classify(exists_412), Outcome::ConditionFailed));
        // A 409 is `AlreadyExists` around the HTTP error itself.
        let conflict = Error::AlreadyExists {
            path: "k".into(),
            source: "Server returned non-2xx status code: 409 Conflict: <Code>ConditionalRequestConflict</Code>".into(),
        };
        assert!(matches!(classify(conflict), Outcome::Conflict));
        // Another store's "exists": the condition was false.
        let exists = Error::AlreadyExists {
            path: "k".into(),
            source: "Object already exists at that location".into(),
        };
        assert!(matches!(classify(exists), Outcome::ConditionFailed));
        let denied = Error::PermissionDenied {
            path: "k".into(),
            source: "403".into(),
        };
        assert!(matches!(classify(denied), Outcome::Fatal(_)));
        let generic = Error::Generic {
            store: "S3",
            source: "500 Internal Error".into(),
        };
        assert!(matches!(classify(generic), Outcome::InDoubt(_)));
    }
}
