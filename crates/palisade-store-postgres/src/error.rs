//! Why the engine could not open, and how database failures become
//! `StoreError`s. Every message that may hold a driver's words goes
//! through [`palisade_core::redact::scrub`] with the engine's URL, so no
//! password, in any form the URL can carry it, is ever shown.

use std::time::Duration;

use palisade_core::format_duration;
use palisade_core::redact::scrub;
use palisade_store::StoreError;

use crate::ENGINE;

/// Why [`PostgresEngine::open`](crate::PostgresEngine::open) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL does not parse as a PostgreSQL connection URL.
    #[error("invalid PostgreSQL URL: {reason}")]
    InvalidUrl {
        /// What is wrong with it (the URL itself is not repeated: it may
        /// hold a password).
        reason: String,
    },
    /// A setting (a field of the configuration, or a URL parameter) that
    /// the engine cannot honour.
    #[error("PostgreSQL store setting `{name}`: {reason}")]
    InvalidSetting {
        /// The setting's name.
        name: String,
        /// What is wrong with it (never its value).
        reason: String,
    },
    /// The database holds a newer engine schema than this binary knows. An
    /// older binary must not write marks it may misread: upgrade it.
    #[error(
        "the palisade_store schema in this database is version {found}, newer than this binary's {known}; upgrade palisade"
    )]
    SchemaTooNew {
        /// The version in the database.
        found: i64,
        /// The newest version this binary knows.
        known: i64,
    },
    /// The server runs with `fsync = off`: a commit would not be durable.
    #[error(
        "the PostgreSQL server runs with fsync = off, so a commit is not durable; turn fsync on (or set require_fsync = false to accept losing acknowledged writes in a crash)"
    )]
    FsyncOff,
    /// A session setting the engine forces did not hold (a pooler in
    /// between that drops startup options, for instance).
    #[error("PostgreSQL session setting {name} is `{found}`, expected `{expected}`")]
    SessionSetting {
        /// The setting.
        name: &'static str,
        /// What the session reports.
        found: String,
        /// What the engine needs.
        expected: String,
    },
    /// The database could not be reached: it refused the connection, gave
    /// no answer, or every connection stayed busy.
    #[error("{0}")]
    Unavailable(Unreachable),
    /// The database refused or failed (the driver's message, scrubbed of
    /// any secret of the URL).
    #[error("PostgreSQL: {message}")]
    Database {
        /// What the database or the driver said.
        message: String,
    },
}

/// Why a request got no connection to PostgreSQL, as far as the engine can
/// tell: the words operators need ("refused" or "no answer") instead of
/// the pool's "timed out".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unreachable {
    /// Nothing accepts connections at the address: the server is down, or
    /// the address is wrong.
    #[error("PostgreSQL at {location} refused the connection")]
    Refused {
        /// `host:port/database`.
        location: String,
    },
    /// A connection attempt got no answer in time: the server is stopped,
    /// overloaded or partitioned away, or what listens is not PostgreSQL.
    #[error("no answer from PostgreSQL at {location} within {}", format_duration(*waited))]
    NoAnswer {
        /// `host:port/database`.
        location: String,
        /// How long the attempt waited.
        waited: Duration,
    },
    /// PostgreSQL answers, but every connection of the pool stayed busy.
    #[error(
        "all {connections} connections to PostgreSQL at {location} stayed busy for {}",
        format_duration(*waited)
    )]
    Busy {
        /// `host:port/database`.
        location: String,
        /// The pool's size.
        connections: u32,
        /// How long the request waited.
        waited: Duration,
    },
    /// Connecting failed for another reason (authentication, TLS, a
    /// database that does not exist): the driver's words, scrubbed.
    #[error("PostgreSQL at {location}: {message}")]
    Failed {
        /// `host:port/database`.
        location: String,
        /// What the driver said.
        message: String,
    },
}

/// Where the engine's errors come from: what to scrub and where it is.
#[derive(Clone)]
pub(crate) struct Origin {
    /// The URL as given, only ever used to scrub messages.
    url: String,
    /// `host:port/database`, safe to show.
    pub(crate) location: String,
}

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Origin")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Origin {
    pub(crate) fn new(url: &str, location: String) -> Origin {
        Origin {
            url: url.to_owned(),
            location,
        }
    }

    /// `error`'s text with every secret of the URL masked.
    pub(crate) fn scrub(&self, error: &dyn std::fmt::Display) -> String {
        scrub(&error.to_string(), &self.url)
    }

    pub(crate) fn open_error(&self, error: sqlx::Error) -> OpenError {
        OpenError::Database {
            message: self.scrub(&error),
        }
    }
}

/// Where in a request a database error happened, which decides what the
/// caller may conclude.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Before anything that could commit was sent: nothing was applied.
    Before,
    /// While a statement that commits was under way: it may or may not
    /// have committed.
    Commit,
}

/// What went wrong in one attempt of a request.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No connection: nothing was sent.
    Unreachable(Unreachable),
    /// The database failed or refused.
    Database {
        /// Where in the request.
        stage: Stage,
        /// The error.
        error: sqlx::Error,
    },
    /// A statement that commits by itself, shared by several requests (a
    /// batch of puts), failed in a way that leaves its outcome unknown.
    InDoubt(std::sync::Arc<sqlx::Error>),
    /// A row holds what no version of the engine writes.
    Corrupt(String),
}

