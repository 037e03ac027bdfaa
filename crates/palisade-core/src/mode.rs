//! Lock modes: writer or reader.

use std::fmt;
use std::str::FromStr;

/// How a lock is held.
///
/// An `Exclusive` holder is the only holder; it may write. `Shared` holders
/// may be many at once and are read-only: the resource server refuses a
/// write under a shared sequencer.
///
/// The text forms are exactly `exclusive` and `shared` (lower case).
///
/// ```
/// use palisade_core::Mode;
///
/// assert_eq!("shared".parse::<Mode>(), Ok(Mode::Shared));
/// assert_eq!(Mode::Exclusive.to_string(), "exclusive");
/// assert!("Exclusive".parse::<Mode>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// One holder, may write.
    Exclusive,
    /// Many holders, read-only.
    Shared,
}

/// The text was neither `exclusive` nor `shared`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode `{found}`; expected `exclusive` or `shared`")]
pub struct ModeParseError {
    /// What was offered (clipped to 64 bytes).
    pub found: String,
}

impl Mode {
    /// The canonical text form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }

    /// Whether a holder in mode `self` and another in mode `other` may hold
    /// the same lock at the same time. Only two shared holders can.
    pub const fn compatible_with(self, other: Mode) -> bool {
        matches!((self, other), (Mode::Shared, Mode::Shared))
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = ModeParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "exclusive" => Ok(Mode::Exclusive),
            "shared" => Ok(Mode::Shared),
            other => Err(ModeParseError {
                found: crate::clip(other),
            }),
        }
    }
}
