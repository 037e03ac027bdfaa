//! What one write op did: the store's answer, the server's `results`, and
//! the client's decoded answer are this one type.

use std::fmt;
use std::str::FromStr;

/// What one op of a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpResult {
    /// A put that created the key.
    Created,
    /// A put that replaced a value.
    Replaced,
    /// A delete that removed a value.
    Deleted,
    /// A delete of a key that was already absent.
    Absent,
    /// A compare-and-swap whose comparison held.
    Swapped,
}

impl OpResult {
    /// Every result, in declaration order.
    pub const ALL: [OpResult; 5] = [
        OpResult::Created,
        OpResult::Replaced,
        OpResult::Deleted,
        OpResult::Absent,
        OpResult::Swapped,
    ];

    /// A short stable name, as the HTTP API writes it: `created`,
    /// `replaced`, `deleted`, `absent`, `swapped`.
    pub fn as_str(self) -> &'static str {
        match self {
            OpResult::Created => "created",
            OpResult::Replaced => "replaced",
            OpResult::Deleted => "deleted",
            OpResult::Absent => "absent",
            OpResult::Swapped => "swapped",
        }
    }
}

impl fmt::Display for OpResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text is not one of [`OpResult::as_str`]'s names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown op result `{found}`")]
pub struct OpResultParseError {
    /// What was offered (at most 64 characters).
    pub found: String,
}

impl FromStr for OpResult {
    type Err = OpResultParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text {
            "created" => OpResult::Created,
            "replaced" => OpResult::Replaced,
            "deleted" => OpResult::Deleted,
            "absent" => OpResult::Absent,
            "swapped" => OpResult::Swapped,
            other => {
                return Err(OpResultParseError {
                    found: other.chars().take(64).collect(),
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for result in OpResult::ALL {
            assert_eq!(result.as_str().parse(), Ok(result));
        }
        assert!("done".parse::<OpResult>().is_err());
    }
}
