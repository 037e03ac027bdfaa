//! [`DemoError`]: why a demo could not tell its story.
//!
//! A demo that ran to the end is never an error, whatever its verdict: a
//! fenced run that accepted a stale write is a *result* (the report says so
//! and the binary exits non-zero). Errors are the runs that could not be
//! told at all: bad flags, a lock service that is not there, a client
//! process that died.

use palisade_client::ClientError;
use palisade_core::{LockError, LockNameError};
use palisade_lock_any::SelectError;
use palisade_server::ServerError;

/// Why a demo stopped before its verdict.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    /// The flags ask for something the demo cannot do (for example the
    /// SIGSTOP variant on the in-process backend). Binaries exit with the
    /// usage status, 2.
    #[error("{message}")]
    Usage {
        /// What is wrong and what to do instead.
        message: String,
    },
    /// A lock operation failed (not a lost lease: those are part of the
    /// story and reported as such).
    #[error("lock service: {0}")]
    Lock(#[from] LockError),
    /// A lock name the demo built was refused.
    #[error("lock name: {0}")]
    LockName(#[from] LockNameError),
    /// The Palisade resource server could not be reached or answered
    /// something unexpected.
    #[error("resource server: {0}")]
    Client(#[from] ClientError),
    /// The in-process resource server could not start or stopped badly.
    #[error("resource server: {0}")]
    Server(#[from] ServerError),
    /// The resource server refused a request the story expected it to
    /// accept (not a stale write: those are outcomes).
    #[error("resource server refused {what}: {refused}")]
    Refused {
        /// Which request.
        what: String,
        /// The refusal.
        refused: Box<palisade_client::Refused>,
    },
    /// The plain (unfenced) store could not be reached or answered badly.
    #[error("plain store at {url}: {message}")]
    PlainStore {
        /// The request's URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The stock table in the user's PostgreSQL (`--store`) could not be
    /// reached or answered badly.
    #[cfg(feature = "sql")]
    #[error("stock table: {0}")]
    Sql(#[from] sqlx::Error),
    /// `palisade_fence_sql` failed for a reason other than a stale sequencer
    /// (those are outcomes).
    #[cfg(feature = "sql")]
    #[error("stock table fence: {0}")]
    Fence(#[from] palisade_fence_sql::FenceError),
    /// `palisade_fence_sql`'s tables could not be set up.
    #[cfg(feature = "sql")]
    #[error("stock table schema: {0}")]
    Schema(#[from] palisade_fence_sql::SchemaError),
    /// `palisade_fence_redis` failed for a reason other than a stale
    /// sequencer (those are outcomes), or its library could not be loaded.
    #[cfg(feature = "redis")]
    #[error("stock in Redis: {0}")]
    RedisFence(#[from] palisade_fence_redis::RedisFenceError),
    /// A stored value is not the number the demo wrote.
    #[error("stored value `{value}` under `{key}` is not a number")]
    NotANumber {
        /// The key read.
        key: String,
        /// What was there.
        value: String,
    },
    /// A client process of the demo failed, died, or said something the
    /// demo does not understand.
    #[error("client process `{role}`: {message}")]
    Child {
        /// Which client (`client A`, `buyer 3`).
        role: String,
        /// What happened, with the end of its standard error if any.
        message: String,
    },
    /// The story could not go on (for example client B never got the lock).
    #[error("{message}")]
    Story {
        /// What happened.
        message: String,
    },
    /// Local I/O (the SVG file, a temporary directory, a socket).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A client process's specification or message is not valid JSON.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

/// Flags that name no usable service, or a backend this build leaves out,
/// are usage errors; a service that cannot be reached stops the story
/// with a hint.
impl From<SelectError> for DemoError {
    fn from(error: SelectError) -> Self {
        match error {
            SelectError::Invalid(_) | SelectError::Unsupported(_) => {
                DemoError::usage(error.to_string())
            }
            SelectError::NotCompiled(kind) => DemoError::usage(format!(
                "--backend {kind}: {error} (for example `cargo run -p example-gc-pause --features {} -- --backend {kind}`)",
                kind.feature()
            )),
            other => DemoError::story(format!(
                "{other} (start it, or give its endpoint: --etcd-endpoints, --redis-url, --database-url or one URL as --backend)"
            )),
        }
    }
}

impl DemoError {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        DemoError::Usage {
            message: message.into(),
        }
    }

    pub(crate) fn story(message: impl Into<String>) -> Self {
        DemoError::Story {
            message: message.into(),
        }
    }

    /// Whether this is a usage error (exit status 2 without a backtrace of
    /// causes).
    pub fn is_usage(&self) -> bool {
        matches!(self, DemoError::Usage { .. })
    }
}
