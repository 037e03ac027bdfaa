//! What a recipe can refuse or fail with.

use palisade_core::{LockError, LockName, LockNameError};

/// An error of a recipe: the lock service's, or a refusal of the recipe's
/// own rules. A refused call changes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecipeError {
    /// The lock service refused or failed.
    #[error(transparent)]
    Lock(#[from] LockError),

    /// A published value (a leader's) cannot be carried: it must fit, with
    /// the election's name, in one lock name (512 bytes of UTF-8 without
    /// control characters).
    #[error("a value of {len} bytes cannot be published for {name}: {reason}")]
    Value {
        /// The election.
        name: LockName,
        /// The value's length in bytes (the value itself is not echoed).
        len: usize,
        /// Why.
        reason: LockNameError,
    },

    /// A name the recipe derives from the user's would not be a valid lock
    /// name (too long once a suffix is added).
    #[error("{0}")]
    Name(#[from] LockNameError),

    /// A semaphore client asked for a different number of permits than the
    /// clients holding permits of the same name.
    #[error(
        "semaphore {name} is in use with {theirs} permits; this client was created with {ours}"
    )]
    PermitCountMismatch {
        /// The semaphore.
        name: LockName,
        /// This client's count.
        ours: u32,
        /// The count in use.
        theirs: u32,
    },

    /// A setting that cannot be honoured (zero permits, zero stripes, a
    /// stripe count above the quantity).
    #[error("{0}")]
    Invalid(String),

    /// This process already has the most waiters the recipe allows.
    #[error("{name}: {waiting} waiters already, the most this client allows")]
    Busy {
        /// The semaphore.
        name: LockName,
        /// How many wait.
        waiting: usize,
    },

    /// The store behind a striped quantity failed or refused.
    #[error("store of {name}: {message}")]
    Store {
        /// The segment's lock.
        name: LockName,
        /// What the store said, secrets scrubbed by the store.
        message: String,
    },
}
