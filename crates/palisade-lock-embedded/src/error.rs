//! Errors of setting up the embedded backend.
//!
//! Lock operations themselves fail with [`palisade_core::LockError`], like
//! every backend's; this enum covers only building a service or a session.

use palisade_core::SequencerError;

/// Why a service or a session could not be created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbeddedError {
    /// The issuer id cannot go into a sequencer (empty, longer than
    /// [`palisade_core::Sequencer::MAX_ID_LEN`] bytes, or with a control
    /// character).
    #[error("invalid issuer id `{issuer}`: {source}")]
    InvalidIssuer {
        /// The issuer id that was offered.
        issuer: String,
        /// Why the sequencer refused it.
        #[source]
        source: SequencerError,
    },
    /// The session options cannot keep a lease alive
    /// (see [`palisade_core::SessionOptions::validate`]).
    #[error("invalid session options: {reason}")]
    InvalidOptions {
        /// What is wrong with them.
        reason: String,
    },
}
