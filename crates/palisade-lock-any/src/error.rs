//! Error texts: [`SelectError`], and one readable line for a lock error or
//! a client library's error chain.
//!
//! Every text that names a connection string shows it through
//! [`palisade_core::redact`]: [`Service`](crate::Service)'s `Display` for
//! the service, and [`scrub`] over what a driver wrote about it.

use palisade_core::LockError;
use palisade_core::redact::scrub;

use crate::spec::{BackendKind, LockSpec};

/// Why a lock service could not be chosen, reached or used. Every message
/// is one line, with secrets masked.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// The flags, environment or URL do not name one usable service.
    #[error("{0}")]
    Invalid(String),
    /// The backend is not compiled into this build.
    #[error(
        "this build has no {} lock backend: build with `--features {}`",
        .0.name(),
        .0.feature()
    )]
    NotCompiled(BackendKind),
    /// The backend cannot do what was asked (say, raise-floor on Redlock).
    #[error("{0}")]
    Unsupported(String),
    /// The service could not be reached, or refused the session.
    #[error("{0}")]
    Unreachable(String),
    /// The service failed part way (a floor raise); the message says what
    /// was changed.
    #[error("{0}")]
    Failed(String),
}

impl SelectError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        SelectError::Invalid(message.into())
    }

    /// "cannot connect to {spec}: {reason}", the reason scrubbed of the spec's
    /// secrets.
    pub(crate) fn unreachable(spec: &LockSpec, reason: &str) -> Self {
        SelectError::Unreachable(format!(
            "cannot connect to {spec}: {}",
            scrub_spec(spec, reason)
        ))
    }
}

/// Refuses an operation on the backends `refused` lists, each with its
/// reason ([`SelectError::Unsupported`]).
pub(crate) fn refuse(
    kind: BackendKind,
    refused: &[(BackendKind, &str)],
) -> Result<(), SelectError> {
    match refused.iter().find(|(refused, _)| *refused == kind) {
        Some((_, why)) => Err(SelectError::Unsupported((*why).to_owned())),
        None => Ok(()),
    }
}

/// `text` with every secret of `spec`'s connection strings masked.
pub(crate) fn scrub_spec(spec: &LockSpec, text: &str) -> String {
    use crate::spec::Service;
    match spec.service() {
        Service::Embedded => text.to_owned(),
        Service::Etcd { endpoints } => scrub(text, endpoints),
        Service::Redis { url } | Service::Sql { url, .. } => scrub(text, url),
        Service::Redlock { masters } | Service::RedisCluster { nodes: masters } => masters
            .iter()
            .fold(text.to_owned(), |text, url| scrub(&text, url)),
        Service::ZooKeeper { connect } => scrub(text, connect),
    }
}

/// A lock error as one readable line.
///
/// Typed errors print as they are. For `Unavailable` and `Backend`, whose
/// source is the client library's error (tonic's `Display` embeds a debug
/// dump of its transport error), only the innermost cause is shown:
/// "Connection refused (os error 111)".
pub fn lock_error_text(error: &LockError) -> String {
    match error {
        LockError::Unavailable { backend, source } => {
            format!(
                "lock service {backend} is unavailable: {}",
                root_cause(source.as_ref())
            )
        }
        LockError::Backend { backend, source } => {
            format!(
                "lock service {backend} failed: {}",
                root_cause(source.as_ref())
            )
        }
        other => other.to_string(),
    }
}

/// The innermost cause of `error`.
pub fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    loop {
        #[cfg(feature = "etcd")]
        if let Some(text) = etcd_status_text(current) {
            return text;
        }
        match current.source() {
            Some(source) => current = source,
            None => return current.to_string(),
        }
    }
}

/// etcd-client's gRPC error as `<status message>: <innermost cause>`,
/// e.g. "tcp connect error: Connection refused (os error 111)". Its own
/// `Display` prints the transport error with `{:?}`, and it does not expose
/// the status as its `source`.
#[cfg(feature = "etcd")]
fn etcd_status_text(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let etcd_client::Error::GRpcStatus(status) = error.downcast_ref::<etcd_client::Error>()? else {
        return None;
    };
    let message = status.message();
    let message = if message.is_empty() {
        format!("{:?}", status.code())
    } else {
        message.to_owned()
    };
    Some(match std::error::Error::source(status) {
        Some(source) => {
            let cause = root_cause(source);
            if cause.contains(&message) {
                cause
            } else {
                format!("{message}: {cause}")
            }
        }
        None => message,
    })
}

/// An error and its sources, joined by `: `, with repeats dropped (client
/// libraries often repeat their source in their own message).
pub fn cause_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(error) = current {
        let text = error.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        current = error.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("Connection refused")]
    struct Inner;

    #[test]
    fn a_chain_reads_as_one_line_without_repeats() {
        assert_eq!(
            cause_chain(&Outer(Inner)),
            "outer: Connection refused",
            "the inner text is already in the outer one"
        );
        assert_eq!(root_cause(&Outer(Inner)), "Connection refused");
    }

    #[test]
    fn a_driver_message_loses_the_password_it_echoes() {
        let spec = LockSpec::redis("redis://app:hunter2@h:6379");
        let error = SelectError::unreachable(
            &spec,
            "failed to connect to redis://app:hunter2@h:6379 (auth hunter2)",
        );
        let text = error.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.starts_with("cannot connect to Redis at redis://app:***@h:6379"),
            "{text}"
        );
    }

    #[test]
    fn a_missing_backend_names_its_feature() {
        let text = SelectError::NotCompiled(BackendKind::Redlock).to_string();
        assert_eq!(
            text,
            "this build has no redlock lock backend: build with `--features redis`"
        );
    }
}
