//! What can go wrong, apart from a refusal (which is an outcome, core's
//! [`Refused`](palisade_core::Refused), in the inner `Result`).

use palisade_core::LockError;

/// A fenced operation that could not be carried out. Nothing here means
/// "stale": a stale write is `Ok(Err(Refused::Stale { .. }))`, so `?` on
/// this error can never swallow a refusal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The guard's lease may have lapsed: nothing was sent.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The store failed, or kept failing until the retry budget ran out.
    /// The message is the store's, scrubbed of the configured secrets.
    #[error("object store {store}: {message}")]
    Store {
        /// The store, as configured (secrets masked).
        store: String,
        /// What failed.
        message: String,
    },
    /// The start-up probe found that the store does not enforce a
    /// condition: a write that had to be refused was accepted. Such a store
    /// cannot fence, so it is not used.
    #[error(
        "object store {store} ignores `{condition}`: a write that had to be refused was accepted, so it cannot fence writes; use a store that enforces conditional writes (S3, or a compatible that implements `If-Match` and `If-None-Match: *`)"
    )]
    ConditionsIgnored {
        /// The store.
        store: String,
        /// The condition it ignored.
        condition: &'static str,
    },
    /// The store refused to even try a conditional write, or does not keep
    /// an object's user metadata (which carries the generation and the
    /// write id that in-doubt writes are resolved by).
    #[error("object store {store} cannot fence: {detail}")]
    Unsupported {
        /// The store.
        store: String,
        /// What it lacks.
        detail: String,
    },
    /// A write was sent, its answer never came, and reading back could not
    /// tell whether it landed before the retry budget ran out. It may have
    /// landed, once; it was not sent again blindly.
    #[error(
        "object store {store}: the outcome of the write to `{path}` is unknown (write id {write_id}): {message}"
    )]
    InDoubt {
        /// The store.
        store: String,
        /// The object.
        path: String,
        /// The write's id, in the object's `palisade-write` metadata if it
        /// landed.
        write_id: String,
        /// The last failure.
        message: String,
    },
    /// A path under `.palisade/`, where the fence keeps its own objects.
    #[error("`{path}` is reserved for the fence's own objects (under `.palisade/`)")]
    ReservedPath {
        /// The path.
        path: String,
    },
    /// An object this fence wrote no longer reads back as it wrote it (a
    /// fence object that does not parse, a log entry without its marks).
    #[error("object `{path}` is not a valid fence record: {detail}")]
    Corrupt {
        /// The object.
        path: String,
        /// What was wrong.
        detail: String,
    },
    /// The object to copy from does not exist.
    #[error("object `{path}` does not exist")]
    NotFound {
        /// The object.
        path: String,
    },
    /// A configuration that cannot be honoured.
    #[error("object store configuration: {0}")]
    Config(String),
}