/// PostgreSQL's SQLSTATEs the engine tells apart.
mod sqlstate {
    /// `serialization_failure`: the statement was rolled back.
    pub(super) const SERIALIZATION_FAILURE: &str = "40001";
    /// `deadlock_detected`: the statement was rolled back.
    pub(super) const DEADLOCK: &str = "40P01";
    /// `lock_not_available`: `lock_timeout` ended a wait for a row lock,
    /// before the statement could change anything.
    pub(super) const LOCK_NOT_AVAILABLE: &str = "55P03";
}

impl Failure {
    pub(crate) fn before(error: sqlx::Error) -> Failure {
        Failure::Database {
            stage: Stage::Before,
            error,
        }
    }

    pub(crate) fn during_commit(error: sqlx::Error) -> Failure {
        Failure::Database {
            stage: Stage::Commit,
            error,
        }
    }

    /// An error of a statement that commits by itself (a write or a fence
    /// call): in doubt, except for what PostgreSQL reports only for a
    /// statement it rolled back or never ran ([`Failure::rolled_back`]).
    pub(crate) fn of_call(error: sqlx::Error) -> Failure {
        if Failure::rolled_back(&error) {
            Failure::before(error)
        } else {
            Failure::during_commit(error)
        }
    }

    /// Whether `error`, the answer to a statement that commits by itself,
    /// says PostgreSQL rolled it back: a serialization failure, a
    /// deadlock, a lock wait that `lock_timeout` ended, and the errors of
    /// the statement's own data
    /// (class 22 data exception, 23 integrity violation, 54 program limit
    /// exceeded, such as an index row too large), which PostgreSQL raises
    /// while it runs the statement, never at its commit (the engine's
    /// tables have no deferred constraint).
    pub(crate) fn rolled_back(error: &sqlx::Error) -> bool {
        match database_code(error).as_deref() {
            Some(
                sqlstate::SERIALIZATION_FAILURE | sqlstate::DEADLOCK | sqlstate::LOCK_NOT_AVAILABLE,
            ) => true,
            Some(code) => ["22", "23", "54"]
                .iter()
                .any(|class| code.starts_with(class)),
            None => false,
        }
    }

    /// A serialization failure or deadlock before COMMIT: rolled back, so a
    /// new attempt is safe. (The engine's statements take one mark row
    /// each and should never see one; retrying costs nothing if they do.)
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            Failure::Database {
                stage: Stage::Before,
                error,
            } => matches!(
                database_code(error).as_deref(),
                Some(sqlstate::SERIALIZATION_FAILURE | sqlstate::DEADLOCK)
            ),
            _ => false,
        }
    }

    pub(crate) fn into_store_error(self, origin: &Origin) -> StoreError {
        match self {
            Failure::Corrupt(what) => StoreError::Corrupt { what },
            Failure::Unreachable(why) => StoreError::Unavailable {
                engine: ENGINE,
                message: why.to_string(),
            },
            Failure::Database {
                stage: Stage::Commit,
                error,
            } => in_doubt(origin, &error),
            Failure::InDoubt(error) => in_doubt(origin, &error),
            Failure::Database { error, .. }
                if database_code(&error).as_deref() == Some(sqlstate::LOCK_NOT_AVAILABLE) =>
            {
                StoreError::Unavailable {
                    engine: ENGINE,
                    message: format!(
                        "the lock's row at PostgreSQL at {} stayed held by another request past lock_timeout; nothing was applied",
                        origin.location
                    ),
                }
            }
            Failure::Database { error, .. } if is_unreachable(&error) => StoreError::Unavailable {
                engine: ENGINE,
                message: format!(
                    "PostgreSQL at {}: {}",
                    origin.location,
                    origin.scrub(&error)
                ),
            },
            Failure::Database { error, .. } => StoreError::Storage {
                engine: ENGINE,
                message: origin.scrub(&error),
            },
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unreachable(why) => why.fmt(f),
            // sqlx's own text: logged at debug only, through the caller's
            // scrub (see `retrying`).
            Failure::Database { error, .. } => error.fmt(f),
            Failure::InDoubt(error) => error.fmt(f),
            Failure::Corrupt(what) => write!(f, "corrupt: {what}"),
        }
    }
}

impl From<sqlx::Error> for Failure {
    fn from(error: sqlx::Error) -> Failure {
        Failure::before(error)
    }
}

impl From<Unreachable> for Failure {
    fn from(why: Unreachable) -> Failure {
        Failure::Unreachable(why)
    }
}

fn in_doubt(origin: &Origin, error: &sqlx::Error) -> StoreError {
    StoreError::Storage {
        engine: ENGINE,
        message: format!(
            "the statement did not complete, so whether the request was applied is unknown (retry with the same request id): {}",
            origin.scrub(error)
        ),
    }
}

fn database_code(error: &sqlx::Error) -> Option<String> {
    error
        .as_database_error()
        .and_then(|db| db.code())
        .map(|code| code.into_owned())
}

/// Errors that say the database cannot be reached, rather than that it
/// refused something.
fn is_unreachable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed => true,
        // 08: connection exception; 57P01-57P03: admin shutdown, crash
        // shutdown, cannot connect now (starting up, recovering).
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P0")),
        _ => false,
    }
}
